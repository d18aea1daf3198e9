"""The flags several commands share: the recording flags of `watch`, `guard`, `diagnose`, `proxy` and `serve`
(`add_recording_arguments`; each flag, its type and where its value goes are written once, in
`servewatch.watch.options.FLAGS`), a deployment's `--prefill` and `--decode` (`add_pair_arguments`: `watch`,
`proxy`), `rules`' and `dashboard`'s --dialect and --names (`add_series_arguments`), the argparse type of every
duration flag (`duration`), and the parsed flags made typed values (`recording_from_args`, `options_from_args`,
`series_from_args`): below the commands no function takes the argparse namespace."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from servewatch.watch.options import FLAGS, LEARNED_DEADLINE_WORDS, NO_PROBE_HELP, ONE_SERVER, RecordingOptions
from servewatch.words import duration_s

if TYPE_CHECKING:
    from servewatch.derive.engine_series import EngineSeries


def duration(text: str) -> float:
    """"0.5", "500ms", "1s", "10m" → seconds (> 0), as argparse's type (servewatch.words.duration_s)."""
    try:
        return duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_recording_arguments(parser: argparse.ArgumentParser, defaults: RecordingOptions,
                            flags: Iterable[str] = ONE_SERVER, *, overlay: bool = False,
                            help: Mapping[str, str] | None = None, metavar: Mapping[str, str] | None = None,
                            url_optional: bool = False) -> None:
    """Add the shared recording `flags` (keys of `servewatch.watch.options.FLAGS`) to `parser`, their defaults from `defaults`.
    `overlay`: the flags default to None (not given), for a command whose base is read later (serve's
    config file); `help`/`metavar`: a command's own wording, with {fields} of `defaults` filled in; `url_optional`:
    the URL may be left out (watch's deployment names its instances with --prefill and --decode instead)."""
    words = {**dataclasses.asdict(defaults), "history_min": defaults.history_s / 60,
             "probes_an_hour": 3600 / defaults.probe_interval_s,
             "probe_deadline_words": (LEARNED_DEADLINE_WORDS if defaults.probe_deadline is None
                                      else f"{defaults.probe_deadline:g} s")}
    for key in flags:
        flag = FLAGS[key]
        kwargs = dict(flag.kwargs)
        if kwargs.pop("seconds", False):
            kwargs["type"] = duration
        option, dest = flag.option, flag.dest
        if key == "probe" and defaults.probe:              # on by default: --no-probe turns it off
            parser.add_argument("--probe", dest="probe", action="store_true",
                                help="the active probe (on by default here)")
            option, dest, kwargs = "--no-probe", "no_probe", {"action": "store_true"}
            parser.add_argument(option, dest=dest, help=(help or {}).get(key, NO_PROBE_HELP).format(**words),
                                **kwargs)
            continue
        elif key != "url" and flag.kwargs.get("action") is None and "default" not in kwargs:
            kwargs["default"] = None if overlay else getattr(defaults, flag.field)
        if metavar and key in metavar:
            kwargs["metavar"] = metavar[key]
        text = (help or {}).get(key, flag.help).format(**words)
        if key == "url":
            if url_optional:
                kwargs.update(nargs="?", default=None)
            parser.add_argument(dest, help=text, **kwargs)
        else:
            parser.add_argument(option, dest=dest, help=text, **kwargs)


def add_pair_arguments(parser: argparse.ArgumentParser, prefill_help: str, decode_help: str) -> None:
    """A disaggregated deployment's instances, each flag repeatable: `--prefill URL` and `--decode URL`."""
    parser.add_argument("--prefill", action="append", metavar="URL", help=prefill_help)
    parser.add_argument("--decode", action="append", metavar="URL", help=decode_help)


def recording_from_args(args, base: RecordingOptions,
                        flags: Iterable[str] = tuple(FLAGS)) -> RecordingOptions:
    """`base` with each of the recording `flags` that `args` was given laid over it (a flag not given, or
    not taken by the command, leaves `base`'s value). Raises ServewatchError naming a bad detector setting."""
    flags = set(flags)
    changes: dict[str, Any] = {}
    for key in flags - {"probe", "detector_settings", "detectors_file"}:
        value = getattr(args, key, None)
        if value is not None:
            changes[FLAGS[key].field] = value
    if "probe" in flags and getattr(args, "probe", False):
        changes["probe"] = True
    if "probe" in flags and getattr(args, "no_probe", False):
        changes["probe"] = False
    given = getattr(args, "detector_settings", None) if "detector_settings" in flags else None
    file = getattr(args, "detectors_file", None) if "detectors_file" in flags else None
    if given or file:
        from servewatch.detectors import settings

        changes["detectors"] = settings.build(given or [], file)
    return dataclasses.replace(base, **changes)


def options_from_args(args, defaults: RecordingOptions) -> RecordingOptions:
    """`watch` and `guard`: the options their flags say over the command's `defaults`. Raises
    ServewatchError naming a bad URL (servewatch.transport.urls) or a bad detector setting. No look-up of the
    host name here: see `resolve_at_start`."""
    from servewatch.transport.urls import check

    check(args.url)
    return recording_from_args(args, dataclasses.replace(defaults, url=args.url))


def resolve_at_start(args) -> None:
    """`watch` and `guard` on the one server the user named: a host name this machine cannot resolve is said at
    once (HostNotResolved: one line, status 2), not watched forever as a server that does not answer. With
    --pid the identity check says it instead, where --unverified-pid-ok can accept a host seen only from
    elsewhere."""
    from servewatch.transport.urls import resolve

    if getattr(args, "pid", None) is None:
        resolve(args.url)


def add_series_arguments(parser: argparse.ArgumentParser) -> None:
    """--dialect and --names, as `rules` and `dashboard` take them."""
    from servewatch.derive.engine_series import NAMING_HELP, namings

    known = namings()
    parser.add_argument("--dialect", choices=tuple(known), default=next(iter(known)),
                        help=f"the engine whose metric names to use (default {next(iter(known))})")
    parser.add_argument("--names", metavar="NAMING", default=None,
                        help=f"metric naming: {NAMING_HELP} (default: the dialect's current names)")


def series_from_args(args) -> EngineSeries:
    """The series `rules` and `dashboard` read: --dialect at --names. Raises ServewatchError on a naming the
    dialect does not have."""
    from servewatch.derive.engine_series import engine_series, namings
    from servewatch.errors import ServewatchError

    try:
        return engine_series(args.dialect, args.names)
    except KeyError:
        raise ServewatchError(f"--names: {args.names!r} is not a {args.dialect} metric naming "
                              f"(one of {', '.join(namings()[args.dialect])})") from None
