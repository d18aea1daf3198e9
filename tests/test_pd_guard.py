"""guard on a deployment (issue 52): `guard --prefill URL --decode URL --instance URL --pid PID` records the whole
pair and holds one instance's server. With the simulator's pair as real processes and the prefill stopped (SIGSTOP)
while decode waits for its KV, kv_transfer_stall names the prefill: the guard holding the prefill proves its PID serves
the prefill's URL and kills it; the guard holding decode signals nothing, and decode lives on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request

import pytest

from tests.pd_harness import REMOTE_DECODE
from tests.processes import stop
from tests.test_watch_command import free_port, read_stderr_until, wait_healthy

SIM = [sys.executable, "-m", "servewatch", "sim", "--max-num-seqs", "8", "--model-name", "tiny"]
GUARD = [sys.executable, "-m", "servewatch", "guard"]
PROMPT = "hello world " * 40
STALL_S = 2.0
# the stall's bound (2 s) plus the stopped prefill's health probes, guard's start (two Python processes) and the
# allowance of a machine shared with other work
DEADLINE_S = 60.0


def _sim(role: str, *extra: str):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*SIM, "--port", str(port), "--pd-role", role, *extra], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, url


@pytest.fixture
def pair():
    prefill = _sim("prefill", "--kv-lease-seconds", "300")
    decode = _sim("decode", "--kv-wait-timeout", "300")
    try:
        for _, url in (prefill, decode):
            wait_healthy(url)
        yield prefill, decode
    finally:
        for proc, _ in (prefill, decode):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
            stop(proc)


def _post(url: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _guard(prefill_url: str, decode_url: str, instance: str, pid: int, tmp_path, name: str) -> subprocess.Popen:
    return subprocess.Popen([*GUARD, "--prefill", prefill_url, "--decode", decode_url, "--instance", instance,
                             "--pid", str(pid), "--json", "--interval", "0.2", "--no-stacks",
                             "--set", f"kv_stall_s={STALL_S:g}", "--duration", str(DEADLINE_S + 30),
                             "--lives", str(tmp_path / f"{name}.lives")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _events(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_guard_kills_only_the_stopped_prefill_for_a_stalled_kv_transfer_and_never_signals_decode(pair, tmp_path):
    (prefill, prefill_url), (decode, decode_url) = pair
    held_prefill = _guard(prefill_url, decode_url, prefill_url, prefill.pid, tmp_path, "prefill")
    held_decode = _guard(prefill_url, decode_url, decode_url, decode.pid, tmp_path, "decode")
    try:
        for guard in (held_prefill, held_decode):
            read_stderr_until(guard, r"recording http://127\.0\.0\.1:\d+: /health 200", DEADLINE_S)
        params = _post(prefill_url, {"model": "tiny", "prompt": PROMPT, "max_tokens": 1,
                                     "kv_transfer_params": dict(REMOTE_DECODE)}, 30)["kv_transfer_params"]
        os.kill(prefill.pid, signal.SIGSTOP)          # the prefill stopped while decode reads its KV
        waiting = threading.Thread(target=lambda: _try(_post, decode_url, {
            "model": "tiny", "prompt": PROMPT, "max_tokens": 4, "kv_transfer_params": params}, DEADLINE_S),
            daemon=True)
        waiting.start()
        code = held_prefill.wait(timeout=DEADLINE_S)
        out_prefill = held_prefill.stdout.read()
        # the prefill's guard killed the prefill for the stall: exit 3, the stopped server gone (SIGKILL)
        assert code == 3, out_prefill[-2000:]
        assert prefill.wait(timeout=10) == -signal.SIGKILL
        said = _events(out_prefill)
        # proven before any signal: the PID guard holds is the one listening on the prefill's URL
        assert [(e["verified"], e["listener_pid"]) for e in said if e.get("guard") == "identity"] == [
            (True, prefill.pid)]
        assert [e["verdict"] for e in said if e.get("guard") == "kill"] == ["kv_transfer_stall"]
        fired = [e for e in said if e.get("event") == "fired" and e.get("verdict") == "kv_transfer_stall"]
        assert fired and fired[0]["details"]["act_on"] == prefill_url.removeprefix("http://")
        assert fired[0]["details"]["prefill_state"] == "stopped"
        # decode's guard hears the same verdict (its decode still waits: the KV never came) and does nothing
        heard = _stdout_until(held_decode, '"verdict": "kv_transfer_stall"', DEADLINE_S)
        assert any('"verdict": "kv_transfer_stall"' in line for line in heard), "".join(heard)[-2000:]
        assert held_decode.poll() is None and decode.poll() is None
        held_decode.send_signal(signal.SIGTERM)         # an attached server is left alone when guard stops
        assert held_decode.wait(timeout=30) == 0
        events = _events("".join(heard) + held_decode.stdout.read())
        assert [(e["verified"], e["listener_pid"]) for e in events if e.get("guard") == "identity"] == [
            (True, decode.pid)]
        # nothing done to decode: guard's own lines are its policy, the proof, the stop and its exit, no stacks or kill
        assert [e["guard"] for e in events if "guard" in e] == ["policy", "identity", "stop", "exit"]
        assert events[-1]["why"] == "stopped watching; the server is still running"
        assert decode.poll() is None
        wait_healthy(decode_url, timeout=10)
    finally:
        for guard in (held_prefill, held_decode):
            stop(guard)


def _stdout_until(proc: subprocess.Popen, text: str, timeout_s: float) -> list[str]:
    """proc's stdout lines up to the first holding `text` (or its end), bounded by a timer that ends proc."""
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if text in line:
                break
    finally:
        timer.cancel()
    return seen


def _try(fn, *args):
    try:
        fn(*args)
    except OSError:
        pass


def test_guard_on_a_deployment_refuses_a_pid_that_serves_another_instance(pair, tmp_path):
    """The proof is of the instance guard holds: decode's PID given for the prefill is refused before anything."""
    (prefill, prefill_url), (decode, decode_url) = pair
    result = subprocess.run([*GUARD, "--prefill", prefill_url, "--decode", decode_url, "--instance", prefill_url,
                             "--pid", str(decode.pid), "--duration", "5", "--lives", str(tmp_path / "l")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {decode.pid}" in lines[0] and prefill_url in lines[0], result.stderr
    assert prefill.poll() is None and decode.poll() is None


def test_guard_on_a_deployment_names_the_instance_it_holds_in_one_line():
    result = subprocess.run([*GUARD, "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2",
                             "--pid", "1"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--instance URL" in result.stderr
