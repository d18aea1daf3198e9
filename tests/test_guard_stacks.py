"""py-spy stacks of a process tree: a real dump of a running and of a stopped Python process, a typed
status when py-spy is missing or the process is gone, and a private file."""

import os
import signal
import subprocess
import sys

import pytest

from servewatch.actions.stacks import capture
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
    assert result.public() == {"status": "captured", "producer": result.producer, "processes": {"api": "captured"}}
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
