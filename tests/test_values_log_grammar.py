"""Values of servewatch/doctor/log_grammar.py (issue 50: the mutation rule finds it): a log line split by each
engine's prefix (current and older, ANSI colour removed), uvicorn's and bare lines; year-less and elapsed stamps in
seconds (a new year when the month goes back); an engine frame's module; the OOM message's bytes; signals, shutdown
lines, force-kills, exit codes and forced stops; launch settings and startup stages."""

from __future__ import annotations

import pytest

from servewatch.doctor.log_grammar import (ASSUMED_YEAR, CHILD_PROCESS_HEADER, EXCEPTION_LINE, FRAME,
                                           SIGNAL_NUMBERS, Line, StampClock, api_process, engine_frame, exit_code,
                                           force_killed, forced_stop, is_engine_process, is_oom_exception,
                                           is_oom_message, known_startup_failure, oom_details, settings,
                                           shutdown_literals, signals, split, startup_stage, timeout_literals)


@pytest.mark.parametrize("raw, line", [
    ("(APIServer pid=26676) INFO 12-01 17:07:36 [launcher.py:254] [shutdown] API server: shutdown triggered",
     Line("vllm", "APIServer", 26676, "INFO", "12-01 17:07:36", "[shutdown] API server: shutdown triggered", True)),
    ("\x1b[1;36m(EngineCore_0 pid=2417)\x1b[0;0m ERROR 09-10 15:53:37 [core.py:387] Traceback (most recent call last):",
     Line("vllm", "EngineCore_0", 2417, "ERROR", "09-10 15:53:37", "Traceback (most recent call last):", True)),
    ("ERROR 09-10 15:53:37 [async_llm.py:399] vllm.v1.engine.exceptions.EngineDeadError: boom",
     Line("vllm", None, None, "ERROR", "09-10 15:53:37", "vllm.v1.engine.exceptions.EngineDeadError: boom", True)),
    ("(VllmWorker rank=1 pid=7) some bare message", Line("vllm", "VllmWorker", 7, None, None, "some bare message", True)),
    ("INFO:     Shutting down\r\n", Line(None, None, None, "INFO", None, "Shutting down", False)),
    ("[2026-11-30 13:51:42] Prefill batch, #new-seq: 1",
     Line("sglang", None, None, None, "2026-11-30 13:51:42", "Prefill batch, #new-seq: 1", True)),
    ("0.15.196.315 I srv    operator(): cleaning up before exit...",
     Line("llamacpp", None, None, "I", "0.15.196.315", "srv    operator(): cleaning up before exit...", True)),
    ("just text\n", Line(None, None, None, None, None, "just text", False)),
])
def test_a_line_split(raw, line):
    assert split(raw) == line


def test_year_less_stamps_count_seconds_from_the_first_and_cross_a_new_year():
    clock = StampClock()
    assert ASSUMED_YEAR == 2000
    assert clock.seconds(None) is None and clock.seconds("") is None
    assert clock.seconds("12-31 23:59:58") == 0.0
    assert clock.seconds("12-31 23:59:59") == 1.0
    assert clock.seconds("01-01 00:00:01") == 3.0             # 2001-01-01
    assert clock.year == 2001
    assert clock.seconds("01-01 00:00:02") == 4.0
    assert clock.seconds("not a stamp") is None
    assert clock.seconds("13-45 99:00:00") is None


def test_a_stamp_earlier_in_the_same_month_is_no_new_year():
    clock = StampClock()
    assert clock.seconds("02-29 10:00:10") == 0.0             # a leap year: 02-29 parses
    assert clock.seconds("02-29 10:00:00") == -10.0           # written out of order, same month
    assert clock.year == 2000
    assert clock.seconds("02-29 10:00:20") == 10.0
    assert clock.last.second == 20


def test_stamps_that_state_the_year():
    clock = StampClock()
    assert clock.seconds("2026-11-30 13:51:14") == 0.0
    assert clock.seconds("2026-11-30 13:52:15") == 61.0
    assert clock.seconds("2026-11-30 13:50:14") == -60.0
    assert clock.last.minute == 52


def test_elapsed_stamps_are_the_process_s_own_clock():
    clock = StampClock()
    assert clock.seconds("0.15.196.315") == 0.0
    assert clock.first_elapsed == pytest.approx(15.196315)
    assert clock.seconds("1.02.003.004") == round(62.003004 - 15.196315, 6)
    assert clock.seconds("0.15.196.316") == 0.000001
    assert clock.first is None


def test_the_traceback_grammar():
    frame = FRAME.match('  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 378, in run_engine_core')
    assert (frame["path"], frame["line"], frame["function"]) == (
        "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", "378", "run_engine_core")
    assert EXCEPTION_LINE.match("torch.OutOfMemoryError: CUDA out of memory.")["type"] == "torch.OutOfMemoryError"
    assert EXCEPTION_LINE.match("KeyboardInterrupt")["type"] == "KeyboardInterrupt"
    assert EXCEPTION_LINE.match("Error in something") is None
    assert CHILD_PROCESS_HEADER.match("Process EngineCore:")["process"] == "EngineCore"


@pytest.mark.parametrize("path, function, frame", [
    ("/venv/lib/python3.12/site-packages/vllm/v1/sample/sampler.py", "apply_penalties",
     "vllm.v1.sample.sampler.apply_penalties"),
    ("C:\\py\\site-packages\\sglang\\srt\\managers\\scheduler.py", "event_loop",
     "sglang.srt.managers.scheduler.event_loop"),
    ("/home/vllm/code/vllm/engine.py", "<lambda>", "vllm.engine.<lambda>"),    # the innermost package directory
    ("/venv/lib/python3.12/site-packages/vllm/csrc/kernel.cu", "run", None),   # not a module path
    ("/venv/lib/python3.12/site-packages/vllm/v1/core.py", "f; rm", None),
    ("/venv/lib/python3.12/site-packages/torch/nn/module.py", "forward", None),
    ("/venv/lib/python3.12/site-packages/vllm", "f", None),                    # the package itself, no module
    ("/venv/vllm/x.pyc", "f", None),
])
def test_an_engine_frame(path, function, frame):
    assert engine_frame(path, function) == frame


@pytest.mark.parametrize("process, engine", [
    ("EngineCore_0", True), ("VllmWorker", True), ("Worker_TP1", True), ("scheduler_TP0", True), ("TP0", True),
    ("APIServer", False), (None, False), ("", False),
])
def test_an_engine_process(process, engine):
    assert is_engine_process(process) is engine


def test_the_oom_message_in_bytes():
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity "
               "of 11.63 GiB of which 84.88 MiB is free. Including non-PyTorch memory")
    assert oom_details(message) == {"requested_bytes": 112 * 2**20, "total_bytes": 11.63 * 2**30,
                                    "free_bytes": 84.88 * 2**20, "device": 0}
    assert oom_details("Tried to allocate 2.00 GiB") == {"requested_bytes": 2 * 2**30}
    assert oom_details("Tried to allocate 3 GB. Device 1 has a total capacity of 80 GB of which 512 KiB is free") == {
        "requested_bytes": 3e9, "total_bytes": 80e9, "free_bytes": 512 * 1024, "device": 1}
    assert oom_details("nothing of the sort") == {}
    assert is_oom_exception("torch.OutOfMemoryError") and not is_oom_exception("RuntimeError")
    assert is_oom_message("CUDA out of memory. Tried") and not is_oom_message("memory is fine")


def test_signals_shutdowns_force_kills_exits():
    assert signals("[shutdown] EngineCore: trigger received signal=SIGTERM") == ["SIGTERM"]
    assert signals("SIGINT received, shutting down") == ["SIGINT"]
    assert signals("all quiet") == []
    assert shutdown_literals("[shutdown] API server: shutdown triggered") == ["[shutdown] API server: shutdown triggered"]
    assert shutdown_literals("INFO: Application shutdown complete.") == ["Application shutdown complete."]
    assert shutdown_literals("Shutting down; Gracefully exiting...") == ["Gracefully exiting...", "Shutting down"]
    assert shutdown_literals("nothing") == []
    assert force_killed("force killing remaining process EngineCore_0 now") == "EngineCore_0"
    assert force_killed("nothing") is None
    assert exit_code("Engine core proc EngineCore_0 died with exit code -9") == -9
    assert exit_code("Worker terminated with exit code: 1") == 1
    assert exit_code("Scheduler crashed with exit code 137") == 137
    assert exit_code("nothing") is None
    assert forced_stop("Received second interrupt, terminating immediately.") == 1
    assert forced_stop("Received an interrupt") is None
    assert SIGNAL_NUMBERS[9] == "SIGKILL" and SIGNAL_NUMBERS[15] == "SIGTERM" and SIGNAL_NUMBERS[6] == "SIGABRT"


def test_settings_and_startup_stages():
    assert settings("non-default args: {'max_num_seqs': 193, 'gpu_memory_utilization': 0.9}") == {
        "max_num_seqs": 193, "gpu_memory_utilization": 0.9}
    assert settings("{'max_num_seqs': 193}") == {}                       # no marker: not a settings line
    assert settings("non-default args: {'model': 'x'}") == {}
    stage, match = startup_stage("Model loading took 14.96 GiB and 30.5 seconds")
    assert (stage, match["gib"], match["seconds"]) == ("weights", "14.96", "30.5")
    assert startup_stage("Available KV cache memory: 3.5 GiB")[0] == "KV sizing"
    assert startup_stage("nothing") is None
    assert known_startup_failure("nothing") is None
    undersized = ("ValueError: To serve at least one request with the model's max seq len (2048), (0.0 GiB KV cache "
                  "is needed, which is larger than the available KV cache memory (0.0 GiB). Based on the available "
                  "memory, the estimated maximum model length is 1920. Try increasing `gpu_memory_utilization`")
    assert known_startup_failure(undersized) == (
        "To serve at least one request with the model's max seq len (2048), (0.0 GiB KV cache is needed, which is "
        "larger than the available KV cache memory (0.0 GiB))")


def test_a_startup_failure_with_its_reason_alone_is_not_rebuilt():
    assert known_startup_failure("ValueError: No available memory for the cache blocks. Try increasing "
                                 "`gpu_memory_utilization` when initializing the engine.") is None


def test_trailing_characters_kept_and_a_relative_engine_path():
    assert split("just text  \n").msg == "just text  "             # only the line ending goes
    assert split("a line ending in X\r\n").msg == "a line ending in X"
    assert engine_frame("vllm/engine.py", "step") == "vllm.engine.step"
    assert is_engine_process("MyWorker") is True                     # a name inside the process name


def test_the_api_server_s_name_and_timeout_lines():
    assert api_process("vllm", "X") == "APIServer"
    assert api_process("sglang", "X") == "X"
    assert api_process(None, "X") == "X"
    assert api_process("vllm", None) == "APIServer"
    assert timeout_literals("RPC call to execute_model timed out") == ["RPC call to w+ timed out"]
    assert timeout_literals("Timed out waiting for engine core processes to start") == [
        "Timed out waiting for engine core processes to start"]
    assert timeout_literals("all fine") == []


def test_an_oom_size_in_a_unit_the_table_lacks_is_left_out():
    assert oom_details("Tried to allocate 5.00 iB") == {}
