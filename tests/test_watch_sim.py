"""The recorder against the in-process simulator, in virtual time: each fault gives its verdict;
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


def test_health_green_stall_fires_within_3s_of_the_stall_and_nothing_else():
    recorder, engine, start = run([Phase(60, rate=2)], faults=((40.2, {"kind": "stall"}),))
    found = incidents(recorder, start)
    assert [name for name, _ in found] == ["alive_health_ok_no_progress"]
    verdict = recorder.fired[0].verdict
    assert 40.2 < verdict.t - start <= 40.2 + 3.0
    assert 40.0 <= verdict.onset - start <= 40.5          # the scrape that last saw progress
    assert engine.health() == 200                         # what a health check would have said
    assert "/health 200" in verdict.why


def test_stall_on_sglang_fires_long_before_its_own_health_check_turns_503():
    recorder, engine, start = run([Phase(60, rate=2)], faults=((30, {"kind": "stall"}),),
                                  config=SimConfig(dialect="sglang"))
    found = dict(incidents(recorder, start))
    assert found["alive_health_ok_no_progress"] <= 33.0
    assert found["health_loss"] >= 50.0                   # SGLang's probe times out after 20 s


def test_stall_that_clears_rearms_and_a_second_stall_fires_again():
    recorder, _, start = run([Phase(90, rate=2)], faults=((20, {"kind": "stall", "duration": 8}),
                                                          (60, {"kind": "stall", "duration": 8})))
    stalls = [at for name, at in incidents(recorder, start) if name == "alive_health_ok_no_progress"]
    assert len(stalls) == 2 and 20 < stalls[0] <= 23 and 60 < stalls[1] <= 63


def test_engine_death_with_exit_zero_is_dead_then_a_masked_exit():
    recorder, engine, start = run([Phase(60, rate=2)], faults=((30, {"kind": "engine-death", "exit_code": 0}),))
    names = [name for name, _ in incidents(recorder, start)]
    assert names[0] == "engine_dead" and "process_exit" in names
    exit_verdict = next(f.verdict for f in recorder.fired if f.verdict.name == "process_exit")
    assert exit_verdict.details["exit_code"] == 0 and exit_verdict.details["masked_failure"] is True
    assert "alive_health_ok_no_progress" not in names


def test_crash_oom_is_engine_dead_then_exit_code_1():
    recorder, _, start = run([Phase(40, rate=14)], faults=((10, {"kind": "crash-oom", "budget_mib": 50}),))
    verdicts = {f.verdict.name: f.verdict for f in recorder.fired}
    assert verdicts["engine_dead"].t - start < 12
    assert verdicts["process_exit"].details["exit_code"] == 1
    assert verdicts["process_exit"].details["masked_failure"] is False


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


def test_admission_deadlock_is_no_progress_with_work_waiting():
    recorder, _, start = run([Phase(50, rate=2)], faults=((30, {"kind": "admission-deadlock"}),))
    verdict = next(f.verdict for f in recorder.fired if f.verdict.name == "alive_health_ok_no_progress")
    assert 30 < verdict.t - start < 40
    assert verdict.details["waiting"] > 0


@pytest.mark.parametrize("label, phases, config, faults", [
    ("healthy load", [Phase(90, rate=2)], None, ()),
    ("idle", [Phase(90, rate=0)], None, ()),
    ("long prefills", [Phase(90, rate=0.3, prompt_tokens=2905, max_tokens=64)], None, ()),
    ("slow steps", [Phase(90, rate=2)], None, ((30, {"kind": "slow", "factor": 5}),)),
])
def test_no_incident(label, phases, config, faults):
    recorder, _, start = run(phases, config=config, faults=faults)
    assert incidents(recorder, start) == [], label


def test_target_down_at_start_then_up():
    # A vLLM still loading: nothing listens for 8 s (health_loss), then it serves; no other verdict.
    recorder, _, start = run([Phase(30, rate=2)], config=SimConfig(startup_seconds=8))
    names = [n for n, _ in incidents(recorder, start)]
    assert names == ["health_loss"]
    assert recorder.latch.active == ()   # cleared once it answered


def test_fired_once_per_condition_and_detection_is_deterministic():
    first, _, start1 = run([Phase(60, rate=2)], faults=((40, {"kind": "stall"}),))
    second, _, start2 = run([Phase(60, rate=2)], faults=((40, {"kind": "stall"}),))
    assert [f.verdict for f in first.fired] == [f.verdict for f in second.fired]


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
