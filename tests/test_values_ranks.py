"""Value tests of detectors/ranks.py (issue 40): rank_stalled's whole verdict on a hand-built vLLM TP=2 tree, and a
boundary test (just under, at, just over) for each threshold it reads from DetectorConfig:
  rank_quiet_s            asleep or starved counts once newest - onset >= it (`< rank_quiet_s` skips);
  rank_idle_cpu_percent   a rank is "not scheduled" under it (`cpu < rank_idle_cpu_percent`);
  stall_busy_cpu_percent  a sibling is busy at it or over (mean CPU `>=`);
  rank_probe_slack_s      a probe asked up to it before the onset counts (`asked < onset - slack` does not);
  stall_floor_s           counters moved over the scrapes of the last stall_floor_s (`m.t >= last - floor`)."""

from __future__ import annotations

from dataclasses import replace

from servewatch.detectors import ranks as R
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import (DEADLINE, FAILED, HealthSample, LogEvent, MetricsSample, ProbeSample,
                                         ProcessMember, ProcessSample)
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
STEP = 0.25
QUIET, IDLE, BUSY, SLACK = (CONFIG.rank_quiet_s, CONFIG.rank_idle_cpu_percent, CONFIG.stall_busy_cpu_percent,
                            CONFIG.rank_probe_slack_s)


def tree(t, *, tp1="running", tp1_cpu=50.0, tp0_cpu=50.0, root_ct=1.0, error=None, alive=True):
    members = (
        ProcessMember(100, 1.0, "api", "python3", "sleeping", 2**30, 30, 20.0, 1),
        ProcessMember(110, 2.0, "engine_core", "VLLM::EngineCore", "sleeping", 2**30, 40, 2.0, 100),
        ProcessMember(111, 3.0, "worker", "VLLM::Worker_TP0", "running", 2**30, 40, tp0_cpu, 110),
        ProcessMember(112, 4.0, "worker", "VLLM::Worker_TP1", tp1, 2**30, 40, tp1_cpu, 110),
    )
    return ProcessSample(T0 + t, 100, root_ct, alive, members if alive else (), error=error)


def scrape(t, running=0.0, waiting=0.0, tokens=500.0):
    state = EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=running, waiting=waiting,
                        counters=Counters(prompt_tokens=100, generation_tokens=tokens, steps=tokens))
    return MetricsSample(T0 + t, "vllm", "vllm-0.32", (state,))


def missed(asked, deadline=3.0, engine=None):
    return ProbeSample(T0 + asked + deadline, DEADLINE, None, deadline, error="timeout", engine=engine)


def window(process_at, *, span=14.0, probes=(), running=0.0, metrics=None, health=None):
    n = int(span / 0.5)
    return Window(health=health if health is not None else tuple(HealthSample(T0 + i, 200, 0.01)
                                                                 for i in range(int(span) + 1)),
                  metrics=metrics if metrics is not None else tuple(scrape(i, running=running)
                                                                    for i in range(int(span) + 1)),
                  process=tuple(process_at(i * 0.5) for i in range(n + 1)), probe=tuple(probes))


def stopped_at(at):
    return lambda t: tree(t, tp1="stopped" if t >= at else "running", tp1_cpu=0.0 if t >= at else 50.0)


def test_a_stopped_rank_is_the_whole_verdict():
    w = window(stopped_at(10.0), probes=[missed(10.5)])
    assert R.detect(w, CONFIG) == [Verdict(
        "rank_stalled", T0 + 14, T0 + 10,
        "TP rank 1 of 2 (VLLM::Worker_TP1, pid 112) stopped 4.0 s; TP rank 0 busy 50 %; engine reports 0 running, "
        "0 waiting; a 1-token probe got nothing in 3 s; /health 200",
        (Evidence("process", T0 + 10, "members[112].status", "stopped"),
         Evidence("process", T0 + 14, "members[112].status", "stopped"),
         Evidence("probe", T0 + 13.5, "outcome", "deadline"),
         Evidence("process", T0 + 14, "members[111].cpu_percent", 50.0),
         Evidence("metrics", T0 + 14, "running", 0.0), Evidence("metrics", T0 + 14, "waiting", 0.0),
         Evidence("health", T0 + 14, "status", 200)),
        {"pid": 112, "title": "VLLM::Worker_TP1", "kind": "worker", "how": "stopped", "rank": "TP1", "lasted_s": 4.0,
         "probe_deadline_s": 3.0, "failed_probes": 1})]


def test_the_probe_slack_under_at_and_over():
    # stopped at 10: a probe asked at 10 - slack counts, one STEP earlier does not
    for asked, fires in ((10 - SLACK - STEP, False), (10 - SLACK, True), (10 - SLACK + STEP, True)):
        w = window(stopped_at(10.0), probes=[missed(asked)], span=16.0)
        assert (R.detect(w, CONFIG) != []) is fires, asked


def test_failed_probes_counts_those_asked_since_the_onset_less_the_slack():
    def failed(*probes):
        v, = R.detect(window(stopped_at(10.0), probes=probes, span=20.0), CONFIG)
        return v.details["failed_probes"]
    assert failed(missed(10 - SLACK), missed(13)) == 2
    assert failed(missed(10 - SLACK - STEP), missed(13)) == 1
    assert failed(missed(11), missed(13), missed(15)) == 3


def test_a_failed_answer_and_health_without_a_status_are_said():
    probe = ProbeSample(T0 + 11.5, FAILED, 0.5, 3.0, status=500, error="http_500")
    health = tuple(HealthSample(T0 + i, 200, 0.01) for i in range(14)) + (HealthSample(T0 + 14, None, None, "timeout"),)
    v, = R.detect(window(stopped_at(10.0), probes=[probe], health=health), CONFIG)
    assert v.why.endswith("; a 1-token probe failed (http_500); /health timeout")
    assert v.evidence[-1] == Evidence("health", T0 + 14, "error", "timeout")
    probe = ProbeSample(T0 + 11.5, FAILED, 0.5, 3.0, status=502)
    health = health[:-1] + (HealthSample(T0 + 14, None, None, None),)
    v, = R.detect(window(stopped_at(10.0), probes=[probe], health=health), CONFIG)
    assert v.why.endswith("; a 1-token probe failed (502); /health no answer")
    v, = R.detect(window(stopped_at(10.0), probes=[missed(10.5)], health=()), CONFIG)
    assert v.why.endswith("; a 1-token probe got nothing in 3 s") and v.t == T0 + 14
    assert v.evidence[-1] == Evidence("metrics", T0 + 14, "waiting", 0.0)


def test_the_verdict_time_is_the_newest_of_probe_process_and_health():
    v, = R.detect(window(stopped_at(10.0), probes=[missed(12.0, deadline=3.0)]), CONFIG)   # missed at 15
    assert v.t == T0 + 15
    health = tuple(HealthSample(T0 + i, 200, 0.01) for i in range(15)) + (HealthSample(T0 + 16, 200, 0.01),)
    v, = R.detect(window(stopped_at(10.0), probes=[missed(10.5)], health=health), CONFIG)
    assert v.t == T0 + 16


def test_no_gauges_read():
    v, = R.detect(window(stopped_at(10.0), probes=[missed(10.5)], metrics=()), CONFIG)
    assert "stopped 4.0 s; TP rank 0 busy 50 %; no engine gauges read; a 1-token probe" in v.why
    assert [e.source for e in v.evidence] == ["process", "process", "probe", "process", "health"]


def test_admitted_work_is_the_stall_verdicts_unless_the_counters_move_beside_a_stop():
    assert R.detect(window(stopped_at(10.0), probes=[missed(10.5)], running=1.0), CONFIG) == []
    waiting = tuple(scrape(i, waiting=2.0) for i in range(15))
    assert R.detect(window(stopped_at(10.0), probes=[missed(10.5)], metrics=waiting), CONFIG) == []
    moving = tuple(scrape(i, running=4.0, tokens=500 + 40 * i) for i in range(15))
    v, = R.detect(window(stopped_at(10.0), probes=[missed(10.5)], metrics=moving), CONFIG)
    assert ("; engine reports 4 running, 0 waiting and its counters moved in the last 2 s: the engine works, yet its "
            "answers reach no client; a 1-token probe") in v.why


def test_moved_lately_reads_the_last_stall_floor_s_under_at_and_over():
    rank = R.rank_view(tree(0))[0]
    floor = CONFIG.stall_floor_s
    # scrapes at 0..10 and at `at`, the counters moved just after `at`: seen when the scrape at `at`, the last
    # before the move, is among those of the last stall_floor_s (at >= 10 - floor)
    for at, moved in ((10 - floor - STEP, False), (10 - floor, True), (10 - floor + STEP, True)):
        times = sorted({*range(11), at})
        metrics = tuple(scrape(t, tokens=500 if t <= at else 501) for t in times)
        assert R._moved_lately(Window(metrics=metrics), rank, CONFIG) is moved, at
    # one scrape only: no movement known; two scrapes further apart than the floor: those two compared
    assert R._moved_lately(Window(metrics=(scrape(0),)), rank, CONFIG) is False
    assert R._moved_lately(Window(metrics=(scrape(0, tokens=1), scrape(10, tokens=2))), rank, CONFIG) is True
    assert R._moved_lately(Window(metrics=(scrape(0), scrape(10))), rank, CONFIG) is False
    bad = MetricsSample(T0 + 11, None, None, error="timeout")
    assert R._moved_lately(Window(metrics=(scrape(9, tokens=1), scrape(10, tokens=2), bad)), rank, CONFIG) is True


def test_gauges_sum_the_rank_s_engines():
    rank = R.rank_view(tree(0))[0]
    two = MetricsSample(T0, "vllm", "vllm-0.32", (
        EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=1.0, waiting=None),
        EngineState("vllm", "vllm-0.32", {"engine": "1"}, running=None, waiting=2.0)))
    sample, running, waiting = R._gauges(Window(metrics=(scrape(-1), two)), rank)
    assert (sample.t, running, waiting) == (T0, 1.0, 2.0)
    assert R._gauges(Window(metrics=(MetricsSample(T0, None, None, error="x"),)), rank) is None


# --- suspects ---------------------------------------------------------------------------------------------

def starved(at, cpu=0.0, sibling=95.0):
    return lambda t: tree(t, tp1_cpu=cpu if t >= at else 50.0, tp0_cpu=sibling)


def test_rank_quiet_s_under_at_and_over():
    # starved from `at` to the end (14): a suspect once 14 - at >= rank_quiet_s
    for lasted, found in ((QUIET - 0.5, False), (QUIET, True), (QUIET + 0.5, True)):
        suspects = R.suspects(window(starved(14 - lasted)), CONFIG)
        assert (suspects != ()) is found, lasted
    s, = R.suspects(window(starved(14 - QUIET)), CONFIG)
    assert (s.how, s.onset, s.t, s.rank.pid) == ("not scheduled", T0 + 14 - QUIET, T0 + 14, 112)
    assert [(r.pid, cpu) for r, cpu in s.busy_siblings] == [(111, 95.0)]


def test_rank_idle_cpu_percent_under_at_and_over():
    for cpu, found in ((IDLE - STEP, True), (IDLE, False), (IDLE + STEP, False)):
        assert (R.suspects(window(starved(8.0, cpu=cpu)), CONFIG) != ()) is found, cpu


def test_a_busy_sibling_under_at_and_over():
    for cpu, found in ((BUSY - STEP, False), (BUSY, True), (BUSY + STEP, True)):
        assert (R.suspects(window(starved(8.0, sibling=cpu)), CONFIG) != ()) is found, cpu


def test_the_sibling_cpu_is_its_mean_since_the_onset():
    # the sibling at 2 x BUSY before the onset (8) and at BUSY - 1 after, but for one sample at BUSY + 12:
    # the mean over the 13 samples from 8 to 14 is ((BUSY - 1) x 12 + BUSY + 12) / 13 = BUSY: busy, just
    def process(t, extra=12.0):
        sibling = 2 * BUSY if t < 8 else (BUSY + extra if t == 10 else BUSY - 1)
        return tree(t, tp1_cpu=0.0 if t >= 8 else 50.0, tp0_cpu=sibling)
    s, = [x for x in R.suspects(window(process), CONFIG) if x.rank.pid == 112]
    (_, mean), = s.busy_siblings
    assert mean == ((BUSY - 1) * 12 + BUSY + 12) / 13 == BUSY
    assert [x for x in R.suspects(window(lambda t: process(t, 11.0)), CONFIG) if x.rank.pid == 112] == []


def test_a_rank_in_uninterruptible_sleep_needs_a_busy_sibling_and_two_samples():
    asleep = lambda at: (lambda t: tree(t, tp1="disk-sleep" if t >= at else "running", tp0_cpu=95.0))
    s, = R.suspects(window(asleep(10.0)), CONFIG)
    assert (s.how, s.onset) == ("in uninterruptible sleep", T0 + 10)
    v, = R.detect(window(asleep(10.0), probes=[missed(10.5)]), CONFIG)
    assert v.details["how"] == "disk_sleep"
    assert v.why.startswith("TP rank 1 of 2 (VLLM::Worker_TP1, pid 112) in uninterruptible sleep 4.0 s; TP rank 0 "
                            "busy 95 %")
    # beside an idle sibling: nothing
    idle_sibling = lambda t: tree(t, tp1="disk-sleep" if t >= 10 else "running", tp0_cpu=1.0)
    assert [x for x in R.suspects(window(idle_sibling), CONFIG) if x.rank.pid == 112] == []
    # one sample only (with a quiet of 0 allowed): still needs two
    s = R.suspects(window(lambda t: tree(t, tp1="disk-sleep" if t >= 14 else "running", tp0_cpu=95.0)),
                   replace(CONFIG, rank_quiet_s=0.0))
    assert [x for x in s if x.rank.pid == 112] == []


def test_a_stopped_rank_needs_no_busy_sibling_nor_time():
    s, = R.suspects(window(lambda t: tree(t, tp1="stopped" if t >= 14 else "running", tp0_cpu=0.0)), CONFIG)
    assert (s.how, s.onset, s.busy_siblings) == ("stopped", T0 + 14, ())
    s, = R.suspects(window(lambda t: tree(t, tp1="tracing-stop" if t >= 13 else "running")), CONFIG)
    assert s.how == "stopped" and s.onset == T0 + 13
    # a stopped sibling is never the busy one
    both = lambda t: tree(t, tp1="stopped" if t >= 10 else "running", tp0_cpu=0.0 if t < 10 else 99.0)
    s, = R.suspects(window(both), CONFIG)
    assert s.rank.pid == 112


def test_the_newest_run_of_one_live_identity_is_read():
    # a restart (another root create time) at 12: only the samples from 12 count
    process = lambda t: tree(t, tp1="stopped", tp1_cpu=0.0, root_ct=1.0 if t < 12 else 9.0)
    s, = R.suspects(window(process), CONFIG)
    assert s.onset == T0 + 12
    # an unreadable sample is skipped, not a break
    process = lambda t: tree(t, tp1="stopped" if t >= 10 else "running", error="denied" if t == 12 else None)
    s, = R.suspects(window(process), CONFIG)
    assert s.onset == T0 + 10
    # a dead target: nothing
    process = lambda t: tree(t, tp1="stopped", alive=t < 14)
    assert R.suspects(window(process), CONFIG) == ()
    assert R._samples(Window()) == []


def test_member_run_and_mean_cpu():
    samples = [tree(t, tp1="stopped" if t in (1, 3, 4) else "running", tp1_cpu=float(t)) for t in range(5)]
    run = R._member_run(samples, 112, 4.0, lambda m: m.status == "stopped")
    assert [s.t for s, _ in run] == [T0 + 3, T0 + 4]
    assert R._member_run(samples, 112, 5.0, lambda m: True) == []          # another create time: another process
    assert R._mean_cpu(samples, 112, T0 + 2) == (2 + 3 + 4) / 3
    assert R._mean_cpu(samples, 999, T0) is None


def test_suspicion_is_the_newest_onset_and_its_aim():
    assert R.suspicion(window(lambda t: tree(t)), CONFIG) is None
    onset, aim = R.suspicion(window(stopped_at(10.0)), CONFIG)
    assert (onset, aim) == (T0 + 10, None)


def test_nothing_without_a_failed_probe_or_with_a_dead_engine():
    assert R.detect(window(stopped_at(10.0)), CONFIG) == []
    w = window(stopped_at(10.0), probes=[missed(10.5)])
    dead = Window(health=w.health, metrics=w.metrics, process=w.process, probe=w.probe,
                  logs=(LogEvent(T0 + 12, "engine_dead", {}),))
    assert R.detect(dead, CONFIG) == []


def test_probes_of_a_dp_rank():
    dp = lambda t: ProcessSample(T0 + t, 100, 1.0, True, (
        ProcessMember(100, 1.0, "api", "python3", "sleeping", cpu_percent=1.0),
        ProcessMember(120, 2.0, "engine_core", "VLLM::EngineCore_DP0", "sleeping", cpu_percent=1.0, ppid=100),
        ProcessMember(121, 3.0, "engine_core", "VLLM::EngineCore_DP1", "stopped" if t >= 10 else "sleeping",
                      cpu_percent=0.0, ppid=100)))
    w = window(dp, probes=[missed(10.5, engine="1"), missed(11.0, engine="0")])
    v, = R.detect(w, CONFIG)
    assert v.details["pid"] == 121 and v.evidence[2] == Evidence("probe", T0 + 13.5, "outcome", "deadline")
    rank = next(r for r in R.rank_view(dp(12)) if r.pid == 121)
    assert [p.engine for p in R._probes_of(w, rank)] == ["1"]
    unaimed = window(dp, probes=[missed(10.5), missed(11.0)])
    assert len(R._probes_of(unaimed, rank)) == 2
    assert R._newest_probe_of(window(dp, probes=[missed(10.5, engine="0")]), rank) is None


def dp_tp(t, tp1="running"):
    """DP rank 1's engine with two TP workers (their titles name both ranks)."""
    return ProcessSample(T0 + t, 100, 1.0, True, (
        ProcessMember(100, 1.0, "api", "python3", "sleeping", cpu_percent=1.0),
        ProcessMember(120, 2.0, "engine_core", "VLLM::EngineCore_DP1", "sleeping", cpu_percent=1.0, ppid=100),
        ProcessMember(121, 3.0, "worker", "VLLM::Worker_DP1_TP0", "running", cpu_percent=50.0, ppid=120),
        ProcessMember(122, 4.0, "worker", "VLLM::Worker_DP1_TP1", tp1, cpu_percent=0.0 if tp1 == "stopped" else 50.0,
                      ppid=120)))


def two_engines(running0=3.0, running1=0.0, waiting1=0.0):
    return tuple(MetricsSample(T0 + i, "vllm", "vllm-0.32", (
        EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=running0, waiting=0.0,
                    counters=Counters(steps=10.0 + i)),
        EngineState("vllm", "vllm-0.32", {"engine": "1"}, running=running1, waiting=waiting1,
                    counters=Counters(steps=10.0)))) for i in range(15))


def test_a_data_parallel_rank_reads_its_own_engine_s_gauges():
    process = lambda t: dp_tp(t, "stopped" if t >= 10 else "running")
    v, = R.detect(window(process, probes=[missed(10.5)], metrics=two_engines()), CONFIG)
    assert "; engine reports 0 running, 0 waiting; " in v.why
    assert v.details["rank"] == "DP1,TP1"
    assert "; DP rank 1 TP rank 0 busy 50 %;" in v.why
    # work on engine 1 holds it back; engine 0's does not
    assert R.detect(window(process, probes=[missed(10.5)], metrics=two_engines(running1=1.0)), CONFIG) == []
    rank = next(r for r in R.rank_view(dp_tp(12, "stopped")) if r.pid == 122)
    assert [e.labels["engine"] for e in R._rank_engines(two_engines()[0], rank)] == ["1"]
    unlabelled = MetricsSample(T0, "vllm", "vllm-0.32", (EngineState("vllm", "vllm-0.32", {}),))
    assert len(R._rank_engines(unlabelled, rank)) == 1          # an engine with no DP rank serves every rank


def test_one_waiting_request_is_admitted_work():
    waiting = tuple(scrape(i, waiting=1.0) for i in range(15))
    assert R.detect(window(stopped_at(10.0), probes=[missed(10.5)], metrics=waiting), CONFIG) == []


def test_the_newest_probe_of_the_rank_must_have_failed():
    served = ProbeSample(T0 + 12.1, "served", 0.1, 3.0, status=200, tokens=1)
    assert R.detect(window(stopped_at(10.0), probes=[missed(10.5), served]), CONFIG) == []


def test_suspicion_is_the_newest_of_several():
    process = lambda t: tree(t, tp1="stopped" if t >= 10 else "running", tp1_cpu=0.0 if t >= 10 else 50.0,
                             tp0_cpu=0.0 if t >= 12 else 50.0)
    both = lambda t: ProcessSample(process(t).t, 100, 1.0, True, tuple(
        replace(m, status="stopped") if m.pid == 111 and t >= 12 else m for m in process(t).members))
    found = R.suspects(window(both), CONFIG)
    assert sorted((s.rank.pid, s.onset) for s in found) == [(111, T0 + 12), (112, T0 + 10)]
    assert R.suspicion(window(both), CONFIG) == (T0 + 12, None)


def test_moved_lately_with_one_recent_scrape_compares_the_last_two():
    rank = R.rank_view(tree(0))[0]
    # scrapes at 0, 5, 10 (only 10 within stall_floor_s of the newest): 5 against 10, not 0 against 10
    metrics = (scrape(0, tokens=1.0), scrape(5, tokens=2.0), scrape(10, tokens=2.0))
    assert R._moved_lately(Window(metrics=metrics), rank, CONFIG) is False
    metrics = (scrape(0, tokens=1.0), scrape(5, tokens=1.0), scrape(10, tokens=2.0))
    assert R._moved_lately(Window(metrics=metrics), rank, CONFIG) is True


def test_moving_counters_beside_a_stop_keep_their_gauges_in_the_evidence():
    moving = tuple(scrape(i, running=4.0, waiting=1.0, tokens=500 + 40 * i) for i in range(15))
    v, = R.detect(window(stopped_at(10.0), probes=[missed(10.5)], metrics=moving), CONFIG)
    assert (Evidence("metrics", T0 + 14, "running", 4.0), Evidence("metrics", T0 + 14, "waiting", 1.0)) == \
        tuple(e for e in v.evidence if e.source == "metrics")


def test_the_rank_s_gpus_are_said():
    from servewatch.detectors.evidence.gpus import rank_gpu_evidence
    from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample

    gpus = GpuSample(T0 + 14, True, (
        GpuDevice(0, 98.0, 2**30, 2**34, 85.0, (GpuProcess(111, 2**30),), power_limit_w=700.0),
        GpuDevice(1, 0.0, 2**30, 2**34, 60.0, (GpuProcess(112, 2**30),), power_limit_w=700.0)))

    def process(t):
        # the sample before the newest and the second one miss TP1 (read while it was being listed): the newest is
        # what counts
        sample = stopped_at(10.0)(t)
        if t in (0.5, 13.5):
            return replace(sample, members=sample.members[:3])
        return sample
    bare_w = window(process, probes=[missed(13.2)])
    w = Window(health=bare_w.health, metrics=bare_w.metrics, process=bare_w.process, probe=bare_w.probe, gpu=(gpus,))
    bare, = R.detect(bare_w, CONFIG)
    v, = R.detect(w, CONFIG)
    clause, token = rank_gpu_evidence(w, w.process[-1])
    assert clause and token and "TP rank 1 GPU 1 idle 0 %" in clause
    assert v.why == bare.why + clause
    assert v.details == {**bare.details, "gpus": token}


def test_a_rank_without_axes_is_said_to_have_none():
    core_stopped = lambda t: ProcessSample(T0 + t, 100, 1.0, True, tuple(
        replace(m, status="stopped") if m.pid == 110 and t >= 10 else m for m in tree(t).members))
    v, = R.detect(window(core_stopped, probes=[missed(10.5)]), CONFIG)
    assert (v.details["pid"], v.details["kind"], v.details["rank"]) == (110, "engine_core", "none")


def three_workers(t, *, tp0="stopped"):
    """TP=3: TP0 stopped all along, TP1 busy, TP2 starved from 10 s (under rank_idle_cpu_percent)."""
    members = (
        ProcessMember(100, 1.0, "api", "python3", "sleeping", 2**30, 30, 20.0, 1),
        ProcessMember(110, 2.0, "engine_core", "VLLM::EngineCore", "sleeping", 2**30, 40, 2.0, 100),
        ProcessMember(111, 3.0, "worker", "VLLM::Worker_TP0", tp0, 2**30, 40, 0.0, 110),
        ProcessMember(112, 4.0, "worker", "VLLM::Worker_TP1", "running", 2**30, 40, 95.0, 110),
        ProcessMember(113, 5.0, "worker", "VLLM::Worker_TP2", "running", 2**30, 40, 1.0 if t >= 10 else 50.0, 110),
    )
    return ProcessSample(T0 + t, 100, 1.0, True, members)


def test_a_stopped_sibling_listed_first_does_not_hide_the_busy_one_after_it():
    found = {s.rank.pid: s for s in R.suspects(window(three_workers), CONFIG)}
    assert found[111].how == "stopped"
    starved = found[113]
    assert (starved.how, starved.onset) == ("not scheduled", T0 + 10)
    assert [(sibling.pid, cpu) for sibling, cpu in starved.busy_siblings] == [(112, 95.0)]


def test_a_rank_of_a_kind_no_stall_reads_listed_first_does_not_end_the_search(monkeypatch):
    # a registered engine may title a process of a kind rank_stalled does not judge (a front end): it is passed over
    real = R.rank_view

    def with_a_front_end_first(sample):
        ranks = real(sample)
        front = replace(ranks[0], kind="front_end", group=("front_end", 1))
        return (front, *ranks)

    monkeypatch.setattr(R, "rank_view", with_a_front_end_first)
    found = R.suspects(window(stopped_at(10.0)), CONFIG)
    assert [(s.rank.pid, s.how) for s in found] == [(112, "stopped")]


def test_a_quiet_run_of_exactly_two_samples_is_enough():
    # with rank_quiet_s 0, a run of two samples (13.5 and 14) is a suspect; one sample (14 alone) is not
    two = lambda t: tree(t, tp1="disk-sleep" if t >= 13.5 else "running", tp0_cpu=95.0)
    found = [s for s in R.suspects(window(two), replace(CONFIG, rank_quiet_s=0.0)) if s.rank.pid == 112]
    assert [(s.how, s.onset) for s in found] == [("in uninterruptible sleep", T0 + 13.5)]
