"""Value tests of detectors/progress.py (issue 40): alive_health_ok_no_progress's threshold, computed here by hand
from the config the detector reads,

    threshold = min(stall_ceiling_s, max(stall_floor_s, stall_k x max(typical longest gap, scrape cadence)))

and the boundary it documents: a quiet of the threshold fires, and so does one short of it by at most
JITTER_SHARE (5 %) of one scrape cadence (the quiet is that many scrape-to-scrape gaps, which jitter), tested just
under, at and just over; `engine_busy`'s CPU share is `>=` stall_busy_cpu_percent over the last stall_floor_s
(both inclusive)."""

from __future__ import annotations

from dataclasses import replace

from servewatch.detectors import progress as P
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.evidence.engine_signs import engine_busy
from servewatch.detectors.verdict import Evidence
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import HealthSample, LogEvent, MetricsSample, ProcessMember, ProcessSample
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
STEP = 0.25
API = ProcessMember(1, 1.0, "api", "python3", "sleeping", cpu_percent=1.0)


def state(steps, running=2.0, waiting=0.0, dialect="vllm", gen=None, prompt=0.0):
    return EngineState(dialect, f"{dialect}-test", {"model_name": "m", "engine": "0"}, running=running,
                       waiting=waiting, counters=Counters(prompt_tokens=prompt,
                                                          generation_tokens=2 * steps if gen is None else gen,
                                                          steps=steps))


def scrape(t, st, dialect="vllm"):
    return MetricsSample(T0 + t, dialect, f"{dialect}-test", (st,))


def health(t, status=200, error=None):
    return HealthSample(T0 + t, status, 0.001 if status else None, error)


def proc(t, status="running", cpu=1.0, alive=True):
    core = ProcessMember(2, 2.0, "engine_core", "VLLM::EngineCore", status, cpu_percent=cpu, ppid=1)
    return ProcessSample(T0 + t, 1, 1.0 if alive else None, alive, (API, core) if alive else ())


def stalled(quiet, *, every=1, moves=10, dialect="vllm", health_=None, process=None, running=2.0):
    """Scrapes every second while the counters move every `every` s, `moves` times (the last at moves x every),
    then flat until a last scrape `quiet` s after that last move."""
    last_move = moves * every
    times = [float(i) for i in range(int(last_move + quiet) + 1) if i < last_move + quiet] + [last_move + quiet]
    metrics = tuple(scrape(t, state(min(int(t // every), moves), running=running, dialect=dialect), dialect)
                    for t in times)
    end = times[-1]
    return Window(health=health_ or (health(end),), metrics=metrics, process=process or ())


def threshold(basis, config=CONFIG):
    return min(config.stall_ceiling_s, max(config.stall_floor_s, config.stall_k * basis))


def test_the_threshold_from_the_scrape_cadence_under_at_and_over():
    # moving at every scrape (gaps of 0: faster than we look), scrapes a second apart: the basis is the cadence
    limit = threshold(1.0)
    assert limit == 4.0
    for quiet, fires in ((limit - STEP, False), (limit, True), (limit + STEP, True)):
        assert (P.detect(stalled(quiet), CONFIG) != []) is fires, quiet


def test_a_quiet_a_jitter_short_of_the_threshold_reaches_it():
    """The fourth quiet scrape of a 2 s cadence read 7.998 s about half the time and the verdict waited a whole
    cadence for the fifth (a frozen target's livez 10.5 s after the freeze, fleet.py, 2026-12-07): a quiet short by
    at most 5 % of one cadence (here 1 s: 0.05 s) reaches the threshold; one short by more does not."""
    limit = threshold(1.0)
    assert P.JITTER_SHARE == 0.05
    for quiet, fires in ((limit - 0.049, True), (limit - 0.051, False), (limit - 0.2, False)):
        assert (P.detect(stalled(quiet), CONFIG) != []) is fires, quiet


def test_the_whole_verdict():
    v, = P.detect(stalled(5.0), CONFIG)
    assert v.name == "alive_health_ok_no_progress"
    assert (v.t, v.onset) == (T0 + 15, T0 + 10)
    assert v.why == ("no progress for 5.0 s on engine 0 (threshold 4.0 s = max(2 s, 4 x 1.00 s recent cadence)) "
                     "since last counter movement, with 2 running and 0 waiting; steps 10, generation tokens 20, "
                     "prompt tokens 0 unchanged; /health 200")
    assert v.evidence == (
        Evidence("metrics", T0 + 10, "counters.steps", 10), Evidence("metrics", T0 + 10, "counters.generation_tokens", 20),
        Evidence("metrics", T0 + 10, "counters.prompt_tokens", 0.0),
        Evidence("metrics", T0 + 15, "counters.steps", 10), Evidence("metrics", T0 + 15, "counters.generation_tokens", 20),
        Evidence("metrics", T0 + 15, "counters.prompt_tokens", 0.0),
        Evidence("metrics", T0 + 15, "running", 2.0), Evidence("metrics", T0 + 15, "waiting", 0.0),
        Evidence("health", T0 + 15, "status", 200))
    assert v.details == {"engine": "engine=0", "quiet_s": 5.0, "threshold_s": 4.0, "longest_gap_s": 0.0,
                         "scrape_gap_s": 1.0, "running": 2.0, "waiting": 0.0, "stopped_processes": 0,
                         "process_known": False, "engine_busy": False}


def test_the_threshold_from_the_gaps_between_movements_under_at_and_over():
    # moving every 3 s, scraped every second: gaps of 3 s, basis 3, threshold max(2, 4 x 3) = 12
    limit = threshold(3.0)
    assert limit == 12.0
    for quiet, fires in ((limit - STEP, False), (limit, True), (limit + STEP, True)):
        assert (P.detect(stalled(quiet, every=3), CONFIG) != []) is fires, quiet
    v, = P.detect(stalled(limit, every=3), CONFIG)
    assert (v.details["longest_gap_s"], v.details["scrape_gap_s"], v.details["threshold_s"]) == (3.0, 1.0, 12.0)
    assert "(threshold 12.0 s = max(2 s, 4 x 3.00 s recent cadence))" in v.why


def test_the_floor_and_the_ceiling_under_at_and_over():
    fast = replace(CONFIG, stall_k=1.0)                 # 1 x 1 s cadence: under the floor
    limit = threshold(1.0, fast)
    assert limit == fast.stall_floor_s
    for quiet, fires in ((limit - STEP, False), (limit, True), (limit + STEP, True)):
        assert (P.detect(stalled(quiet), fast) != []) is fires, quiet
    low = replace(CONFIG, stall_ceiling_s=7.0)          # 4 x 3 s = 12: over the ceiling
    limit = threshold(3.0, low)
    assert limit == 7.0
    for quiet, fires in ((limit - STEP, False), (limit, True), (limit + STEP, True)):
        assert (P.detect(stalled(quiet, every=3), low) != []) is fires, quiet
    # a ceiling under the floor: the ceiling (the pre-check is min(ceiling, floor) too)
    tight = replace(CONFIG, stall_ceiling_s=1.5, stall_floor_s=2.0)
    for quiet, fires in ((1.5 - STEP, False), (1.5, True)):
        assert (P.detect(stalled(quiet), tight) != []) is fires, quiet


def test_only_the_recent_movements_make_the_cadence():
    # the counters move at 1, at 6 (a gap of 5 s), then at 7 and 8 (at the very next scrape: gaps of 0); the gaps
    # are [5, 0, 0]: all of them, the longest is 5 (threshold 4 x 5 = 20); the 2 most recent only, 0 (threshold 4)
    def window(quiet):
        times = [float(i) for i in range(9)] + [8 + quiet]
        steps = lambda t: 0 if t < 1 else (1 if t < 6 else min(int(t) - 4, 4))
        return Window(health=(health(times[-1]),), metrics=tuple(scrape(t, state(steps(t))) for t in times))
    v, = P.detect(window(5.0), replace(CONFIG, stall_recent_movements=2))
    assert (v.details["longest_gap_s"], v.details["threshold_s"]) == (0.0, 4.0)
    assert P.detect(window(5.0), CONFIG) == []
    v, = P.detect(window(20.0), CONFIG)
    assert (v.details["longest_gap_s"], v.details["threshold_s"]) == (5.0, 20.0)
    v, = P.detect(window(20.0), replace(CONFIG, stall_recent_movements=3))
    assert v.details["longest_gap_s"] == 5.0


def test_typical_longest_gap():
    assert P.typical_longest_gap([]) == 0.0
    assert P.typical_longest_gap([3.0, 1.0]) == 3.0
    assert P.typical_longest_gap([4.0, 1.0, 2.0, 3.0]) == 4.0               # fewer than five: the longest
    # five or more: the 90th percentile, index int(0.9 x (n - 1)) of the sorted gaps
    assert P.typical_longest_gap([100.0, 1.0, 2.0, 3.0, 4.0]) == 4.0         # int(0.9 x 4) = 3
    gaps = [float(i) for i in range(1, 12)] + [500.0]                         # 12 gaps: int(0.9 x 11) = 9 -> 10.0
    assert P.typical_longest_gap(gaps) == 10.0


def test_work_admitted_after_idle_is_timed_from_its_admission():
    # idle (running 0) and flat to 5, then 2 running from 5 and nothing moves: "since work was admitted" at 5
    metrics = tuple(scrape(t, state(3, running=0.0 if t < 5 else 2.0)) for t in range(11))
    v, = P.detect(Window(health=(health(10),), metrics=metrics), CONFIG)
    assert v.onset == T0 + 5 and v.details["quiet_s"] == 5.0
    assert "since work was admitted, with 2 running" in v.why
    # admitted at 7: 3 s quiet, under 4
    metrics = tuple(scrape(t, state(3, running=0.0 if t < 7 else 2.0)) for t in range(11))
    assert P.detect(Window(health=(health(10),), metrics=metrics), CONFIG) == []


def test_idle_or_unknown_is_no_stall():
    assert P.detect(stalled(10, running=0.0), CONFIG) == []
    waiting = Window(health=(health(20),), metrics=tuple(scrape(t, state(3, running=0.0, waiting=1.0))
                                                          for t in range(21)))
    v, = P.detect(waiting, CONFIG)
    assert "with 0 running and 1 waiting" in v.why
    no_counters = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "0"}, running=2.0, waiting=0.0)
    assert P.detect(Window(health=(health(20),), metrics=tuple(scrape(t, no_counters) for t in range(21))),
                    CONFIG) == []
    assert P.detect(Window(health=(health(20),), metrics=(scrape(20, state(3)),)), CONFIG) == []   # one point
    assert P.detect(Window(metrics=tuple(scrape(t, state(3)) for t in range(21))), CONFIG) == []  # no /health


def test_only_the_counters_it_has_are_shown():
    st = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "0"}, running=2.5, waiting=None,
                     counters=Counters(generation_tokens=7.0))
    v, = P.detect(Window(health=(health(20),), metrics=tuple(scrape(t, st) for t in range(21))), CONFIG)
    assert "with 2.5 running and n/a waiting; generation tokens 7 unchanged; /health 200" in v.why
    assert [e.field for e in v.evidence] == ["counters.generation_tokens", "counters.generation_tokens", "running",
                                             "waiting", "status"]


def test_failing_health_stops_it_unless_health_runs_through_the_engine():
    bad = (health(14), health(15, 503, "http_503"))
    assert P.detect(stalled(5.0, health_=bad), CONFIG) == []
    v, = P.detect(stalled(5.0, dialect="sglang", health_=bad), CONFIG)
    assert v.why.endswith("; /health failing (http_503; this engine's /health waits on the engine, so a stall "
                          "takes it down too)")
    assert v.evidence[-1] == Evidence("health", T0 + 15, "error", "http_503")
    v, = P.detect(stalled(5.0, dialect="sglang", health_=(health(15, 500, None),)), CONFIG)
    assert "; /health failing (500; this engine's" in v.why       # no error class: the status


def test_a_busy_engine_waits_for_the_ceiling():
    hot = tuple(proc(t, cpu=CONFIG.stall_busy_cpu_percent) for t in range(16))
    assert P.detect(stalled(5.0, dialect="sglang", process=hot), CONFIG) == []
    limit = CONFIG.stall_ceiling_s
    for quiet, fires in ((limit - STEP, False), (limit, True)):
        hot = tuple(proc(t, cpu=CONFIG.stall_busy_cpu_percent) for t in range(int(10 + quiet) + 1))
        hot += (proc(10 + quiet, cpu=CONFIG.stall_busy_cpu_percent),)
        found = P.detect(stalled(quiet, dialect="sglang", process=hot), CONFIG)
        assert (found != []) is fires, quiet
    v, = found
    assert v.why.endswith(f"; its engine kept using CPU, so this waited for the {limit:g} s ceiling (no step takes "
                          f"that long)")
    assert v.details["engine_busy"] is True and v.details["threshold_s"] == limit
    # on vLLM (/health does not wait on the engine) the CPU does not matter
    hot = tuple(proc(t, cpu=99.0) for t in range(16))
    assert P.detect(stalled(5.0, process=hot), CONFIG)[0].details["engine_busy"] is False


def test_engine_busy_under_at_and_over_and_its_window():
    pct, floor = CONFIG.stall_busy_cpu_percent, CONFIG.stall_floor_s
    assert engine_busy((), CONFIG) is False
    for cpu, busy in ((pct - STEP, False), (pct, True), (pct + STEP, True)):
        assert engine_busy((proc(0, cpu=1.0), proc(1, cpu=cpu)), CONFIG) is busy, cpu
    # a hot sample stall_floor_s before the newest counts; one STEP older does not
    assert engine_busy((proc(10 - floor, cpu=pct), proc(10, cpu=0.0)), CONFIG) is True
    assert engine_busy((proc(10 - floor - STEP, cpu=pct), proc(10, cpu=0.0)), CONFIG) is False
    # a stopped engine now is not busy, however hot before
    assert engine_busy((proc(9, cpu=99.0), proc(10, status="stopped", cpu=0.0)), CONFIG) is False
    assert engine_busy((proc(9, cpu=99.0), proc(10, status="tracing-stop", cpu=0.0)), CONFIG) is False
    # only engine processes count
    hot_api = ProcessSample(T0 + 10, 1, 1.0, True, (replace(API, cpu_percent=99.0),))
    assert engine_busy((hot_api,), CONFIG) is False
    none_cpu = ProcessSample(T0 + 10, 1, 1.0, True, (ProcessMember(2, 2.0, "worker", "w", "running"),))
    assert engine_busy((none_cpu,), CONFIG) is False


def test_stopped_processes_are_named_and_counted():
    process = tuple(proc(t, status="stopped" if t >= 10 else "running", cpu=0.0) for t in range(16))
    v, = P.detect(stalled(5.0, process=process), CONFIG)
    assert v.details["stopped_processes"] == 1 and v.details["process_known"] is True
    assert v.evidence[-2:] == (Evidence("process", T0 + 15, "alive", True),
                               Evidence("process", T0 + 15, "members[2].status", "stopped"))
    assert len(v.why) > len("no progress for 5.0 s")
    plain, = P.detect(stalled(5.0, process=tuple(proc(t) for t in range(16))), CONFIG)
    assert v.why.startswith(plain.why) and v.why != plain.why      # the stopped words are added
    assert plain.evidence[-1] == Evidence("process", T0 + 15, "alive", True)


def test_the_verdict_time_is_the_newest_of_scrape_health_and_process():
    v, = P.detect(stalled(5.0, health_=(health(15.5),), process=(proc(16.5),)), CONFIG)
    assert v.t == T0 + 16.5
    v, = P.detect(stalled(5.0, health_=(health(15.5),)), CONFIG)
    assert v.t == T0 + 15.5


def test_a_dead_process_or_engine_is_not_a_stall():
    assert P.detect(stalled(5.0, process=(proc(15, alive=False),)), CONFIG) == []
    w = stalled(5.0)
    w = Window(health=w.health, metrics=w.metrics, logs=(LogEvent(T0 + 14, "engine_dead", {}),))
    assert P.detect(w, CONFIG) == []


def test_quiet_since():
    from servewatch.detectors.series import tracks

    def track(steps, running):
        return tracks(tuple(scrape(t, state(s, running=r)) for t, (s, r) in enumerate(zip(steps, running))))["engine=0"]

    assert P._quiet_since(track([1, 2, 3, 3, 3], [2] * 5)) == 2
    assert P._quiet_since(track([1, 1, 1, 1], [0, 2, 2, 2])) == 1      # idle before: the admitted stretch's first
    assert P._quiet_since(track([1, 2, 3, 4], [2] * 4)) == 3
    assert P._quiet_since(track([1, 1, 1], [2] * 3)) == 0


def test_an_unknown_cpu_is_no_cpu_even_for_the_lowest_bar():
    none_cpu = ProcessSample(T0 + 10, 1, 1.0, True, (ProcessMember(2, 2.0, "worker", "w", "running"),))
    assert engine_busy((none_cpu,), replace(CONFIG, stall_busy_cpu_percent=1.0)) is False
    assert engine_busy((proc(10, cpu=1.0),), replace(CONFIG, stall_busy_cpu_percent=1.0)) is True


def test_two_scrapes_are_enough():
    # two admitted scrapes 5 s apart, nothing moved: the threshold min(3 s ceiling, max(2, 4 x 5)) = 3 s
    w = Window(health=(health(5),), metrics=(scrape(0, state(3)), scrape(5, state(3))))
    v, = P.detect(w, replace(CONFIG, stall_ceiling_s=3.0))
    assert (v.details["quiet_s"], v.details["threshold_s"]) == (5.0, 3.0)
    assert P.detect(Window(health=(health(5),), metrics=(scrape(5, state(3)),)), replace(CONFIG, stall_ceiling_s=3.0)) == []


def test_the_stall_names_each_rank_s_gpu():
    from servewatch.detectors.evidence.gpus import rank_gpu_evidence
    from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample

    def tree(t):
        return ProcessSample(T0 + t, 1, 1.0, True, (
            API, ProcessMember(2, 2.0, "engine_core", "VLLM::EngineCore", "sleeping", cpu_percent=1.0, ppid=1),
            ProcessMember(3, 3.0, "worker", "VLLM::Worker_TP0", "running", cpu_percent=50.0, ppid=2),
            ProcessMember(4, 4.0, "worker", "VLLM::Worker_TP1", "stopped", cpu_percent=0.0, ppid=2)))
    gpus = GpuSample(T0 + 15, True, (
        GpuDevice(0, 98.0, 2**30, 2**34, 85.0, (GpuProcess(3, 2**30),), power_limit_w=700.0),
        GpuDevice(1, 0.0, 2**30, 2**34, 60.0, (GpuProcess(4, 2**30),), power_limit_w=700.0)))
    plain = stalled(5.0, process=tuple(tree(t) for t in range(16)))
    with_gpus = Window(health=plain.health, metrics=plain.metrics, process=plain.process, gpu=(gpus,))
    bare, = P.detect(plain, CONFIG)
    v, = P.detect(with_gpus, CONFIG)
    clause, token = rank_gpu_evidence(with_gpus, plain.process[-1])
    assert clause.startswith("; GPUs: TP rank 0 GPU 0 98 % at 85 of 700 W") and token
    assert v.why == bare.why + clause
    assert v.details == {**bare.details, "gpus": token}
    assert (v.t, v.onset, v.evidence) == (bare.t, bare.onset, bare.evidence)


def test_the_newest_scrape_s_counters_are_what_is_read():
    # no counters exported in the first two scrapes, then steady: the newest has them, so it is judged
    bare = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "0"}, running=2.0, waiting=0.0)
    metrics = tuple(scrape(t, bare if t < 2 else state(3)) for t in range(11))
    v, = P.detect(Window(health=(health(10),), metrics=metrics), CONFIG)
    assert (v.onset, v.details["quiet_s"]) == (T0 + 2, 8.0)


def test_a_gap_across_an_idle_stretch_is_not_the_cadence():
    # moving to 1, idle (running 0) from 2 to 9, busy again from 10 moving at 10, 11, 12, then flat to 17: the gap
    # from 1 to 10 spans idle time and is not counted; the gaps are 0 (next scrape), the threshold 4 x 1 s = 4
    def st(t):
        idle = 2 <= t <= 9
        return state(min(t, 1) if t < 10 else min(t, 12) - 8, running=0.0 if idle else 2.0)
    metrics = tuple(scrape(t, st(t)) for t in range(18))
    v, = P.detect(Window(health=(health(17),), metrics=metrics), CONFIG)
    assert (v.details["longest_gap_s"], v.details["threshold_s"], v.details["quiet_s"], v.onset) == \
        (0.0, 4.0, 5.0, T0 + 12)


def test_the_first_scrape_is_no_movement():
    # flat from 0 to 2, one move at 3, flat to 8: no gap between movements (one movement), threshold 4, quiet 5
    metrics = tuple(scrape(t, state(0 if t < 3 else 1)) for t in range(9))
    v, = P.detect(Window(health=(health(8),), metrics=metrics), CONFIG)
    assert (v.details["longest_gap_s"], v.details["threshold_s"], v.details["quiet_s"]) == (0.0, 4.0, 5.0)


def test_the_verdict_time_is_the_scrape_when_it_is_the_newest():
    v, = P.detect(stalled(5.0, health_=(health(14),), process=(proc(13),)), CONFIG)
    assert v.t == T0 + 15


def test_the_busy_line_is_the_whole_line_plus_the_ceiling():
    limit = CONFIG.stall_ceiling_s
    hot = tuple(proc(t, cpu=CONFIG.stall_busy_cpu_percent) for t in range(int(10 + limit) + 1))
    v, = P.detect(stalled(limit, dialect="sglang", process=hot), CONFIG)
    assert v.why.startswith(f"no progress for {limit:.1f} s on engine 0 (threshold {limit:.1f} s = ")
    assert v.why.endswith("; /health 200; its engine kept using CPU, so this waited for the 60 s ceiling (no step "
                          "takes that long)")
