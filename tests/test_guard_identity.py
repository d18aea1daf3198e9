"""guard and watch act on (and record the tree of) a PID only once it is proven to be the server behind
the URL (actions.identity), and prove it again before every signal."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import signal
import subprocess
import sys

import psutil
import pytest

from servewatch.actions.identity import prove_server
from servewatch.actions.policy import Action, GuardConfig
from servewatch.actions.supervisor import Guard
from servewatch.actions.tree import Member
from tests.processes import stop
from tests.test_identity import served  # noqa: F401 - fixture
from tests.test_watch_command import free_port, read_stderr_until, wait_healthy

GUARD = [sys.executable, "-m", "servewatch", "guard"]
WATCH = [sys.executable, "-m", "servewatch", "watch"]
SIM = [sys.executable, "-m", "servewatch", "sim", "--max-num-seqs", "8", "--model-name", "tiny"]


@pytest.fixture
def sim():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*SIM, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(url)
        yield proc, url
    finally:
        stop(proc)


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        stop(proc)


@pytest.mark.parametrize("command", [GUARD, WATCH], ids=["guard", "watch"])
def test_a_pid_that_is_not_the_server_is_one_line_and_exit_2(sim, sleeper, command):
    server, url = sim
    result = subprocess.run([*command, url, "--pid", str(sleeper.pid), "--duration", "5"], capture_output=True,
                            text=True, timeout=60)
    tool = command[-1]
    assert result.returncode == 2, result.stderr
    port = url.rsplit(":", 1)[1]
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"servewatch {tool}: pid {sleeper.pid} (sleep) does not serve {url}: "
                                    f"port {port} is held by pid {server.pid} ("), result.stderr
    assert sleeper.poll() is None          # never signalled


def test_watch_records_the_override_in_every_bundle(sleeper, tmp_path):
    """A URL whose port cannot be seen from here: refused, unless --unverified-pid-ok, which the bundle keeps."""
    url = "http://servewatch-test.invalid:8000"       # .invalid never resolves
    refused = subprocess.run([*WATCH, url, "--pid", str(sleeper.pid), "--json"], capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert "does not resolve here (pass --unverified-pid-ok" in refused.stderr
    out = tmp_path / "bundles"
    watch = subprocess.Popen([*WATCH, url, "--pid", str(sleeper.pid), "--unverified-pid-ok", "--json", "--interval",
                              "0.2", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, seen = read_stderr_until(watch, r"^servewatch watch: recording ", timeout_s=30)
        assert seen[0].startswith("servewatch watch: identity: not verified: ") and "--unverified-pid-ok was given" in seen[0]
        watch.send_signal(signal.SIGUSR1)
        match, _ = read_stderr_until(watch, r"^servewatch watch: bundle on demand: (\S+)$", timeout_s=30)
    finally:
        stop(watch)
    bundle = match[1]
    incident = json.loads((pathlib.Path(bundle) / "incident.json").read_text())
    assert incident["target"]["identity"] == {
        "verified": False, "override": True,
        "how": f"not verified: servewatch-test.invalid does not resolve here; pid {sleeper.pid} was accepted on the "
               f"user's explicit override"}
    from servewatch.bundle.verify import verify_bundle

    verify_bundle(bundle)


def _guard_of(pid: int, url: str, **kw) -> Guard:
    proof = prove_server(pid, url)
    return Guard(Member(pid, proof.create_time, "api"), GuardConfig(stacks=False), pathlib.Path("."),
                 returncode=None, url=url, proof=proof, **kw)


def test_no_signal_when_the_proof_fails_just_before_it(served, capsys):  # noqa: F811
    """Proven at attach; the listener then goes away: the kill after a stall is refused and said."""
    parent, child, url = served
    guard = _guard_of(parent, url)
    listener = psutil.Process(child)
    listener.kill()
    listener.wait(timeout=10)

    async def act():
        await guard._act(Action("alive_health_ok_no_progress", 0.0, stacks=False, kill=True))

    asyncio.run(act())
    assert psutil.Process(parent).is_running() and psutil.Process(parent).status() != psutil.STATUS_ZOMBIE
    assert guard.outcome.killed_for is None and not guard.busy
    assert len(guard.refused) == 1
    err = capsys.readouterr().err
    assert f"servewatch guard: alive_health_ok_no_progress: sending no signal: pid {parent} (" in err
    assert f"does not serve {url}: nothing listens on port" in err
    code, why = guard.result()
    assert code == 0 and "1 signal(s) not sent, the process was not proven to be the server" in why


def test_a_reused_pid_is_not_signalled(served):  # noqa: F811
    parent, _, url = served
    guard = _guard_of(parent, url)
    guard.proof = dataclasses.replace(guard.proof, create_time=guard.proof.create_time - 3)
    asyncio.run(guard._act(Action("engine_dead", 0.0, stacks=False, kill=True)))
    assert guard.outcome.killed_for is None and "PID was reused" in guard.refused[0]
    assert psutil.Process(parent).status() != psutil.STATUS_ZOMBIE


def test_a_proven_server_is_killed(served):  # noqa: F811
    parent, child, url = served
    guard = _guard_of(parent, url)
    asyncio.run(guard._act(Action("engine_dead", 0.0, stacks=False, kill=True)))
    assert guard.outcome.killed_for == "engine_dead" and not guard.refused
    for pid in (parent, child):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
