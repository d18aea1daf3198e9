"""`servewatch proxy` put together: the request path, its records, its /metrics and its traces."""

from __future__ import annotations

import asyncio
import gc
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servewatch import stopping
from servewatch.errors import ServewatchError
from servewatch.proxy.config import ProxyConfig
from servewatch.proxy.server import Proxy

if TYPE_CHECKING:
    from servewatch.watch.options import RecordingOptions


@dataclass(frozen=True)
class ProxyRun:
    """What `proxy` takes beyond the request path's ProxyConfig (commands/proxy.py builds both from the flags)."""
    listen: tuple[str, int]                       # host, port (0: any free port)
    metrics_listen: tuple[str, int] | None = None  # its own /metrics (None: none)
    records: str | None = None                    # one JSON line per request into this file
    records_max_mb: float = 64.0                  # rotated at this size
    records_keep: int = 3                         # files kept, the current one included
    otlp_endpoint: str | None = None              # traces to this OTLP/HTTP collector
    trace_sample: float = 0.1                     # the share of requests traced
    watch: RecordingOptions | None = None         # --watch: the recorder over the upstream, with these options
    duration: float | None = None                 # stop after this long (None: until stopped)


async def run_proxy(config: ProxyConfig, run: ProxyRun) -> int:
    from servewatch.proxy.recordlog import RecordLog, flush_forever, record_sink
    from servewatch.proxy.telemetry import Telemetry

    if (config.keep_text or config.keep_itl) and not run.records:
        raise ServewatchError(f"{'--keep-text' if config.keep_text else '--keep-itl'} keeps more in the records "
                              "file: give one with --records FILE")
    log = None
    if run.records:
        try:
            log = RecordLog(run.records, max_bytes=int(run.records_max_mb * 2**20), keep=run.records_keep)
        except OSError as exc:
            raise ServewatchError(f"--records {run.records}: {exc.strerror or exc}") from None
    telemetry = Telemetry(otlp_endpoint=run.otlp_endpoint, sample=run.trace_sample)
    telemetry.log = log

    try:
        if config.prefill:
            from servewatch.proxy.pair import PairProxy      # the pair's path: its own module, the single path untouched

            proxy = PairProxy(config, on_record=record_sink(log, telemetry, config.keep_text))
        else:
            proxy = Proxy(config, on_record=record_sink(log, telemetry, config.keep_text))
    except ValueError as exc:
        raise ServewatchError(f"--upstream {config.upstream}: {exc}") from None
    telemetry.proxy = proxy
    try:
        port = await proxy.start(*run.listen)
    except OSError as exc:
        raise ServewatchError(f"--listen {run.listen[0]}:{run.listen[1]}: {exc.strerror or exc}") from None
    # what was built to start (modules, the registry) is kept for good: the collector's older generations
    # stop walking it again and again under the per-request garbage of the request path
    gc.freeze()
    metrics_runner = None
    try:
        if run.metrics_listen is not None:
            host, mport = run.metrics_listen
            try:
                metrics_runner, mport = await telemetry.serve_metrics(proxy, host, mport)
            except OSError as exc:
                raise ServewatchError(f"--metrics-listen {host}:{mport}: {exc.strerror or exc}") from None
            print(f"servewatch proxy: /metrics on http://{host}:{mport}/metrics", file=sys.stderr)
        if config.keep_text:
            print(f"servewatch proxy: --keep-text: {run.records} holds every prompt and completion as text; "
                  "do not share it", file=sys.stderr)
        if config.prefill:
            where = (f"prefill {', '.join(config.prefill)} then decode {', '.join(config.decode)} "
                     "(each side in turn)")
        else:
            where = config.upstream
        print(f"servewatch proxy: listening on {run.listen[0]}:{port}, forwarding to {where}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        remove = stopping.on_stop(asyncio.get_running_loop(), stop.set)   # ^C, SIGTERM, SIGHUP: an orderly stop
        try:
            flusher = asyncio.create_task(flush_forever(log)) if log is not None else None
            watcher = asyncio.create_task(_watch(run.watch, proxy, stop)) if run.watch else None
            try:
                await asyncio.wait_for(stop.wait(), run.duration)
            except TimeoutError:
                pass
            if flusher is not None:
                flusher.cancel()
            if watcher is not None:
                watcher.cancel()
                try:
                    await watcher
                except asyncio.CancelledError:
                    pass
        finally:
            remove()
    finally:
        await proxy.close()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        telemetry.close()
        if log is not None:
            log.close()
    if stopping.received() is not None:
        stopping.say("proxy", _records_kept(log))
        return stopping.status()
    return 0


def _records_kept(log) -> str:
    """The stop line's words for the records file: every record finished before the stop is in it, whole."""
    if log is None:
        return "no --records given, no record written"
    kept = log.written - log.lost
    rotated = f" and {log.rotations} rotated file{'' if log.rotations == 1 else 's'}" if log.rotations else ""
    return f"{kept} record{'' if kept == 1 else 's'} kept in {log.path}{rotated}"


async def _watch(options: RecordingOptions, proxy, stop: asyncio.Event) -> None:
    """The recorder over the upstream (health, /metrics) with the proxy's requests as one more source:
    verdicts as JSON lines on stdout, bundles with --out."""
    from servewatch.proxy.signals import RequestsSource
    from servewatch.watch.event_lines import EventLines
    from servewatch.watch.session import record

    def sources_for(clock):
        return [RequestsSource(proxy, clock, options.interval)]

    try:
        lines = EventLines(json_lines=True)      # the output contract of watch (watch.event_lines)
        await record(options, None, tool="proxy", listeners=[lines.fired], clear_listeners=[lines.cleared],
                     evidence_listeners=[lines.evidence],
                     extra_sources=sources_for)
    finally:
        stop.set()
