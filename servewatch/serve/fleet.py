"""The fleet: one recorder per target (built exactly as `watch` builds one), each on its own tasks,
started with a jittered offset so scrapes do not align; targets come and go as discovery changes.

A target's GPUs: NVML when it runs on this machine (a PID given); dcgm-exporter's page in NVML's place when
the target names one (`gpu_metrics`); this node's exporter (serve's own `gpu_metrics`) for every target on
this node that names none, when NVML cannot be loaded here. The exporter is read on the target's GPU cadence
by its own task, with a deadline and byte and series bounds (sources.dcgm): a slow exporter delays nothing else.

A target whose health probe keeps failing without an answer backs off: each of its sources waits an
exponentially growing delay (capped) before polling again, and it shows `up 0`. Its tasks are its own,
so a slow or dead target never delays another.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from servewatch.serve.targets import TargetSpec, on_this_node

if TYPE_CHECKING:
    from servewatch.clock import Clock
    from servewatch.serve.config import ServeConfig
    from servewatch.serve.sidecar import Sidecar
    from servewatch.transport.contract import Transport
    from servewatch.serve.signals import Signals
    from servewatch.sinks.base import Sink
    from servewatch.sinks.export.exporter import FleetExporter
    from servewatch.sources.base import Source
    from servewatch.timeline.samples import ProcessSample
    from servewatch.watch.recorder import Recorder
    from servewatch.watch.ticker import Ticker

RecorderFor = Callable[[TargetSpec, Callable[["Source"], "Source"], "Sidecar | None"], "Recorder"]

BACKOFF_AFTER = 3          # failed probes in a row (no answer at all) before backing off
BACKOFF_CAP_S = 60.0


def backoff_delay(consecutive_failures: int, interval: float) -> float:
    """0 until BACKOFF_AFTER failures in a row, then interval, 2×, 4× ... up to BACKOFF_CAP_S."""
    if consecutive_failures < BACKOFF_AFTER:
        return 0.0
    return min(BACKOFF_CAP_S, interval * 2 ** (consecutive_failures - BACKOFF_AFTER))


@dataclass
class TargetStatus:
    health_answered: bool | None = None    # the newest /health probe got an HTTP answer
    health_ok: bool | None = None          # ... and it was 2xx
    scrape_ok: bool | None = None          # the newest /metrics scrape succeeded
    last_error: str | None = None          # the newest failure's kind (scrape vocabulary)
    consecutive_failures: int = 0
    backoff_s: float = 0.0

    @property
    def up(self) -> bool:
        return bool(self.health_answered and self.scrape_ok)

    @property
    def state(self) -> str:
        return "backoff" if self.backoff_s > 0 else ("up" if self.up else "down")


class BackedOffSource:
    """A source that waits the target's backoff delay before each poll, and reports what it saw."""

    def __init__(self, source, status: TargetStatus, clock, observe: Callable[[str, list], None]):
        self.source, self.status, self.clock, self.observe = source, status, clock, observe
        self.kind = source.kind
        self.interval = source.interval

    async def poll(self):
        if self.status.backoff_s > 0:
            await self.clock.sleep(self.status.backoff_s)
        samples = list(await self.source.poll())
        self.observe(self.kind, samples)
        return samples

    async def close_connections(self) -> None:
        await self.source.close_connections()


class TargetRun:
    def __init__(self, spec: TargetSpec, exporter: FleetExporter, clock: Clock, interval: float,
                 recorder_for: RecorderFor, ticker: Ticker | None = None):
        """`recorder_for(spec, wrap_source, sidecar)` builds the target's recorder; `ticker`: the fleet's timer
        for the recorder's 1 s checks (None: a task each)."""
        self.spec, self.exporter, self.clock, self.interval = spec, exporter, clock, interval
        self.ticker = ticker
        self.status = TargetStatus()
        self.label = _label(spec.name)    # the target as the exporter's series name it (made once: read per sample)
        self.task: asyncio.Task | None = None
        self._columns = None      # serve.signals.Columns: the export's per-scrape reads, carried from the last one
        self.sidecar: Sidecar | None = None
        if spec.proxy is not None:
            from servewatch.serve.sidecar import Sidecar
            self.sidecar = Sidecar(spec)
        self.recorder = recorder_for(spec, self._wrap, self.sidecar)

    def _wrap(self, source):
        if source.kind not in ("health", "metrics"):
            return source
        return BackedOffSource(source, self.status, self.clock, self._observe)

    def _observe(self, kind: str, samples: list) -> None:
        status, name = self.status, self.label
        for sample in samples:
            if kind == "health":
                status.health_answered = sample.status is not None
                status.health_ok = sample.ok
                if not sample.ok:
                    self.exporter.probe_failures.labels(name).inc()
                    status.last_error = sample.error
                status.consecutive_failures = 0 if sample.status is not None else status.consecutive_failures + 1
                status.backoff_s = backoff_delay(status.consecutive_failures, self.interval)
            elif kind == "metrics":
                status.scrape_ok = sample.error is None
                if sample.scrape_s is not None:
                    self.exporter.scrape_duration.observe(sample.scrape_s)
                if sample.error is not None:
                    status.last_error = sample.error
                    self.exporter.scrape_failures.labels(name, _label(_kind(sample.error))).inc()
        self.exporter.target_up.labels(name).set(1 if status.up else 0)

    def live_signals(self, now: float) -> Signals:
        """The derived signals serve exports for this target (every family at once, from here only): none
        while it does not answer (`servewatch_target_up 0`): a rate from the last good scrapes before it
        stopped is not its rate now, and an exporter drops what it cannot measure. They come back with the
        first good scrape."""
        from servewatch.serve.signals import Columns, Signals, signals
        from servewatch.timeline.window import Window

        if not self.status.up:
            return Signals()
        if self._columns is None:
            self._columns = Columns()
        ring = self.recorder.ring
        of_kind = getattr(ring, "of_kind", None)          # a deployment's ring makes the whole window
        return signals(Window(metrics=of_kind("metrics")) if of_kind is not None else ring.window(), now,
                       self._columns)                    # (signals read its scrapes only)

    def live_process(self, now: float) -> ProcessSample | None:
        """The newest process sample no older than rank_series.SAMPLE_MAX_AGE_S (None: no state to export). A
        process that is gone has a sample saying so (not alive): its ranks' series go with it."""
        from servewatch.sinks.export.rank_series import SAMPLE_MAX_AGE_S

        newest = getattr(self.recorder.ring, "newest", None)    # a deployment's rings hold no process view of theirs
        return newest("process", since=now - SAMPLE_MAX_AGE_S) if newest is not None else None

    async def open(self) -> int | None:
        """The sidecar proxy listening (before the recorder starts): its port. Raises ServewatchError if it
        cannot listen."""
        return await self.sidecar.start() if self.sidecar is not None else None

    def start(self, jitter_s: float) -> None:
        self.task = asyncio.create_task(self._run(jitter_s))

    async def _run(self, jitter_s: float) -> None:
        await asyncio.sleep(jitter_s)
        await self.recorder.run(None, ticker=self.ticker)

    async def stop(self) -> None:
        self.recorder.stop()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if self.sidecar is not None:
            await self.sidecar.close()
        await asyncio.get_running_loop().run_in_executor(None, self.recorder.close_sinks)


def _nvml_error() -> str | None:
    """Why NVML cannot be loaded on this machine ("unavailable: ..."), or None when it can."""
    from servewatch.sources.gpu import NvmlProbe

    probe = NvmlProbe()
    try:
        return probe.error
    finally:
        probe.close()


def _label(value: str) -> str:
    from servewatch.sinks.export.exporter import label
    return label(value)


def _kind(error: str) -> str:
    return "http_status" if error.startswith("http_") else error


class Fleet:
    """The running targets. `apply(specs)` starts the new ones and stops the gone ones."""

    def __init__(self, config: ServeConfig, transport: Transport | None, clock: Clock,
                 exporter: FleetExporter, *, extra_sinks: Callable[[TargetSpec], list[Sink]] = lambda s: [],
                 extra_evidence: Callable[[TargetSpec], list[Callable]] = lambda s: [],
                 rng: random.Random | None = None, tool: str = "serve",
                 nvml_error: Callable[[], str | None] | None = None):
        """`nvml_error()`: why NVML cannot be loaded here (None: it can); asked once, only when the config
        names this node's dcgm-exporter. `extra_evidence(spec)`: listeners told when a verdict's evidence
        first holds (the recorder's evidence listeners: serve's line when it comes after the firing)."""
        self.config, self.transport, self.clock, self.exporter = config, transport, clock, exporter
        self.extra_sinks = extra_sinks
        self.extra_evidence = extra_evidence
        self.rng = rng or random.Random()
        self.tool = tool
        self.node_gpu_metrics: str | None = None     # this node's exporter, when it stands in for NVML
        if config.gpu_metrics:
            why = (nvml_error or _nvml_error)()
            if why is None:
                said = (f"GPUs from NVML (it loads here); this node's dcgm-exporter {config.gpu_metrics} is read only "
                        "for targets that name it")
            else:
                self.node_gpu_metrics = config.gpu_metrics
                said = (f"NVML cannot be loaded here: {why.removeprefix('unavailable: ')}; the GPUs of the targets "
                        f"on this node come from dcgm-exporter at {config.gpu_metrics}")
            print(f"servewatch {tool}: {said}", file=sys.stderr, flush=True)
        self.runs: dict[str, TargetRun] = {}
        # One timer wheel for every target's probe check, heartbeat and idle slot listing (a target's cadence then
        # costs three task wake-ups fewer; watch.ticker).
        from servewatch.watch.ticker import Ticker
        self.ticker = Ticker(clock, tool=tool)
        self.writers: list = []           # every target's bundle writer this run, gone targets' too (their counts)
        self.quota = None
        if config.out:
            from servewatch.serve.bundle_quota import FleetBundleQuota
            self.quota = FleetBundleQuota(config.out, config.bundle_cap_bytes)

    def _recorder_for(self, spec: TargetSpec, wrap: Callable[[Source], Source],
                      sidecar: Sidecar | None = None) -> Recorder:
        from servewatch.sources.process import PsutilProbe
        from servewatch.sinks.bundle_sink import bundle_sink
        from servewatch.watch.session import build_recorder

        if spec.prefill:
            return self._deployment_recorder(spec)
        options = replace(self.config.recording, url=spec.url, log_file=spec.log_file,
                          gpu=spec.pid is not None,    # a remote server's GPUs are not this machine's
                          gpu_metrics=self.gpu_metrics_of(spec))
        probe = PsutilProbe(spec.pid) if spec.pid is not None else None
        bundles = (bundle_sink(os.path.join(self.config.out, spec.name), spec.url, options.detectors)
                   if self.config.out else None)
        if bundles is not None:
            self.writers.append(bundles.writer)
        sinks = [*([self.quota.sink()] if bundles else []), self.exporter.sink(spec.name), *self.extra_sinks(spec)]
        extra = [sidecar.source(self.clock, self.config.recording.interval)] if sidecar is not None else []
        recorder = build_recorder(options, self.transport, self.clock, probe=probe, bundles=bundles, sinks=sinks,
                                  wrap_source=wrap, tool=self.tool, extra_sources=extra)
        recorder.evidence_listeners.extend(self.extra_evidence(spec))
        return recorder

    def _deployment_recorder(self, spec: TargetSpec) -> Recorder:
        """A disaggregated pair as one target (servewatch.watch.deployment): each instance on its own timeline,
        the pair's verdicts judged together; its verdicts exported and said as a target's, and with --out a bundle
        per verdict holding every instance's evidence (each sample named by its instance and role). No backoff for
        it yet: its instances' health is read from their own windows (serve.probes)."""
        from servewatch.sinks.bundle_sink import bundle_sink
        from servewatch.watch.deployment import build, members_from

        members = members_from(spec.prefill, spec.decode)
        options = replace(self.config.recording, url=spec.url)
        bundles = (bundle_sink(os.path.join(self.config.out, spec.name), None, options.detectors)
                   if self.config.out else None)
        if bundles is not None:
            self.writers.append(bundles.writer)
        sinks = [*([bundles, self.quota.sink()] if bundles else []), self.exporter.sink(spec.name),
                 *self.extra_sinks(spec)]
        recorder = build(members, options, self.transport, self.clock, sinks=sinks, tool=self.tool)
        if bundles is not None:
            bundles.recorder = recorder
        recorder.evidence_listeners.extend(self.extra_evidence(spec))
        return recorder

    def gpu_metrics_of(self, spec: TargetSpec) -> str | None:
        """The dcgm-exporter a target's GPUs are read from (None: NVML where it runs here, or none)."""
        if spec.gpu_metrics:
            return spec.gpu_metrics
        return self.node_gpu_metrics if self.node_gpu_metrics and on_this_node(spec) else None

    def _new_run(self, spec: TargetSpec) -> TargetRun:
        return TargetRun(spec, self.exporter, self.clock, self.config.recording.interval, self._recorder_for,
                         self.ticker)

    async def apply(self, specs: list[TargetSpec]) -> tuple[list[str], list[str]]:
        """The fleet becomes `specs`: (names started, names stopped). A target whose URL, PID or log
        changed is restarted. A target with a sidecar proxy is always this process's (clients depend on
        it); a sidecar that cannot listen raises ServewatchError."""
        wanted = {spec.name: spec for spec in specs if spec.proxy is not None or self.config.shard.owns(spec)}
        stopped = [name for name, run in self.runs.items() if wanted.get(name) != run.spec]
        for name in stopped:
            run = self.runs.pop(name)
            await run.stop()
            self.exporter.remove_target(name)
        started = []
        for name, spec in wanted.items():
            if name in self.runs:
                continue
            try:
                run = self._new_run(spec)
            except Exception as exc:  # noqa: BLE001 - one bad target (gone PID, unwritable out) never stops the fleet
                print(f"servewatch {self.tool}: {name}: not watched: {exc}", file=sys.stderr, flush=True)
                continue
            if run.sidecar is not None:
                try:
                    port = await run.open()
                except Exception:
                    await run.stop()
                    raise
                print(f"servewatch {self.tool}: {name}: proxy listening on port {port}, forwarding to {spec.url}",
                      file=sys.stderr, flush=True)
            self.exporter.add_target(name)
            self.runs[name] = run
            run.start(self.rng.uniform(0, self.config.recording.interval))
            started.append(name)
        self._count_states()
        return started, [name for name in stopped if name not in wanted]

    def _count_states(self) -> None:
        counts = {"up": 0, "down": 0, "backoff": 0}
        for run in self.runs.values():
            counts[run.status.state] += 1
        for state, n in counts.items():
            self.exporter.targets.labels(state).set(n)

    def refresh_states(self) -> None:
        """Targets by state into the exporter (each recorder bounds its own record of verdicts)."""
        self._count_states()

    async def close(self) -> None:
        for name in list(self.runs):
            await self.runs.pop(name).stop()
        self.ticker.close()
