"""One recording session against a URL, as `watch` and `guard` run it: the sources, the recorder, the
bundle sink, the "recording" announcement and SIGUSR1 on-demand bundles. The caller adds what it
does with verdicts (sinks; plain functions as `listeners`) and how the session ends."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from servewatch.errors import ServewatchError
from servewatch.kinds import NO_ENGINE_METRICS, failure_words
from servewatch.watch.options import RecordingOptions

if TYPE_CHECKING:
    from servewatch.clock import Clock
    from servewatch.detectors.verdict import Verdict
    from servewatch.sinks.base import Cleared, Fired, Sink
    from servewatch.sources.base import Source
    from servewatch.sources.process import PsutilProbe
    from servewatch.sinks.bundle_sink import BundleSink
    from servewatch.transport.contract import Transport
    from servewatch.watch.recorder import Recorder


async def record(options: RecordingOptions, probe: PsutilProbe | None, *, tool: str,
                 listeners: Sequence[Callable[[Fired], None]] = (),
                 clear_listeners: Sequence[Callable[[Cleared], None]] = (), sinks: Sequence[Sink] = (),
                 evidence_listeners: Sequence[Callable[[Verdict, bool], None]] = (),
                 bundle_listeners: Sequence[Callable[[str, float], None]] = (),
                 stop_when: Callable[[Fired], bool] | None = None,
                 on_recorder: Callable[[Recorder], None] | None = None,
                 drive: Callable[[Recorder], Awaitable[None]] | None = None,
                 identity: Callable[[], dict | None] | None = None,
                 extra_sources: Sequence[Source] | Callable[[Clock], Sequence[Source]] = (),
                 build: Callable[..., Recorder] | None = None) -> Recorder:
    """Record options.url until options.duration ends or the recorder is stopped; the recorder when
    done. `sinks` hear fired and cleared verdicts after the bundle writer (--out); `listeners` and
    `clear_listeners` are plain functions heard on the event loop, after every sink (each an on-loop
    `sinks.base.CallbackSink`), and `evidence_listeners` once a verdict's evidence first holds (Recorder), `bundle_listeners(path, t)`
    once a bundle asked for with SIGUSR1 is written; `drive(recorder)` replaces the plain run (the live table);
    `on_recorder(recorder)` is called once it exists; `identity()` says how the PID was tied to the URL, for
    every bundle (actions.identity). `build(options, transport, clock, *, sinks, stop_when, tool)`: a deployment's
    recorder in place of one target's (guard on a pair: watch.deployment.build, options.url the instance held), its
    bundles naming each instance."""
    from servewatch.clock import RealClock
    from servewatch.sinks.base import CallbackSink
    from servewatch.sinks.bundle_sink import bundle_sink
    from servewatch.transport.contract import Http1Transport
    from servewatch.watch.targets import base_url

    target = base_url(options.url)
    log_file = options.log_file
    if log_file is not None and not os.path.isfile(log_file):
        if not os.path.isdir(os.path.dirname(os.path.abspath(log_file))):
            raise ServewatchError(f"--log-file {log_file}: no such directory")
        print(f"servewatch {tool}: --log-file {log_file}: not there yet; it will be read once it appears",
              file=sys.stderr)
    sink = (bundle_sink(options.out, None if build else target, options.detectors)   # unwritable: exit 2
            if options.out else None)
    if sink is not None:
        sink.identity = identity
    clock = RealClock()
    transport = Http1Transport()          # health, metrics, the probe (a fresh connection each) and dcgm-exporter
    try:
        heard = [*(CallbackSink(listener, on_loop=True) for listener in listeners),
                 *(CallbackSink(on_cleared=listener, on_loop=True) for listener in clear_listeners)]
        extra = list(extra_sources(clock) if callable(extra_sources) else extra_sources)
        if probe is not None and getattr(probe, "live", True):   # the ranks' collective sources (RAS, Flight
            # Recorder dumps), issue 43; a replayed process view (`watch --replay`) has no live process to read
            extra.append(_collective_source(probe, clock, options, tool, identity))
        if build is not None:
            recorder = build(options, transport, clock, sinks=[*([sink] if sink else []), *sinks, *heard],
                             stop_when=stop_when, tool=tool)
            if sink is not None:
                sink.recorder = recorder
        else:
            recorder = build_recorder(options, transport, clock, probe=probe, bundles=sink, sinks=[*sinks, *heard],
                                      stop_when=stop_when, tool=tool, extra_sources=extra)
        recorder.evidence_listeners.extend(evidence_listeners)
        if on_recorder is not None:
            on_recorder(recorder)
        announce = asyncio.create_task(_announce_recording(recorder, target, tool))
        on_demand = _OnDemand(recorder, sink, tool, bundle_listeners)
        try:
            if drive is not None:
                await drive(recorder)
            else:
                await recorder.run(options.duration)
        except asyncio.CancelledError:
            pass
        finally:
            announce.cancel()
            on_demand.close()
            if on_demand.tasks:         # a bundle asked for before the stop is finished, and counted
                await asyncio.gather(*on_demand.tasks, return_exceptions=True)
            await asyncio.get_running_loop().run_in_executor(None, recorder.close_sinks)
    finally:
        await transport.close()
    if sink is not None and sink.failures:
        print(f"servewatch {tool}: {sink.failures} bundle(s) could not be written", file=sys.stderr)
    _say_probe_cost(recorder, tool)
    return recorder


def bundles_kept(written: int, out: str | None) -> str:
    """What a stop keeps of a session, for its one line (servewatch.stopping.say): the bundles written to
    --out, every one complete (a bundle being written when the signal came is finished first)."""
    if not out:
        return "no --out given, no bundle written"
    return f"{written} bundle{'' if written == 1 else 's'} written to {out}"


def bundles_written(recorders: Sequence[Recorder]) -> int:
    """The bundles the recorders' bundle sinks wrote."""
    from servewatch.sinks.bundle_sink import BundleSink

    return sum(sink.writer.bundles_written for recorder in recorders for sink in recorder.sinks
               if isinstance(sink, BundleSink))


def _collective_source(probe: PsutilProbe, clock: Clock, options: RecordingOptions, tool: str,
                       identity: Callable[[], dict | None] | None) -> Source:
    """The tree's collective source: said once at its first poll; a dump trigger is written only while the
    root's identity proof holds (watch and guard prove it; `identity()` says so)."""
    from servewatch.sources.collective_source import CollectiveSource

    def proven() -> bool:
        said = identity() if identity is not None else None
        return identity is None or bool(said and (said.get("verified") or said.get("override")))

    return CollectiveSource(clock, options.interval, root=probe.pid, tool=tool, proven=proven)


def _say_probe_cost(recorder: Recorder, tool: str) -> None:
    """What the active probe cost the server over the session, in one line."""
    for source in recorder.sources:
        if getattr(source, "kind", None) == "probe":
            print(f"servewatch {tool}: probe cost: {source.cost_line()}", file=sys.stderr, flush=True)


def build_recorder(options: RecordingOptions, transport: Transport, clock: Clock, *, tool: str,
                   probe: PsutilProbe | None = None, bundles: BundleSink | None = None, sinks: Sequence[Sink] = (),
                   stop_when: Callable[[Fired], bool] | None = None,
                   wrap_source: Callable[[Source], Source] | None = None,
                   extra_sources: Sequence[Source] = ()) -> Recorder:
    """The recorder for one target, as `watch`, `guard` and `serve` all record one: the HTTP sources
    (plus process, log and active-probe sources when asked for), the detectors of options.detectors,
    the bundle sink first and then `sinks`. `wrap_source(source)` may wrap each source (serve's backoff)."""
    from servewatch.sources.probe import stderr_say
    from servewatch.watch.recorder import Recorder
    from servewatch.watch.targets import base_url, http_sources

    sources = http_sources(transport, base_url(options.url), clock, options.interval, process_probe=probe,
                           slot_limit=probe.slot_limit() if probe else None, log_file=options.log_file,
                           gpu=options.gpu and not options.gpu_metrics,
                           probe_interval_s=options.probe_interval_s if options.probe else None,
                           probe_deadline=options.probe_deadline, say=stderr_say(tool))
    if options.gpu_metrics:                    # dcgm-exporter's page in place of NVML
        from servewatch.sources.dcgm import DcgmSource
        from servewatch.sources.http import http_transport
        from servewatch.watch.targets import gpu_interval

        sources.append(DcgmSource(http_transport(transport, options.gpu_metrics, timeout_s=5.0), clock,
                                  gpu_interval(options.interval), pid=getattr(probe, "pid", None)))
    sources = [*sources, *extra_sources]       # e.g. the proxy's requests source
    if wrap_source is not None:
        sources = [wrap_source(source) for source in sources]
    recorder = Recorder(sources, clock, history_s=options.history_s, config=options.detectors,
                        sinks=[*([bundles] if bundles else []), *sinks], stop_when=stop_when, tool=tool)
    if bundles is not None:
        bundles.recorder = recorder
    return recorder


class _OnDemand:
    """SIGUSR1 → a bundle of the current window, written off the event loop (the probes go on)."""

    def __init__(self, recorder: Recorder, sink: BundleSink | None, tool: str,
                 listeners: Sequence[Callable[[str, float], None]] = ()):
        import signal

        self.recorder, self.sink, self.tool, self.listeners = recorder, sink, tool, listeners
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
        say = f"servewatch {self.tool}: SIGUSR1:"
        if self.sink is None:
            print(f"{say} no --out DIR was given, no bundle written", file=sys.stderr, flush=True)
            return
        window = self.recorder.ring.window()
        if not len(window):
            print(f"{say} nothing recorded yet, no bundle written", file=sys.stderr, flush=True)
            return
        asked = time.time()
        path = await self.loop.run_in_executor(None, self.sink.write_on_demand, window)
        if path is not None:   # a failure was already said on stderr by the writer, and counted
            print(f"servewatch {self.tool}: bundle on demand: {path}", file=sys.stderr, flush=True)
            for listener in self.listeners:      # the output contract's line (stdout when not a terminal)
                listener(str(path), asked)

    def close(self) -> None:
        if self.signal is not None:
            self.loop.remove_signal_handler(self.signal)


def first_answers(window) -> str | None:
    """"/health 200, /metrics vllm (vllm-0.32)": what a target's first /health and /metrics answers were, once
    both are in the window (None before)."""
    if not (window.health and window.metrics):
        return None
    health, metrics = window.health[-1], window.metrics[-1]
    what = (f"{metrics.dialect} ({metrics.naming})" if metrics.dialect
            else failure_words(metrics.error or NO_ENGINE_METRICS))
    said = health.status if health.status is not None else failure_words(health.error or "no answer")
    return f"/health {said}, /metrics {what}"


async def _announce_recording(recorder: Recorder, target: str, tool: str) -> None:
    """One stderr line once the first /health and /metrics answers are in: from here on, what happens
    to the target is on the record (scripts can wait for this line before they start load). A deployment's: the
    held instance's (the one whose URL is `target`)."""
    def window():
        found = recorder.ring.window()
        held = [m.name for m, _ in getattr(recorder.ring, "rings", ()) if m.url == target]
        return found.instance(held[0]).window if held else found

    while (answers := first_answers(window())) is None:
        await asyncio.sleep(0.1)
    print(f"servewatch {tool}: recording {target}: {answers}", file=sys.stderr, flush=True)
