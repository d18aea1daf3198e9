"""`servewatch guard` supervising a real vLLM it started: SIGTERM → vLLM drains and guard exits with vLLM's own
status. (Guard attached to a vLLM whose worker is stopped — the stacks, the tree killed, exit 3 — is a fault
of plans/short-vllm.yaml, and of plans/multirank-vllm.yaml at TP=2.)"""

from __future__ import annotations

import signal
import time

import pytest
from lab_guard import GuardProcess, gone

from servewatch.lab.server import ServerConfig, free_port, vllm_command, vllm_environment

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


def test_sigterm_to_guard_drains_vllm_and_exits_with_its_status(lab, run_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = ServerConfig(model_dir=lab.model.path, cache_root=lab.cache_dir / "vllm-cache", max_num_seqs=4,
                          kv_cache_memory_bytes=8 * 2**20, max_model_len=2048, port=port)
    with GuardProcess(url, run_dir, "drain", "--drain-timeout", "60s", "--",
                      *vllm_command(lab.venv.python, config, port), env=vllm_environment(config)) as guard:
        guard.wait_server_ready(url)
        tree = list(guard.tree)
        guard.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = guard.proc.wait(timeout=120)
        ended = time.monotonic()
        events = guard.events()
        stderr = guard.stderr_tail()
    lab.obs.say(f"guard: SIGTERM → vLLM drained and exited in {ended - signalled:.1f} s; guard exit {code}")
    assert "drain" in events and "kill" not in events, events
    assert events["exit"][1]["code"] == code == 0, stderr
    assert "the server exited 0 after the drain" in stderr
    assert all(gone(proc) for proc in tree)
