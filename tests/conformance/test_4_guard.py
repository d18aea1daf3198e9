"""`servewatch guard` supervising a real vLLM it started: SIGTERM → vLLM drains and guard exits with vLLM's own
status. (Guard attached to a vLLM whose worker is stopped — the stacks, the tree killed, exit 3 — is a fault
of plans/short-vllm.yaml, and of plans/multirank-vllm.yaml at TP=2.)"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import psutil
import pytest
from lab_cli import SERVEWATCH
from lab_observations import log_excerpt
from lab_scrape import health

from servewatch.lab.server import ServerConfig, free_port, vllm_command, vllm_environment

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

READY_S = 240


class GuardedVllm:
    """`servewatch guard URL --json ... -- <vllm command>`; its JSON lines collected as they arrive.
    Whatever is left of guard and vLLM is killed on exit."""

    def __init__(self, lab, run_dir, name: str, *guard_args: str, extra_args: tuple[str, ...] = (),
                 extra_env: tuple[tuple[str, str], ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = ServerConfig(model_dir=lab.model.path, cache_root=lab.cache_dir / "vllm-cache", max_num_seqs=4,
                                   kv_cache_memory_bytes=8 * 2**20, max_model_len=2048, port=self.port,
                                   extra_args=extra_args, extra_env=extra_env)
        self.stderr_path = run_dir / f"{name}.guard-stderr.txt"
        self.stacks_dir = run_dir / "stacks"
        self.out = run_dir / "bundles"
        self.args = ["guard", self.url, "--json", "--interval", "0.5", "--stacks-dir", str(self.stacks_dir),
                     "--out", str(self.out), *guard_args, "--",
                     *vllm_command(lab.venv.python, self.config, self.port)]
        self.lines: list[tuple[float, dict]] = []
        self.tree: list[psutil.Process] = []

    def __enter__(self) -> GuardedVllm:
        self._stderr = open(self.stderr_path, "w+", encoding="utf-8")
        self.proc = subprocess.Popen([*SERVEWATCH, *self.args], stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, env=vllm_environment(self.config))
        self.started = time.monotonic()
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), json.loads(raw)))

    def wait_ready(self) -> float:
        """/health 200 (bounded); then the vLLM tree under guard is recorded for the cleanup."""
        deadline = self.started + READY_S
        while time.monotonic() < deadline:
            if health(self.url, timeout_s=1.0) == 200:
                break
            assert self.proc.poll() is None, f"guard exited {self.proc.returncode}: {self.stderr_tail()}"
            time.sleep(0.5)    # vLLM's start-up: nothing to wait on but its port
        else:
            raise AssertionError(f"vLLM under guard not ready after {READY_S} s: {self.stderr_tail()}")
        ready = time.monotonic() - self.started
        self.tree = psutil.Process(self.proc.pid).children(recursive=True)
        return ready

    def role_pid(self, prefix: str) -> int:
        for proc in self.tree:
            try:
                if " ".join(proc.cmdline()).startswith(prefix):
                    return proc.pid
            except psutil.Error:
                continue
        raise AssertionError(f"no {prefix} process under guard: {[p.pid for p in self.tree]}")

    def events(self) -> dict[str, tuple[float, dict]]:
        return {(line.get("guard") or line.get("verdict")): (at, line) for at, line in self.lines
                if line.get("event") != "cleared"}

    def stderr_tail(self) -> str:
        self._stderr.flush()
        return log_excerpt(self.stderr_path.read_text(errors="replace"), max_lines=40)

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for proc in self.tree:
            try:
                proc.resume()
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(self.tree, timeout=10)
        self._stderr.close()


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_sigterm_to_guard_drains_vllm_and_exits_with_its_status(lab, run_dir):
    with GuardedVllm(lab, run_dir, "drain", "--drain-timeout", "60s") as guarded:
        guarded.wait_ready()
        tree = list(guarded.tree)
        guarded.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = guarded.proc.wait(timeout=120)
        ended = time.monotonic()
        events = guarded.events()
        stderr = guarded.stderr_tail()
    lab.obs.say(f"guard: SIGTERM → vLLM drained and exited in {ended - signalled:.1f} s; guard exit {code}")
    assert "drain" in events and "kill" not in events, events
    assert events["exit"][1]["code"] == code == 0, stderr
    assert "the server exited 0 after the drain" in stderr
    assert all(_gone(proc) for proc in tree)
