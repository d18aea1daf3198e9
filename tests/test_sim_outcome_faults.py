"""The simulator's error-storm, startup-hang@STAGE and crash-loop faults under the recorder, in virtual
time: each gives its verdict, named as a user would read it, and nothing else."""

from __future__ import annotations

import pytest

from servewatch.detectors import registry
from servewatch.detectors.evidence.stages import stages
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.faults import FaultSpecError, parse_fault_spec
from tests.sim_harness import Phase, fired, run


def by_name(recorder) -> dict:
    return {f.verdict.name: f.verdict for f in recorder.fired}


def incidents(recorder, start) -> list[tuple[str, float]]:
    """Fired incidents (the simulated GPU's ITL buckets also give a histogram_blind finding: left out)."""
    return [(name, t) for name, t in fired(recorder, start) if registry.is_incident(name) or name == "client_errors"]


@pytest.mark.parametrize("dialect, status", [("vllm", 500), ("sglang", 503)])
def test_a_5xx_storm_is_server_errors_soon_after_it_starts(dialect, status):
    recorder, _, start = run([Phase(120, rate=4)], config=SimConfig(dialect=dialect),
                             faults=((20, {"kind": "error-storm", "status": status, "duration": 30}),))
    assert [name for name, _ in incidents(recorder, start)] == ["server_errors"]
    (_, at), = incidents(recorder, start)
    assert 20 < at < 25
    if dialect == "sglang":
        assert "× 503" in by_name(recorder)["server_errors"].why       # SGLang counts exact codes
    assert "server_errors" not in {v.name for v in recorder.latch.active}   # 60 s after the storm: cleared


def test_a_4xx_storm_of_over_length_prompts_names_the_input_limit():
    recorder, _, start = run([Phase(110, rate=4)], faults=((80, {"kind": "error-storm", "status": 400}),),
                             with_log=True)
    assert [name for name, _ in incidents(recorder, start)] == ["client_errors"]
    verdict = by_name(recorder)["client_errors"]
    assert verdict.details["cause"] == "input_too_long"
    assert "maximum length of 4,096 tokens" in verdict.why


def test_the_4xx_spec_form_is_the_same_fault():
    assert parse_fault_spec("error-storm:4xx").status == 400
    assert parse_fault_spec("error-storm@30s:5xx,for=20s") == parse_fault_spec("error-storm@30s:500,for=20s")
    with pytest.raises(FaultSpecError):
        parse_fault_spec("error-storm:200")


@pytest.mark.parametrize("dialect, stage", [("vllm", "compiling"), ("sglang", "weights_loading")])
def test_a_start_hung_at_a_stage_is_startup_stalled_naming_it_and_never_health_loss(dialect, stage):
    config = SimConfig(dialect=dialect, profile="tiny-cpu", startup_seconds=40, faults=(f"startup-hang@{stage}",))
    recorder, _, start = run([Phase(200)], config=config, with_log=True)
    assert [name for name, _ in fired(recorder, start)] == ["startup_stalled"]
    verdict = by_name(recorder)["startup_stalled"]
    assert verdict.details["stage"] == stage and f"stuck after {stage}" in verdict.why


def test_a_normal_slow_start_raises_nothing_and_its_stages_are_in_the_timeline():
    recorder, _, start = run([Phase(80, rate=0.5, max_tokens=32)], config=SimConfig(profile="tiny-cpu", startup_seconds=40),
                             with_log=True)
    assert incidents(recorder, start) == []
    assert [t for _, t in fired(recorder, start) if t <= 40] == []     # nothing at all while it loads (40 s)
    found = {s.name: round(s.t - start, 1) for s in stages(recorder.ring.window())}
    assert list(found) == ["process_up", "engine_start", "weights_loading", "weights_loaded", "compiling",
                           "compiled", "kv_cache_size", "engine_ready", "health_ok"]
    assert 38 <= found["engine_ready"] <= found["health_ok"] <= 41


def test_an_unknown_stage_is_refused_with_the_known_ones():
    with pytest.raises(FaultSpecError, match="known: process_up"):
        SimEngine(SimConfig(startup_seconds=10, faults=("startup-hang@warp_drive",)))


@pytest.mark.parametrize("with_log", [True, False])
def test_a_crash_loop_is_one_crash_loop_verdict_and_then_no_more_per_restart_verdicts(with_log):
    config = SimConfig(startup_seconds=5, faults=("crash-loop:every=10s",))
    recorder, engine, start = run([Phase(150, rate=2)], config=config, with_log=with_log)
    names = [name for name, _ in incidents(recorder, start)]
    assert names.count("crash_loop") == 1 and engine.restarts >= 7
    at = dict(incidents(recorder, start))["crash_loop"]
    assert at <= 52                                          # the third death (15 s, 32 s, 49 s) or restart
    after = [name for name, t in incidents(recorder, start) if t > at]
    assert after == []                                       # no engine_dead / health_loss / restart per start
    verdict = by_name(recorder)["crash_loop"]
    if with_log:
        assert "engine death" in verdict.why and "Worker proc died unexpectedly" in verdict.why
    else:
        assert "restarts (new process)" in verdict.why


def test_servewatch_sim_refuses_an_unknown_stage_in_one_line(capsys):
    from servewatch.cli import main

    assert main(["sim", "--fault", "startup-hang@warp_drive", "--startup-seconds", "5", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "startup-hang@warp_drive" in err[0] and "known: process_up" in err[0]
