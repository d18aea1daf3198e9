"""py-spy stacks of a process tree: a real dump of a running and of a stopped Python process, a typed
status when py-spy is missing or the process is gone, and a private file."""

import os
import signal
import subprocess
import sys

import pytest

from servewatch.actions.stacks import ProcessStacks, capture, divergence, innermost
from servewatch.actions.tree import Member, snapshot
from tests.tools import needs_tool

SLEEPER = [sys.executable, "-c", "import time\ndef waiting_for_the_guard():\n    time.sleep(60)\n"
                                 "print('up', flush=True)\nwaiting_for_the_guard()"]


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(SLEEPER, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"     # inside the function from here on
    yield proc
    proc.kill()
    proc.wait(timeout=10)


@needs_tool("py-spy")
@pytest.mark.parametrize("stopped", [False, True])
def test_a_real_dump_of_a_running_and_of_a_stopped_process(tmp_path, sleeper, stopped):
    if stopped:
        sleeper.send_signal(signal.SIGSTOP)
    members = snapshot(sleeper.pid)
    assert [m.pid for m in members] == [sleeper.pid] and members[0].role == "api"
    result = capture(members, tmp_path / "stacks", timeout_s=20)
    assert result.status == "captured", result
    assert result.producer.startswith("py-spy ")
    assert result.public() == {"status": "captured", "producer": result.producer, "processes": {"api": "captured"},
                               "diverging": []}
    text = open(result.path).read()
    assert "waiting_for_the_guard" in text            # the frame the process is really in
    assert os.stat(result.path).st_mode & 0o777 == 0o600
    if stopped:
        sleeper.send_signal(signal.SIGCONT)


def test_without_py_spy_the_outcome_is_typed_unavailable(tmp_path, monkeypatch):
    import servewatch.actions.stacks as stacks

    monkeypatch.setattr(stacks, "find_py_spy", lambda: None)
    result = stacks.capture((Member(os.getpid(), 0.0, "api"),), tmp_path)
    assert (result.status, result.path) == ("unavailable", None)
    assert "pip install py-spy" in result.reason


def test_a_py_spy_that_cannot_run_is_a_failure_per_process(tmp_path):
    result = capture((Member(os.getpid(), 0.0, "api"),), tmp_path, py_spy=str(tmp_path / "no-py-spy"))
    assert result.status == "failed" and result.public()["processes"] == {"api": "failed"}


def test_a_pid_that_is_gone_or_reused_is_not_in_the_tree(sleeper):
    create_time = snapshot(sleeper.pid)[0].create_time
    assert snapshot(sleeper.pid, create_time + 5.0) == ()       # same PID, another process
    sleeper.kill()
    sleeper.wait(timeout=10)
    assert snapshot(sleeper.pid, create_time) == ()


@needs_tool("py-spy")
def test_an_unwritable_stacks_directory_is_a_typed_failure_not_an_exception(tmp_path, sleeper):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = capture(snapshot(sleeper.pid), blocker / "stacks", timeout_s=20)
    assert (result.status, result.path) == ("failed", None)
    assert result.reason.startswith("cannot write ") and str(blocker) in result.reason


def rank_process(function: str):
    """A Python process that announces, then stays, inside `function` (a rank's step loop or its wait)."""
    code = (f"import time\ndef {function}():\n    print('up', flush=True)\n    while True:\n        time.sleep(0.05)\n"
            f"{function}()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"
    return proc


@pytest.fixture
def ranks():
    started = []
    yield lambda function: started.append(rank_process(function)) or started[-1]
    for proc in started:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)


@needs_tool("py-spy")
@pytest.mark.parametrize("n", [2, 3])
def test_the_rank_out_of_step_with_its_siblings_is_named_from_real_dumps(tmp_path, ranks, n):
    """n TP workers: all but the last wait in one function; the last is in another and stopped (SIGSTOP,
    as a wedged rank). With two ranks there is no majority: the stopped one is the odd one."""
    procs = [ranks("wait_in_the_collective") for _ in range(n - 1)] + [ranks("step_that_never_ends")]
    procs[-1].send_signal(signal.SIGSTOP)
    members = tuple(Member(p.pid, 0.0, "worker", f"VLLM::Worker_TP{i}") for i, p in enumerate(procs))
    result = capture(members, tmp_path, timeout_s=20)
    assert result.status == "captured", result
    split = result.divergence
    assert split is not None and [p.pid for p in split.odd] == [procs[-1].pid]
    assert f"VLLM::Worker_TP{n - 1} (pid {procs[-1].pid}) is in step_that_never_ends (<string>:" in split.words
    assert "(stopped), while" in split.words
    assert f"its {n - 1} sibling(s)" in split.words and "are in wait_in_the_collective (<string>)" in split.words
    assert result.public()["diverging"] == [f"VLLM::Worker_TP{n - 1}"]      # titles only leave the machine
    assert open(result.path).read().startswith(f"divergence: {split.words}\n")


def stacks(title, where, stopped=False):
    return ProcessStacks(1, "worker", "captured", 0.1, title, where, stopped)


def test_ranks_in_one_place_or_of_no_known_kind_have_no_divergence():
    same = [stacks("VLLM::Worker_TP0", "dequeue (shm.py:1)"), stacks("VLLM::Worker_TP1", "dequeue (shm.py:1)")]
    assert divergence(same) is None
    lines_apart = [stacks("VLLM::Worker_TP0", "dequeue (shm.py:1)"), stacks("VLLM::Worker_TP1", "dequeue (shm.py:9)")]
    assert divergence(lines_apart) is None                # one function, two of its lines: one place
    unranked = [stacks("python3", "a (x.py:1)"), stacks("python3", "b (x.py:2)")]
    assert divergence(unranked) is None                   # not engine ranks: nothing to compare
    both_stopped = [stacks("VLLM::Worker_TP0", "a (x.py:1)", True), stacks("VLLM::Worker_TP1", "a (x.py:1)", True)]
    assert divergence(both_stopped) is None               # the whole group held still: no rank is the odd one
    lone = [stacks("VLLM::Worker_TP0", "a (x.py:1)"), stacks("VLLM::EngineCore", "b (x.py:2)")]
    assert divergence(lone) is None                       # different kinds are not siblings


def test_a_stopped_rank_in_the_same_function_as_its_running_siblings_is_named():
    split = divergence([stacks("VLLM::Worker_TP0", "all_reduce (comm.py:10)"),
                        stacks("VLLM::Worker_TP1", "all_reduce (comm.py:12)", stopped=True)])
    assert split.public() == ["VLLM::Worker_TP1"]
    assert split.words == ("VLLM::Worker_TP1 (pid 1) stopped (state T) in all_reduce (comm.py), where its 1 "
                           "sibling(s) (VLLM::Worker_TP0 (pid 1)) are too, not stopped")


def test_two_ranks_apart_with_neither_stopped_are_both_said():
    split = divergence([stacks("VLLM::Worker_TP0", "a (x.py:1)"), stacks("VLLM::Worker_TP1", "b (x.py:2)")])
    assert split.words == ("the ranks are in different places: VLLM::Worker_TP0 (pid 1) is in a (x.py:1); "
                           "VLLM::Worker_TP1 (pid 1) is in b (x.py:2)")


def test_the_main_threads_innermost_frame_is_read_from_a_dump_with_the_file_base_name_only():
    dump = ('Process 9: python -m vllm\nPython v3.12.1 (/usr/bin/python3.12)\n\n'
            'Thread 10 (idle): "pt_thread"\n    run (/x/threading.py:1)\n'
            'Thread 9 (active): "MainThread"\n    acquire_read (/opt/v/vllm/shm_broadcast.py:412)\n'
            '    dequeue (/opt/v/vllm/shm_broadcast.py:480)\n')
    assert innermost(dump) == "acquire_read (shm_broadcast.py:412)"
    assert innermost('Thread 3 (idle): "other"\n    wait (/a/b.py:7)\n') == "wait (b.py:7)"
    assert innermost("Thread 1799 (idle)\n    f (<string>:5)\n    <module> (<string>:6)\n") == "f (<string>:5)"
    assert innermost("py-spy: failed to suspend process") is None
