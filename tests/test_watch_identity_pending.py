"""watch --pid of a server still starting (nothing listens on the URL's port yet): its tree is recorded,
and proven once it listens; when another process takes the port instead, the watch ends with exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

LISTEN_LATER = """
import socket, sys, time
sys.stdin.readline() if sys.argv[2] == "when-told" else time.sleep(float(sys.argv[2]))
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("listening", flush=True)
time.sleep(60)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _watch(port: int, pid: int, duration: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servewatch", "watch", f"http://127.0.0.1:{port}", "--pid", str(pid),
                           "--interval", "0.3", "--no-probe", "--duration", str(duration), "--json"],
                          capture_output=True, text=True, timeout=120)


def test_a_server_that_listens_later_is_proven_then():
    port = _free_port()
    # The server listens only once the watch has said it does not yet (a loaded machine may take longer to
    # start the watch than any fixed delay).
    server = subprocess.Popen([sys.executable, "-c", LISTEN_LATER, str(port), "when-told"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        watch = subprocess.Popen([sys.executable, "-m", "servewatch", "watch", f"http://127.0.0.1:{port}", "--pid",
                                  str(server.pid), "--interval", "0.3", "--no-probe", "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        deadline = time.monotonic() + 60
        for line in watch.stderr:          # the watch's own lines: an event to wait on, not a time
            lines.append(line)
            if "does not listen on the URL's port yet" in line:
                server.stdin.write("listen now\n")
                server.stdin.flush()
            if f"pid {server.pid} listens on port {port}" in line or time.monotonic() > deadline:
                break
        watch.terminate()
        watch.wait(timeout=30)
    finally:
        server.kill()
        server.wait(timeout=10)
    text = "".join(lines)
    assert "does not listen on the URL's port yet" in text, text
    assert f"identity: pid {server.pid} listens on port {port} itself" in text, text


def test_another_process_taking_the_port_ends_the_watch_with_exit_2():
    port = _free_port()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    other = subprocess.Popen([sys.executable, "-c", LISTEN_LATER, str(port), "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        done = _watch(port, sleeper.pid, 60.0)
    finally:
        for proc in (sleeper, other):
            proc.kill()
            proc.wait(timeout=10)
    assert done.returncode == 2, done.stderr
    assert f"pid {sleeper.pid}" in done.stderr and f"port {port} is held by pid {other.pid}" in done.stderr, done.stderr


def test_a_server_that_exits_before_it_listens_is_left_to_process_exit_not_called_a_mismatch():
    # As with a real vLLM whose start failed (an undersized KV cache) in CI: its API server exited before it
    # ever listened, and stayed a zombie until its parent reaped it. pid_exists says yes for a zombie, the
    # proof said "not running", and the watch ended with exit 2 — before its process_exit verdict.
    import asyncio

    from servewatch.watch.lifecycle import prove_once_listening as _prove_once_listening

    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:   # exited, not reaped: a zombie (the event is its state, polled)
            try:
                with open(f"/proc/{zombie.pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.01)

        class Recorder:
            stopped = False

            def stop(self):
                self.stopped = True

        recorder, mismatch = Recorder(), []
        identity = {"verified": False}
        asyncio.run(asyncio.wait_for(_prove_once_listening(zombie.pid, f"http://127.0.0.1:{_free_port()}", 0.01,
                                                           identity, recorder, mismatch), timeout=30))
        assert mismatch == [] and not recorder.stopped, mismatch
        assert identity == {"verified": False}
    finally:
        zombie.wait(timeout=10)
