"""The demo in virtual time: the built-in engine in-process, the recorder polling it through the same
sources and detectors as a real server, the script advancing the world between polls. No sleeping:
a ten-minute run takes seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from servewatch.clock import VirtualClock
from servewatch.demo.plan import CLEARED_BY_SERVEWATCH, PROBE_DEADLINE_S, PROBE_INTERVAL_S, Phase
from servewatch.demo.records import record_of
from servewatch.demo.result import PhaseResult
from servewatch.demo.script import Arrival, phase_arrivals
from servewatch.demo.serverside import blindness_findings, health_answers, server_summary
from servewatch.load.scenarios import LoadConfig
from servewatch.load.summary import summarize
from servewatch.sim import DEAD, EXITED, EngineDeadError, RequestRejected, SimConfig, SimEngine
from servewatch.sinks.base import CallbackSink, Fired
from servewatch.watch.recorder import Recorder
from servewatch.watch.sim_target import sim_sources

START_GAP_S = 5.0        # idle before the first phase, so the detectors learn the idle cadence


@dataclass(slots=True)
class _Submitted:
    request: object
    scheduled: float
    phase: int


class VirtualScript:
    """Moves the in-process engine through the plan; `advance(t)` is the recorder's world hook."""

    def __init__(self, engine: SimEngine, plan: list[Phase], recorder: Recorder, seed: int,
                 on_phase: Callable[[PhaseResult], None] = lambda p: None):
        self.engine = engine
        self.plan = plan
        self.recorder = recorder
        self.seed = seed
        self.on_phase = on_phase
        self.results: list[PhaseResult] = []
        self.submitted: list[_Submitted] = []
        self.died_at: float | None = None
        self._i = -1
        self._pending: list[Arrival] = []
        self._next_start = engine.clock.now() + START_GAP_S

    @property
    def current(self) -> PhaseResult | None:
        return self.results[-1] if self.results and self._i < len(self.plan) else None

    def advance(self, t: float) -> None:
        engine = self.engine
        while True:
            due, action = self._next_event(t)
            if action is None:
                break
            engine.run_until(max(due, engine.clock.now()))
            action()
        engine.run_until(t)
        self._transition(t)

    def _next_event(self, t: float):
        """The earliest scripted event at or before t: a phase start, an arrival, or a fault."""
        if self._next_start is not None:
            return (self._next_start, self._start_next) if self._next_start <= t else (None, None)
        result = self.current
        if result is None:
            return None, None
        events = []
        if self._pending and result.start + self._pending[0].t <= t:
            events.append((result.start + self._pending[0].t, self._submit_next))
        phase = result.phase
        if phase.is_fault and result.fault_at is None and result.start + phase.fault_after_s <= t:
            events.append((result.start + phase.fault_after_s, self._inject))
        if not events:
            return None, None
        return min(events, key=lambda e: e[0])

    def _start_next(self) -> None:
        self._i += 1
        self._next_start = None
        if self._i >= len(self.plan):
            self.recorder.stopped = True
            return
        phase = self.plan[self._i]
        now = self.engine.clock.now()
        self.results.append(PhaseResult(phase=phase, start=now))
        self._pending = phase_arrivals(phase, self.seed + self._i)
        self.on_phase(self.results[-1])

    def _submit_next(self) -> None:
        arrival = self._pending.pop(0)
        now = self.engine.clock.now()
        try:
            request = self.engine.submit(prompt_tokens=arrival.prompt_tokens, max_tokens=arrival.max_tokens,
                                         ignore_eos=True,
                                         prefix_key=self.plan[self._i].name if self.plan[self._i].shared_prompt else None)
        except (EngineDeadError, RequestRejected):
            return
        self.submitted.append(_Submitted(request, now, self._i))

    def _inject(self) -> None:
        result = self.current
        result.fault_at = self.engine.clock.now()
        self.engine.inject(result.phase.fault)
        if result.phase.fault.get("kind") == "engine-death":
            self.died_at = result.fault_at

    def _transition(self, t: float) -> None:
        """Decide, at t, whether the current phase is over (arrivals done, faults shown, drained)."""
        result = self.current
        if result is None or result.end:
            return
        phase = result.phase
        if t < result.start + phase.duration_s:
            return
        if phase.is_fault:
            waited_enough = result.fault_at is not None and t >= result.fault_at + phase.wait_for_verdicts_s
            if not (self._expected_fired(result) or waited_enough):
                return
            if phase.fault.get("kind") in CLEARED_BY_SERVEWATCH and result.cleared_at is None:
                self.engine.inject({"kind": "clear"})
                result.cleared_at = t
        self._pending.clear()
        drained = self.engine.in_flight == 0 or self.engine.state in (DEAD, EXITED)
        settle_until = (result.cleared_at or result.start + phase.duration_s) + phase.drain_s
        if phase.name == "engine-death":
            drained = self.engine.state == EXITED and t >= (result.fault_at or t) + 2.0
        if not drained and t < settle_until:
            return
        result.end = t
        self._next_start = t

    def _expected_fired(self, result: PhaseResult) -> bool:
        names = {f.verdict.name for f in result.fired}
        return all(name in names for name in result.phase.expect)

    def on_fired(self, fired: Fired) -> None:
        if self.current is not None:
            self.current.fired.append(fired)


def run_virtual(plan: list[Phase], *, dialect: str, seed: int, interval: float, sink, detector_config,
                history_s: float, listeners=(), on_phase=lambda p: None) -> list[PhaseResult]:
    import asyncio

    clock = VirtualClock(start=time.time())
    engine = SimEngine(SimConfig(dialect=dialect, seed=seed), clock)
    sources = sim_sources(engine, clock, interval, probe_interval_s=PROBE_INTERVAL_S, probe_deadline=PROBE_DEADLINE_S)
    recorder = Recorder(sources, clock, history_s=history_s, config=detector_config,
                        sinks=[sink] if sink is not None else (), tool="demo")
    if sink is not None:
        sink.recorder = recorder
    script = VirtualScript(engine, plan, recorder, seed, on_phase=on_phase)
    recorder.sinks.extend(CallbackSink(on_fired, on_loop=True) for on_fired in [script.on_fired, *listeners])
    total = START_GAP_S + sum(p.duration_s + p.drain_s + p.wait_for_verdicts_s + 60.0 for p in plan)
    asyncio.run(recorder.run_virtual(total, script.advance))
    _finish(script, recorder, interval)
    return script.results


def _finish(script: VirtualScript, recorder: Recorder, interval: float) -> None:
    window = recorder.ring.window()
    for i, result in enumerate(script.results):
        end = result.end or script.engine.clock.now()
        result.records = [record_of(n, s.request, s.scheduled, script.died_at)
                          for n, s in enumerate(x for x in script.submitted if x.phase == i)]
        metrics = [m for m in window.metrics if result.start <= m.t <= end]
        server = server_summary(metrics, interval)
        server["slot_limit"] = script.engine.config.max_num_seqs
        config = LoadConfig(url="sim://in-process", scenario=_scenario(result.phase), rate=result.phase.rate,
                            duration_s=result.phase.duration_s, output_tokens=result.phase.output_tokens,
                            prompt_tokens=result.phase.prompt_tokens).resolved()
        result.summary = summarize(config, result.records, wall_s=end - result.start, prompt_source="server",
                                   prompts_exact=True, server=server, client_name="in-process")
        result.summary["server_blindness"] = blindness_findings(metrics)
        since = result.fault_at if result.fault_at is not None else result.start
        result.health = health_answers([h for h in window.health if since <= h.t <= end])


def _scenario(phase: Phase) -> str:
    from servewatch.load.scenarios import PRESETS

    return phase.name if phase.name in PRESETS else "custom"
