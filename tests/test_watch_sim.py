"""The recorder against the in-process simulator, in virtual time: each fault gives its verdict, at
the right moment, once (see test_watch_sim_quiet.py for the runs where nothing may fire)."""

from servewatch.sim import SimConfig
from tests.sim_harness import Phase, fired, run

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
    recorder, _, start = run([Phase(65, rate=2)], faults=((20, {"kind": "stall", "duration": 8}),
                                                          (50, {"kind": "stall", "duration": 8})))
    stalls = [at for name, at in incidents(recorder, start) if name == "alive_health_ok_no_progress"]
    assert len(stalls) == 2 and 20 < stalls[0] <= 23 and 50 < stalls[1] <= 53


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


def test_admission_deadlock_is_no_progress_with_work_waiting():
    recorder, _, start = run([Phase(50, rate=2)], faults=((30, {"kind": "admission-deadlock"}),))
    verdict = next(f.verdict for f in recorder.fired if f.verdict.name == "alive_health_ok_no_progress")
    assert 30 < verdict.t - start < 40
    assert verdict.details["waiting"] > 0


def test_fired_once_per_condition_and_detection_is_deterministic():
    first, _, start1 = run([Phase(40, rate=2)], faults=((30, {"kind": "stall"}),))
    second, _, start2 = run([Phase(40, rate=2)], faults=((30, {"kind": "stall"}),))
    assert [f.verdict.name for f in first.fired] == ["alive_health_ok_no_progress"]
    assert [f.verdict for f in first.fired] == [f.verdict for f in second.fired]
