"""alive_health_ok_no_progress on hand-built windows: the stall fires; idle, slow-but-stepping and
long prefills do not."""

from dataclasses import replace

from tests.timeline_builders import T0, Timeline

from servewatch.detectors import DetectorConfig, evidence_window, run_detectors
from servewatch.timeline.samples import ProcessMember

NAME = "alive_health_ok_no_progress"


def names(window, config=None):
    return [v.name for v in run_detectors(window, config)]


def stall_of(window):
    found = [v for v in run_detectors(window) if v.name == NAME]
    return found[0] if found else None


def test_stall_fires_after_the_adaptive_threshold_with_onset_at_last_progress():
    tl = Timeline(interval=0.5).ticks(40, running=8)
    last_progress_t = tl.samples[-2].t  # the last metrics sample that showed movement
    tl.ticks(3, running=8, steps=0, gen=0)          # 1.5 s quiet: below the floor
    assert stall_of(tl.window()) is None
    tl.ticks(1, running=8, steps=0, gen=0)          # 2.0 s quiet: at the threshold
    verdict = stall_of(tl.window())
    assert verdict is not None
    assert verdict.onset == last_progress_t
    assert verdict.details["threshold_s"] == 2.0     # max(floor 2 s, 4 x 0.5 s cadence)
    assert verdict.details["quiet_s"] == 2.0
    assert "8 running" in verdict.why and "/health 200" in verdict.why
    fields = {e.field for e in verdict.evidence}
    assert {"counters.steps", "counters.generation_tokens", "running", "status", "alive"} <= fields


def test_idle_is_not_a_stall():
    tl = Timeline().ticks(20, running=4).ticks(200, running=0, waiting=0)
    assert NAME not in names(tl.window())


def test_work_admitted_after_idle_is_timed_from_admission_not_from_last_progress():
    tl = Timeline().ticks(10, running=4).ticks(100, running=0)
    tl.ticks(2, running=1, steps=0, gen=0)   # a request arrives; first step not seen yet (1 s)
    assert NAME not in names(tl.window())
    tl.ticks(6, running=1, steps=0, gen=0)   # 4 s admitted and nothing moves: that is a stall
    verdict = stall_of(tl.window())
    assert verdict is not None and "since work was admitted" in verdict.why


def test_waiting_only_counts_as_admitted_work():
    tl = Timeline().ticks(20, running=2).ticks(10, running=0, waiting=5, steps=0, gen=0)
    assert NAME in names(tl.window())


def test_long_prefill_that_still_steps_is_not_a_stall():
    # Prefill chunks: steps move every tick, no generation token for 30 s.
    tl = Timeline().ticks(20, running=1).ticks(60, running=1, steps=1, gen=0, prompt=512)
    assert NAME not in names(tl.window())


def test_slow_engine_raises_the_threshold_from_its_own_cadence():
    # An engine that moves its counters only every 5 s (e.g. long steps) is not stalled after 6 s quiet...
    tl = Timeline(interval=0.5)
    for _ in range(10):
        tl.tick(running=2, steps=1, gen=2).ticks(9, running=2, steps=0, gen=0)
    tl.ticks(3, running=2, steps=0, gen=0)
    assert NAME not in names(tl.window())
    # ...but is after more than 4 x 5 s.
    tl.ticks(40, running=2, steps=0, gen=0)
    verdict = stall_of(tl.window())
    assert verdict is not None and verdict.details["longest_gap_s"] == 5.0 and verdict.details["threshold_s"] == 20.0


def test_an_earlier_stall_does_not_become_the_learned_cadence():
    # Real vLLM, SIGSTOP twice: after the first stall clears, the engine steps every scrape again. The
    # first stall's 10 s gap must not teach the detector that 10 s gaps are normal (4 x 10 s = 40 s).
    tl = Timeline(interval=0.5).ticks(40, running=8)
    tl.ticks(20, running=8, steps=0, gen=0)                  # the first stall, 10 s
    assert stall_of(tl.window()) is not None
    tl.ticks(30, running=8)                                  # SIGCONT: progress every scrape
    assert stall_of(tl.window()) is None
    tl.ticks(4, running=8, steps=0, gen=0)                   # the second stall, 2 s in
    verdict = stall_of(tl.window())
    assert verdict is not None and verdict.details["threshold_s"] == 2.0


def test_a_slow_scrape_between_two_movements_is_not_the_engine_cadence():
    # Real vLLM on 2 cores: while the engine is busy, its API server answers /metrics only every ~4 s,
    # and every answer shows new steps. That 4 s is our view of the engine, not its cadence: when the
    # worker is SIGSTOPped (and the CPU frees up, scrapes come every 0.5 s), the stall is due at the
    # 2 s floor, not at 4 x 4 s.
    tl = Timeline(interval=0.5).ticks(4, running=0).ticks(2, running=4)
    tl.interval = 4.13                                       # the next scrape answers 4.13 s later...
    tl.tick(running=4).tick(running=4)
    tl.interval = 0.5
    tl.tick(running=4)                                       # ...and so does this one; each has new steps
    tl.ticks(3, running=4, steps=0, gen=0)
    assert stall_of(tl.window()) is None                     # 1.5 s quiet
    tl.ticks(1, running=4, steps=0, gen=0)
    verdict = stall_of(tl.window())
    assert verdict is not None and verdict.details["quiet_s"] == 2.0
    assert verdict.details["longest_gap_s"] == 0.0 and verdict.details["threshold_s"] == 2.0


def test_ceiling_bounds_the_adaptive_threshold():
    config = DetectorConfig(stall_ceiling_s=10.0)
    tl = Timeline(interval=1.0)
    for _ in range(5):
        tl.tick(running=2, steps=1).ticks(29, running=2, steps=0, gen=0)   # gaps of 30 s
    tl.tick(running=2, steps=1).ticks(12, running=2, steps=0, gen=0)
    verdict = [v for v in run_detectors(tl.window(), config) if v.name == NAME]
    assert verdict and verdict[0].details["threshold_s"] == 10.0


def test_health_not_ok_or_process_gone_is_not_this_verdict():
    tl = Timeline().ticks(20, running=4).ticks(10, running=4, steps=0, gen=0, health=503)
    assert NAME not in names(tl.window())
    tl = Timeline().ticks(20, running=4).ticks(10, running=4, steps=0, gen=0, alive=False)
    assert NAME not in names(tl.window())


def test_without_pid_process_is_unknown_and_the_stall_still_fires():
    tl = Timeline(with_process=False).ticks(20, running=4).ticks(10, running=4, steps=0, gen=0)
    verdict = stall_of(tl.window())
    assert verdict is not None and verdict.details["process_known"] is False


def test_stopped_worker_is_named_in_the_evidence():
    from tests.timeline_builders import API, ENGINE, WORKER
    stopped = replace(WORKER, status="stopped")
    tl = Timeline().ticks(20, running=4).ticks(10, running=4, steps=0, gen=0, members=(API, ENGINE, stopped))
    verdict = stall_of(tl.window())
    assert verdict.details["stopped_processes"] == 1
    assert "VLLM::Worker_TP0" in verdict.why


def test_failed_scrapes_do_not_extend_the_claim():
    # After the last good scrape, only errors: the quiet time rests on observed scrapes only.
    tl = Timeline().ticks(20, running=4).ticks(2, running=4, steps=0, gen=0)
    tl.ticks(20, running=4, metrics_error="timeout")
    assert NAME not in names(tl.window())


def test_recomputed_from_the_evidence_window_gives_identical_verdicts():
    tl = Timeline().ticks(500, running=4, itl_fast=50).ticks(10, running=4, steps=0, gen=0)
    window = tl.window()
    small = evidence_window(window)
    assert len(small) < len(window)
    assert run_detectors(small) == run_detectors(window)


# -- an engine whose /health waits on the engine itself (SGLang 0.5.23 runs a generation through its
# scheduler): a stalled scheduler takes /health down with it ------------------------------------------

def _sglang(scheduler_status: str = "sleeping", scheduler_cpu: float = 3.0) -> tuple[Timeline, tuple]:
    from tests.timeline_builders import API
    scheduler = ProcessMember(pid=4343, create_time=T0 - 99.0, role="engine_core", title="sglang::scheduler",
                              status=scheduler_status, cpu_percent=scheduler_cpu)
    detokenizer = ProcessMember(pid=4344, create_time=T0 - 98.0, role="worker", title="sglang::detokenizer",
                                status="sleeping", cpu_percent=1.0)
    return Timeline(dialect="sglang"), (API, scheduler, detokenizer)


def test_sglang_stall_with_health_timing_out_is_still_a_stall():
    tl, members = _sglang(scheduler_status="stopped", scheduler_cpu=0.0)   # a SIGSTOPped scheduler
    tl.ticks(20, running=5, members=members)
    tl.ticks(5, running=5, steps=0, gen=0, health=None, health_error="timeout", members=members)
    verdict = stall_of(tl.window())
    assert verdict is not None and verdict.details["threshold_s"] == 2.0 and not verdict.details["engine_busy"]
    assert "/health failing (timeout" in verdict.why
    assert ("health", "error", "timeout") in {(e.source, e.field, e.value) for e in verdict.evidence}


def test_sglang_slow_steps_with_health_timing_out_are_not_a_stall():
    # A long chunked prefill: /health times out (it waits for the running batch) while every step still
    # moves the counters.
    tl, members = _sglang()
    tl.ticks(20, running=2, members=members)
    for _ in range(10):
        tl.tick(running=2, steps=1, gen=0, prompt=4096, health=None, health_error="timeout", members=members)
        tl.tick(running=2, steps=0, gen=0, health=None, health_error="timeout", members=members)
    assert NAME not in names(tl.window())
    assert "health_loss" in names(tl.window())     # /health did stop answering in time: that is true


def test_sglang_dead_scheduler_is_engine_dead_not_a_stall():
    tl, members = _sglang()
    tl.ticks(20, running=5, members=members)
    tl.ticks(8, running=5, steps=0, gen=0, health=None, health_error="timeout", members=members[:1])
    found = names(tl.window())
    assert "engine_dead" in found and NAME not in found


def test_vllm_health_timing_out_is_not_this_verdict():
    # vLLM's /health does not wait on the engine: there a failed probe is health_loss's business.
    tl = Timeline().ticks(20, running=4).ticks(10, running=4, steps=0, gen=0, health=None, health_error="timeout")
    assert NAME not in names(tl.window())


def test_sglang_hung_idle_scheduler_is_a_stall():
    # Deadlocked, not stopped: asleep at a few % CPU with requests admitted and nothing moving.
    tl, members = _sglang(scheduler_status="sleeping", scheduler_cpu=2.0)
    tl.ticks(20, running=5, members=members)
    tl.ticks(5, running=5, steps=0, gen=0, health=None, health_error="timeout", members=members)
    assert stall_of(tl.window()) is not None


def test_sglang_one_long_step_that_keeps_the_scheduler_busy_waits_for_the_ceiling():
    # A real SGLang computing one 200,000-token prefill step: counters frozen for 15 s, /health timing
    # out, the scheduler at 95-180 % CPU. Slow, not stalled - until no step could take that long.
    _, idle = _sglang()
    tl, busy = _sglang(scheduler_status="running", scheduler_cpu=140.0)
    tl.ticks(20, running=4, members=idle)
    tl.ticks(40, running=4, steps=0, gen=0, health=None, health_error="timeout", members=busy)   # 20 s
    assert NAME not in names(tl.window())
    assert "health_loss" in names(tl.window())
    tl.ticks(81, running=4, steps=0, gen=0, health=None, health_error="timeout", members=busy)   # 60.5 s
    verdict = stall_of(tl.window())
    assert verdict is not None and verdict.details["threshold_s"] == 60.0 and verdict.details["engine_busy"]
    assert "kept using CPU" in verdict.why


def test_busy_cpu_does_not_lift_the_threshold_when_health_is_green():
    # vLLM's /health does not wait on the engine: the rule is unchanged there.
    from tests.timeline_builders import API, ENGINE, WORKER
    busy_worker = replace(WORKER, status="running", cpu_percent=150.0)
    tl = Timeline().ticks(20, running=4).ticks(5, running=4, steps=0, gen=0, members=(API, ENGINE, busy_worker))
    verdict = stall_of(tl.window())
    assert verdict is not None and verdict.details["threshold_s"] == 2.0


def test_one_low_cpu_reading_in_a_long_step_does_not_make_it_a_stall():
    # On 2 shared cores a busy scheduler read 47-104 % per sample; one sample can read low.
    _, idle = _sglang()
    tl, busy = _sglang(scheduler_status="running", scheduler_cpu=90.0)
    _, dip = _sglang(scheduler_status="running", scheduler_cpu=5.0)
    tl.ticks(20, running=4, members=idle)
    for _ in range(10):
        tl.ticks(3, running=4, steps=0, gen=0, health=None, health_error="timeout", members=busy)
        tl.tick(running=4, steps=0, gen=0, health=None, health_error="timeout", members=dip)
    assert NAME not in names(tl.window())


def test_sglang_long_step_ending_with_health_answered_before_the_counters_show_it_is_not_a_stall():
    # Real SGLang: the step's end answers the pending /health (200) a scrape before /metrics shows the
    # step's counters; the scheduler was at ~186 % CPU throughout.
    _, idle = _sglang()
    tl, busy = _sglang(scheduler_status="running", scheduler_cpu=186.0)
    tl.ticks(20, running=2, members=idle)
    tl.ticks(8, running=2, steps=0, gen=0, health=None, health_error="timeout", members=busy)
    tl.tick(running=2, steps=0, gen=0, health=200, members=busy)
    assert NAME not in names(tl.window())
