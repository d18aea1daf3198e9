"""engine_dead, process_exit, health_loss on hand-built windows."""

from tests.timeline_builders import API, ENGINE, WORKER, Timeline

from servewatch.detectors import run_detectors


def by_name(window):
    return {v.name: v for v in run_detectors(window)}


def test_health_503_on_vllm_is_engine_dead_with_onset_at_first_503():
    tl = Timeline().ticks(10, running=4)
    onset = tl.t
    tl.ticks(2, running=4, steps=0, gen=0, health=503)
    verdicts = by_name(tl.window())
    assert verdicts["engine_dead"].onset == onset
    assert "/health 503 for 2 probe(s)" in verdicts["engine_dead"].why
    assert "alive_health_ok_no_progress" not in verdicts


def test_503_on_sglang_alone_is_not_engine_dead():
    # SGLang answers 503 while starting and when its health generation times out.
    tl = Timeline(dialect="sglang").ticks(10, running=4).ticks(4, health=503)
    verdicts = by_name(tl.window())
    assert "engine_dead" not in verdicts
    assert "health_loss" in verdicts


def test_engine_child_gone_while_api_lives_is_engine_dead():
    tl = Timeline().ticks(10, running=4)
    gone_at = tl.t + 0.02
    tl.ticks(3, members=(API,))
    verdict = by_name(tl.window())["engine_dead"]
    assert verdict.onset == gone_at
    assert "VLLM::EngineCore" in verdict.why and "VLLM::Worker_TP0" in verdict.why
    assert verdict.details["api_alive"] is True


def test_engine_dead_log_line_is_evidence():
    tl = Timeline().ticks(10, running=4).log("engine_dead", reason="EngineDeadError").ticks(1)
    verdict = by_name(tl.window())["engine_dead"]
    assert any(e.source == "log" for e in verdict.evidence)


def test_exit_zero_after_engine_death_is_flagged():
    tl = Timeline().ticks(10, running=4).ticks(4, health=503).ticks(2, health=None, health_error="connect")
    tl.ticks(2, health=None, health_error="connect", alive=False, exit_code=0)
    verdicts = by_name(tl.window())
    exit_verdict = verdicts["process_exit"]
    assert exit_verdict.details["exit_code"] == 0
    assert exit_verdict.details["after_engine_death"] is True
    assert exit_verdict.details["masked_failure"] is True
    assert "#48966" in exit_verdict.why
    assert "engine_dead" not in verdicts  # the whole target is gone: that is process_exit's story


def test_a_masked_exit_on_sglang_is_flagged_without_citing_vllms_issue():
    tl = Timeline(dialect="sglang").ticks(10, running=4).log("engine_dead", reason="scheduler exception").ticks(2)
    tl.ticks(2, health=None, health_error="connect", alive=False, exit_code=0)
    exit_verdict = by_name(tl.window())["process_exit"]
    assert exit_verdict.details["masked_failure"] is True
    assert "hides the failure from Restart=on-failure" in exit_verdict.why and "vLLM" not in exit_verdict.why


def test_exit_without_engine_death_and_unknown_code():
    tl = Timeline().ticks(10, running=0).ticks(3, health=None, health_error="connect", alive=False)
    verdict = by_name(tl.window())["process_exit"]
    assert verdict.details["after_engine_death"] is False
    assert verdict.details["exit_code"] is None
    assert "unknown" in verdict.why


def test_startup_failure_reason_from_the_log_rides_on_process_exit():
    tl = Timeline().ticks(2, running=0, health=None, health_error="connect")
    tl.log("startup_failure", reason="EngineCore failed to start.")
    tl.log("startup_failure", reason="To serve at least one request with the model's max seq len",
           max_model_len=2048, needed_gib=0.0, available_gib=0.0)
    tl.log("startup_failure", reason="Engine core initialization failed.")
    tl.ticks(2, health=None, health_error="connect", alive=False, exit_code=1)
    verdict = by_name(tl.window())["process_exit"]
    assert verdict.details["startup_failure"].startswith("To serve at least one request")
    assert "exit code 1" in verdict.why
    assert ("To serve at least one request with the model's max seq len (2048), (0.0 GiB KV cache is needed, "
            "which is larger than the available KV cache memory (0.0 GiB))") in verdict.why


def test_health_loss_needs_consecutive_failures_and_rearms():
    tl = Timeline().ticks(5, running=0).ticks(2, health=None, health_error="timeout")
    assert "health_loss" not in by_name(tl.window())
    tl.ticks(1, health=None, health_error="connect")
    verdict = by_name(tl.window())["health_loss"]
    assert verdict.details["failed_probes"] == 3
    assert "timeout" in verdict.why and "connect" in verdict.why
    tl.ticks(1, running=0)
    assert "health_loss" not in by_name(tl.window())


def test_target_down_from_the_start_is_health_loss():
    tl = Timeline(with_process=False).ticks(4, health=None, health_error="connect", metrics_error="connect")
    assert set(by_name(tl.window())) == {"health_loss"}


def test_healthy_window_has_no_liveness_verdict():
    tl = Timeline().ticks(100, running=4, members=(API, ENGINE, WORKER))
    assert by_name(tl.window()) == {}


def test_an_engine_that_died_behind_an_api_that_exits_a_second_later_is_still_engine_dead():
    """A real vLLM's API server exits about a second after its engine: the engine's death is said (engine_dead)
    though the newest sample already shows the API gone; a target that went all at once stays process_exit's."""
    tl = Timeline().ticks(10, running=4)
    gone_at = tl.t + 0.02
    tl.ticks(2, members=(API,)).ticks(2, alive=False, health=None, health_error="connect")
    verdicts = by_name(tl.window())
    assert verdicts["engine_dead"].onset == gone_at
    assert "the API process outlived it, then exited" in verdicts["engine_dead"].why
    assert "process_exit" in verdicts

    at_once = Timeline().ticks(10, running=4).ticks(3, alive=False, health=None, health_error="connect")
    assert "engine_dead" not in by_name(at_once.window())


def test_a_worker_killed_whose_api_server_exits_before_its_death_lines_are_read_is_engine_dead_at_once():
    # As on a real vLLM 0.32 in CI: the worker went (SIGKILL) while the API server lived, the API server
    # exited 0 half a second later, and the engine's death lines were read just after that exit. The
    # vanished worker used to wait 2 s for a shutdown line (logs are read) while the death lines were
    # judged by when they were read (after the exit: "the whole target went at once"), so engine_dead
    # came 2 s after process_exit. The engine's own death lines say it was no shutdown.
    tl = Timeline().log("stats", engine=0).ticks(10, running=4)
    gone_at = tl.t + 0.02
    tl.ticks(1, members=(API, ENGINE))
    tl.ticks(1, health=None, health_error="connect", alive=False, exit_code=0)
    tl.log("engine_dead", reason="Worker proc died unexpectedly", worker_rank=0)
    verdicts = by_name(tl.window())
    assert verdicts["engine_dead"].onset == gone_at
    assert "the API process outlived it, then exited" in verdicts["engine_dead"].why
    assert "the engine died 0.5 s before" in verdicts["process_exit"].why


def test_a_worker_gone_in_a_shutdown_whose_line_comes_late_is_no_engine_death():
    # The other side of the wait: without a death line, a vanished worker waits for the shutdown line.
    tl = Timeline().log("stats", engine=0).ticks(10, running=4)
    tl.ticks(2, members=(API,))
    tl.log("shutdown")
    tl.ticks(4, members=(API,))
    assert "engine_dead" not in by_name(tl.window())


def test_an_exit_seen_before_the_engines_death_lines_are_read_waits_for_them_and_names_the_death():
    # A real vLLM 0.32 whose worker was SIGKILLed: its API server exited 0.5 s later, and in one drill the exit
    # was judged before the EngineDeadError lines were read (lines are timed when read): "exit code 0", no word
    # of the death. Where a log is read, the exit waits up to shutdown_log_wait_s for the lines that say why.
    tl = Timeline().ticks(10, running=4).log("stats", running=4)
    tl.ticks(1, health=None, health_error="connect", alive=False, exit_code=0)
    assert "process_exit" not in by_name(tl.window())          # the exit is seen; the log not read since
    tl.log("engine_dead", reason="EngineDeadError").ticks(1, health=None, health_error="connect", alive=False,
                                                            exit_code=0)
    verdict = by_name(tl.window())["process_exit"]
    assert verdict.details["after_engine_death"] is True and "the engine died" in verdict.why
    assert "hides the failure from Restart=on-failure" in verdict.why


def test_an_exit_with_nothing_in_the_log_is_judged_once_the_wait_is_over():
    tl = Timeline().ticks(10, running=4).log("stats", running=4)
    waited = 0
    while "process_exit" not in by_name(tl.tick(health=None, health_error="connect", alive=False).window()):
        waited += 1
        assert waited * tl.interval <= 2.0 + tl.interval, "process_exit held past shutdown_log_wait_s"
    assert waited * tl.interval >= 2.0 - tl.interval                  # it did wait for the log
    assert by_name(tl.window())["process_exit"].details["after_engine_death"] is False
