"""`servewatch watch URL`: the flight recorder."""

from __future__ import annotations

import argparse
import re

from servewatch.errors import ServewatchError

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
    import asyncio
    import os
    import sys
    import time

    import aiohttp

    from servewatch.clock import RealClock
    from servewatch.detectors import DetectorConfig
    from servewatch.sources.process import PsutilProbe
    from servewatch.watch.output import INCIDENT_VERDICTS, json_line, status_table
    from servewatch.watch.recorder import Recorder
    from servewatch.watch.bundle_sink import bundle_sink
    from servewatch.watch.targets import base_url, http_sources

    target = base_url(args.url)
    probe = PsutilProbe(args.pid) if args.pid is not None else None   # wrong PID: one line, non-zero exit
    if args.log_file is not None and not os.path.isfile(args.log_file):
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.log_file))):
            raise ServewatchError(f"--log-file {args.log_file}: no such directory")
        print(f"servewatch watch: --log-file {args.log_file}: not there yet; it will be read once it appears",
              file=sys.stderr)
    config = DetectorConfig()
    sink = bundle_sink(args.out, target, config) if args.out else None   # unwritable: one line, exit 2

    clock = RealClock()
    listeners = []
    if args.json:
        listeners.append(lambda fired: print(json_line(fired), flush=True))
    stop_when = (lambda fired: fired.verdict.name in INCIDENT_VERDICTS) if args.stop_on_incident else None
    connector = aiohttp.TCPConnector(limit=8, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        sources = http_sources(session, target, clock, args.interval, process_probe=probe,
                               slot_limit=probe.slot_limit() if probe else None, log_file=args.log_file)
        recorder = Recorder(sources, clock, history_s=args.history, config=config,
                            on_verdict=sink.write if sink else None, listeners=listeners, stop_when=stop_when)
        if sink is not None:
            sink.recorder = recorder
        started = time.monotonic()
        announce = asyncio.create_task(_announce_recording(recorder, target))
        on_demand = _OnDemand(recorder, sink)
        terminated = _StopOnSigterm(recorder)
        try:
            if args.json:
                await recorder.run(args.duration)
            else:
                await _run_live(recorder, started, status_table, args.duration)
        except asyncio.CancelledError:
            pass
        finally:
            announce.cancel()
            on_demand.close()
            terminated.close()
    if sink is not None and sink.failures:
        print(f"servewatch watch: {sink.failures} bundle(s) could not be written", file=sys.stderr)
    if terminated.received:
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


class _OnDemand:
    """SIGUSR1 → a bundle of the current window, written off the event loop (the probes go on)."""

    def __init__(self, recorder, sink):
        import asyncio
        import signal

        self.recorder, self.sink = recorder, sink
        self.loop = asyncio.get_running_loop()
        self.tasks: set = set()
        self.signal = getattr(signal, "SIGUSR1", None)
        if self.signal is not None:
            self.loop.add_signal_handler(self.signal, self._requested)

    def _requested(self) -> None:
        task = self.loop.create_task(self._write())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _write(self) -> None:
        import sys

        if self.sink is None:
            print("servewatch watch: SIGUSR1: no --out DIR was given, no bundle written", file=sys.stderr, flush=True)
            return
        window = self.recorder.ring.window()
        if not len(window):
            print("servewatch watch: SIGUSR1: nothing recorded yet, no bundle written", file=sys.stderr, flush=True)
            return
        path = await self.loop.run_in_executor(None, self.sink.write_on_demand, window)
        if path is not None:   # a failure was already said on stderr by the writer, and counted
            print(f"servewatch watch: bundle on demand: {path}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.signal is not None:
            self.loop.remove_signal_handler(self.signal)


async def _announce_recording(recorder, target: str) -> None:
    """One stderr line once the first /health and /metrics answers are in: from here on, what happens
    to the target is on the record (scripts can wait for this line before they start load)."""
    import asyncio
    import sys

    while True:
        window = recorder.ring.window()
        if window.health and window.metrics:
            health, metrics = window.health[-1], window.metrics[-1]
            what = (f"{metrics.dialect} ({metrics.generation})" if metrics.dialect
                    else (metrics.error or "no engine metrics"))
            print(f"servewatch watch: recording {target}: /health {health.status or health.error}, "
                  f"/metrics {what}", file=sys.stderr, flush=True)
            return
        await asyncio.sleep(0.1)


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
