"""Each fault's signature, in virtual time through the in-process API."""

from __future__ import annotations

import io
import re

import pytest

from servewatch.clock import VirtualClock
from servewatch.sim import EngineDeadError, SimFault, FaultSpecError, SimConfig, SimEngine, parse_fault_spec
from servewatch.sim.faults import fault_from_json


def _value(text: str, name: str) -> float:
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    if not found:
        raise KeyError(name)
    return total


def _progress(engine: SimEngine) -> tuple[float, ...]:
    text = engine.metrics_text()
    if engine.config.dialect == "vllm":
        return (_value(text, "vllm:iteration_tokens_total_count"), _value(text, "vllm:generation_tokens_total"),
                _value(text, "vllm:prompt_tokens_total"))
    return (_value(text, "sglang:cuda_graph_passes_total"), _value(text, "sglang:realtime_tokens_total"))


def _engine(dialect="vllm", **kw) -> tuple[SimEngine, VirtualClock, io.StringIO]:
    clock = VirtualClock()
    log = io.StringIO()
    engine = SimEngine(SimConfig(dialect=dialect, profile="tiny-cpu", seed=4, **kw), clock, log_stream=log)
    return engine, clock, log


def _load(engine, n=6, out=2000):
    return [engine.submit(prompt_tokens=20, max_tokens=out, ignore_eos=True) for _ in range(n)]


def test_stall_keeps_health_green_while_every_progress_counter_stands_still():
    engine, clock, log = _engine(log_stats_interval=2.0)
    handles = _load(engine)
    engine.run_until(clock.now() + 1)
    engine.inject({"kind": "stall"})
    frozen = _progress(engine)
    tokens = [h.output_len for h in handles]
    for _ in range(20):                       # 10 s of virtual time, sampled every 0.5 s
        engine.run_until(clock.now() + 0.5)
        assert engine.health() == 200
        assert _progress(engine) == frozen
        assert engine.num_running == 6       # work is admitted: a stall, not idleness
    assert [h.output_len for h in handles] == tokens
    assert "Avg generation throughput: 0.0 tokens/s, Running: 6 reqs" in log.getvalue()
    engine.inject({"kind": "clear"})
    engine.run_until(clock.now() + 0.5)
    assert _progress(engine)[0] > frozen[0]
    assert all(h.output_len > t for h, t in zip(handles, tokens))


def test_stall_at_a_start_time_and_for_a_duration():
    engine, clock, _ = _engine()
    _load(engine, n=2)
    engine.inject(parse_fault_spec("stall@2s:for=3s"))
    engine.run_until(engine.started_at + 2.5)
    assert engine.stalled
    steps = engine.steps
    engine.run_until(engine.started_at + 4.9)
    assert engine.steps == steps
    engine.run_until(engine.started_at + 5.5)
    assert not engine.stalled and engine.steps > steps


def test_sglang_stall_turns_health_red_after_the_probe_timeout_then_the_watchdog_kills_it():
    engine, clock, log = _engine("sglang", watchdog_timeout=60.0)
    _load(engine)
    engine.run_until(clock.now() + 1)
    engine.inject({"kind": "stall"})
    engine.run_until(clock.now() + 19)
    assert engine.health() == 200
    engine.run_until(clock.now() + 2)
    assert engine.health() == 503
    engine.run_until(clock.now() + 40)
    assert engine.state in ("dead", "exited")
    assert "Scheduler watchdog timeout (self.watchdog_timeout=60, self.soft=False)" in log.getvalue()
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in log.getvalue()


@pytest.mark.parametrize("exit_code", [0, 3])
def test_engine_death_503_then_in_flight_requests_end_short_then_exit_with_the_code(exit_code):
    engine, clock, log = _engine(exit_delay=2.0)
    handles = _load(engine, n=4)
    engine.run_until(clock.now() + 0.5)
    exits = []
    engine.on_exit.append(lambda e: exits.append((clock.now(), e.exit_code)))
    engine.inject(SimFault("engine-death", exit_code=exit_code))
    died_at = clock.now()
    assert engine.health() == 503
    assert all(h.finished and h.finish_reason == "abort" and 0 < h.output_len < 2000 for h in handles)
    with pytest.raises(EngineDeadError):
        engine.submit(prompt_tokens=5, max_tokens=5)
    engine.run_until(died_at + 1.9)
    assert engine.health() == 503 and exits == []
    engine.run_until(died_at + 2.1)
    assert exits == [(pytest.approx(died_at + 2.0), exit_code)]
    assert engine.health() == 0                       # nothing listens any more
    text = log.getvalue()
    assert "Worker proc VllmWorker-0 died unexpectedly (exit code: None), shutting down executor." in text
    assert "EngineCore encountered a fatal error." in text
    assert "EngineDeadError: EngineCore encountered an issue." in text
    assert "INFO:     Finished server process" in text


def test_scheduled_engine_death_from_a_spec():
    engine, clock, _ = _engine(faults=["engine-death@20s:exit=0"])
    engine.run_until(engine.started_at + 19.9)
    assert engine.health() == 200
    engine.run_until(engine.started_at + 20.0)
    assert engine.health() == 503 and engine.exit_code == 0


def test_crash_oom_names_the_logits_sized_allocation_when_the_batch_outgrows_the_budget():
    clock = VirtualClock()
    log = io.StringIO()
    engine = SimEngine(SimConfig(profile="rtx3060-7b", seed=1), clock, log_stream=log)
    engine.inject({"kind": "crash-oom", "budget_mib": 111.9})
    for _ in range(400):                              # arrivals slower than steps: running grows one by one
        if engine.state != "ready":
            break
        engine.submit(prompt_tokens=44, max_tokens=4000, ignore_eos=True)
        engine.run_until(clock.now() + 0.2)
    assert engine.state == "dead"
    mib = 193 * 152064 * 4 / 2**20                   # seed 002 §5: 193 running -> 111.95 MiB
    match = re.search(r"Tried to allocate ([\d.]+) MiB\. GPU 0 has a total capacity of 11\.63 GiB of which "
                      r"111\.90 MiB is free\.", log.getvalue())
    assert match and float(match.group(1)) == pytest.approx(mib, abs=0.01)
    assert "torch.OutOfMemoryError: CUDA out of memory." in log.getvalue()


def test_crash_oom_stays_quiet_below_the_budget():
    engine = SimEngine(SimConfig(profile="rtx3060-7b"), VirtualClock())
    engine.inject({"kind": "crash-oom", "budget_mib": 200})
    for _ in range(100):
        engine.submit(prompt_tokens=44, max_tokens=16, ignore_eos=True)
    engine.run_until(engine.clock.now() + 5)
    assert engine.state == "ready" and engine.num_running == 0


def test_slow_multiplies_step_time_and_clear_restores_it():
    engine, clock, _ = _engine()
    _load(engine, n=1)
    engine.step()
    normal = engine.step().duration
    engine.inject({"kind": "slow", "factor": 3})
    engine.step()                                     # the step begun before the fault
    slow = engine.step().duration
    assert slow == pytest.approx(3 * normal)
    engine.inject({"kind": "clear"})
    engine.step()
    assert engine.step().duration == pytest.approx(normal)


@pytest.mark.parametrize("dialect,waiting_gauge", [("vllm", "vllm:num_requests_waiting"),
                                                   ("sglang", "sglang:num_queue_reqs")])
def test_admission_deadlock_grows_waiting_while_kv_is_free(dialect, waiting_gauge):
    engine, clock, _ = _engine(dialect)
    engine.inject({"kind": "admission-deadlock"})
    for i in range(10):
        engine.submit(prompt_tokens=20, max_tokens=10)
        engine.run_until(clock.now() + 1)
    assert engine.num_waiting == 10 and engine.num_running == 0 and engine.kv_usage == 0.0
    assert _value(engine.metrics_text(), waiting_gauge) == 10
    assert engine.health() == 200
    engine.inject({"kind": "clear"})
    engine.run_until(clock.now() + 2)
    assert engine.num_waiting == 0


def test_startup_hang_never_becomes_ready():
    for dialect, status in (("vllm", 0), ("sglang", 503)):
        engine, clock, _ = _engine(dialect, faults=["startup-hang"])
        engine.run_until(clock.now() + 600)
        assert engine.state == "starting" and engine.health() == status


def test_sglang_answers_503_while_starting_then_200():
    engine, clock, _ = _engine("sglang", startup_seconds=5.0)
    assert engine.health() == 503
    engine.run_until(clock.now() + 5)
    assert engine.health() == 200


def test_startup_oom_exits_1_with_the_kv_sizing_error():
    engine, clock, log = _engine(faults=["startup-oom"])
    engine.run_until(clock.now() + 1)
    assert engine.state == "exited" and engine.exit_code == 1
    assert "To serve at least one request with the model's max seq len (2048)" in log.getvalue()
    engine, clock, log = _engine("sglang", faults=["startup-oom"])
    engine.run_until(clock.now() + 1)
    assert engine.exit_code == 1 and "Not enough memory. Please try to increase --mem-fraction-static." in log.getvalue()


@pytest.mark.parametrize("spec,expected", [
    ("stall@30s", SimFault("stall", at=30.0)),
    ("engine-death@20s:exit=0", SimFault("engine-death", at=20.0, exit_code=0)),
    ("slow@500ms:factor=2.5", SimFault("slow", at=0.5, factor=2.5)),
    ("crash-oom:budget=80", SimFault("crash-oom", budget_mib=80.0)),
    ("stall@1m:for=10s", SimFault("stall", at=60.0, duration=10.0)),
])
def test_fault_specs(spec, expected):
    assert parse_fault_spec(spec) == expected


@pytest.mark.parametrize("spec", ["meltdown", "stall@soon", "engine-death:exit=999", "slow:factor", "stall:x=1"])
def test_bad_fault_specs_are_refused_with_a_reason(spec):
    with pytest.raises(FaultSpecError):
        parse_fault_spec(spec)


def test_fault_json_refuses_unknown_fields():
    assert fault_from_json({"kind": "engine-death", "exit_code": 0}) == SimFault("engine-death", exit_code=0)
    with pytest.raises(FaultSpecError):
        fault_from_json({"kind": "stall", "colour": "red"})
    with pytest.raises(FaultSpecError):
        fault_from_json(["stall"])


def test_sglang_stall_counts_no_client_abort_until_its_scheduler_runs_again():
    """A stopped SGLang scheduler reports nothing, an aborted request's prompt tokens included: the active
    probe timing out mid-stall must not move a counter (it did, and the stall fired three times)."""
    from servewatch.sim import SimConfig
    from tests.sim_harness import Phase, fired, run

    recorder, engine, start = run([Phase(60.0, rate=2.0, max_tokens=512)], faults=((5.0, {"kind": "stall"}),),
                                  config=SimConfig(dialect="sglang"), probe=(10.0, 5.0), with_process=False)
    stalls = [t for name, t in fired(recorder, start) if name == "alive_health_ok_no_progress"]
    assert len(stalls) == 1, stalls
    assert engine._aborts_unreported, "the probe's aborted requests wait for the scheduler"
