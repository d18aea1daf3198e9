"""Value tests of detectors/liveness.py (issue 40): engine_dead, process_exit and health_loss as whole verdicts on
hand-built windows, and a boundary test (just under, at, just over) for each of their thresholds, read from the
DetectorConfig the detectors read:
  health_fail_count      a run of that many failed /health probes fires (`>=`);
  shutdown_log_wait_s    where a log is read, a sign counts once it has held that long (`end - t >= wait`), and an
                         exit is judged then (`_exit_log_read`); a death line read up to it after an exit counts
                         (`e.t < t + wait`); a shutdown line read up to it after a sign covers the sign;
  log_evidence_s         a death line counts that long (`e.t >= end - log_evidence_s`), and a shutdown line covers
                         signs up to that long after it (both ends of `in_shutdown` inclusive)."""

from __future__ import annotations

from dataclasses import replace

from servewatch.detectors import liveness as L
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.evidence import engine_signs as ES
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import HealthSample, LogEvent, MetricsSample, ProcessMember, ProcessSample
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
WAIT = CONFIG.shutdown_log_wait_s
KEEP = CONFIG.log_evidence_s
STEP = 0.25

API = ProcessMember(1, 1.0, "api", "python3", "sleeping")
CORE = ProcessMember(2, 2.0, "engine_core", "VLLM::EngineCore", "running", ppid=1)


def health(t, status=200, error=None):
    return HealthSample(T0 + t, status, 0.001 if status else None, error)


def scrape(t, dialect="vllm", tokens=100.0):
    state = EngineState(dialect, f"{dialect}-test", {"model_name": "m", "engine": "0"}, running=0.0, waiting=0.0,
                        counters=Counters(generation_tokens=tokens, steps=tokens))
    return MetricsSample(T0 + t, dialect, f"{dialect}-test", (state,))


def proc(t, members=(API, CORE), alive=True, code=None, signal=None, root_ct=1.0, error=None):
    return ProcessSample(T0 + t, 1, root_ct if alive else None, alive, tuple(members) if alive else (), code, signal,
                         error)


def log(t, kind, **fields):
    return LogEvent(T0 + t, kind, fields)


def dead_health(first, n, start=0):
    """/health 200 from `start` to first - 1, then 503 (vLLM's engine-dead status) n times, a second apart."""
    return tuple(health(i) for i in range(start, first)) + tuple(health(first + i, 503) for i in range(n))


# --- health_loss ---------------------------------------------------------------------------------------

def test_health_fail_count_under_at_and_over():
    need = CONFIG.health_fail_count
    for n, fires in ((need - 1, False), (need, True), (need + 1, True)):
        w = Window(health=tuple(health(i) for i in range(5)) + tuple(health(5 + i, 500) for i in range(n)),
                   metrics=(scrape(0),))
        assert (L.detect_health_loss(w, CONFIG) != []) is fires, n


def test_health_loss_is_the_whole_verdict():
    w = Window(health=(health(0), health(1), health(2, 500), health(3, None, "connect"), health(4.5, 503)),
               metrics=(scrape(0),))
    assert L.detect_health_loss(w, replace(CONFIG, health_fail_count=3)) == [Verdict(
        "health_loss", T0 + 4.5, T0 + 2,
        "3 consecutive health probes failed over 2.5 s (≥ 3); last: HTTP 503; seen: HTTP 500, HTTP 503, connect",
        (Evidence("health", T0 + 2, "status", 500), Evidence("health", T0 + 4.5, "status", 503)),
        {"failed_probes": 3, "last_status": 503, "last_error": None})]
    w = Window(health=(health(0), health(1, None, "timeout"), health(2, None, "timeout")), metrics=(scrape(0),))
    v, = L.detect_health_loss(w, replace(CONFIG, health_fail_count=2))
    assert v.why == "2 consecutive health probes failed over 1.0 s (≥ 2); last: timeout; seen: timeout"
    assert v.evidence == (Evidence("health", T0 + 1, "error", "timeout"), Evidence("health", T0 + 2, "error", "timeout"))
    assert v.details == {"failed_probes": 2, "last_status": None, "last_error": "timeout"}


def test_answer_problem_and_health_evidence():
    assert ES.answer_problem(health(0, 503)) == "HTTP 503"
    assert ES.answer_problem(health(0, None, "connect")) == "connect"
    assert ES.answer_problem(HealthSample(T0, None, None, None)) == "no answer"
    assert ES.health_evidence(health(1, 200)) == Evidence("health", T0 + 1, "status", 200)
    assert ES.health_evidence(health(1, None, "timeout")) == Evidence("health", T0 + 1, "error", "timeout")


def test_trailing():
    assert ES._trailing([1, 2, 0, 3, 4], lambda x: x > 0) == [3, 4]
    assert ES._trailing([1, 2], lambda x: x > 0) == [1, 2]
    assert ES._trailing([1, 0], lambda x: x > 0) == []
    assert ES._trailing([], lambda x: True) == []


# --- engine_dead: /health's dead status --------------------------------------------------------------------

def test_engine_dead_by_health_is_the_whole_verdict():
    w = Window(health=dead_health(5, 3), metrics=(scrape(0),))
    assert L.detect_engine_dead(w, CONFIG) == [Verdict(
        "engine_dead", T0 + 7, T0 + 5, "engine dead: /health 503 for 3 probe(s) over 2.0 s",
        (Evidence("health", T0 + 5, "status", 503), Evidence("health", T0 + 7, "status", 503)),
        {"api_alive": None, "signals": 1})]
    alive = Window(health=dead_health(5, 3), metrics=(scrape(0),), process=tuple(proc(i) for i in range(8)))
    v, = L.detect_engine_dead(alive, CONFIG)
    assert v.why == "engine dead: /health 503 for 3 probe(s) over 2.0 s — the API process is still alive"
    assert v.details == {"api_alive": True, "signals": 1}


def test_a_dead_status_counts_only_for_a_dialect_that_has_one():
    w = Window(health=dead_health(5, 3), metrics=(scrape(0, dialect="sglang"),))
    assert L.detect_engine_dead(w, CONFIG) == []
    assert ES._dead_status(w) is None
    assert ES._dead_status(Window(metrics=(scrape(0),))) == 503
    assert ES._dead_status(Window()) is None


def test_with_a_log_a_dead_status_counts_once_it_held_shutdown_log_wait_s():
    # a log is read (one line long before), no death line: the 503 run that began at 5 counts once end - 5 >= WAIT
    for held, fires in ((WAIT - STEP, False), (WAIT, True), (WAIT + STEP, True)):
        h = (health(0), health(5, 503), health(5 + held, 503))
        w = Window(health=h, metrics=(scrape(0),), logs=(log(0, "ready"),))
        assert (L.detect_engine_dead(w, CONFIG) != []) is fires, held
    # no log at all: at once
    assert L.detect_engine_dead(Window(health=(health(0), health(5, 503)), metrics=(scrape(0),)), CONFIG) != []


def test_a_death_line_makes_a_dead_status_count_at_once():
    w = Window(health=(health(0), health(5, 503)), metrics=(scrape(0),), logs=(log(5, "engine_dead"),))
    v, = L.detect_engine_dead(w, CONFIG)
    assert v.why == "engine dead: /health 503 for 1 probe(s) over 0.0 s; 1 engine-death log line(s) (engine_dead)"
    assert v.details == {"api_alive": None, "signals": 2}
    assert v.evidence == (Evidence("health", T0 + 5, "status", 503), Evidence("health", T0 + 5, "status", 503),
                          Evidence("log", T0 + 5, "kind", "engine_dead"))


def test_in_shutdown_bounds_under_at_and_over():
    w = Window(logs=(log(10, "shutdown"),))
    at = lambda t: ES.in_shutdown(w, T0 + t, CONFIG)
    assert [at(10 - WAIT - STEP), at(10 - WAIT), at(10 - WAIT + STEP)] == [False, True, True]
    assert [at(10 + KEEP - STEP), at(10 + KEEP), at(10 + KEEP + STEP)] == [True, True, False]
    assert ES.in_shutdown(Window(logs=(log(10, "engine_dead"),)), T0 + 10, CONFIG) is False


def test_a_requested_shutdown_is_no_death():
    w = Window(health=(health(0), health(5, 503), health(6, 503), health(9, 503)), metrics=(scrape(0),),
               logs=(log(5, "shutdown"), log(5.5, "engine_dead")))
    assert L.detect_engine_dead(w, CONFIG) == []
    assert ES.engine_death_evidence(w, CONFIG) == (None, [], [])


# --- engine_dead: the log's death lines ------------------------------------------------------------------

def test_a_death_line_counts_for_log_evidence_s_under_at_and_over():
    # the window ends at 100 (a /health 200 then): a line at 100 - KEEP still counts, one STEP earlier not
    for age, fires in ((KEEP - STEP, True), (KEEP, True), (KEEP + STEP, False)):
        w = Window(health=(health(0), health(100)), logs=(log(100 - age, "engine_dead", reason="EngineDeadError"),))
        assert (L.detect_engine_dead(w, CONFIG) != []) is fires, age


def test_death_lines_with_their_worker_and_exit_code():
    lines = (log(5, "engine_dead", reason="EngineDeadError", worker_rank=1, exit_code=-9),
             log(5.5, "engine_dead", reason="x"), log(6, "engine_dead"), log(6.5, "engine_dead"))
    w = Window(health=(health(0), health(7)), logs=lines)
    v, = L.detect_engine_dead(w, CONFIG)
    assert v.why == "engine dead: 4 engine-death log line(s) (EngineDeadError: worker rank 1, exit code -9 (signal 9))"
    assert (v.t, v.onset) == (T0 + 6, T0 + 5)          # the first three lines are the evidence
    assert v.evidence == tuple(Evidence("log", T0 + t, "kind", "engine_dead") for t in (5, 5.5, 6))
    w = Window(health=(health(0), health(7)), logs=(log(5, "engine_dead", reason="R", worker_rank=0, exit_code=1),))
    assert L.detect_engine_dead(w, CONFIG)[0].why == "engine dead: 1 engine-death log line(s) (R: worker rank 0, exit code 1)"
    w = Window(health=(health(0), health(7)), logs=(log(5, "engine_dead", reason="R", worker_rank=2),))
    assert L.detect_engine_dead(w, CONFIG)[0].why == "engine dead: 1 engine-death log line(s) (R: worker rank 2)"
    w = Window(health=(health(0), health(7)), logs=(log(5, "engine_dead", reason="R", worker_rank="2", exit_code=1),))
    assert L.detect_engine_dead(w, CONFIG)[0].why == "engine dead: 1 engine-death log line(s) (R)"
    w = Window(health=(health(0), health(7)), logs=(log(5, "engine_dead", reason="R", worker_rank=2, exit_code="9"),))
    assert L.detect_engine_dead(w, CONFIG)[0].why == "engine dead: 1 engine-death log line(s) (R: worker rank 2)"


# --- engine_dead: engine processes gone -------------------------------------------------------------------

def test_an_engine_child_gone_while_the_api_lives():
    process = tuple(proc(i) for i in range(5)) + tuple(proc(5 + i, members=(API,)) for i in range(3))
    w = Window(health=tuple(health(i) for i in range(8)), process=process)
    v, = L.detect_engine_dead(w, CONFIG)
    assert (v.t, v.onset) == (T0 + 5, T0 + 5)
    assert v.why.startswith("engine dead: engine process(es) gone (")
    assert v.why.endswith(") while the API process 1 lives — the API process is still alive")
    assert v.evidence == (Evidence("process", T0 + 5, "alive", True), Evidence("process", T0 + 5, "members[2]", "gone"))
    assert v.details == {"api_alive": True, "signals": 1}


def test_with_a_log_a_vanished_engine_counts_once_it_held_shutdown_log_wait_s():
    for held, fires in ((WAIT - STEP, False), (WAIT, True), (WAIT + STEP, True)):
        process = (proc(0), proc(5, members=(API,)), proc(5 + held, members=(API,)))
        w = Window(process=process, logs=(log(0, "ready"),))
        assert (L.detect_engine_dead(w, CONFIG) != []) is fires, held


def test_engine_children_gone():
    gone = ES._engine_children_gone
    assert gone(()) is None
    assert gone((proc(0), proc(1))) is None
    # gone at 2 and still gone at 3: the first sample missing it is 2
    first, last, missing = gone((proc(0), proc(1), proc(2, members=(API,)), proc(3, members=(API,))))
    assert (first.t, last.t, missing) == (T0 + 2, T0 + 3, [(2, "VLLM::EngineCore")])
    # a zombie is gone
    zombie = replace(CORE, status="zombie")
    first, _, missing = gone((proc(0), proc(1, members=(API, zombie))))
    assert (first.t, missing) == (T0 + 1, [(2, "VLLM::EngineCore")])
    # a zombie seen earlier was never live: nothing to miss
    assert gone((proc(0, members=(API, zombie)), proc(1, members=(API,)))) is None
    # an unreadable sample is not an empty tree, and is skipped
    assert gone((proc(0), proc(1, members=(), error="access_denied"))) is None
    # a new root (another create time) forgets what the old one had
    assert gone((proc(0), proc(1, members=(API,), root_ct=5.0))) is None
    # a dead root: not this verdict's
    assert gone((proc(0), proc(1, alive=False))) is None
    # only engine roles count; the API gone is not an engine gone
    other = ProcessMember(3, 3.0, "other", "sh", "sleeping", ppid=1)
    assert gone((proc(0, members=(API, CORE, other)), proc(1))) is None
    # the engine came back in between: only the trailing run counts (gone at 1, back at 2, gone at 3)
    first, _, _ = gone((proc(0), proc(1, members=(API,)), proc(2), proc(3, members=(API,))))
    assert first.t == T0 + 3
    # two gone: sorted by pid
    worker = ProcessMember(4, 4.0, "worker", "VLLM::Worker_TP0", "running", ppid=2)
    _, _, missing = gone((proc(0, members=(API, worker, CORE)), proc(1, members=(API,))))
    assert missing == [(2, "VLLM::EngineCore"), (4, "VLLM::Worker_TP0")]


def test_the_whole_target_gone_at_once_is_process_exits_and_an_api_that_outlived_is_said():
    process = (proc(0), proc(1, members=(API,)), proc(2, alive=False, code=1))
    w = Window(health=(health(0), health(1, 503)), metrics=(scrape(0),), process=process)
    v, = L.detect_engine_dead(w, CONFIG)
    assert v.why == "engine dead: /health 503 for 1 probe(s) over 0.0 s — the API process outlived it, then exited"
    assert v.details == {"api_alive": False, "signals": 1}      # a dead root: no child is "gone" from it
    # the death seen only as the target went (no sample alive at or after the onset): none
    process = (proc(0), proc(2, alive=False, code=1))
    w = Window(health=(health(0), health(2, 503)), metrics=(scrape(0),), process=process)
    assert L.detect_engine_dead(w, CONFIG) == []
    # alive exactly at the onset counts as outliving it
    process = (proc(0), proc(2), proc(3, alive=False, code=1))
    w = Window(health=(health(0), health(2, 503)), metrics=(scrape(0),), process=process)
    assert L.detect_engine_dead(w, CONFIG)[0].details["api_alive"] is False


def test_several_signs_take_the_earliest_onset():
    process = tuple(proc(i) for i in range(6)) + (proc(6, members=(API,)),)
    w = Window(health=dead_health(4, 3), metrics=(scrape(0),), process=process)
    onset, evidence, reasons = ES.engine_death_evidence(w, CONFIG)
    assert onset == T0 + 4 and len(reasons) == 2
    assert reasons[0] == "/health 503 for 3 probe(s) over 2.0 s"


# --- process_exit -------------------------------------------------------------------------------------------

def _exited(code=None, signal=None, logs=(), health_=None, metrics=()):
    process = (proc(0), proc(1), proc(2, alive=False, code=code, signal=signal), proc(3, alive=False, code=code,
                                                                                        signal=signal))
    return Window(health=health_ or (health(0),), metrics=metrics, process=process, logs=logs)


def test_process_exit_is_the_whole_verdict():
    assert L.detect_process_exit(_exited(code=1), CONFIG) == [Verdict(
        "process_exit", T0 + 3, T0 + 2, "target process 1 is gone (exit code 1)",
        (Evidence("process", T0 + 2, "alive", False), Evidence("process", T0 + 3, "exit_code", 1)),
        {"pid": 1, "exit_code": 1, "exit_signal": None, "after_engine_death": False, "masked_failure": False})]
    v, = L.detect_process_exit(_exited(signal=9), CONFIG)
    assert v.why == "target process 1 is gone (signal 9)"
    assert v.evidence[1] == Evidence("process", T0 + 3, "exit_signal", 9)
    assert v.details["exit_signal"] == 9
    v, = L.detect_process_exit(_exited(), CONFIG)
    assert v.why == "target process 1 is gone (exit status unknown (not our child))"
    assert v.evidence == (Evidence("process", T0 + 2, "alive", False),)
    v, = L.detect_process_exit(_exited(code=0, signal=15), CONFIG)     # the code says more than the signal
    assert v.why == "target process 1 is gone (exit code 0)"
    assert L.detect_process_exit(Window(process=(proc(0), proc(1))), CONFIG) == []
    assert L.detect_process_exit(Window(), CONFIG) == []


def test_the_newest_known_exit_code_is_read():
    process = (proc(0), proc(2, alive=False, code=None), proc(3, alive=False, code=7), proc(4, alive=False, code=None))
    v, = L.detect_process_exit(Window(process=process), CONFIG)
    assert v.details["exit_code"] == 7 and v.evidence[1] == Evidence("process", T0 + 4, "exit_code", 7)
    process = (proc(0), proc(2, alive=False, code=3), proc(3, alive=False, code=7))
    assert L.detect_process_exit(Window(process=process), CONFIG)[0].details["exit_code"] == 7


def test_an_exit_after_an_engine_death_says_the_gap_and_an_exit_0_masks_it():
    w = _exited(code=1, health_=(health(0), health(0.5, 503)), metrics=(scrape(0),))
    v, = L.detect_process_exit(w, CONFIG)
    assert v.why == "target process 1 is gone (exit code 1); the engine died 1.5 s before"
    assert v.details["after_engine_death"] is True and v.details["masked_failure"] is False
    assert v.evidence == (Evidence("process", T0 + 2, "alive", False), Evidence("process", T0 + 3, "exit_code", 1),
                          Evidence("health", T0 + 0.5, "status", 503))
    v, = L.detect_process_exit(_exited(code=0, health_=(health(0), health(0.5, 503)), metrics=(scrape(0),)), CONFIG)
    assert v.why == ("target process 1 is gone (exit code 0); the engine died 1.5 s before — an exit 0 after an "
                     "engine death hides the failure from Restart=on-failure (vLLM #48966)")
    assert v.details["masked_failure"] is True
    # its death lines read just after the exit (within shutdown_log_wait_s): "before it"
    w = _exited(code=0, logs=(log(2 + WAIT - STEP, "engine_dead"),), metrics=(scrape(0, dialect="sglang"),))
    v, = L.detect_process_exit(w, CONFIG)
    assert v.why == ("target process 1 is gone (exit code 0); the engine died before it (its death lines were read "
                     "just after the exit) — an exit 0 after an engine death hides the failure from Restart=on-failure")


def test_a_death_line_read_up_to_shutdown_log_wait_s_after_the_exit_counts_under_at_and_over():
    for after, counted in ((WAIT - STEP, True), (WAIT, False), (WAIT + STEP, False)):
        w = _exited(code=1, logs=(log(2 + after, "engine_dead"),))
        onset, signs = L._death_before(w, T0 + 2, CONFIG)
        assert (onset is not None) is counted, after


def test_death_before_reads_each_sign_before_the_exit():
    w = Window(health=(health(0), health(1, 503), health(1.5, 503), health(2, 503)), metrics=(scrape(0),),
               process=(proc(0), proc(1, members=(API,)), proc(2, alive=False)),
               logs=(log(1.2, "engine_dead"), log(1.4, "engine_dead")))
    onset, signs = L._death_before(w, T0 + 2, CONFIG)
    assert onset == T0 + 1
    assert signs == [Evidence("health", T0 + 1, "status", 503), Evidence("process", T0 + 1, "members[2]", "gone"),
                     Evidence("log", T0 + 1.2, "kind", "engine_dead")]
    # a dead status at the exit's own time is not before it
    w = Window(health=(health(0), health(2, 503)), metrics=(scrape(0),), process=(proc(0), proc(2, alive=False)))
    assert L._death_before(w, T0 + 2, CONFIG) == (None, [])
    # a requested stop is no death
    w = Window(health=(health(0), health(1, 503)), metrics=(scrape(0),), process=(proc(0), proc(2, alive=False)),
               logs=(log(1, "shutdown"),))
    assert L._death_before(w, T0 + 2, CONFIG) == (None, [])


def test_an_exit_is_judged_once_its_log_had_time_under_at_and_over():
    # a log is read; no line says why: judged once the window reaches shutdown_log_wait_s past the exit (at 2)
    for held, judged in ((WAIT - STEP, False), (WAIT, True), (WAIT + STEP, True)):
        process = (proc(0), proc(2, alive=False, code=1), proc(2 + held, alive=False, code=1))
        w = Window(process=process, logs=(log(0, "ready"),))
        assert (L.detect_process_exit(w, CONFIG) != []) is judged, held


def test_a_reason_line_read_within_log_evidence_s_before_the_exit_judges_it_at_once():
    for age, judged in ((KEEP - STEP, True), (KEEP, True), (KEEP + STEP, False)):
        process = (proc(0), proc(100, alive=False, code=1))
        w = Window(process=process, logs=(log(100 - age, "shutdown"),))
        assert L._exit_log_read(w, T0 + 100, CONFIG) is judged, age
    assert L._exit_log_read(Window(process=(proc(0),)), T0, CONFIG) is True
    w = Window(process=(proc(0), proc(100, alive=False)), logs=(log(99, "ready"),))
    assert L._exit_log_read(w, T0 + 100, CONFIG) is False
    for kind in L.EXIT_REASON_LINES:
        w = Window(process=(proc(0), proc(100, alive=False)), logs=(log(99, kind),))
        assert L._exit_log_read(w, T0 + 100, CONFIG) is True, kind


def test_a_startup_failure_in_the_log_is_said():
    lines = (log(1, "startup_failure", reason="oom"),
             log(1.5, "startup_failure", reason="kv_cache", needed_gib=4.0, available_gib=2.0))
    v, = L.detect_process_exit(_exited(code=1, logs=lines), CONFIG)
    assert v.details["startup_failure"] == "kv_cache"
    assert v.why.startswith("target process 1 is gone (exit code 1); startup failure in the log: ")
    assert v.evidence[-1] == Evidence("log", T0 + 1.5, "reason", "kv_cache")
    v, = L.detect_process_exit(_exited(code=1, logs=(log(1, "startup_failure", reason="oom"),
                                                      log(1.5, "startup_failure", reason="late"))), CONFIG)
    assert v.details["startup_failure"] == "oom"          # without numbers: the first (the root cause)
    v, = L.detect_process_exit(_exited(code=1, logs=(log(1, "startup_failure"),)), CONFIG)
    assert v.details["startup_failure"] == "unknown"
    assert v.why.endswith("; startup failure in the log: unknown")


def test_exit_zero_note():
    assert L._exit_zero_note(Window(metrics=(scrape(0),))) == "vLLM #48966"
    assert L._exit_zero_note(Window(metrics=(scrape(0, dialect="sglang"),))) is None
    assert L._exit_zero_note(Window(metrics=(scrape(0), MetricsSample(T0 + 1, None, None, error="timeout")))) == \
        "vLLM #48966"
    assert L._exit_zero_note(Window()) == "vLLM #48966"      # no engine seen: the registered engines' notes


def test_dialect_hint():
    assert ES.dialect_hint(Window(metrics=(scrape(0, dialect="sglang"), scrape(1)))).name == "vllm"
    assert ES.dialect_hint(Window(metrics=(scrape(0), MetricsSample(T0 + 1, None, None, error="x")))).name == "vllm"
    assert ES.dialect_hint(Window(process=(proc(0),))).name == "vllm"
    sg = ProcessMember(5, 5.0, "engine_core", "sglang::scheduler", "running", ppid=1)
    hint = ES.dialect_hint(Window(process=(proc(0, members=(API, sg)),)))
    assert hint is not None and hint.name == "sglang"
    assert ES.dialect_hint(Window(process=(proc(0, members=(API,)),))) is None
    assert ES.dialect_hint(Window()) is None


def test_death_before_names_the_first_sample_missing_the_engine():
    w = Window(process=(proc(0), proc(1, members=(API,)), proc(1.5, members=(API,)), proc(2, alive=False)))
    assert L._death_before(w, T0 + 2, CONFIG) == (T0 + 1, [Evidence("process", T0 + 1, "members[2]", "gone")])


def test_death_before_reads_only_the_live_samples_before_the_exit():
    # the engine gone at 2 from a root that had exited and come back (the same identity) at 1: the dead sample
    # in between is not read (it would clear what was seen)
    w = Window(process=(proc(0), proc(1, alive=False), proc(2, members=(API,)), proc(3, alive=False)))
    assert L._death_before(w, T0 + 3, CONFIG) == (T0 + 2, [Evidence("process", T0 + 2, "members[2]", "gone")])


def test_health_loss_waits_out_a_start_by_the_config_s_startup_max_s():
    # never healthy, no log, no token generated; the process was created 100 s before the window's end: a start in
    # progress under the default startup_max_s (900 s), none under 50 s
    def w():
        created = T0 + 10 - 100
        return Window(health=tuple(health(i, None, "connect") for i in range(11)),
                      metrics=(scrape(0, tokens=0.0),),
                      process=tuple(ProcessSample(T0 + i, 1, created, True, (API, CORE)) for i in range(11)))
    assert L.detect_health_loss(w(), CONFIG) == []
    assert len(L.detect_health_loss(w(), replace(CONFIG, startup_max_s=50.0))) == 1


def test_exit_zero_note_of_an_unknown_engine_and_of_several(monkeypatch):
    assert L._exit_zero_note(Window(metrics=(scrape(0, dialect="no-such-engine"),))) is None

    class A:
        exit_zero_after_death_note = "a #1"

    class B:
        exit_zero_after_death_note = "b #2"

    class C:
        exit_zero_after_death_note = None

    monkeypatch.setattr(L.dialects, "registered", lambda: (A, C, B))
    assert L._exit_zero_note(Window()) == "a #1, b #2"
    monkeypatch.setattr(L.dialects, "registered", lambda: (C,))
    assert L._exit_zero_note(Window()) is None


def test_describe_startup_failure_through_the_dialect_that_logged_it():
    numbers = {"max_model_len": 4096, "needed_gib": 2.0, "available_gib": 1.0}
    assert L._describe_startup_failure({"dialect": "vllm", "reason": "zzz", **numbers}) == (
        "zzz (4096), (2.0 GiB KV cache is needed, which is larger than the available KV cache memory (1.0 GiB))")
    # no dialect named: the one whose grammar has the reason; else the reason itself, else "unknown"
    from servewatch import dialects
    literal = sorted(dialects.by_name("vllm").grammar_literals() - dialects.by_name("sglang").grammar_literals())[0]
    assert L._describe_startup_failure({"reason": literal, **numbers}).startswith(f"{literal} (4096), (2.0 GiB")
    assert L._describe_startup_failure({"reason": "zzz", **numbers}) == "zzz"
    assert L._describe_startup_failure({}) == "unknown"


def test_a_death_line_read_at_the_exit_itself_is_before_it():
    # gap 0 (the line timed at the exit): said as read just after the exit, not as "0.0 s before"
    v, = L.detect_process_exit(_exited(code=1, logs=(log(2, "engine_dead"),), metrics=(scrape(0, dialect="sglang"),)),
                               CONFIG)
    assert v.why == ("target process 1 is gone (exit code 1); the engine died before it (its death lines were read "
                     "just after the exit)")
    v, = L.detect_process_exit(_exited(code=1, logs=(log(1.75, "engine_dead"),),
                                       metrics=(scrape(0, dialect="sglang"),)), CONFIG)
    assert v.why == "target process 1 is gone (exit code 1); the engine died 0.2 s before"


def test_the_startup_failure_line_with_numbers_is_one_with_more_than_two_fields():
    lines = (log(1, "startup_failure", reason="first", dialect="vllm"),
             log(1.5, "startup_failure", reason="numbers", dialect="vllm", needed_gib=4.0))
    v, = L.detect_process_exit(_exited(code=1, logs=lines), CONFIG)
    assert v.details["startup_failure"] == "numbers"


def test_engine_children_gone_of_the_newest_root_and_since_its_first_zombie():
    # an earlier root (create time 1) then the newest (create time 5) that showed its engine, which is now gone
    first, last, missing = ES._engine_children_gone((proc(0), proc(1, root_ct=5.0), proc(2, members=(API,), root_ct=5.0)))
    assert (first.t, last.t, missing) == (T0 + 2, T0 + 2, [(2, "VLLM::EngineCore")])
    # a zombie then gone: gone since the zombie
    zombie = replace(CORE, status="zombie")
    first, last, _ = ES._engine_children_gone((proc(0), proc(1, members=(API, zombie)), proc(2, members=(API,))))
    assert (first.t, last.t) == (T0 + 1, T0 + 2)


def test_a_death_line_with_exit_code_0_names_no_signal():
    w = Window(health=(health(0), health(7)), logs=(log(5, "engine_dead", reason="R", worker_rank=1, exit_code=0),))
    assert L.detect_engine_dead(w, CONFIG)[0].why == "engine dead: 1 engine-death log line(s) (R: worker rank 1, exit code 0)"
