"""What a stop does to a llama-server that waits on its clients (issue 53): its first SIGTERM ends the loop and the
process waits on clients still connected; a second ends it with exit 1 (server.cpp:28-35; the lab's real server:
tests/fixtures/llamacpp/stop_and_kill.json). guard's drain sends that second SIGTERM, declared by the dialect
(STOP_SIGNAL_AGAIN_AFTER_S), to the server's root only, instead of waiting out its drain timeout and killing the tree.

The server here is a stand-in that handles SIGTERM exactly as llama-server does, started through a link named
llama-server (its kernel name, which the dialect's process roles know)."""

from __future__ import annotations

import os
import sys
import time

from servewatch.dialects import llamacpp
from tests.test_guard_command import finish, guard, reaper, started  # noqa: F401 - reaper is a fixture
from tests.test_watch_command import free_port, read_stderr_until

# Like server.cpp's signal_handler: the first signal "cleans up" and then the process stays (an HTTP thread waits on a
# client that never hangs up); the second writes its line and exits 1.
STAND_IN = f"""
import signal, sys, threading
first = threading.Event()
def handler(signum, frame):
    if first.is_set():
        sys.stderr.write({llamacpp.SECOND_SIGNAL_LINE!r} + "\\n"); sys.stderr.flush(); sys.exit(1)
    first.set()
    print("0.00.100.000 I srv    operator(): operator(): " + {llamacpp.SHUTDOWN_LINE!r}, flush=True)
signal.signal(signal.SIGTERM, handler)
print("up", flush=True)
while True:
    signal.pause()
"""


def _stand_in(tmp_path, name):
    link = tmp_path / name
    os.symlink(sys.executable, link)
    return [str(link), "-c", STAND_IN]


def _drain(tmp_path, name, drain_timeout):
    proc = guard(f"http://127.0.0.1:{free_port()}", "--drain-timeout", drain_timeout,
                 server=_stand_in(tmp_path, name))
    pid, seen = started(proc)
    if "up\n" not in seen:                                  # the server may write before guard's line, or after
        read_stderr_until(proc, r"^up$", timeout_s=30)      # its handler is in place
    began = time.monotonic()
    proc.send_signal(15)
    lines, stderr = finish(proc)
    return proc.returncode, lines, stderr, time.monotonic() - began, pid


def test_guard_ends_a_stop_that_waits_on_clients_with_the_second_sigterm(tmp_path, reaper):
    code, lines, stderr, took, pid = _drain(tmp_path, "llama-server", "30s")
    reaper(pid)
    assert code == 1, stderr                                  # the server's own status: its forced exit
    assert "the server exited 1 after a second SIGTERM" in stderr
    drains = [line for line in lines if line.get("guard") == "drain"]
    assert len(drains) == 2
    assert (f"servewatch guard: the server is still up {llamacpp.STOP_SIGNAL_AGAIN_AFTER_S:g} s after SIGTERM: "
            f"llama.cpp stops its work at the first signal and then waits on clients still connected; a second "
            f"SIGTERM ends it (SIGTERM to pid {pid})") in stderr
    assert not any(line.get("guard") == "kill" for line in lines)
    assert llamacpp.SECOND_SIGNAL_LINE in stderr
    # the second signal after the dialect's 2 s, not the 30 s drain timeout (the allowance: guard's start and stop)
    assert llamacpp.STOP_SIGNAL_AGAIN_AFTER_S <= took < llamacpp.STOP_SIGNAL_AGAIN_AFTER_S + 10, took


def test_a_process_no_dialect_knows_gets_one_sigterm_and_the_drain_timeout(tmp_path, reaper):
    code, lines, stderr, took, pid = _drain(tmp_path, "some-server", "3s")
    reaper(pid)
    assert code == 5, stderr                                  # never signalled twice: killed at the drain timeout
    assert [line["guard"] for line in lines if line.get("guard") in ("drain", "kill")] == ["drain", "kill"]
    assert llamacpp.SECOND_SIGNAL_LINE not in stderr and took >= 3


def test_the_labs_stop_sends_the_second_sigterm_rather_than_waiting_out_its_grace(tmp_path):
    """The lab's stop of its llama-server (servewatch/lab/llamacpp.py): SIGTERM, then after the dialect's
    STOP_SIGNAL_AGAIN_AFTER_S a second one (exit 1 at once), not the lab's 15 s grace and a SIGKILL."""
    import subprocess
    from pathlib import Path

    import psutil

    from servewatch.lab.llamacpp import LlamacppConfig, LlamacppServer
    from servewatch.lab.server import STOP_GRACE_S

    server = LlamacppServer(Path(sys.executable), LlamacppConfig(model_path=tmp_path / "m.gguf",
                                                                 binary=tmp_path / "llama-server"), tmp_path / "log")
    server.proc = subprocess.Popen([sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
    try:
        server._tracked = {server.proc.pid: psutil.Process(server.proc.pid)}
        assert server.proc.stdout.readline() == "up\n"          # its handler is in place
        began = time.monotonic()
        code = server.stop()
        took = time.monotonic() - began
        assert code == 1 and llamacpp.SECOND_SIGNAL_LINE in server.proc.stderr.read()
        assert llamacpp.STOP_SIGNAL_AGAIN_AFTER_S <= took < llamacpp.STOP_SIGNAL_AGAIN_AFTER_S + 5 < STOP_GRACE_S, took
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(5)


def test_guards_exit_line_says_the_second_sigterm():
    from servewatch.actions.policy import Outcome, exit_status

    assert exit_status(Outcome(server_exit=1, server_gone=True, drain="forced")) == \
        (1, "the server exited 1 after a second SIGTERM")
    assert exit_status(Outcome(server_exit=0, server_gone=True, drain="drained")) == \
        (0, "the server exited 0 after the drain")
