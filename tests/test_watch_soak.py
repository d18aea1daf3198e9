"""A 10-minute virtual soak mixing idle, normal load, overload and long prompts: the overload is
reported during the overload phase and nothing else fires (no stall, death, exit, health loss or restart)."""

import asyncio

from servewatch.clock import VirtualClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.watch import Recorder
from servewatch.watch.sim_target import sim_sources
from tests.sim_harness import Phase, Workload

PLAN = [("idle", Phase(60, rate=0)), ("normal", Phase(120, rate=2)), ("overload", Phase(120, rate=14)),
        ("idle", Phase(60, rate=0)), ("long prompts", Phase(120, rate=0.3, prompt_tokens=2905, max_tokens=64)),
        ("normal", Phase(120, rate=2))]


def test_ten_minute_soak_has_no_false_positive():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(seed=7), clock)
    start = clock.now()
    bounds, t = [], start
    for label, phase in PLAN:
        bounds.append((t, t + phase.duration, label))
        t += phase.duration
    workload = Workload(engine, [phase for _, phase in PLAN], seed=7)
    recorder = Recorder(sim_sources(engine, clock, 1.0), clock)
    asyncio.run(recorder.run_virtual(workload.end - start, advance=workload.advance))
    assert workload.end - start == 600

    def phase_at(at):
        return next(label for lo, hi, label in bounds if lo <= at < hi + 1.0)
    seen = [(f.verdict.name, phase_at(f.verdict.t)) for f in recorder.fired if f.verdict.name != "histogram_blind"]
    assert ("overload", "overload") in seen
    assert [s for s in seen if s[1] != "overload" or s[0] not in ("overload", "kv_pressure", "preemption")] == []
    assert recorder.detection_runs >= 590 and engine.steps > 10_000
