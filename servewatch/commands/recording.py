"""The flags several commands share: the recording flags of `watch`, `guard`, `diagnose`, `proxy` and `serve`
(`add_recording_arguments`; each flag, its type and where its value goes are written once, in
`servewatch.watch.options.FLAGS`), a deployment's `--prefill` and `--decode` (`add_pair_arguments`: `watch`,
`proxy`), and the argparse type of every duration flag (`duration`)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping

from servewatch.watch.options import FLAGS, LEARNED_DEADLINE_WORDS, NO_PROBE_HELP, ONE_SERVER, RecordingOptions
from servewatch.words import duration_s


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
