"""The recorder against the in-process simulator, in virtual time: capacity verdicts with their cause;
healthy load, idle, long prefills, slow steps and a preemption burst that progresses give no wrong one."""

import asyncio

import pytest

from servewatch.clock import VirtualClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.watch import Recorder
from servewatch.watch.sim_target import sim_sources
from tests.sim_harness import Phase, Workload, fired, run

# A standing finding about the exposition, not an incident: it may appear in any run.
STANDING = {"histogram_blind"}


def incidents(recorder, start):
    return [(name, at) for name, at in fired(recorder, start) if name not in STANDING]


def test_overload_out_of_slots():
    recorder, _, start = run([Phase(60, rate=10, max_tokens=512)], config=SimConfig(max_num_seqs=16))
    verdict = next(f.verdict for f in recorder.fired if f.verdict.name == "overload")
    assert verdict.details["cause"] == "slots" and verdict.details["slot_limit"] == 16
    assert "alive_health_ok_no_progress" not in [n for n, _ in fired(recorder, start)]


def test_kv_pressure_with_a_preemption_burst_that_still_progresses():
    recorder, _, start = run([Phase(60, rate=4, prompt_tokens=200, max_tokens=1500)],
                             config=SimConfig(kv_tokens=8192, max_num_seqs=16))
    names = [n for n, _ in incidents(recorder, start)]
    assert "kv_pressure" in names and "preemption" in names
    overload = next(f.verdict for f in recorder.fired if f.verdict.name == "overload")
    assert overload.details["cause"] == "kv"
    assert not {"alive_health_ok_no_progress", "engine_dead", "health_loss", "process_exit"} & set(names)


@pytest.mark.parametrize("label, phases, config, faults", [
    ("healthy load", [Phase(60, rate=2)], None, ()),
    ("idle", [Phase(40, rate=0)], None, ()),
    ("long prefills", [Phase(60, rate=0.3, prompt_tokens=2905, max_tokens=64)], None, ()),
    ("slow steps", [Phase(60, rate=2)], None, ((20, {"kind": "slow", "factor": 5}),)),
])
def test_no_incident(label, phases, config, faults):
    recorder, _, start = run(phases, config=config, faults=faults)
    assert incidents(recorder, start) == [], label


def test_target_down_at_start_then_up():
    # A vLLM still loading: nothing listens for 8 s, then it serves. Starting is not losing health: no
    # verdict, with or without its log (a real vLLM took 49 s to ready; guard used to say health_loss at 1 s).
    for with_log in (False, True):
        recorder, _, start = run([Phase(30, rate=2)], config=SimConfig(startup_seconds=8), with_log=with_log)
        assert incidents(recorder, start) == []
        assert recorder.latch.active == ()


def test_slow_scrape_source_failure_is_a_typed_sample_not_a_crash():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(), clock)
    sources = sim_sources(engine, clock, 0.5)

    def broken():
        raise OSError("boom")
    from servewatch.sources.http import in_process_transport
    from servewatch.sources.metrics import MetricsSource
    sources[1] = MetricsSource(in_process_transport(broken), clock, 0.5)
    recorder = Recorder(sources, clock)
    workload = Workload(engine, [Phase(5, rate=2)])
    asyncio.run(recorder.run_virtual(5, advance=workload.advance))
    errors = {m.error for m in recorder.ring.window().metrics}
    assert errors == {"connect"}
