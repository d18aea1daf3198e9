"""Value tests of detectors/startup.py (issue 40): startup_stalled's bound by hand,

    bound = max(startup_stall_floor_s, startup_stall_k x the longest gap between the stages so far)

and its boundaries: a wait of exactly the bound fires (`waited < bound` says nothing); a process created at most
startup_max_s before the window's end counts as a start in progress (`end - created <= startup_max_s`)."""

from __future__ import annotations

from dataclasses import replace

from servewatch.detectors import startup as S
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.evidence import stages as ST
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import HealthSample, LogEvent, MetricsSample, ProcessMember, ProcessSample
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
K, FLOOR, MAX = CONFIG.startup_stall_k, CONFIG.startup_stall_floor_s, CONFIG.startup_max_s
STEP = 0.25


def stage(t, name, **fields):
    return LogEvent(T0 + t, "startup", {"stage": name, **fields})


def failing(t):
    return HealthSample(T0 + t, None, None, "connect")


def test_the_floor_under_at_and_over():
    # process_up at 0, weights_loading at 10 (the longest gap 10: 4 x 10 = 40 < the floor)
    for waited, fires in ((FLOOR - STEP, False), (FLOOR, True), (FLOOR + STEP, True)):
        w = Window(logs=(stage(0, "process_up"), stage(10, "weights_loading")), health=(failing(10 + waited),))
        assert (S.detect_startup_stalled(w, CONFIG) != []) is fires, waited


def test_k_times_the_longest_stage_under_at_and_over():
    longest = 50.0                               # 4 x 50 = 200 > the floor
    bound = max(FLOOR, K * longest)
    assert bound == K * longest
    for waited, fires in ((bound - STEP, False), (bound, True), (bound + STEP, True)):
        w = Window(logs=(stage(0, "process_up"), stage(longest, "weights_loading"),
                         stage(longest + 20, "weights_loaded", seconds=20.0)),
                   health=(failing(longest + 20 + waited),))
        assert (S.detect_startup_stalled(w, CONFIG) != []) is fires, waited


def test_the_whole_verdict():
    w = Window(logs=(stage(0, "process_up"), stage(50, "weights_loading"), stage(70, "weights_loaded", seconds=20.0)),
               health=(failing(100), failing(270)))
    assert S.detect_startup_stalled(w, CONFIG) == [Verdict(
        "startup_stalled", T0 + 270, T0 + 70,
        f"startup stuck after weights_loaded (took 20 s) for 200 s, compiling, profiling memory and sizing the KV cache "
        f"(bound 200 s: {K:g} × the longest earlier stage, 50 s, at least {FLOOR:g} s); 3 stage(s) in 270 s since the "
        f"start",
        (Evidence("log", T0 + 70, "stage", "weights_loaded"), Evidence("health", T0 + 270, "error", "connect")),
        {"stage": "weights_loaded", "waited_s": 200.0, "bound_s": 200.0, "longest_gap_s": 50.0, "stages": 3})]


def test_stall_bound():
    stages = [ST.Stage("process_up", T0), ST.Stage("engine_start", T0 + 5), ST.Stage("weights_loading", T0 + 45),
              ST.Stage("weights_loaded", T0 + 50)]
    assert S.stall_bound(stages, CONFIG) == (max(FLOOR, K * 40.0), 40.0)
    assert S.stall_bound(stages[:1], CONFIG) == (FLOOR, 0.0)
    assert S.stall_bound(stages, replace(CONFIG, startup_stall_k=2.0, startup_stall_floor_s=10.0)) == (80.0, 40.0)


def proc(t, created, status="running", alive=True):
    members = (ProcessMember(1, created, "api", "python3", "sleeping"),
               ProcessMember(2, created + 1, "engine_core", "VLLM::EngineCore", status, ppid=1))
    return ProcessSample(T0 + t, 1, T0 + created if alive else None, alive, members if alive else ())


def test_startup_max_s_under_at_and_over():
    # no log: a process created `age` s before the window's end is a start while age <= startup_max_s
    for age, starting in ((MAX - STEP, True), (MAX, True), (MAX + STEP, False)):
        end = 1000.0
        w = Window(process=(proc(end, end - age),), health=(failing(end),))
        assert ST.in_startup(w, CONFIG) is starting, age
        start = ST.latest_start(w, CONFIG)
        assert (start == ST.Stage("process_up", T0 + end - age, {}, "process")) is starting


def test_a_start_seen_only_by_its_process_counts_from_the_first_look():
    # created at 0, watched from 100: it waited since 100
    process = tuple(proc(100 + i * 10, 0.0) for i in range(int(FLOOR / 10) + 1))
    w = Window(process=process, health=(failing(100 + FLOOR),))
    v, = S.detect_startup_stalled(w, CONFIG)
    assert v.why == (f"startup stuck after the process start (no startup line in the log) for {FLOOR:.0f} s of "
                     f"watching (the process started {100 + FLOOR:.0f} s ago), starting the engine (imports, engine "
                     f"process start) (bound {FLOOR:.0f} s: {K:g} × the longest earlier stage, 0 s, at least "
                     f"{FLOOR:g} s); 1 stage(s) in {100 + FLOOR:.0f} s since the start")
    assert v.evidence == (Evidence("process", T0 + 100 + FLOOR, "root_create_time", T0),
                          Evidence("health", T0 + 100 + FLOOR, "error", "connect"))
    assert v.onset == T0 and v.details["waited_s"] == FLOOR
    # one STEP less watched: nothing
    process = tuple(proc(100 + i * 10, 0.0) for i in range(int(FLOOR / 10))) + (proc(100 + FLOOR - STEP, 0.0),)
    assert S.detect_startup_stalled(Window(process=process, health=(failing(100 + FLOOR - STEP),)), CONFIG) == []


def test_stopped_processes_are_named():
    w = Window(logs=(stage(0, "process_up"),), process=(proc(FLOOR, -1.0, status="stopped"),),
               health=(HealthSample(T0 + FLOOR, 503, 0.01, "http_503"),))
    v, = S.detect_startup_stalled(w, CONFIG)
    assert "; process(es) stopped: " in v.why
    assert v.evidence == (Evidence("log", T0, "stage", "process_up"),
                          Evidence("process", T0 + FLOOR, "members[2].status", "stopped"),
                          Evidence("health", T0 + FLOOR, "status", 503))


def test_in_startup_ends():
    logs = (stage(0, "process_up"),)
    assert ST.in_startup(Window(logs=logs, health=(failing(5),)), CONFIG) is True
    assert ST.in_startup(Window(logs=logs, health=(failing(5), HealthSample(T0 + 6, 200, 0.01))), CONFIG) is False
    # healthy before the start does not count
    assert ST.in_startup(Window(logs=logs + (stage(10, "process_up"),),
                               health=(HealthSample(T0 + 6, 200, 0.01), failing(12))), CONFIG) is True
    assert ST.in_startup(Window(logs=logs + (LogEvent(T0 + 3, "startup_failure", {"reason": "oom"}),),
                               health=(failing(5),)), CONFIG) is False
    # a failure line before the start is an earlier start's
    assert ST.in_startup(Window(logs=(LogEvent(T0 - 3, "startup_failure", {}),) + logs, health=(failing(5),)),
                        CONFIG) is True
    tokens = lambda t, gen: MetricsSample(T0 + t, "vllm", "vllm-test", (EngineState(
        "vllm", "vllm-test", {"engine": "0"}, counters=Counters(generation_tokens=gen)),))
    assert ST.in_startup(Window(logs=logs, metrics=(tokens(2, 5.0),), health=(failing(5),)), CONFIG) is False
    assert ST.in_startup(Window(logs=logs, metrics=(tokens(2, 0.0),), health=(failing(5),)), CONFIG) is True
    assert ST.in_startup(Window(logs=logs, metrics=(tokens(-2, 5.0),), health=(failing(5),)), CONFIG) is True
    assert ST.in_startup(Window(logs=logs, process=(proc(5, -1.0, alive=False),), health=(failing(5),)), CONFIG) is False
    # a log-only watch that read "ready": started
    assert ST.in_startup(Window(logs=logs + (stage(4, "ready"),)), CONFIG) is False
    assert ST.in_startup(Window(logs=logs + (stage(4, "ready"),), health=(failing(5),)), CONFIG) is True
    assert ST.in_startup(Window(), CONFIG) is False


def test_stages_merge_the_numbers_of_later_lines():
    logs = (stage(0, "process_up"), stage(5, "kv_cache_size", tokens=100), stage(6, "kv_cache_size", concurrency=2.5),
            stage(7, "kv_cache_size", tokens=999))
    found = ST.stages(Window(logs=logs))
    assert found[-1] == ST.Stage("kv_cache_size", T0 + 5, {"tokens": 100, "concurrency": 2.5}, "log")
    # the newest process_up starts the stages; lines before it are an earlier start's
    found = ST.stages(Window(logs=(stage(0, "process_up"), stage(1, "weights_loading"), stage(2, "process_up"))))
    assert [s.name for s in found] == ["process_up"] and found[0].t == T0 + 2
    # a log without process_up: its first stage line is the start
    found = ST.stages(Window(logs=(stage(3, "weights_loading"), stage(4, "weights_loaded"))))
    assert [(s.name, s.t) for s in found] == [("process_up", T0 + 3), ("weights_loading", T0 + 3),
                                              ("weights_loaded", T0 + 4)]


def test_describe():
    assert S._describe(ST.Stage("weights_loaded", T0, {"seconds": 2.5})) == "weights_loaded (took 2.5 s)"
    assert S._describe(ST.Stage("compiled", T0)) == "compiled"
    assert S._describe(ST.Stage("process_up", T0, {}, "process")) == "the process start (no startup line in the log)"


def test_only_startup_lines_are_stages():
    logs = (stage(0, "process_up"), LogEvent(T0 + 2, "engine_dead", {"stage": "weights_loading"}),
            LogEvent(T0 + 3, "startup", {"stage": 5}))
    assert [s.name for s in ST.stages(Window(logs=logs))] == ["process_up"]
    assert ST.stages(Window(logs=(stage(3, "weights_loading"),)))[0] == ST.Stage("process_up", T0 + 3, {}, "log")
    assert ST.latest_start(Window(logs=(stage(3, "weights_loading"), stage(4, "process_up"))), CONFIG) == \
        ST.Stage("process_up", T0 + 4, {}, "log")


def test_the_config_s_startup_max_s_decides_the_start():
    # no log; the process was created 1000 s before the end: a start under startup_max_s 2000 s, none under 900 s
    # (watched from 850: it waited 150 s, over the floor)
    w = Window(process=(proc(850, 0.0), proc(1000, 0.0)), health=(failing(1000),))
    long = replace(CONFIG, startup_max_s=2000.0)
    assert ST.in_startup(w, CONFIG) is False and ST.in_startup(w, long) is True
    assert S.detect_startup_stalled(w, CONFIG) == []
    v, = S.detect_startup_stalled(w, long)
    assert (v.onset, v.details["stage"], v.details["waited_s"]) == (T0, "process_up", 150.0)
    w = Window(process=(proc(100, 0.0),), health=(failing(100),))
    assert ST.in_startup(w, replace(CONFIG, startup_max_s=50.0)) is False and ST.in_startup(w, CONFIG) is True


def test_a_failure_or_tokens_at_the_start_itself_end_it():
    logs = (stage(10, "process_up"),)
    assert ST.in_startup(Window(logs=logs + (LogEvent(T0 + 10, "startup_failure", {}),), health=(failing(12),)),
                        CONFIG) is False
    tokens = lambda t, gen: MetricsSample(T0 + t, "vllm", "vllm-test", (EngineState(
        "vllm", "vllm-test", {"engine": "0"}, counters=Counters(generation_tokens=gen)),))
    assert ST.in_startup(Window(logs=logs, metrics=(tokens(10, 5.0),), health=(failing(12),)), CONFIG) is False
    assert ST.in_startup(Window(logs=logs, metrics=(tokens(11, 1.0),), health=(failing(12),)), CONFIG) is False


def test_a_stage_the_table_does_not_know_waits_for_the_next_stage():
    w = Window(logs=(stage(0, "process_up"), stage(10, "custom_stage")), health=(failing(10 + FLOOR),))
    v, = S.detect_startup_stalled(w, CONFIG)
    assert v.why.startswith(f"startup stuck after custom_stage for {FLOOR:.0f} s, the next stage (bound ")


def test_the_stopped_processes_by_rank():
    from servewatch.detectors.rank_words import named_processes
    w = Window(logs=(stage(0, "process_up"),), process=(proc(FLOOR, -1.0, status="stopped"),),
               health=(failing(FLOOR),))
    v, = S.detect_startup_stalled(w, CONFIG)
    named = named_processes(w.process[-1], [(2, "VLLM::EngineCore")])
    assert v.why.endswith(f"; process(es) stopped: {named}")


def test_failing_health_from_the_start_on_is_the_evidence():
    logs = (stage(10, "process_up"),)
    w = Window(logs=logs, health=(failing(5),), process=(proc(10 + FLOOR, -1.0),))
    v, = S.detect_startup_stalled(w, CONFIG)
    assert [e.source for e in v.evidence] == ["log"]                  # the failure at 5 is an earlier start's
    w = Window(logs=logs, health=(failing(10),), process=(proc(10 + FLOOR, -1.0),))
    v, = S.detect_startup_stalled(w, CONFIG)
    assert v.evidence[-1] == Evidence("health", T0 + 10, "error", "connect")   # at the start itself: counted


def test_the_details_are_rounded_to_a_tenth():
    # the longest stage 50.0625 s: bound 4 x 50.0625 = 200.25 s, waited 200.375 s
    w = Window(logs=(stage(0, "process_up"), stage(50.0625, "weights_loading"),
                     stage(70.0625, "weights_loaded")), health=(failing(70.0625 + 200.375),))
    v, = S.detect_startup_stalled(w, CONFIG)
    assert (v.details["waited_s"], v.details["bound_s"], v.details["longest_gap_s"]) == \
        (round(200.375, 1), round(200.25, 1), round(50.0625, 1)) == (200.4, 200.2, 50.1)


def test_latest_start_from_the_process_reads_live_readable_samples_and_takes_the_newest_candidate():
    dead = ProcessSample(T0 + 20, 1, None, False, ())
    assert ST.latest_start(Window(process=(proc(10, 0.0), dead)), CONFIG) == ST.Stage("process_up", T0, {}, "process")
    unreadable = ProcessSample(T0 + 20, 1, T0 + 15, True, (), error="access_denied")
    assert ST.latest_start(Window(process=(proc(10, 0.0), unreadable)), CONFIG) == \
        ST.Stage("process_up", T0, {}, "process")
    # a first stage line at 50 and a process created at 40: the line; created at 60: the process
    line = (stage(50, "weights_loading"),)
    assert ST.latest_start(Window(logs=line, process=(proc(70, 40.0),)), CONFIG) == ST.Stage("process_up", T0 + 50, {}, "log")
    assert ST.latest_start(Window(logs=line, process=(proc(70, 60.0),)), CONFIG) == \
        ST.Stage("process_up", T0 + 60, {}, "process")


def test_stages_after_the_newest_start_whatever_came_before():
    logs = (stage(0, "process_up"), stage(1, "weights_loading"), stage(2, "process_up"), stage(3, "weights_loaded"))
    assert [(s.name, s.t) for s in ST.stages(Window(logs=logs))] == [("process_up", T0 + 2), ("weights_loaded", T0 + 3)]


def test_health_ok_is_a_stage_of_its_own_from_the_start_instant():
    logs = (stage(5, "process_up"),)
    found = ST.stages(Window(logs=logs, health=(HealthSample(T0 + 5, 200, 0.01),)))
    assert found[-1] == ST.Stage("health_ok", T0 + 5, {}, "health")
    # a log line named health_ok is replaced by /health's own
    found = ST.stages(Window(logs=logs + (stage(6, "health_ok"),), health=(HealthSample(T0 + 7, 200, 0.01),)))
    assert [(s.name, s.t, s.source) for s in found] == [("process_up", T0 + 5, "log"), ("health_ok", T0 + 7, "health")]


def test_stages_at_one_instant_are_in_the_table_s_order_unknown_last():
    logs = (stage(0, "process_up"), stage(5, "custom"), stage(5, "weights_loaded"), stage(5, "weights_loading"))
    assert [s.name for s in ST.stages(Window(logs=logs))] == ["process_up", "weights_loading", "weights_loaded", "custom"]
