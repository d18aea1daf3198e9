"""`servewatch watch URL`: the flight recorder."""

from __future__ import annotations

import argparse
import re


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str) -> float:
    """"0.5", "500ms", "1s", "10m" → seconds (> 0)."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 0.5, 500ms, 1s, 10m)")
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than zero")
    return seconds


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "watch", help="record a server's health, metrics and processes; report verdicts health checks miss",
        description="Poll /health, /metrics, the process tree (--pid), GPUs and an optional log; keep a bounded "
                    "history; fire a verdict once when a condition starts (and write an incident bundle with "
                    "--out; `kill -USR1 <watch pid>` writes one of the current window at any time). Exit status: "
                    "0, or 1 when --stop-on-incident stopped on an incident.")
    parser.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--pid", type=int, help="the API server's PID: process tree, identity and exit detection")
    parser.add_argument("--interval", type=duration, default=1.0, help="health/metrics/process cadence (default 1s)")
    parser.add_argument("--history", type=duration, default=600.0, help="seconds of history kept (default 600)")
    parser.add_argument("--out", metavar="DIR", help="write an incident bundle per verdict into DIR")
    parser.add_argument("--duration", type=duration, metavar="S", help="stop after S seconds (default: until ^C)")
    parser.add_argument("--stop-on-incident", action="store_true", help="stop at the first incident verdict")
    parser.add_argument("--log-file", metavar="F", help="the server's log file, tailed and parsed")
    parser.add_argument("--json", action="store_true", help="one JSON line per verdict instead of a live table")
    parser.set_defaults(func=run)


def run(args) -> int:
    import asyncio
    import sys

    try:
        return asyncio.run(_watch(args))
    except KeyboardInterrupt:   # ^C is how a watch usually ends
        print("servewatch watch: stopped", file=sys.stderr)
        return 0


async def _watch(args) -> int:
    import sys
    import time

    from servewatch.sources.process import PsutilProbe
    from servewatch.detectors.registry import is_incident
    from servewatch.watch.output import json_line, status_table
    from servewatch.watch.session import record

    probe = PsutilProbe(args.pid) if args.pid is not None else None   # wrong PID: one line, non-zero exit
    listeners = [lambda fired: print(json_line(fired), flush=True)] if args.json else []
    stop_when = (lambda fired: is_incident(fired.verdict.name)) if args.stop_on_incident else None
    started = time.monotonic()
    terminated = []

    def on_recorder(recorder) -> None:
        terminated.append(_StopOnSigterm(recorder))

    async def live(recorder) -> None:
        await _run_live(recorder, started, status_table, args.duration)

    try:
        recorder = await record(args, probe, tool="watch", listeners=listeners, stop_when=stop_when,
                                on_recorder=on_recorder, drive=None if args.json else live)
    finally:
        for handler in terminated:
            handler.close()
    if terminated and terminated[0].received:
        print("servewatch watch: stopped (SIGTERM)", file=sys.stderr)
        return 0
    return 1 if recorder.stopped else 0


class _StopOnSigterm:
    """SIGTERM (a service manager stopping the watch) ends it like ^C: bundles being written are
    finished, exit status 0."""

    def __init__(self, recorder):
        import asyncio
        import signal

        self.received = False
        self.recorder = recorder
        self.loop = asyncio.get_running_loop()
        self.loop.add_signal_handler(signal.SIGTERM, self._stop)

    def _stop(self) -> None:
        self.received = True
        self.recorder.stop()

    def close(self) -> None:
        import signal

        self.loop.remove_signal_handler(signal.SIGTERM)


async def _run_live(recorder, started, status_table, duration) -> None:
    import asyncio
    import time

    from rich.live import Live

    def view():
        return status_table(recorder.ring.window(), recorder.fired, [v.name for v in recorder.latch.active],
                            time.monotonic() - started)

    with Live(get_renderable=view, refresh_per_second=2, transient=False):
        await recorder.run(duration)
    await asyncio.sleep(0)
