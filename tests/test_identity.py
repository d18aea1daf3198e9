"""actions.identity: a PID is proven to be the server behind a URL before anything acts on it, with real
processes (an http.server child, a sleep)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import textwrap

import pytest

from servewatch.actions.identity import (ServerIdentityError, ServerProof, prove_server, reprove, tree_listens,
                                         unverifiable_reason)
from tests.processes import stop

# A parent that starts an HTTP server child on 127.0.0.1:0 and prints the child's pid and port.
PARENT = textwrap.dedent("""
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
    print(child.pid, child.stdout.readline().strip(), flush=True)
    child.wait()
    sys.stdin.read()        # outlives its child: until the test closes stdin (or kills it)
""")
SERVER = textwrap.dedent("""
    import http.server, sys
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
""")


@pytest.fixture
def served():
    """(parent pid, listener pid, url): the listener is the parent's child."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        child_pid, port = (int(x) for x in parent.stdout.readline().split())
        yield parent.pid, child_pid, f"http://127.0.0.1:{port}"
    finally:
        import psutil

        for proc in psutil.Process(parent.pid).children(recursive=True) if parent.poll() is None else []:
            proc.kill()
        stop(parent)


SLEEP_ARG = "599.75"      # an argument no pid or port can contain: the line must never show it


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", SLEEP_ARG])
    try:
        yield proc
    finally:
        stop(proc)


def test_the_listener_itself_is_proven(served):
    _, child, url = served
    proof = prove_server(child, url)
    assert isinstance(proof, ServerProof)
    assert proof.verified and proof.pid == child and proof.listener_pid == child
    assert proof.port == int(url.rsplit(":", 1)[1])
    assert "listens on port" in proof.how and "itself" in proof.how


def test_the_parent_of_the_listener_is_proven(served):
    parent, child, url = served
    proof = prove_server(parent, url + "/metrics")
    assert proof.verified and proof.pid == parent and proof.listener_pid == child
    assert "descendant" in proof.how
    assert reprove(proof, url).listener_pid == child


def test_tree_listens_is_the_cheap_check_a_poll_uses(served, sleeper):
    parent, child, url = served
    assert tree_listens(parent, url) and tree_listens(child, url)
    assert not tree_listens(sleeper.pid, url)


def test_localhost_counts_as_local(served):
    _, child, url = served
    assert prove_server(child, url.replace("127.0.0.1", "localhost")).verified


def test_a_sleep_is_refused_naming_who_listens(served, sleeper):
    _, child, url = served
    with pytest.raises(ServerIdentityError) as err:
        prove_server(sleeper.pid, url)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"pid {sleeper.pid} (sleep) does not serve {url}: ")
    assert f"is held by pid {child} (python" in line
    assert SLEEP_ARG not in line and "-c" not in line        # the name, never the arguments
    assert not err.value.unverifiable                        # a mismatch: no override accepts it
    with pytest.raises(ServerIdentityError):
        prove_server(sleeper.pid, url, allow_unverifiable=True)


def test_a_sleep_on_a_dead_port_says_nothing_listens(sleeper):
    import socket

    with socket.socket() as s:      # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(ServerIdentityError, match=f"nothing listens on port {port} here"):
            prove_server(sleeper.pid, f"http://127.0.0.1:{port}")


def test_a_dead_pid_is_refused(sleeper):
    pid = sleeper.pid
    stop(sleeper)
    with pytest.raises(ServerIdentityError, match=f"pid {pid} is not running"):
        prove_server(pid, "http://127.0.0.1:1")


def test_a_reused_pid_fails_reproof(served):
    _, child, url = served
    proof = prove_server(child, url)
    reused = dataclasses.replace(proof, create_time=proof.create_time - 5.0)
    with pytest.raises(ServerIdentityError, match="PID was reused"):
        reprove(reused, url)


def test_reproof_fails_once_the_listener_is_gone(served):
    parent, child, url = served
    proof = prove_server(parent, url)
    import psutil

    victim = psutil.Process(child)
    victim.kill()
    victim.wait(timeout=10)
    with pytest.raises(ServerIdentityError, match=rf"pid {parent} \(python[^)]*\) does not serve"):
        reprove(proof, url)


def test_a_non_local_url_is_refused_unless_allowed(sleeper):
    url = "http://192.0.2.10:8000"     # TEST-NET-1: never this machine
    with pytest.raises(ServerIdentityError) as err:
        prove_server(sleeper.pid, url)
    assert re.search(r"192\.0\.2\.10 is not an address of this machine", str(err.value))
    assert "--unverified-pid-ok" in str(err.value) and err.value.unverifiable
    assert unverifiable_reason(url) == "192.0.2.10 is not an address of this machine"
    assert unverifiable_reason("http://localhost:1") is None
    proof = prove_server(sleeper.pid, url, allow_unverifiable=True)
    assert not proof.verified and proof.listener_pid is None
    assert proof.how.startswith("not verified: ")
    assert reprove(proof, url) == proof
    with pytest.raises(ServerIdentityError, match="PID was reused"):
        reprove(dataclasses.replace(proof, create_time=proof.create_time + 5), url)


def test_an_unusable_url_is_one_line():
    with pytest.raises(ServerIdentityError, match="not an http"):
        prove_server(1, "ftp://x")
