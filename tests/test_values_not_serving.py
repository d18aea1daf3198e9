"""Value tests of detectors/not_serving.py (issue 40): the whole verdict (time, onset, the line, its evidence and
details) on hand-built windows, and the boundaries it documents: `probe_fail_count` probes in a row (a run shorter
than it says nothing, `>=` fires), and a probe counts when it was asked at or after the counters last moved or a
process was last seen stopped (`asked_at(probe) < after` drops it, so asked exactly then counts)."""

from __future__ import annotations

from dataclasses import replace

from servewatch.detectors import not_serving as N
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import (DEADLINE, FAILED, SERVED, UNAVAILABLE, HealthSample, LogEvent, MetricsSample,
                                         ProbeSample, ProcessMember, ProcessSample)
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()


def engine(name="0", running=0.0, waiting=0.0, steps=10.0, dialect="vllm"):
    labels = {"model_name": "m", "engine": name} if dialect == "vllm" else {"model_name": "m"}
    return EngineState(dialect, f"{dialect}-test", labels, running=running, waiting=waiting,
                       counters=Counters(prompt_tokens=steps, generation_tokens=steps, steps=steps))


def scrape(t, *engines, dialect="vllm", error=None):
    if error:
        return MetricsSample(T0 + t, None, None, error=error)
    return MetricsSample(T0 + t, dialect, f"{dialect}-test", tuple(engines) or (engine(dialect=dialect),))


def health(t, status=200, error=None):
    return HealthSample(T0 + t, status, 0.001 if status else None, error)


def missed(asked, deadline=3.0, engine=None):
    return ProbeSample(T0 + asked + deadline, DEADLINE, None, deadline, error="timeout", engine=engine)


def failed(asked, latency=0.5, status=500, engine=None):
    return ProbeSample(T0 + asked + latency, FAILED, latency, 3.0, status=status, error=f"http_{status}",
                       engine=engine)


def served(asked, latency=0.1, engine=None):
    return ProbeSample(T0 + asked + latency, SERVED, latency, 3.0, status=200, tokens=1, engine=engine)


def proc(t, status="sleeping", cpu=1.0, role="engine_core"):
    members = (ProcessMember(1, 1.0, "api", "python3", "sleeping", cpu_percent=1.0),
               ProcessMember(2, 2.0, role, "VLLM::EngineCore", status, cpu_percent=cpu, ppid=1))
    return ProcessSample(T0 + t, 1, 1.0, True, members)


def idle(span=20, **kw):
    """/health 200 and a flat idle scrape every second from T0 to T0 + span."""
    return dict(health=tuple(health(i) for i in range(span + 1)),
                metrics=tuple(scrape(i) for i in range(span + 1)), **kw)


def one(window, config=CONFIG):
    verdicts = N.detect(window, config)
    assert len(verdicts) == 1, verdicts
    return verdicts[0]


def test_an_idle_wedge_is_the_whole_verdict():
    # asked at 10, deadline 3 s: missed at 13; /health answered at 10, 11, 12, 13 meanwhile (the verdict's time is
    # the newer of the last probe and the last of those); the newest scrape at 20
    w = Window(**idle(), probe=(missed(10),))
    assert N.detect(w, CONFIG) == [Verdict(
        "not_serving", T0 + 13, T0 + 10,
        "a one-token probe got no token within 3 s while /health answered 200 (4 time(s) meanwhile); "
        "no counter moved (running 0, waiting 0)",
        (Evidence("probe", T0 + 13, "outcome", "deadline"), Evidence("health", T0 + 13, "status", 200),
         Evidence("metrics", T0 + 20, "running", 0.0), Evidence("metrics", T0 + 20, "waiting", 0.0)),
        {"failed_probes": 1, "last_outcome": "deadline", "deadline_s": 3.0, "last_status": None,
         "last_error": "timeout", "running": 0.0, "waiting": 0.0})]


def test_the_verdict_time_is_the_probe_when_health_is_older():
    # asked at 10.5, missed at 13.5: no /health in [10.5, 13.5], so the last before it (10) is the one read
    w = Window(health=(health(8), health(10), health(14.5)), metrics=(scrape(8), scrape(9)), probe=(missed(10.5),))
    v = one(w)
    assert (v.t, v.onset) == (T0 + 13.5, T0 + 10.5)
    w = Window(health=(health(8), health(10)), metrics=(scrape(8), scrape(9)), probe=(missed(10.5),))
    v = one(w)
    assert (v.t, v.onset) == (T0 + 13.5, T0 + 10.5)
    assert "while /health answered 200 (1 time(s) meanwhile)" in v.why
    assert v.evidence[1] == Evidence("health", T0 + 10, "status", 200)


def test_health_after_the_last_probe_is_not_counted_as_meanwhile():
    w = Window(health=(health(9), health(11), health(12), health(14), health(15)), metrics=(scrape(9),),
               probe=(missed(10),))
    v = one(w)
    assert "(2 time(s) meanwhile)" in v.why                    # 11 and 12, not 14 or 15 (after 13)
    assert v.evidence[1] == Evidence("health", T0 + 12, "status", 200)
    assert v.t == T0 + 13


def test_probe_fail_count_under_at_and_over():
    need = 3
    config = replace(CONFIG, probe_fail_count=need)
    probes = [missed(2 + 4 * i) for i in range(need + 1)]      # asked at 2, 6, 10, 14; missed at 5, 9, 13, 17
    for n, fires in ((need - 1, False), (need, True), (need + 1, True)):
        w = Window(**idle(), probe=tuple(probes[:n]))
        assert (N.detect(w, config) != []) is fires, n
    v = one(Window(**idle(), probe=tuple(probes[:need])), config)
    # three in a row, the first asked at 2, the last missed at 13: "over 11.0 s"
    assert "got no token within 3 s (3 probes in a row over 11.0 s) while /health" in v.why
    assert v.details["failed_probes"] == 3
    assert v.onset == T0 + 2
    assert v.evidence[:3] == (Evidence("probe", T0 + 5, "outcome", "deadline"),
                              Evidence("probe", T0 + 13, "outcome", "deadline"),
                              Evidence("health", T0 + 13, "status", 200))


def test_the_default_probe_fail_count_is_read_from_the_config():
    need = CONFIG.probe_fail_count
    probes = tuple(missed(2 + 4 * i) for i in range(need))
    assert len(N.detect(Window(**idle(), probe=probes), CONFIG)) == 1
    assert N.detect(Window(**idle(), probe=probes[:need - 1]), CONFIG) == []


def test_a_served_probe_last_or_between_ends_the_run():
    assert N.detect(Window(**idle(), probe=(missed(2), served(8))), CONFIG) == []
    v = one(Window(**idle(), probe=(missed(2), served(6), missed(10))), replace(CONFIG, probe_fail_count=1))
    assert v.details["failed_probes"] == 1 and v.onset == T0 + 10
    assert N.detect(Window(**idle(), probe=(missed(2), served(6), missed(10))), replace(CONFIG, probe_fail_count=2)) == []
    # a probe that could not be asked is no failure
    assert N.detect(Window(**idle(), probe=(ProbeSample(T0 + 5, UNAVAILABLE, None, 3.0, error="no_models"),)),
                    CONFIG) == []


def test_a_failed_answer_is_named_with_its_status_and_latency():
    v = one(Window(**idle(), probe=(failed(10, latency=0.5, status=500),)))
    assert v.why.startswith("a one-token probe failed (HTTP 500) while /health answered 200 (1 time(s) meanwhile)")
    assert v.onset == T0 + 10                  # the answer at 10.5 less its 0.5 s latency
    assert v.details == {"failed_probes": 1, "last_outcome": "failed", "deadline_s": 3.0, "last_status": 500,
                         "last_error": "http_500", "running": 0.0, "waiting": 0.0}
    nostatus = ProbeSample(T0 + 10.5, FAILED, 0.5, 3.0, error="stream_cut")
    assert "a one-token probe failed (stream_cut) while" in one(Window(**idle(), probe=(nostatus,))).why


def _moving(until, span=20):
    """Scrapes whose counters move every second up to `until`, then stay flat."""
    return tuple(scrape(i, engine(steps=10 + min(i, until))) for i in range(span + 1))


def test_a_probe_asked_before_the_counters_last_moved_proves_nothing_at_after_and_just_over():
    # the counters last moved at the scrape of 8: a probe asked at 8 counts, one asked at 7.75 does not
    for asked, fires in ((8 - 0.25, False), (8.0, True), (8 + 0.25, True)):
        w = Window(health=tuple(health(i) for i in range(21)), metrics=_moving(8), probe=(missed(asked),))
        assert (N.detect(w, CONFIG) != []) is fires, asked


def test_only_the_probes_after_the_last_movement_make_the_run():
    config = replace(CONFIG, probe_fail_count=2)
    w = Window(health=tuple(health(i) for i in range(21)), metrics=_moving(8), probe=(missed(4), missed(9)))
    assert N.detect(w, config) == []              # the one asked at 4 is before the move at 8: a run of one
    w = Window(health=tuple(health(i) for i in range(21)), metrics=_moving(8), probe=(missed(8.5), missed(12)))
    assert one(w, config).details["failed_probes"] == 2


def test_a_probe_asked_before_a_process_was_last_seen_stopped_proves_nothing():
    for asked, fires in ((7 - 0.25, False), (7.0, True)):
        process = tuple(proc(t, status="stopped" if t == 7 else "sleeping") for t in range(21))
        w = Window(**idle(), process=process, probe=(missed(asked),))
        assert (N.detect(w, CONFIG) != []) is fires, asked
    # the newest stopped sample counts, not the first (stopped at 3 and at 7)
    process = tuple(proc(t, status="stopped" if t in (3, 7) else "sleeping") for t in range(21))
    assert N.detect(Window(**idle(), process=process, probe=(missed(5),)), CONFIG) == []
    assert N._last_stopped(Window(process=process)) == T0 + 7
    assert N._last_stopped(Window(process=tuple(proc(t, status="tracing-stop" if t == 4 else "running")
                                                for t in range(9)))) == T0 + 4
    assert N._last_stopped(Window(process=(proc(1),))) is None


def test_work_admitted_is_not_this_verdict():
    for running, waiting in ((1, 0), (0, 1), (0.5, 0)):
        w = Window(health=tuple(health(i) for i in range(21)),
                   metrics=tuple(scrape(i, engine(running=running, waiting=waiting)) for i in range(21)),
                   probe=(missed(10),))
        assert N.detect(w, CONFIG) == [], (running, waiting)


def test_the_newest_good_scrape_is_read_for_the_gauges():
    # running 2 at 19, then 0 at 20: the newest reads idle
    metrics = tuple(scrape(i, engine(running=2 if i == 19 else 0)) for i in range(21))
    v = one(Window(health=tuple(health(i) for i in range(21)), metrics=metrics, probe=(missed(10),)))
    assert v.evidence[-2:] == (Evidence("metrics", T0 + 20, "running", 0), Evidence("metrics", T0 + 20, "waiting", 0))
    # the other way round: work at the newest scrape
    metrics = tuple(scrape(i, engine(running=2 if i == 20 else 0)) for i in range(21))
    assert N.detect(Window(health=tuple(health(i) for i in range(21)), metrics=metrics, probe=(missed(10),)),
                    CONFIG) == []


def test_gauges_unknown_or_summed_over_engines():
    unknown = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "0"}, running=None, waiting=None,
                          counters=Counters(steps=10))
    metrics = tuple(scrape(i, unknown) for i in range(21))
    v = one(Window(health=tuple(health(i) for i in range(21)), metrics=metrics, probe=(missed(10),)))
    assert v.why.endswith("; no counter moved (running ?, waiting ?)")
    assert v.details["running"] is None and v.details["waiting"] is None
    # two engines, none aimed at: the gauges are summed (0 + 0, None + 0)
    half = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "1"}, running=0.0, waiting=None,
                       counters=Counters(steps=10))
    metrics = tuple(scrape(i, unknown, half) for i in range(21))
    v = one(Window(health=tuple(health(i) for i in range(21)), metrics=metrics, probe=(missed(10),)))
    assert v.why.endswith("; no counter moved (running 0, waiting ?)")
    # work on either engine holds it back (1 + None)
    busy = replace(half, running=1.0)
    metrics = tuple(scrape(i, unknown, busy) for i in range(21))
    assert N.detect(Window(health=tuple(health(i) for i in range(21)), metrics=metrics, probe=(missed(10),)),
                    CONFIG) == []


def test_add_and_count():
    assert N._add(None, None) is None
    assert N._add(None, 2.0) == 2.0
    assert N._add(3.0, None) == 3.0
    assert N._add(3.0, 2.5) == 5.5
    assert N._count(None) == "?"
    assert N._count(2.5) == "2.5"
    assert N._count(3.0) == "3"


def test_no_scrape_at_all_gives_no_gauge_clause():
    w = Window(health=tuple(health(i) for i in range(21)), metrics=(scrape(1, error="timeout"),), probe=(missed(10),))
    v = one(w)
    assert v.why == "a one-token probe got no token within 3 s while /health answered 200 (4 time(s) meanwhile)"
    assert "running" not in v.details and len(v.evidence) == 2
    assert N._newest_gauges(w) is None


def _dp(running1=0.0, moving0_until=20, moving1_until=0):
    return tuple(scrape(i, engine("0", steps=10 + min(i, moving0_until)),
                        engine("1", running=running1, steps=10 + min(i, moving1_until))) for i in range(21))


def test_each_dp_engine_answers_for_itself():
    # engine 0 keeps moving to the end; engine 1 is flat; the probe aimed at engine 1 missed
    w = Window(health=tuple(health(i) for i in range(21)), metrics=_dp(), probe=(missed(10, engine="1"),))
    v = one(w)
    assert v.why == ("a one-token probe sent to DP rank 1's engine got no token within 3 s while /health answered "
                     "200 (4 time(s) meanwhile); no counter moved on engine 1 (running 0, waiting 0)")
    assert v.details["engine"] == "engine=1"
    assert v.evidence[-2:] == (Evidence("metrics", T0 + 20, "running", 0.0), Evidence("metrics", T0 + 20, "waiting", 0.0))
    # engine 1's own gauges, not the sum: work on engine 0 only does not hold it back
    w = Window(health=tuple(health(i) for i in range(21)),
               metrics=tuple(scrape(i, engine("0", running=3, steps=10 + i), engine("1")) for i in range(21)),
               probe=(missed(10, engine="1"),))
    assert one(w).why.endswith("(running 0, waiting 0)")
    # work on engine 1 does
    w = Window(health=tuple(health(i) for i in range(21)), metrics=_dp(running1=1.0), probe=(missed(10, engine="1"),))
    assert N.detect(w, CONFIG) == []
    # engine 1's counters moved after the probe was asked: it proves nothing
    w = Window(health=tuple(health(i) for i in range(21)), metrics=_dp(moving1_until=12),
               probe=(missed(10, engine="1"),))
    assert N.detect(w, CONFIG) == []


def test_an_engine_no_scrape_names_is_said_by_its_rank():
    v = one(Window(**idle(), probe=(missed(10, engine="3"),)))
    assert v.details["engine"] == "dp_rank=3"
    assert "sent to DP rank 3's engine" in v.why and "no counter moved (running 0, waiting 0)" in v.why


def test_engines_are_judged_apart():
    w = Window(health=tuple(health(i) for i in range(21)), metrics=_dp(moving0_until=0),
               probe=(missed(4, engine="0"), missed(6, engine="1"), served(12, engine="0")))
    vs = N.detect(w, CONFIG)
    assert [v.details["engine"] for v in vs] == ["engine=1"]
    w = Window(health=tuple(health(i) for i in range(21)), metrics=_dp(moving0_until=0),
               probe=(missed(4, engine="0"), missed(6, engine="1")))
    assert [v.details["engine"] for v in N.detect(w, CONFIG)] == ["engine=0", "engine=1"]
    assert N._by_engine((missed(1, engine="0"), missed(2), missed(3, engine="0"))) == {
        "0": (missed(1, engine="0"), missed(3, engine="0")), None: (missed(2),)}


def test_failing_health_is_health_losss_where_health_is_not_a_generation():
    w = Window(health=tuple(health(i, 503 if i >= 11 else 200) for i in range(21)),
               metrics=tuple(scrape(i) for i in range(21)), probe=(missed(10),))
    assert N.detect(w, CONFIG) == []
    # /health fine meanwhile but failing at the end of the window: also not ours
    w = Window(health=tuple(health(i, 503 if i >= 18 else 200) for i in range(21)),
               metrics=tuple(scrape(i) for i in range(21)), probe=(missed(10),))
    assert N.detect(w, CONFIG) == []


def _sglang(health_status=503, *, metrics_until=20, last_metrics_error=False, logs=(), process=()):
    metrics = [scrape(i, dialect="sglang") for i in range(metrics_until + 1)]
    if last_metrics_error:
        metrics.append(scrape(metrics_until + 0.5, error="timeout"))
    return Window(health=tuple(health(i, health_status if i >= 11 else 200) for i in range(21)),
                  metrics=tuple(metrics), probe=(missed(10),), logs=tuple(logs), process=tuple(process))


def test_health_that_is_a_generation_failing_too_is_not_serving():
    v = one(_sglang())
    assert v.why == ("a one-token probe got no token within 3 s, and /health, which runs its own generation "
                     "through this engine, failed too (HTTP 503) while /metrics answered; no counter moved "
                     "(running 0, waiting 0)")
    assert v.t == T0 + 13 and v.evidence[1] == Evidence("health", T0 + 13, "status", 503)
    nostatus = Window(health=tuple(health(i, None if i >= 11 else 200, None if i < 11 else "timeout")
                                   for i in range(21)),
                      metrics=tuple(scrape(i, dialect="sglang") for i in range(21)), probe=(missed(10),))
    v = one(nostatus)
    assert "failed too (timeout) while /metrics answered" in v.why
    assert v.evidence[1] == Evidence("health", T0 + 13, "error", "timeout")


def test_health_as_a_probe_needs_metrics_since_the_probe_was_asked():
    # /metrics last answered at 9 (before the probe asked at 10): a frozen API server, health_loss's
    assert N.detect(_sglang(metrics_until=9), CONFIG) == []
    assert len(N.detect(_sglang(metrics_until=10), CONFIG)) == 1        # answered at 10.0, asked at 10.0: counts
    # the newest scrape failed: no
    assert N.detect(_sglang(last_metrics_error=True), CONFIG) == []


def test_health_as_a_probe_not_while_the_engine_computes_or_shuts_down():
    busy = [proc(t, cpu=CONFIG.stall_busy_cpu_percent, role="engine_core") for t in range(21)]
    assert N.detect(_sglang(process=busy), CONFIG) == []
    calm = [proc(t, cpu=CONFIG.stall_busy_cpu_percent / 2, role="engine_core") for t in range(21)]
    assert len(N.detect(_sglang(process=calm), CONFIG)) == 1
    shutdown = [LogEvent(T0 + 19, "shutdown", {})]
    assert N.detect(_sglang(logs=shutdown), CONFIG) == []


def test_health_as_a_probe_judged_by_the_window_s_dialect(monkeypatch):
    # the dialect's own "dead" status on /health is engine_dead's: a dialect with one
    from servewatch.detectors.evidence import engine_signs

    class Dead:
        health_runs_through_engine = True
        health_dead_status = 503

    monkeypatch.setattr(engine_signs, "dialect_hint", lambda window: Dead)
    assert N.detect(_sglang(503), CONFIG) == []
    assert len(N.detect(_sglang(500), CONFIG)) == 1
    monkeypatch.setattr(engine_signs, "dialect_hint", lambda window: None)
    assert N.detect(_sglang(500), CONFIG) == []


def test_last_counter_movement():
    w = Window(metrics=_moving(8))
    assert N._last_counter_movement(w) == T0 + 8
    assert N._last_counter_movement(Window(metrics=_moving(0))) is None
    dp = Window(metrics=_dp(moving0_until=6, moving1_until=9))
    assert N._last_counter_movement(dp) == T0 + 9
    assert N._last_counter_movement(dp, "engine=0") == T0 + 6
    assert N._last_counter_movement(dp, "engine=1") == T0 + 9
    # a counter that went back and forth: the newest change, not the first
    back = tuple(scrape(i, engine(steps=11 if i in (3, 4) else 10)) for i in range(10))
    assert N._last_counter_movement(Window(metrics=back)) == T0 + 5


def test_engine_key():
    w = Window(metrics=_dp())
    assert N._engine_key(w, None) is None
    assert N._engine_key(w, "1") == "engine=1"
    assert N._engine_key(w, "0") == "engine=0"
    assert N._engine_key(w, "7") is None


def test_nothing_failed_says_nothing():
    assert N.detect(Window(**idle(), probe=(served(4), served(8))), CONFIG) == []
    assert N.detect(Window(**idle()), CONFIG) == []
    # no /health at or before the last probe: nothing to compare with
    w = Window(health=(health(15),), metrics=(scrape(1),), probe=(missed(10),))
    assert N.detect(w, CONFIG) == []


def test_the_health_before_the_probe_is_the_last_one_only():
    # no /health in [10.5, 13.5]: the newest before it (10) is the one read, one of it, not those before it
    w = Window(health=(health(6), health(8), health(10)), metrics=(scrape(8),), probe=(missed(10.5),))
    v = one(w)
    assert "(1 time(s) meanwhile)" in v.why and v.evidence[1] == Evidence("health", T0 + 10, "status", 200)


def test_health_failing_only_at_the_end_of_the_window_is_not_ours():
    w = Window(health=tuple(health(i, 503 if i == 20 else 200) for i in range(21)),
               metrics=tuple(scrape(i) for i in range(21)), probe=(missed(10),))
    assert N.detect(w, CONFIG) == []


def test_a_streak_of_two_is_said():
    v = one(Window(**idle(), probe=(missed(2), missed(6))), replace(CONFIG, probe_fail_count=2))
    assert "got no token within 3 s (2 probes in a row over 7.0 s) while /health" in v.why


def test_health_that_is_a_generation_names_its_newest_failure():
    w = Window(health=tuple(health(i, 200 if i < 11 else (500 if i < 13 else 503)) for i in range(14)),
               metrics=tuple(scrape(i, dialect="sglang") for i in range(21)), probe=(missed(10),))
    assert "failed too (HTTP 503) while /metrics answered" in one(w).why


def test_health_as_a_probe_reads_the_newest_health_for_the_dead_status(monkeypatch):
    from servewatch.detectors.evidence import engine_signs

    class Dead:
        health_runs_through_engine = True
        health_dead_status = 503

    monkeypatch.setattr(engine_signs, "dialect_hint", lambda window: Dead)
    w = Window(health=tuple(health(i, 200 if i < 11 else (503 if i == 20 else 500)) for i in range(21)),
               metrics=tuple(scrape(i, dialect="sglang") for i in range(21)), probe=(missed(10),))
    assert N.detect(w, CONFIG) == []          # the newest /health is the dead status: engine_dead's


def test_health_as_a_probe_waits_out_a_start_by_the_config_s_startup_max_s():
    # never healthy, no log; the target process was created 100 s before the window's end: a start in progress
    # under the default startup_max_s (900 s), none under 50 s
    def w():
        created = T0 + 20 - 100
        return Window(health=tuple(health(i, 503) for i in range(21)),
                      metrics=tuple(scrape(i, engine(steps=0.0, dialect="sglang"), dialect="sglang")
                                    for i in range(21)),
                      process=tuple(ProcessSample(T0 + i, 1, created, True, proc(i).members) for i in range(21)),
                      probe=(missed(10),))
    assert N.detect(w(), CONFIG) == []
    assert len(N.detect(w(), replace(CONFIG, startup_max_s=50.0))) == 1


def test_last_counter_movement_at_the_ends_and_over_engines():
    assert N._last_counter_movement(Window(metrics=_moving(20))) == T0 + 20           # the newest pair
    first_only = tuple(scrape(i, engine(steps=10 if i == 0 else 11)) for i in range(6))
    assert N._last_counter_movement(Window(metrics=first_only)) == T0 + 1             # the oldest pair
    # engine 0 (read first) moved last: the newest of all engines, not the last engine read
    dp = Window(metrics=_dp(moving0_until=9, moving1_until=6))
    assert N._last_counter_movement(dp) == T0 + 9


def test_work_on_the_first_engine_read_holds_it_back():
    busy = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "0"}, running=1.0, waiting=2.0,
                       counters=Counters(steps=10))
    unknown = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "1"}, running=None, waiting=None,
                          counters=Counters(steps=10))
    metrics = tuple(scrape(i, busy, unknown) for i in range(21))
    assert N.detect(Window(health=tuple(health(i) for i in range(21)), metrics=metrics, probe=(missed(10),)),
                    CONFIG) == []
    sample, running, waiting = N._newest_gauges(Window(metrics=metrics))
    assert (running, waiting) == (1.0, 2.0)


# --- a /metrics that waits on the engine's loop (llama.cpp): silent since the probe was asked ---------------

def _llama(times, timeouts=()):
    """llama.cpp scrapes answered at `times` and timed out at `timeouts` (seconds after T0), in time order."""
    samples = [scrape(t, dialect="llamacpp") for t in times] + [scrape(t, error="timeout") for t in timeouts]
    return Window(metrics=tuple(sorted(samples, key=lambda m: m.t)))


def test_metrics_silent_since_the_probe_every_scrape_timed_out_both_ends_inclusive():
    silent = lambda w, asked, at: N._metrics_silent(w, T0 + asked, T0 + at)
    answered = range(10)
    assert silent(_llama(answered, timeouts=(10,)), 10, 10.5) is True      # a timeout at `asked` itself
    assert silent(_llama(answered, timeouts=(10.5,)), 9.5, 10.5) is True   # and at `at` itself
    assert silent(_llama(answered, timeouts=(10.2, 10.4)), 10, 10.5) is True
    assert silent(_llama([*answered, 10.2], timeouts=(10.4,)), 10, 10.5) is False   # one answered: not silent
    # the same timeouts from a /metrics that answers beside the loop (vLLM) say nothing
    vllm = Window(metrics=tuple(scrape(t) for t in answered) + (scrape(10, error="timeout"),))
    assert silent(vllm, 10, 10.5) is False
    # nor from an engine no scrape or process names (no dialect known)
    assert silent(Window(metrics=(scrape(10, error="timeout"),)), 10, 10.5) is False


def test_metrics_silent_with_no_scrape_since_after_three_times_the_median_cadence():
    silent = lambda w, asked, at: N._metrics_silent(w, T0 + asked, T0 + at)
    # answers at 0, 1, 2, 4, 10: gaps 1, 1, 2, 6, whose median (the upper one of the middle two) is 2 s; the last
    # answer is at 10, so the loop is silent from 10 + 3 x 2 = 16 on
    w = _llama((0, 1, 2, 4, 10))
    assert N.SILENT_CADENCES == 3.0
    assert [silent(w, 10.5, at) for at in (15.75, 16, 16.25)] == [False, True, True]
    # only answers before the probe was asked count: one answer alone has no cadence
    assert silent(_llama((10,)), 10.5, 100) is False
    # a vLLM /metrics answers beside the loop: no scrape for a minute is no silence of the loop
    assert silent(Window(metrics=tuple(scrape(t) for t in (0, 1, 2, 4, 10))), 10.5, 70) is False


def test_a_loop_hang_with_one_health_answer_meanwhile_counts_the_timeouts_at_both_ends():
    from servewatch.timeline.samples import SlotsSample
    # llama.cpp answered /metrics every second until 9; probes asked at 12 and 20.5 miss (at 15 and 23.5); scrapes
    # time out at 12 (the first probe's asking), 17 and 23.5 (the last probe's end); one /health answer (at 20)
    # meanwhile; the slot listing answers idle at 13 and 18 (no prompt moving)
    w = Window(health=tuple(health(t) for t in range(12)) + (health(20),),
               metrics=tuple(scrape(t, engine(dialect="llamacpp"), dialect="llamacpp") for t in (*range(10), 9.0001))
               + tuple(scrape(t, error="timeout") for t in (12, 17, 23.5)),
               probe=(missed(12), missed(20.5)), slots=(SlotsSample(T0 + 13), SlotsSample(T0 + 18)))
    v = one(w)
    assert (v.t, v.onset) == (T0 + 23.5, T0 + 12)
    assert v.details["metrics_timeouts"] == 3 and v.details["metrics_silent_s"] == 14.5     # 23.5 - 9.0001, to 3 places
    assert "/metrics has not answered for 14.5 s (3 scrape(s) timed out meanwhile" in v.why
    assert [e.t - T0 for e in v.evidence if e.field == "error"] == [12, 23.5]
    assert [e.source for e in v.evidence][:3] == ["probe", "probe", "health"]
    # the slot listing, which waits on the same loop, timed out at the asking, at 16 and at the end (a 503 at 20 is
    # no timeout): counted, its first and last as evidence
    slots = (SlotsSample(T0 + 11.5, error="timeout"), SlotsSample(T0 + 12, error="timeout"),
             SlotsSample(T0 + 16, error="timeout"), SlotsSample(T0 + 20, error="http_503"),
             SlotsSample(T0 + 23.5, error="timeout"))
    v = one(replace(w, slots=slots))
    assert v.why.endswith("; its slot listing timed out too (3 time(s))") and v.why.startswith("a one-token probe")
    assert v.details["slots_timeouts"] == 3
    assert [(e.source, e.t - T0, e.field, e.value) for e in v.evidence if e.source == "slots"] == [
        ("slots", 12, "error", "timeout"), ("slots", 23.5, "error", "timeout")]
    assert [e.source for e in v.evidence] == ["probe", "probe", "health", "metrics", "metrics", "slots", "slots"]
    v = one(replace(w, slots=slots[1:3]))                     # two timeouts: both
    assert [e.t - T0 for e in v.evidence if e.source == "slots"] == [12, 16]
    # no answer at all before the probe was asked: the silence counts from the asking
    w = replace(w, metrics=(MetricsSample(T0 + 12, "llamacpp", None, error="timeout"),
                            MetricsSample(T0 + 23.5, "llamacpp", None, error="timeout")))
    assert one(w).details["metrics_silent_s"] == 11.5


def test_a_loop_line_at_the_asking_or_a_prompt_line_at_the_judging_counts():
    prefill = dict(batch="prefill", tokens=1000, progress=0.5, tps=100.0)     # 10 s left at 100 tokens/s
    # a prompt line at `at` itself is read; a later line of another kind does not hide it
    assert N._prompt_still_due(Window(logs=(LogEvent(T0 + 20, "stats", prefill),)), T0 + 20) is True
    assert N._prompt_still_due(Window(logs=(LogEvent(T0 + 20, "stats", prefill), LogEvent(T0 + 21, "startup",
                                                                                          {"stage": "ready"}))),
                               T0 + 21) is True
    # the loop's own line at the first probe's asking (12) is progress since then: no hang
    assert N._loop_logged_progress(Window(logs=(LogEvent(T0 + 12, "stats", {}),)), T0 + 12) is True
    assert N._loop_logged_progress(Window(logs=(LogEvent(T0 + 11.75, "stats", {}),)), T0 + 12) is False


# --- the long-prompt exceptions at their edges (the full rerun of the shard after the llama.cpp loop-hang code) ---

def _slots(t, busy=True, processed=100, decoded=0, error=None):
    from servewatch.dialects.base import Slot
    from servewatch.timeline.samples import SlotsSample, SlotView
    if error is not None:
        return SlotsSample(T0 + t, error=error)
    return SlotsSample(T0 + t, (SlotView(Slot(0, busy, prompt_processed=processed, decoded=decoded), 1.0),
                                SlotView(Slot(1, False), None)))


def test_slots_show_a_prompt_moving_only_between_good_listings_up_to_the_judging_instant():
    moving = (_slots(10, processed=100), _slots(12, processed=200))
    assert N._slots_show_prompt(Window(slots=moving), T0 + 12, T0 + 12) is True       # the second at `asked` and `at`
    assert N._slots_show_prompt(Window(slots=moving), T0 + 12.5, T0 + 20) is False    # answered before it was asked
    assert N._slots_show_prompt(Window(slots=moving), T0 + 10, T0 + 11.9) is False    # the second after `at`
    same = (_slots(10, processed=100), _slots(12, processed=100))
    assert N._slots_show_prompt(Window(slots=same), T0 + 10, T0 + 20) is False         # nothing computed between
    idle = (_slots(10, processed=100), _slots(12, busy=False, processed=200))
    assert N._slots_show_prompt(Window(slots=idle), T0 + 10, T0 + 20) is False         # no slot busy at the second
    # a failed listing between two good ones is passed over: the two good ones are compared
    gap = (_slots(10, processed=100), _slots(11, error="timeout"), _slots(12, processed=200))
    assert N._slots_show_prompt(Window(slots=gap), T0 + 10, T0 + 20) is True
    failed = (_slots(10, error="timeout"), _slots(12, error="timeout"))
    assert N._slots_show_prompt(Window(slots=failed), T0 + 10, T0 + 20) is False
    # three listings: moving only between the second and the third
    three = (_slots(8, processed=100), _slots(10, processed=100), _slots(12, processed=150))
    assert N._slots_show_prompt(Window(slots=three), T0 + 11, T0 + 20) is True


def _prefill_line(t, tokens=1000, progress=0.5, tps=100.0):
    return LogEvent(T0 + t, "stats", {"batch": "prefill", "tokens": tokens, "progress": progress, "tps": tps})


def test_a_prompt_is_still_due_until_twice_what_is_left_at_its_rate():
    # 1,000 tokens done at half the prompt: 1,000 left at 100 tokens/s, 10 s; due until 2 x 10 = 20 s after the line
    w = Window(logs=(_prefill_line(10),))
    assert (N._prompt_still_due(w, T0 + 29.9), N._prompt_still_due(w, T0 + 30)) == (True, False)
    # a finished prompt (progress 1), a progress, a count or a rate of 0 say nothing
    for kw in ({"progress": 1.0}, {"progress": 0.0}, {"tokens": 0}, {"tps": 0.0}):
        assert N._prompt_still_due(Window(logs=(_prefill_line(10, **kw),)), T0 + 11) is False, kw
    assert N._prompt_still_due(Window(logs=(_prefill_line(10, progress=0.99),)), T0 + 10.1) is True
