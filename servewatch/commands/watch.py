"""`servewatch watch URL`: the flight recorder."""

from __future__ import annotations

import argparse

from servewatch.commands.recording import add_pair_arguments, add_recording_arguments, duration
from servewatch.watch.options import RecordingOptions

HELP = "record a server's health, metrics and processes; report verdicts health checks miss"
DESCRIPTION = ("Poll /health, /metrics, the process tree (--pid), GPUs and an optional log; keep a bounded "
               "history; fire a verdict once when a condition starts (and write an incident bundle with "
               "--out; `kill -USR1 <watch pid>` writes one of the current window at any time). Exit status: "
               "0, or 1 when --stop-on-incident stopped on an incident.")

DEFAULTS = RecordingOptions(url="", interval=1.0, probe=True)   # watch probes by default (--no-probe)

__all__ = ["arguments", "duration", "run"]


def arguments(parser: argparse.ArgumentParser) -> None:
    add_recording_arguments(parser, DEFAULTS, url_optional=True)
    add_pair_arguments(parser, "instead of URL, a disaggregated deployment: a prefill instance (repeat for more), "
                               "watched with its --decode instances as one target: each recorded on its own, the "
                               "pair's verdicts (kv_transfer_stall, kv_expired, pd_bypass, kv_transfer_failures) "
                               "judged together",
                       "a decode instance of the deployment (repeat for more)")
    parser.add_argument("--pid", type=int, help="the API server's PID: process tree, identity and exit detection")
    parser.add_argument("--unverified-pid-ok", action="store_true",
                        help="record --pid although it cannot be proven, from here, to hold the URL's port (another "
                             "host or network namespace); kept in every bundle")
    parser.add_argument("--replay", metavar="BUNDLE", default=None,
                        help="URL is `servewatch sim --replay BUNDLE`: take the process view from the bundle, in step "
                             "with the replay (in place of --pid)")
    add_recording_arguments(parser, DEFAULTS, ("duration",))
    parser.add_argument("--stop-on-incident", action="store_true", help="stop at the first incident verdict")
    parser.add_argument("--json", action="store_true",
                        help="one JSON line per event (a verdict fired, with its bundle's path; cleared; its "
                             "evidence held later) in place of the live table on a terminal, or of the plain line "
                             "per event written when stdout is not a terminal")
    parser.add_argument("--wide", action="store_true", help="the live table whole, however wide (without it, "
                                                            "columns that do not fit the terminal are left out)")


def run(args) -> int:
    import asyncio

    from servewatch.errors import ServewatchError
    from servewatch.watch.deployment import watch_deployment
    from servewatch.watch.lifecycle import WatchRun, watch_session
    from servewatch.commands.recording import options_from_args, recording_from_args, resolve_at_start

    if args.url is None and not (args.prefill or args.decode):
        raise ServewatchError("give the server's URL, or a deployment: --prefill URL --decode URL")
    watch_run = WatchRun(pid=args.pid, replay=args.replay, unverified_pid_ok=args.unverified_pid_ok, json=args.json,
                         stop_on_incident=args.stop_on_incident, wide=args.wide)
    try:
        if args.prefill or args.decode:
            for flag, given in (("a URL", args.url), ("--pid", args.pid), ("--replay", args.replay),
                                ("--log-file", args.log_file)):
                if given:
                    raise ServewatchError(f"{flag} names one server; a deployment (--prefill, --decode) is watched "
                                          f"from its instances' URLs alone")
            return asyncio.run(watch_deployment(recording_from_args(args, DEFAULTS), tuple(args.prefill or ()),
                                                tuple(args.decode or ()), watch_run))
        options = options_from_args(args, DEFAULTS)  # a bad URL, --set or --detectors: one line, exit 2
        resolve_at_start(args)
        return asyncio.run(watch_session(options, watch_run))
    except KeyboardInterrupt:   # a signal before the recording began, or a second one: stopped at once
        from servewatch import stopping

        stopping.say("watch")
        return stopping.status()
