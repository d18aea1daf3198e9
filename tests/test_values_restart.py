"""Value tests of detectors/restart.py and detectors/crash_loop.py (issue 40): target_restarted and crash_loop as
whole verdicts, and a boundary test (just under, at, just over) for each threshold, read from DetectorConfig:
  crash_loop_count     that many episodes fire (`>=`);
  crash_loop_window_s  an episode at exactly end - window counts (`e >= since`);
  crash_loop_burst_s   engine-death lines at most that far apart are one death (`> burst` starts another);
and _first_failure's line taken up to 1 s after the loop's first episode (`<= before + 1.0`)."""

from __future__ import annotations

from dataclasses import replace

from servewatch.detectors import crash_loop as CLV
from servewatch.detectors import restart as R
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.evidence import crash_loop as CL
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import HealthSample, LogEvent, MetricsSample, ProcessSample
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
STEP = 0.25
COUNT, SPAN, BURST = CONFIG.crash_loop_count, CONFIG.crash_loop_window_s, CONFIG.crash_loop_burst_s


def proc(t, pid=1, ct=1.0, alive=True, code=None):
    return ProcessSample(T0 + t, pid, ct if alive else None, alive, (), code)


def scrape(t, steps=10.0, gen=20.0, prompt=5.0, preempt=0.0, engine="0"):
    state = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": engine},
                        counters=Counters(prompt_tokens=prompt, generation_tokens=gen, preemptions=preempt,
                                          steps=steps))
    return MetricsSample(T0 + t, "vllm", "vllm-test", (state,))


def log(t, kind, **fields):
    return LogEvent(T0 + t, kind, fields)


def health(t):
    return HealthSample(T0 + t, 200, 0.001)


# --- target_restarted ---------------------------------------------------------------------------------------

def test_a_new_process_is_the_whole_verdict():
    w = Window(process=(proc(0), proc(1), proc(2, pid=7, ct=101.5), proc(3, pid=7, ct=101.5)))
    assert R.detect(w, CONFIG) == [Verdict(
        "target_restarted", T0 + 2, T0 + 2,
        "process identity changed: pid 1 started at 1.00 → pid 7 started at 101.50",
        (Evidence("process", T0 + 1, "root_create_time", 1.0), Evidence("process", T0 + 2, "root_create_time", 101.5)),
        {"by": "pid_identity", "old_pid": 1, "new_pid": 7, "restarts_seen": 1})]
    # the same pid, another create time: a reused pid is another process
    v, = R.detect(Window(process=(proc(0), proc(1, ct=2.25))), CONFIG)
    assert v.why == "process identity changed: pid 1 started at 1.00 → pid 1 started at 2.25"
    # a dead sample between is skipped; no change, no verdict
    assert R.detect(Window(process=(proc(0), proc(1, alive=False), proc(2))), CONFIG) == []


def test_a_counter_that_goes_down_is_the_whole_verdict():
    w = Window(metrics=(scrape(0, steps=10), scrape(1, steps=12), scrape(2, steps=3), scrape(3, steps=4)))
    assert R.detect(w, CONFIG) == [Verdict(
        "target_restarted", T0 + 2, T0 + 2, "counter steps went down 12 → 3 on engine 0: the exporter restarted",
        (Evidence("metrics", T0 + 1, "counters.steps", 12.0), Evidence("metrics", T0 + 2, "counters.steps", 3.0)),
        {"by": "counter_reset", "counter": "steps", "restarts_seen": 1})]
    for name, kw in (("generation_tokens", dict(gen=1.5)), ("prompt_tokens", dict(prompt=1.0)),
                     ("preemptions", dict(preempt=-1.0))):
        v, = R.detect(Window(metrics=(scrape(0), scrape(1, **kw))), CONFIG)
        assert v.details["counter"] == name and v.why.startswith(f"counter {name} went down "), name
    assert R.detect(Window(metrics=(scrape(0), scrape(1, gen=20.0))), CONFIG) == []


def test_signs_at_the_same_time_are_one_line_and_the_newest_time_speaks():
    w = Window(process=(proc(0), proc(2, pid=7, ct=50.0)),
               metrics=(scrape(0, steps=10), scrape(2, steps=3)))
    v, = R.detect(w, CONFIG)
    # the scrape is at T0 + 2, the process sample too: both are said, identity first (found first)
    assert v.why == ("process identity changed: pid 1 started at 1.00 → pid 7 started at 50.00; counter steps went "
                     "down 10 → 3 on engine 0: the exporter restarted")
    # the details are the last found of that time (the counter's), with every sign counted
    assert len(v.evidence) == 4 and v.details == {"by": "counter_reset", "counter": "steps", "restarts_seen": 2}
    w = Window(process=(proc(0), proc(1, pid=7, ct=50.0)), metrics=(scrape(0, steps=10), scrape(3, steps=3)))
    v, = R.detect(w, CONFIG)
    assert (v.t, v.details["by"], v.details["restarts_seen"]) == (T0 + 3, "counter_reset", 2)
    assert "engine" not in v.details


# --- crash_loop --------------------------------------------------------------------------------------------

def restarts(n, every=10.0, start=0.0, end=None):
    """n restarts (a new pid each) `every` s apart from `start`, and a last sample at `end`."""
    samples = [proc(start + i * every, pid=10 + i, ct=100.0 + i) for i in range(n + 1)]
    if end is not None:
        samples.append(proc(end, pid=10 + n, ct=100.0 + n))
    return tuple(samples)


def test_crash_loop_count_under_at_and_over():
    for n, fires in ((COUNT - 1, False), (COUNT, True), (COUNT + 1, True)):
        w = Window(process=restarts(n))
        assert (CLV.detect_crash_loop(w, CONFIG) != []) is fires, n
        assert CL.in_crash_loop(w, CONFIG) is fires
        assert (R.detect(w, CONFIG) == []) is fires            # a crash loop is not also a restart


def test_crash_loop_is_the_whole_verdict():
    w = Window(process=restarts(3, every=10.0))
    assert CLV.detect_crash_loop(w, CONFIG) == [Verdict(
        "crash_loop", T0 + 30, T0 + 10,
        f"3 restarts (new process) in 20 s (≥ {COUNT:g} within {SPAN:g} s): a crash loop",
        (Evidence("process", T0 + 10, "root_create_time", 101.0), Evidence("process", T0 + 20, "root_create_time", 102.0),
         Evidence("process", T0 + 30, "root_create_time", 103.0)),
        {"episodes": 3, "by": "restarts", "span_s": 20.0})]


def test_crash_loop_window_under_at_and_over():
    # restarts at 10, 20, 30; the window ends at `end`: the first one counts while 10 >= end - SPAN
    for end, fires in ((10 + SPAN - STEP, True), (10 + SPAN, True), (10 + SPAN + STEP, False)):
        w = Window(process=restarts(3, end=end))
        assert (CLV.detect_crash_loop(w, CONFIG) != []) is fires, end


def test_engine_death_lines_within_a_burst_are_one_death_under_at_and_over():
    for gap, deaths in ((BURST - STEP, 1), (BURST, 1), (BURST + STEP, 2)):
        episodes = CL._engine_deaths(Window(logs=(log(0, "engine_dead"), log(gap, "engine_dead"))), CONFIG)
        assert len(episodes) == deaths, gap
    # a burst is measured from its first line: 0, 6, 12 with a 10 s burst are 0 (with 6) and 12
    episodes = CL._engine_deaths(Window(logs=(log(0, "engine_dead"), log(6, "engine_dead"), log(12, "engine_dead"),
                                             log(13, "shutdown"))), replace(CONFIG, crash_loop_burst_s=10.0))
    assert episodes == [(T0, Evidence("log", T0, "kind", "engine_dead")),
                        (T0 + 12, Evidence("log", T0 + 12, "kind", "engine_dead"))]


def test_the_signal_with_the_most_episodes_speaks():
    # 3 new processes, and 4 deaths: deaths speak
    logs = tuple(log(5 + i * 20, "engine_dead", reason="EngineDeadError") for i in range(4))
    what, episodes = CL.crash_loop_episodes(Window(process=restarts(3), logs=logs), CONFIG)
    assert (what, len(episodes)) == ("engine deaths", 4)
    # a tie: the first signal listed keeps it (new process before deaths)
    logs = tuple(log(5 + i * 20, "engine_dead") for i in range(3))
    what, _ = CL.crash_loop_episodes(Window(process=restarts(3), logs=logs), CONFIG)
    assert what == "restarts (new process)"


def test_each_signal_of_a_restart():
    ups = tuple(log(i * 10, "startup", stage="process_up") for i in range(4)) + (log(45, "startup", stage="ready"),)
    assert CL._later_starts(Window(logs=ups)) == [(T0 + t, Evidence("log", T0 + t, "stage", "process_up"))
                                                 for t in (10, 20, 30)]
    process = (proc(0), proc(1, alive=False, code=1), proc(2, alive=False), proc(3), proc(4, alive=False))
    assert CL._exits(Window(process=process)) == [(T0 + 1, Evidence("process", T0 + 1, "alive", False)),
                                                 (T0 + 4, Evidence("process", T0 + 4, "alive", False))]
    metrics = (scrape(0, steps=5), scrape(1, steps=1), scrape(2, steps=2), scrape(3, steps=1),
               scrape(0.5, steps=9, engine="1"), scrape(1.5, steps=1, engine="1"))
    resets = CL._counter_resets(Window(metrics=tuple(sorted(metrics, key=lambda m: m.t))))
    assert resets == [(T0 + 1, Evidence("metrics", T0 + 1, "counters.steps", 1.0)),
                      (T0 + 3, Evidence("metrics", T0 + 3, "counters.steps", 1.0))]    # engine 0's only
    assert CL._identity_changes(Window(process=restarts(2))) == [
        (T0 + 10, Evidence("process", T0 + 10, "root_create_time", 101.0)),
        (T0 + 20, Evidence("process", T0 + 20, "root_create_time", 102.0))]


def test_the_first_failure_is_said():
    logs = (log(2, "engine_dead", reason="EngineDeadError"), log(25, "startup_failure", reason="oom"))
    v, = CLV.detect_crash_loop(Window(process=restarts(3), logs=logs), CONFIG)
    assert v.why.endswith("a crash loop; the first: engine dead (EngineDeadError)")
    assert v.evidence[-1] == Evidence("log", T0 + 2, "reason", "EngineDeadError")
    v, = CLV.detect_crash_loop(Window(process=restarts(3), logs=(log(3, "startup_failure"),)), CONFIG)
    assert v.why.endswith("; the first: startup failure (unknown)")
    assert v.evidence[-1] == Evidence("log", T0 + 3, "reason", None)
    process = restarts(3)[:1] + (proc(5, alive=False, code=137),) + restarts(3)[1:]
    v, = CLV.detect_crash_loop(Window(process=process), CONFIG)
    assert v.why.endswith("; the first: exit code 137")
    assert v.evidence[-1] == Evidence("process", T0 + 5, "exit_code", 137)


def test_the_first_failure_line_up_to_one_second_after_the_first_episode():
    for after, said in ((1.0 - STEP, True), (1.0, True), (1.0 + STEP, False)):
        found = CLV._first_failure(Window(logs=(log(10 + after, "engine_dead", reason="R"),)), T0 + 10)
        assert (found is not None) is said, after
    assert CLV._first_failure(Window(logs=(log(1, "shutdown"),), process=(proc(0),)), T0 + 10) is None
    assert CLV._first_failure(Window(process=(proc(0, alive=False),)), T0 + 10) is None


def test_a_live_sample_without_a_create_time_is_no_new_process():
    unknown = ProcessSample(T0 + 1, 1, None, True, ())
    w = Window(process=(proc(0), unknown, proc(2)))
    assert R.detect(w, CONFIG) == []
    assert CL._identity_changes(w) == []


def test_a_log_line_between_deaths_does_not_end_the_reading():
    logs = (log(0, "engine_dead"), log(1, "startup", stage="ready"), log(BURST + 5, "engine_dead"))
    assert [t for t, _ in CL._engine_deaths(Window(logs=logs), CONFIG)] == [T0, T0 + BURST + 5]


def test_crash_loop_evidence_is_the_first_three_episodes_and_its_span_to_a_tenth():
    # restarts every 10.125 s: at 10.125, 20.25, 30.375, 40.5; span 40.5 - 10.125 = 30.375, said 30.4
    w = Window(process=restarts(4, every=10.125))
    v, = CLV.detect_crash_loop(w, CONFIG)
    assert v.evidence == tuple(Evidence("process", T0 + 10.125 * i, "root_create_time", 100.0 + i) for i in (1, 2, 3))
    assert v.details == {"episodes": 4, "by": "restarts", "span_s": round(30.375, 1)}
    assert round(30.375, 1) != round(30.375, 2) and round(30.375, 1) != round(30.375)
    assert v.why.startswith(f"4 restarts (new process) in 30 s (≥ {COUNT:g} within {SPAN:g} s)")


def test_each_signal_alone_names_what_repeats():
    # three resets of engine 0's counters (5 then 1, three times), and nothing else
    metrics = tuple(scrape(i, steps=5.0 if i % 2 == 0 else 1.0) for i in range(6))
    assert CL.crash_loop_episodes(Window(metrics=metrics), CONFIG)[0] == "restarts (counters reset)"
    # four process_up lines: three later starts
    ups = tuple(log(i * 10, "startup", stage="process_up") for i in range(4))
    assert CL.crash_loop_episodes(Window(logs=ups), CONFIG)[0] == "restarts (startup lines)"
    # alive, dead, three times (the same process each time: no new identity)
    process = tuple(proc(i, alive=i % 2 == 0) for i in range(6))
    what, episodes = CL.crash_loop_episodes(Window(process=process), CONFIG)
    assert (what, [t for t, _ in episodes]) == ("exits", [T0 + 1, T0 + 3, T0 + 5])
