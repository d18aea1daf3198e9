"""rank_stalled on hand-built windows shaped like the real vLLM TP=2 and DP=2 runs, the urgent probe that
the process view triggers, and a bundle of the verdict that verifies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from servewatch.clock import VirtualClock
from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.detectors import ranks as rank_detector
from servewatch.engine.state import Counters, EngineState
from servewatch.bundle.writer import BundleWriter
from servewatch.bundle.verify import verify_bundle
from servewatch.sources.probe import URGENT_DEADLINE_S, ProbeSource
from servewatch.timeline.ranks import Aim
from servewatch.timeline.ring import Ring
from servewatch.timeline.samples import (DEADLINE, SERVED, HealthSample, MetricsSample, ProbeSample, ProcessMember,
                                         ProcessSample)
from servewatch.timeline.window import Window
from servewatch.sinks.base import Fired
from servewatch.sinks.bundle_sink import BundleSink

T0 = 1_800_000_000.0
CONFIG = DetectorConfig()
STEP = 0.5


def tree(t, *, tp1_status="running", tp1_cpu=50.0, tp0_cpu=50.0, core_cpu=2.0):
    members = (
        ProcessMember(100, 1.0, "api", "python3", "sleeping", 2**30, 30, 20.0, 1),
        ProcessMember(110, 2.0, "engine_core", "VLLM::EngineCore", "sleeping", 2**30, 40, core_cpu, 100),
        ProcessMember(111, 3.0, "worker", "VLLM::Worker_TP0", "running", 2**30, 40, tp0_cpu, 110),
        ProcessMember(112, 4.0, "worker", "VLLM::Worker_TP1", tp1_status, 2**30, 40, tp1_cpu, 110),
    )
    return ProcessSample(t=t, root_pid=100, root_create_time=1.0, alive=True, members=members)


def scrape(t, running=0, waiting=0, tokens=500, engine="0"):
    state = EngineState("vllm", "vllm-0.32", {"engine": engine}, running=running, waiting=waiting,
                        counters=Counters(prompt_tokens=100, generation_tokens=tokens, steps=tokens))
    return MetricsSample(t, "vllm", "vllm-0.32", (state,))


def window(process, *, probes=(), running=0, span=20.0):
    n = int(span / STEP)
    health = tuple(HealthSample(T0 + i * 1.0, 200, 0.01) for i in range(int(span) + 1))
    metrics = tuple(scrape(T0 + i * 1.0, running=running) for i in range(int(span) + 1))
    samples = tuple(process(T0 + i * STEP) for i in range(n + 1))
    return Window(health=health, metrics=metrics, process=samples, probe=tuple(probes))


def stopped_at(at):
    return lambda t: tree(t, tp1_status="stopped" if t >= T0 + at else "running",
                          tp1_cpu=0.0 if t >= T0 + at else 50.0)


def missed(asked, deadline=3.0):
    return ProbeSample(T0 + asked + deadline, DEADLINE, deadline, deadline, error="timeout")


def names(w):
    return [v.name for v in run_detectors(w, CONFIG)]


def test_a_stopped_tp_rank_while_the_engine_reads_idle_is_named_when_a_probe_gets_nothing():
    w = window(stopped_at(10.0), probes=[missed(10.5)], span=14.0)
    (verdict,) = [v for v in run_detectors(w, CONFIG) if v.name == "rank_stalled"]
    assert names(w) == ["rank_stalled"]                                 # not not_serving as well
    assert verdict.why.startswith("TP rank 1 of 2 (VLLM::Worker_TP1, pid 112) stopped 4.0 s; TP rank 0 busy 50 %")
    assert "engine reports 0 running, 0 waiting" in verdict.why
    assert "a 1-token probe got nothing in 3 s" in verdict.why and verdict.why.endswith("/health 200")
    assert verdict.onset == T0 + 10.0 and verdict.details["rank"] == "TP1" and verdict.details["how"] == "stopped"


def test_rank_stalled_counts_the_probes_missed_since_the_stop_its_action_evidence():
    """failed_probes is what the action policy reads (rank_stalled acts on one): the misses in a row asked no
    earlier than the stop, never one asked long before it."""
    def failed(*probes):
        w = window(stopped_at(10.0), probes=list(probes), span=16.0)
        (verdict,) = [v for v in run_detectors(w, CONFIG) if v.name == "rank_stalled"]
        return verdict.details["failed_probes"]

    assert failed(missed(10.5)) == 1
    assert failed(missed(10.5), missed(13.0)) == 2
    assert failed(missed(1.0), missed(10.5)) == 1


def test_no_verdict_without_a_missed_probe_nor_with_one_asked_before_the_stop():
    assert "rank_stalled" not in names(window(stopped_at(10.0), span=14.0))
    served = ProbeSample(T0 + 10.6, SERVED, 0.1, 3.0, status=200, tokens=1)
    assert "rank_stalled" not in names(window(stopped_at(10.0), probes=[served], span=14.0))
    assert "rank_stalled" not in names(window(stopped_at(10.0), probes=[missed(5.0, deadline=10.0)], span=16.0))


def test_an_idle_multi_rank_engine_whose_workers_spin_is_no_suspect():
    w = window(lambda t: tree(t), span=60.0)
    assert rank_detector.suspects(w, CONFIG) == ()
    # a probe that misses there is not_serving's (no rank to name), never rank_stalled's
    assert names(window(lambda t: tree(t), probes=[missed(50.0)], span=60.0)) == ["not_serving"]


def test_idle_workers_that_sleep_alike_are_no_suspect():
    assert rank_detector.suspects(window(lambda t: tree(t, tp0_cpu=0.0, tp1_cpu=0.0), span=30.0), CONFIG) == ()


def test_a_long_prefill_with_every_rank_busy_is_no_suspect():
    w = window(lambda t: tree(t, tp0_cpu=99.0, tp1_cpu=97.0, core_cpu=30.0), running=1, span=30.0)
    assert rank_detector.suspects(w, CONFIG) == ()
    assert "rank_stalled" not in names(w)


def test_a_rank_not_scheduled_beside_a_spinning_sibling_is_a_suspect_after_rank_quiet_s():
    starved = lambda at: (lambda t: tree(t, tp1_cpu=0.0 if t >= T0 + at else 50.0, tp0_cpu=95.0))  # noqa: E731
    assert rank_detector.suspects(window(starved(19.0), span=20.0), CONFIG) == ()       # 1 s: not yet
    (suspect,) = rank_detector.suspects(window(starved(17.0), span=20.0), CONFIG)
    assert suspect.how == "not scheduled" and suspect.rank.pid == 112 and suspect.onset == T0 + 17.0


def test_admitted_work_is_left_to_the_stall_verdict():
    w = window(stopped_at(10.0), probes=[missed(10.5)], running=4, span=14.0)
    assert "rank_stalled" not in names(w)


def test_the_probe_asks_at_once_with_the_short_deadline_when_a_rank_looks_stalled():
    asked, source = urgent_asks(stopped_at(10.0), 12.0)
    assert asked == [(T0 + 10.0, URGENT_DEADLINE_S, None)]
    assert source.urgent == 1 and "asked at once" in source.cost_line()


def urgent_asks(process, span: float) -> tuple[list, ProbeSource]:
    """(time, deadline, route) of each probe a ProbeSource asked while the recorder saw `process` (a routine
    probe went out 5 s before: the next is not due for 25 s), and the source."""
    clock = VirtualClock(T0)
    asked = []

    class Attempt:
        def answer(self):
            return None

        def cancel(self):
            pass

    def prober(deadline, route=None):
        asked.append((clock.now(), deadline, route))
        return Attempt()

    source = ProbeSource(prober, clock, probe_interval_s=30.0, deadline_s=10.0, check_s=0.5)
    ring = Ring.for_history(60.0, {"process": STEP, "probe": 0.5, "metrics": 1.0, "health": 1.0})
    source.bind_timeline(ring, lambda w: rank_detector.suspicion(w, CONFIG))
    w = window(process, span=span)
    source._asked = T0 - 5.0
    for i in range(int(span / STEP) + 1):
        t = T0 + i * STEP
        clock.set(t)
        ring.extend([s for s in (*w.process, *w.metrics, *w.health) if s.t == t])
        asyncio.run(source.poll())
        if asked:
            break
    return asked, source


def test_the_urgent_probe_is_aimed_at_the_stopped_ranks_data_parallel_engine():
    """An idle DP=2 vLLM balances by load, so every request goes to engine 0: a probe engine 0 answers says
    nothing about a stopped DP rank 1. The urgent probe carries vLLM's X-data-parallel-rank: 1; a tensor-
    parallel rank needs no header (one engine)."""
    dp_stopped = lambda t: dp_tree(t, dp1_worker="stopped" if t >= T0 + 6.0 else "running")  # noqa: E731
    assert urgent_asks(dp_stopped, 8.0)[0] == [(T0 + 6.0, URGENT_DEADLINE_S, {"X-data-parallel-rank": "1"})]
    assert urgent_asks(stopped_at(6.0), 8.0)[0] == [(T0 + 6.0, URGENT_DEADLINE_S, None)]
    onset, aim = rank_detector.suspicion(window(dp_stopped, span=8.0), CONFIG)
    assert (onset, aim) == (T0 + 6.0, Aim("1", (("X-data-parallel-rank", "1"),)))
    assert rank_detector.suspicion(window(lambda t: dp_tree(t), span=8.0), CONFIG) is None


def test_a_rank_stalled_bundle_keeps_parent_pids_and_verifies(tmp_path):
    clock = VirtualClock(T0 + 14.0)
    w = window(stopped_at(10.0), probes=[missed(10.5)], span=14.0)
    verdicts = run_detectors(w, CONFIG)
    sink = BundleSink(BundleWriter(tmp_path, clock=clock), "http://127.0.0.1:8000", CONFIG)
    path = Path(sink.on_fired(Fired(verdicts[0], None, w, tuple(verdicts))))
    assert verify_bundle(path).verdicts_checked >= 1        # schema, hashes, the verdict recomputed
    stored = "".join(p.read_text() for p in sorted(path.glob("samples-*.json")))
    assert '"ppid":110' in stored and "VLLM::Worker_TP1" in stored


# --- the rank in the stall and engine_dead verdicts -------------------------------------------------

def dp_tree(t, *, dp1_worker="running"):
    members = (
        ProcessMember(100, 1.0, "api", "python3", "sleeping", 2**30, 30, 20.0, 1),
        ProcessMember(105, 1.5, "other", "VLLM::DPCoordinator", "sleeping", 2**20, 4, 1.0, 100),
        ProcessMember(110, 2.0, "engine_core", "VLLM::EngineCore_DP0", "running", 2**30, 40, 60.0, 100),
        ProcessMember(111, 3.0, "worker", "VLLM::Worker", "running", 2**30, 40, 60.0, 110),
        ProcessMember(120, 4.0, "engine_core", "VLLM::EngineCore_DP1", "sleeping", 2**30, 40, 1.0, 100),
        ProcessMember(121, 5.0, "worker", "VLLM::Worker", dp1_worker, 2**30, 40, 0.0, 120),
    )
    return ProcessSample(t=t, root_pid=100, root_create_time=1.0, alive=True, members=members)


def test_the_dp_rank_is_said_once_whether_the_engine_key_names_it_or_not():
    """vLLM's key is engine=1: the process view adds "(DP rank 1)"; SGLang's key carries dp_rank=1 and its
    words already say "DP rank 1" (a real SGLang DP=2 stall once read "(DP rank 1, ...) (DP rank 1)")."""
    from servewatch.detectors.rank_words import dp_words

    sample = dp_tree(T0)
    assert dp_words(sample, "engine=1") == " (DP rank 1)"
    assert dp_words(sample, "dp_rank=1,engine_type=unified,tp_rank=0") == ""


def test_an_idle_data_parallel_engine_beside_a_busy_one_is_no_suspect():
    w = Window(process=tuple(dp_tree(T0 + i * STEP) for i in range(41)))   # DP1's core and worker at 0-1 %
    assert rank_detector.suspects(w, CONFIG) == ()


def test_a_stall_on_engine_1_of_a_data_parallel_server_names_dp_rank_1():
    metrics = tuple(MetricsSample(T0 + i, "vllm", "vllm-0.32", (
        EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=2, waiting=0,
                    counters=Counters(prompt_tokens=100, generation_tokens=100 + 20 * i, steps=100 + 20 * i)),
        EngineState("vllm", "vllm-0.32", {"engine": "1"}, running=2, waiting=0,
                    counters=Counters(prompt_tokens=100, generation_tokens=100 + 20 * min(i, 10),
                                      steps=100 + 20 * min(i, 10))))) for i in range(21))
    health = tuple(HealthSample(T0 + i, 200, 0.01) for i in range(21))
    process = tuple(dp_tree(T0 + i * STEP, dp1_worker="stopped" if i * STEP >= 10 else "running") for i in range(41))
    (stall,) = [v for v in run_detectors(Window(health=health, metrics=metrics, process=process), CONFIG)
                if v.name == "alive_health_ok_no_progress"]
    assert stall.details["engine"] == "engine=1"
    assert " on engine 1 (DP rank 1) " in stall.why
    assert stall.why.endswith("1 process(es) stopped: DP rank 1 worker (VLLM::Worker, pid 121)")


def test_engine_dead_names_the_rank_that_died_and_how_the_log_said():
    from servewatch.timeline.samples import LogEvent

    def gone(t):
        sample = tree(t)
        if t >= T0 + 10:
            sample = ProcessSample(t=t, root_pid=100, root_create_time=1.0, alive=True, members=sample.members[:3])
        return sample

    w = window(gone, span=12.0)
    w = Window(health=w.health, metrics=w.metrics, process=w.process,
               logs=(LogEvent(T0 + 10.2, "engine_dead", {"reason": "Worker proc died unexpectedly",
                                                          "exit_code": -9}),))
    (dead,) = [v for v in run_detectors(w, CONFIG) if v.name == "engine_dead"]
    assert "TP rank 1 of 2 (VLLM::Worker_TP1, pid 112), exit code -9 (signal 9)" in dead.why


# --- servewatch_rank_state -------------------------------------------------------------------------

def test_rank_state_series_are_one_per_rank_with_bounded_labels():
    from servewatch.sinks.export.exporter import FleetExporter

    samples = {"tp2": stopped_at(10.0)(T0 + 12.0), "dp2": dp_tree(T0), "gone": None}
    exporter = FleetExporter(ranks=lambda: list(samples.items()))
    text = exporter.exposition().decode()
    rows = sorted(line for line in text.splitlines() if line.startswith("servewatch_rank_state{"))
    assert 'servewatch_rank_state{rank="TP1",role="worker",state="T",target="tp2"} 1.0' in rows
    assert 'servewatch_rank_state{rank="TP0",role="worker",state="R",target="tp2"} 1.0' in rows
    assert 'servewatch_rank_state{rank="none",role="engine_core",state="S",target="tp2"} 1.0' in rows
    assert 'servewatch_rank_state{rank="DP1",role="worker",state="R",target="dp2"} 1.0' in rows
    assert 'servewatch_rank_state{rank="none",role="coordinator",state="S",target="dp2"} 1.0' in rows
    assert len(rows) == 3 + 5 and not any('target="gone"' in row for row in rows)
    assert not any("VLLM::" in row or "pid" in row for row in rows)        # no titles, no pids as labels


def test_the_targets_api_lists_each_rank_with_its_state_title_and_pid_and_nothing_from_a_stale_view():
    from servewatch.serve.http_api import RANK_SAMPLE_MAX_AGE_S, _ranks

    sample = stopped_at(10.0)(T0 + 12.0)
    ranks = _ranks(sample, now=sample.t + 1.0)
    assert [(r["role"], r["rank"], r["state"]) for r in ranks] == \
        [("engine_core", "none", "S"), ("worker", "TP0", "R"), ("worker", "TP1", "T")]
    assert ranks[2]["title"] == "VLLM::Worker_TP1" and ranks[2]["pid"] == 112
    assert _ranks(sample, now=sample.t + RANK_SAMPLE_MAX_AGE_S + 0.1) == []     # no state from an old view
    assert _ranks(None, now=0.0) == []


def test_startup_and_other_verdicts_name_stopped_processes_by_rank():
    from servewatch.detectors.rank_words import named_processes

    sample = stopped_at(0.0)(T0)
    assert named_processes(sample, [(112, "VLLM::Worker_TP1")]) == "TP rank 1 of 2 (VLLM::Worker_TP1, pid 112)"
    assert named_processes(sample, [(100, "python3")]) == "python3"


def test_engine_dead_from_the_log_alone_names_the_worker_rank_and_its_exit():
    """vLLM's executor logs the dead worker's rank ('Worker proc VllmWorker-1 died unexpectedly (exit code:
    -9)'); when that line is read before a process sample shows the rank gone (seen on a real TP=2 vLLM),
    the verdict still says which worker died and how."""
    from servewatch.sources.logs import _read_line
    from servewatch.timeline.samples import LogEvent

    line = ("(EngineCore pid=16059) ERROR 12-01 18:20:45 [multiproc_executor.py:315] Worker proc VllmWorker-1 "
            "died unexpectedly (exit code: -9), shutting down executor.")
    (kind, fields), = _read_line(line)[2]
    assert kind == "engine_dead" and fields["worker_rank"] == 1 and fields["exit_code"] == -9
    w = window(tree, span=12.0)     # every rank still in the process view
    w = Window(health=w.health, metrics=w.metrics, process=w.process, logs=(LogEvent(T0 + 11.5, kind, fields),))
    (dead,) = [v for v in run_detectors(w, CONFIG) if v.name == "engine_dead"]
    assert "(Worker proc died unexpectedly: worker rank 1, exit code -9 (signal 9))" in dead.why, dead.why


def sglang_tree(t, *, detokenizer="running"):
    members = (
        ProcessMember(200, 1.0, "api", "python3", "sleeping", 2**30, 30, 20.0, 1),
        ProcessMember(210, 2.0, "engine_core", "sglang::scheduler", "running", 2**30, 40, 95.0, 200),
        ProcessMember(211, 3.0, "worker", "sglang::detokenizer", detokenizer, 2**30, 4,
                      0.0 if detokenizer == "stopped" else 3.0, 200),
    )
    return ProcessSample(t=t, root_pid=200, root_create_time=1.0, alive=True, members=members)


def test_a_stopped_detokenizer_while_the_scheduler_steps_on_is_named_when_a_probe_gets_nothing():
    # As on a real SGLang 0.5.23 in a drill: the detokenizer SIGSTOPped under 4 long completions; the
    # scheduler kept stepping (its counters moved, 4 running), /health answered 200 22 times out of 24, and no
    # client got a token for the 12 s the stop held. Left "to the stall verdict" (work admitted), which
    # cannot fire while counters move, nothing told it.
    def sglang_scrape(t):
        tokens = 500 + 40 * (t - T0)          # the scheduler generates throughout
        state = EngineState("sglang", "sglang-0.5.23", {"engine_type": "unified"}, running=4, waiting=0,
                            counters=Counters(prompt_tokens=100, generation_tokens=tokens, steps=tokens))
        return MetricsSample(t, "sglang", "sglang-0.5.23", (state,))

    span = 14.0
    health = tuple(HealthSample(T0 + i, 200, 0.01) for i in range(int(span) + 1))
    metrics = tuple(sglang_scrape(T0 + i) for i in range(int(span) + 1))
    process = tuple(sglang_tree(T0 + i * STEP, detokenizer="stopped" if i * STEP >= 10.0 else "running")
                    for i in range(int(span / STEP) + 1))
    w = Window(health=health, metrics=metrics, process=process, probe=(missed(10.5),))
    (verdict,) = [v for v in run_detectors(w, CONFIG) if v.name == "rank_stalled"]
    assert verdict.details["title"] == "sglang::detokenizer" and verdict.details["how"] == "stopped"
    assert "engine reports 4 running, 0 waiting and its counters moved in the last 2 s" in verdict.why, verdict.why
    assert "a 1-token probe got nothing in 3 s" in verdict.why
    assert "alive_health_ok_no_progress" not in names(w)

    # Without the missed probe, nothing: the stop alone is not a verdict.
    quiet = Window(health=health, metrics=metrics, process=process, probe=())
    assert "rank_stalled" not in names(quiet)


def test_each_engine_names_its_own_data_parallel_routing_header():
    """vLLM 0.32 reads X-data-parallel-rank, SGLang 0.5.23 X-Data-Parallel-Rank (HTTP header names are
    case-insensitive; each dialect states the one its engine's source reads); a rank with no DP axis needs none."""
    from servewatch.timeline.ranks import dp_route, rank_view

    members = (
        ProcessMember(200, 1.0, "api", "python3", "sleeping", 2**30, 30, 5.0, 1),
        ProcessMember(205, 1.5, "dp_controller", "sglang::data_parallel_controller", "sleeping", 2**30, 4, 1.0, 200),
        ProcessMember(210, 2.0, "scheduler", "sglang::scheduler_DP1", "stopped", 2**30, 40, 0.0, 205),
    )
    sglang = ProcessSample(t=T0, root_pid=200, root_create_time=1.0, alive=True, members=members)
    routes = {r.title: dp_route(r) for r in (*rank_view(sglang), *rank_view(dp_tree(T0)), *rank_view(tree(T0)))}
    assert routes["sglang::scheduler_DP1"] == {"X-Data-Parallel-Rank": "1"}
    assert routes["VLLM::EngineCore_DP1"] == {"X-data-parallel-rank": "1"}
    assert routes["VLLM::Worker_TP1"] == {}


# --- every data-parallel engine asked in turn -------------------------------------------------------------

def routine_asks(process, polls: int, answer=None) -> tuple[list, ProbeSource]:
    """(time, deadline, route) of the routine probes a ProbeSource (every 5 s) sent over `polls` intervals while
    the recorder saw `process` idle; `answer(route)` says how each ended (None: still waiting)."""
    clock = VirtualClock(T0)
    asked = []

    class Attempt:
        def __init__(self, route):
            self.route = route

        def answer(self):
            return answer(self.route) if answer is not None else None

        def cancel(self):
            pass

    def prober(deadline, route=None):
        asked.append((clock.now(), deadline, route))
        return Attempt(route)

    source = ProbeSource(prober, clock, probe_interval_s=5.0, deadline_s=3.0, check_s=0.5)
    ring = Ring.for_history(60.0, {"process": STEP, "probe": 0.5, "metrics": 1.0, "health": 1.0})
    source.bind_timeline(ring, lambda w: rank_detector.suspicion(w, CONFIG))
    samples = []
    for i in range(polls * 10):
        t = T0 + i * STEP
        clock.set(t)
        ring.extend([process(t), scrape(t), HealthSample(t, 200, 0.01)])
        samples += asyncio.run(source.poll())
    ring.extend(samples)
    return asked, source, samples


def test_routine_probes_ask_each_data_parallel_engine_in_turn_and_say_which():
    """An idle DP=2 vLLM balances by load: an unaimed probe would only ever reach engine 0, and an engine 1
    that hangs while idle (spinning or asleep like an idle rank, so the process view cannot tell) would never
    be asked. The routine probe asks engine 0, then engine 1, ... with vLLM's routing header, and each sample
    says which engine it asked; one engine (TP=2 here) is asked unaimed."""
    from servewatch.sources.probe import SERVED as OK, ProbeAnswer

    asked, _, samples = routine_asks(lambda t: dp_tree(t), 4, lambda route: ProbeAnswer(OK, 0.05, 200, 1))
    assert [route for _, _, route in asked] == [{"X-data-parallel-rank": str(n % 2)} for n in range(len(asked))]
    assert len(asked) == 4 and [s.engine for s in samples] == ["0", "1", "0", "1"]
    asked, _, samples = routine_asks(lambda t: tree(t), 3, lambda route: ProbeAnswer(OK, 0.05, 200, 1))
    assert [route for _, _, route in asked] == [None] * 3 and {s.engine for s in samples} == {None}


def dp_window(probes, span=30.0, engines=("0", "1")):
    n = int(span)
    metrics = tuple(MetricsSample(T0 + i, "vllm", "vllm-0.32", tuple(
        EngineState("vllm", "vllm-0.32", {"engine": e}, running=0, waiting=0,
                    counters=Counters(prompt_tokens=100, generation_tokens=500, steps=500)) for e in engines))
        for i in range(n + 1))
    health = tuple(HealthSample(T0 + i * 1.0, 200, 0.01) for i in range(n + 1))
    process = tuple(dp_tree(T0 + i * STEP) for i in range(int(span / STEP) + 1))
    return Window(health=health, metrics=metrics, process=process, probe=tuple(probes))


def aimed(t, engine, outcome=DEADLINE):
    if outcome == DEADLINE:
        return ProbeSample(T0 + t + 3.0, DEADLINE, 3.0, 3.0, error="timeout", engine=engine)
    return ProbeSample(T0 + t + 0.05, SERVED, 0.05, 3.0, status=200, tokens=1, engine=engine)


def test_an_engine_that_hangs_while_idle_is_not_serving_though_the_other_answers_after_it(tmp_path):
    """Engine 1 missed its probe and engine 0 answered the next: not_serving holds, naming engine 1, until
    engine 1 answers one of its own. Its bundle keeps which engine each probe asked (verify recomputes it)."""
    missed_then_other = [aimed(5.0, "0", SERVED), aimed(10.0, "1"), aimed(15.0, "0", SERVED)]
    w = dp_window(missed_then_other)
    verdicts = run_detectors(w, CONFIG)
    (verdict,) = [v for v in verdicts if v.name == "not_serving"]
    sink = BundleSink(BundleWriter(tmp_path, clock=VirtualClock(T0 + 30.0)), "http://127.0.0.1:8000", CONFIG)
    path = Path(sink.on_fired(Fired(verdict, None, w, tuple(verdicts))))
    assert verify_bundle(path).verdicts_checked >= 1
    assert verdict.details["engine"] == "engine=1"
    assert "a one-token probe sent to DP rank 1's engine got no token within 3 s" in verdict.why
    assert "no counter moved on engine 1 (running 0, waiting 0)" in verdict.why
    answered = [*missed_then_other, aimed(20.0, "1", SERVED)]
    assert "not_serving" not in names(dp_window(answered))
    # before: one unaimed probe was all there was, and the last one served said the server serves
    assert "not_serving" not in names(dp_window([ProbeSample(T0 + 13.0, DEADLINE, 3.0, 3.0, error="timeout"),
                                                 ProbeSample(T0 + 15.05, SERVED, 0.05, 3.0, status=200, tokens=1)]))


def test_a_stopped_dp_rank_stays_named_while_the_other_engine_answers_its_turn():
    stopped = lambda t: dp_tree(t, dp1_worker="stopped" if t >= T0 + 6.0 else "running")  # noqa: E731
    w = dp_window([aimed(6.5, "1"), aimed(10.0, "0", SERVED)], span=14.0)
    w = Window(health=w.health, metrics=w.metrics, probe=w.probe,
               process=tuple(stopped(T0 + i * STEP) for i in range(29)))
    (verdict,) = [v for v in run_detectors(w, CONFIG) if v.name == "rank_stalled"]
    assert "DP rank 1 worker (VLLM::Worker, pid 121) stopped" in verdict.why


def test_probes_sent_while_a_rank_was_stopped_are_no_new_incident_once_it_runs_again():
    """A real vLLM's engine core, SIGSTOPped 34 s under the standard drill: rank_stalled held, and in the half
    second after SIGCONT (the rank running, the counters not moved yet) the probes sent during the stop read
    as not_serving. They are the stop's; a probe sent after the rank runs again counts."""
    stopped = lambda t: tree(t, tp1_status="stopped" if T0 + 10.0 <= t < T0 + 20.0 else "running",  # noqa: E731
                             tp1_cpu=0.0 if T0 + 10.0 <= t < T0 + 20.0 else 50.0)
    w = window(stopped, probes=[missed(10.5), missed(15.0, deadline=4.0)], span=21.0)
    assert names(w) == []
    w = window(stopped, probes=[missed(10.5), missed(15.0, deadline=4.0), missed(20.5)], span=24.0)
    assert names(w) == ["not_serving"]


def test_a_routine_probe_in_flight_gives_way_to_the_urgent_one_when_a_rank_stops():
    """On a TP=2 vLLM whose engine core stopped while a routine probe (10 s deadline) was in flight, the verdict
    waited for that deadline (10.5 s after the stop) although the process view showed the stop at once. The
    routine probe, asked before the rank looked stalled, says nothing of it: it is cancelled and the urgent probe
    asked at the first look after the stop; an urgent probe in flight is never cancelled for another."""
    clock = VirtualClock(T0 - 5.0)
    asked, cancelled = [], []

    class Attempt:
        def __init__(self, n):
            self.n = n

        def answer(self):
            return None

        def cancel(self):
            cancelled.append(self.n)

    def prober(deadline, route=None):
        asked.append((clock.now(), deadline))
        return Attempt(len(asked))

    source = ProbeSource(prober, clock, probe_interval_s=30.0, deadline_s=10.0, check_s=0.5)
    ring = Ring.for_history(60.0, {"process": STEP, "probe": 0.5, "metrics": 1.0, "health": 1.0})
    source.bind_timeline(ring, lambda w: rank_detector.suspicion(w, CONFIG))
    asyncio.run(source.poll())                       # the routine probe, idle server, asked at T0 - 5
    w = window(stopped_at(6.0), span=9.0)
    for i in range(int(9.0 / STEP) + 1):
        t = T0 + i * STEP
        clock.set(t)
        ring.extend([s for s in (*w.process, *w.metrics, *w.health) if s.t == t])
        asyncio.run(source.poll())
    assert asked == [(T0 - 5.0, 10.0), (T0 + 6.0, URGENT_DEADLINE_S)]
    assert cancelled == [1] and source.preempted == 1 and source.urgent == 1
