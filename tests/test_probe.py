"""The active probe and not_serving: in virtual time against the in-process simulator (the idle wedge
a passive reader cannot see), the detector on hand-built windows, and bundles that carry probe samples."""

from __future__ import annotations

import dataclasses

import asyncio
import json
from pathlib import Path

import pytest

from servewatch.clock import VirtualClock
from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.engine.state import Counters, EngineState
from servewatch.sim import SimConfig, SimEngine
from servewatch.bundle import serialize
from servewatch.bundle.writer import BundleWriter
from servewatch.bundle.verify import verify_bundle
from servewatch.sources.probe import PROMPT, ProbeAnswer
from servewatch.timeline.samples import (DEADLINE, FAILED, SERVED, UNAVAILABLE, HealthSample, MetricsSample,
                                         ProbeSample)
from servewatch.timeline.window import Window
from servewatch.watch import Recorder
from servewatch.sinks.bundle_sink import BundleSink
from servewatch.watch.sim_target import sim_sources
from tests.sim_harness import Phase, Workload, fired, run

STANDING = {"histogram_blind"}


def incidents(recorder, start):
    return [(name, at) for name, at in fired(recorder, start) if name not in STANDING]


def probe_source(recorder):
    return next(s for s in recorder.sources if s.kind == "probe")


# --- the idle wedge in the simulator ----------------------------------------------------------------

def test_an_idle_wedge_is_invisible_without_the_probe_and_caught_within_interval_plus_deadline_with_it():
    phases = [Phase(20), Phase(30, rate=2), Phase(120)]
    faults = ((75, {"kind": "wedge-idle"}),)
    blind, engine, start = run(phases, faults=faults)
    assert incidents(blind, start) == []                      # gauges 0, counters flat, /health 200
    assert engine.health() == 200

    recorder, engine, start = run(phases, faults=faults, probe=(10, 5))
    found = incidents(recorder, start)
    assert [name for name, _ in found] == ["not_serving"]
    verdict = recorder.fired[0].verdict
    assert 75 < verdict.t - start <= 75 + 10 + 5 + 0.5        # interval + deadline (+ one look)
    assert verdict.details["running"] == 0 and verdict.details["waiting"] == 0
    assert verdict.details["last_outcome"] == DEADLINE
    assert "/health answered 200" in verdict.why and "no counter moved" in verdict.why
    assert engine.health() == 200 and engine.num_running == 0 and engine.num_waiting == 0


def test_an_idle_server_under_the_probe_gives_no_verdict_and_pays_one_request_per_interval():
    recorder, engine, start = run([Phase(300)], probe=(30, 10))
    assert incidents(recorder, start) == []
    source = probe_source(recorder)
    probes = recorder.ring.window().probe
    assert [p.outcome for p in probes] == [SERVED] * len(probes)
    assert len(probes) == 10                                  # 300 s / 30 s
    assert source.sent - len(probes) <= 1                     # the last one may be answered after the run
    assert all(p.tokens == 1 and p.latency_s < 1.0 for p in probes)


def test_a_busy_server_pays_nothing_the_counters_already_prove_it_serves():
    recorder, _, start = run([Phase(20), Phase(200, rate=2)], probe=(10, 5))
    source = probe_source(recorder)
    busy = [p for p in recorder.ring.window().probe if p.t - start > 30]
    assert busy == []
    assert source.skipped >= 17                               # every interval of the 200 s busy stretch
    assert incidents(recorder, start) == []


def test_a_wedge_armed_under_traffic_takes_hold_once_the_engine_is_idle_and_the_stall_verdict_stays_silent():
    recorder, engine, start = run([Phase(50, rate=2), Phase(100)], faults=((30, {"kind": "wedge-idle"}),),
                                  probe=(10, 5))
    names = [name for name, _ in incidents(recorder, start)]
    assert names == ["not_serving"]
    verdict = recorder.fired[0].verdict
    assert verdict.t - start > 50                             # not while requests still finished
    assert engine.stalled and engine.num_running == 0


def test_clear_ends_the_wedge_and_the_verdict_clears_at_the_next_served_probe():
    recorder, _, start = run([Phase(150)], faults=((20, {"kind": "wedge-idle"}), (80, {"kind": "clear"})),
                             probe=(10, 5))
    assert [name for name, _ in incidents(recorder, start)] == ["not_serving"]
    assert [c.verdict.name for c in recorder.cleared] == ["not_serving"]
    # a probe pending at the clear is answered at it (the confirmation moved the routine probes 0.5 s later)
    assert 80 <= recorder.cleared[0].t - start <= 80 + 10 + 1
    assert recorder.ring.window().probe[-1].outcome == SERVED


def test_the_wedge_fault_parses_from_a_spec_and_clears_itself_after_its_duration():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(faults=["wedge-idle@10:for=20"]), clock)
    engine.run_until(clock.now() + 15)
    assert engine.stalled
    request = engine.submit(prompt_tokens=8, max_tokens=1)
    engine.run_until(clock.now() + 10)
    assert request.output_len == 0 and engine.num_waiting == 0 and engine.num_running == 0
    engine.run_until(clock.now() + 10)
    assert not engine.stalled and request.output_len == 1


# --- the detector on hand-built windows ----------------------------------------------------------

T0 = 1_800_000_000.0


def metrics_sample(t, *, generation_tokens):
    state = EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=0, waiting=0,
                        counters=Counters(prompt_tokens=10, generation_tokens=generation_tokens, steps=generation_tokens))
    return MetricsSample(t, "vllm", "vllm-0.32", (state,))


def _window(probes, *, health_status=200, tokens=(50, 50, 50)):
    health = tuple(HealthSample(T0 + i * 5, health_status, 0.01, None if health_status == 200 else "http_503")
                   for i in range(8))
    metrics = tuple(metrics_sample(T0 + i * 15, generation_tokens=n)
                    for i, n in enumerate(tokens))
    return Window(health=health, metrics=metrics, probe=tuple(probes))


def _probe(t, outcome, error=None, status=None):
    latency = 10.0 if outcome == DEADLINE else 0.05
    return ProbeSample(t=T0 + t, outcome=outcome, latency_s=latency, deadline_s=10.0, status=status, error=error)


def names(window, config=None):
    return [v.name for v in run_detectors(window, config or DetectorConfig())]


def test_a_missed_deadline_while_health_is_200_and_counters_are_flat_is_not_serving():
    assert names(_window([_probe(5, SERVED), _probe(30, DEADLINE, "timeout")])) == ["not_serving"]


def test_probes_that_could_not_be_asked_never_give_a_verdict():
    probes = [_probe(t, UNAVAILABLE, error) for t, error in ((5, "http_404"), (15, "no_models"), (25, "http_401"))]
    assert names(_window(probes)) == []


def test_a_failed_probe_while_health_fails_is_left_to_the_health_verdicts():
    found = names(_window([_probe(30, FAILED, "http_503", 503)], health_status=503))
    assert "not_serving" not in found and "health_loss" in found


def test_a_slow_probe_on_a_server_whose_counters_move_is_not_not_serving():
    assert names(_window([_probe(28, DEADLINE, "timeout")], tokens=(50, 60, 90))) == []


def test_a_served_probe_after_failures_ends_the_condition():
    assert names(_window([_probe(10, DEADLINE, "timeout"), _probe(25, SERVED)])) == []


def test_probe_fail_count_asks_for_that_many_failures_in_a_row():
    two = DetectorConfig(probe_fail_count=2)
    assert names(_window([_probe(28, FAILED, "http_500", 500)]), two) == []
    assert names(_window([_probe(12, FAILED, "http_500", 500), _probe(28, DEADLINE, "timeout")]), two) == [
        "not_serving"]


# --- bundles ----------------------------------------------------------------------------------------

def test_probe_samples_round_trip_and_hold_no_text():
    sample = ProbeSample(t=T0, outcome=SERVED, latency_s=0.02, deadline_s=10.0, status=200, tokens=1)
    stored = serialize.sample_to_dict(sample)
    assert serialize.sample_from_dict(stored) == sample
    assert set(stored) == {"source", "t", "outcome", "latency_s", "deadline_s", "status", "tokens", "error", "engine"}
    aimed = dataclasses.replace(sample, engine="1")          # the data-parallel engine it asked, a number only
    assert serialize.sample_from_dict(serialize.sample_to_dict(aimed)) == aimed
    assert serialize.sample_to_dict(dataclasses.replace(sample, engine="engine=/models/x"))["engine"] is None
    odd = serialize.sample_to_dict(ProbeSample(t=T0, outcome="weird", latency_s=None, deadline_s=1.0,
                                               error="timeout after /v1/completions?x=secret"))
    assert odd["outcome"] == UNAVAILABLE and odd["error"] == "timeout"


def test_a_not_serving_bundle_stores_the_probe_samples_validates_and_verifies(tmp_path):
    clock = VirtualClock()
    engine = SimEngine(SimConfig(), clock)
    engine.inject({"kind": "wedge-idle", "at": 40})
    config = DetectorConfig()
    sink = BundleSink(BundleWriter(tmp_path, clock=clock), "http://127.0.0.1:8000", config)
    recorder = Recorder(sim_sources(engine, clock, 0.5, probe_interval_s=10, probe_deadline=5), clock, config=config,
                        sinks=[sink])
    sink.recorder = recorder
    workload = Workload(engine, [Phase(20, rate=2), Phase(60)])
    asyncio.run(recorder.run_virtual(workload.end - clock.now(), advance=workload.advance))
    bundle = next(f.bundle for f in recorder.fired if f.verdict.name == "not_serving")
    assert verify_bundle(bundle).verdicts_checked >= 1
    incident = json.loads((Path(bundle) / "incident.json").read_text())
    assert incident["window"]["samples"]["probe"] >= 2
    verdict = next(v for v in incident["verdicts"] if v["name"] == "not_serving")
    assert {e["source"] for e in verdict["evidence"]} >= {"probe", "health", "metrics"}
    stored = "".join(p.read_text() for p in sorted(Path(bundle).glob("samples-*.json")))
    assert PROMPT not in stored and engine.config.model_name not in stored


@pytest.mark.parametrize("interval", [5.0, 30.0])
def test_recording_options_carry_the_probe_flags(interval):
    import argparse

    from servewatch.commands.recording import add_recording_arguments, options_from_args
    from servewatch.watch.options import RecordingOptions

    parser = argparse.ArgumentParser()
    defaults = RecordingOptions(url="")
    add_recording_arguments(parser, defaults)
    off = options_from_args(parser.parse_args(["http://x:1"]), defaults)
    assert off.probe is False
    on = options_from_args(parser.parse_args(["http://x:1", "--probe", "--probe-interval", f"{interval:g}s",
                                              "--probe-deadline", "3"]), defaults)
    assert (on.probe, on.probe_interval_s, on.probe_deadline) == (True, interval, 3.0)


# --- the default probe: every 10 s, its deadline learned from the server's own answers ------------------------

def test_the_learned_deadline_is_four_times_the_slowest_recent_answer_between_the_floor_and_the_ceiling():
    from servewatch.sources import probe as P
    from tests.test_values_probe import make, poll, served

    source, clock, prober, _ = make()
    assert source.fixed_deadline_s is None and source.deadline_s == P.DEADLINE_CEILING_S == 10.0   # none answered yet
    assert "until the server has answered one" in source.deadline_words()

    def answer(latency: float) -> None:
        clock.advance(P.DEFAULT_PROBE_INTERVAL_S)
        poll(source)                               # asks (the routine probe is due: no ring, nothing proven)
        prober.last.result = served(latency)
        poll(source)                               # collects

    answer(0.05)
    assert prober.attempts[0].deadline_s == 10.0   # asked with the ceiling
    assert source.deadline_s == 3.0                # 4 x 0.05 = 0.2 s, under the 3 s floor
    answer(0.8)
    assert source.deadline_s == pytest.approx(3.2)  # 4 x 0.8 s
    assert prober.attempts[-1].deadline_s == 3.0    # that one was asked with the deadline learned before it
    answer(2.6)
    assert source.deadline_s == 10.0               # 4 x 2.6 = 10.4 s, over the ceiling
    for _ in range(P.LEARN_FROM - 1):
        answer(0.05)
    assert source.deadline_s == 10.0               # the 2.6 s answer is one of the last 8 still
    answer(0.05)
    assert source.deadline_s == 3.0                # the 2.6 s answer (and the older 0.8 s) left the last 8: floor
    assert "learned: 4 x the slowest of the last 8 served" in source.deadline_words()
    fixed, *_ = make(deadline_s=7.0)
    assert fixed.deadline_s == 7.0 and fixed.deadline_words() == "7 s"


def test_the_default_probe_names_an_idle_wedge_within_15_s():
    """Defaults: every 10 s, the deadline learned (the simulator answers in milliseconds: the 3 s floor). The engine
    wedges while idle at 75 s; the next probe is due at most 10 s later and misses 3 s after it (one 1 s look and a
    0.5 s detection cadence on top): not_serving by 75 + 10 + 3 + 1 + 0.5 = 89.5 s; the confirmation asked at once
    misses 3 s (+1 s look) later: the restart class's evidence by 93.5 s (the old defaults, 30 s and 10 s: 116 s)."""
    from servewatch.detectors import registry
    from servewatch.detectors.verdict import RESTART
    from servewatch.sources.probe import DEFAULT_DEADLINE_S, DEFAULT_PROBE_INTERVAL_S

    heard = []
    recorder, engine, start = run([Phase(20), Phase(30, rate=2), Phase(120)], faults=((75, {"kind": "wedge-idle"}),),
                                  probe=(DEFAULT_PROBE_INTERVAL_S, DEFAULT_DEADLINE_S),
                                  on_recorder=lambda r: r.evidence_listeners.append(lambda v, now: heard.append(v)))
    fired_at = next(f.verdict.t for f in recorder.fired if f.verdict.name == "not_serving") - start
    assert 75 < fired_at <= 75 + 10 + 3 + 1 + 0.5
    missed = [p for p in recorder.ring.window().probe if p.outcome == DEADLINE]
    assert missed[0].deadline_s == 3.0
    held = next(v for v in heard if v.name == "not_serving")
    assert registry.acts(held, RESTART) and held.t - start <= 75 + 10 + 3 + 1 + 3 + 1 + 0.5


def test_a_miss_while_a_process_was_stopped_is_asked_again_at_once_when_the_stop_ends():
    """gdb's attach holds the engine in a tracing stop for seconds, then its inferior call blocks it in a system call
    (state S): probes asked during the stop prove nothing (not_serving leaves them out), so the one that missed is
    asked again the moment the process view shows the stop over — not a routine interval later."""
    from servewatch.timeline.samples import ProcessMember, ProcessSample
    from tests.test_values_probe import T0, Ring, make, poll

    def view(status: str, t: float) -> Window:
        member = ProcessMember(7, T0 - 100, "engine_core", "VLLM::EngineCore", status)
        return Window(process=(ProcessSample(t, 1, T0 - 100, True, (member,)),))

    source, clock, prober, _ = make(deadline_s=3.0)
    ring = Ring(view("tracing-stop", T0 + 1.0))
    source.bind_timeline(ring)
    poll(source)                                           # the routine probe, asked at T0
    clock.advance(3.0)
    prober.last.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
    poll(source)                                           # the miss, while the stop showed
    poll(source)                                           # its confirmation, asked at once
    assert len(prober.attempts) == 2 and source.confirms == 1
    clock.advance(3.0)
    prober.last.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
    poll(source)                                           # the confirmation missed too, the stop still showing
    clock.advance(1.0)
    poll(source)
    assert len(prober.attempts) == 2 and source.after_stop == 0   # still stopped: nothing asked
    ring.window_ = view("sleeping", clock.now())
    clock.advance(1.0)
    poll(source)                                           # the stop ended: asked at once, 8 s after the first
    assert len(prober.attempts) == 3 and source.after_stop == 1
    assert clock.now() - T0 == 8.0 < source.probe_interval_s
    assert "1 asked at once when a stop that a miss coincided with ended" in source.cost_line()
