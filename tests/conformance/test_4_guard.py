"""`servewatch guard` supervising a real vLLM it started: a stopped worker → stacks of the whole tree →
the tree killed → exit 3; SIGTERM → vLLM drains and guard exits with vLLM's own status."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import psutil
import pytest
from lab_cli import SERVEWATCH, VerdictLine, assert_bundles_verify
from lab_observations import log_excerpt
from lab_scrape import health
from lab_signals import stop_on_running_work
from lab_timing import STALL_FLOOR_S, FreezeExplainedMiss, check_within, longest_freeze, stall_bound
from lab_traffic import Traffic

from servewatch.lab.server import ServerConfig, free_port, vllm_command, vllm_environment

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

READY_S = 240
KILL_AFTER_VERDICT_S = 2.0


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


def test_guard_dumps_the_stacks_of_a_stalled_vllm_and_kills_its_tree(lab, run_dir):
    with GuardedVllm(lab, run_dir, "stall") as guarded:
        ready = guarded.wait_ready()
        worker = guarded.role_pid("VLLM::Worker")
        # Sixteen waves of 4 x 1800 tokens: a starved client (this machine freezes everything but vLLM's
        # worker for seconds at a time) still finds requests running when it stops the worker; three
        # waves (21,600 tokens) were all done in ~7 s by the CPU vLLM here before a stop could land.
        traffic = Traffic(guarded.url, n=64, concurrency=4, max_tokens=1800, timeout_s=300).start()
        stopped_at, _, _ = stop_on_running_work(guarded, worker, traffic)
        try:   # the wait is only a fence; the bounds are asserted below from the verdict's own threshold
            code = guarded.proc.wait(timeout=STALL_FLOOR_S + 40)
        except subprocess.TimeoutExpired:
            freeze = longest_freeze(stopped_at)
            raise (FreezeExplainedMiss if freeze >= 40 else AssertionError)(
                f"guard did not act within {STALL_FLOOR_S + 40:.0f} s of the stop (longest freeze measured "
                f"{freeze:.1f} s); its lines: {[line for _, line in guarded.lines]}") from None
        events = guarded.events()
        tree = list(guarded.tree)
    traffic.wait(60)
    assert code == 3, guarded.stderr_tail()
    stall_at, stall = events["alive_health_ok_no_progress"]
    stacks_at, stacks = events["stacks"]
    kill_at, kill = events["kill"]
    lab.obs.record("guard_stall", {"ready_s": round(ready, 1), "verdict_after_s": round(stall_at - stopped_at, 2),
                                   "stacks": stacks["processes"], "stacks_after_s": round(stacks_at - stopped_at, 2),
                                   "killed": kill["killed"], "killed_after_s": round(kill_at - stopped_at, 2)})
    lab.obs.say(f"guard: worker SIGSTOP → stall verdict {stall_at - stopped_at:.2f} s (threshold "
                f"{stall['details']['threshold_s']:.2f} s = max(2 s, 4 x {stall['details']['scrape_gap_s']:.2f} s "
                f"scrape gap, {stall['details']['longest_gap_s']:.2f} s step gap)) → stacks {stacks['processes']} "
                f"{stacks_at - stopped_at:.2f} s → {kill['killed']} processes killed {kill_at - stopped_at:.2f} s; "
                f"guard exit {code}")
    # The verdict within its own threshold + two 0.5 s cadences; the stacks and the kill right after it:
    # py-spy dumps of the 4 processes and the kill took 0.15 s after the verdict on a quiet run, 2 s allowed.
    check_within("guard's stall verdict", stall_at - stopped_at, stall_bound(VerdictLine(stall_at, stall), 0.5, stopped_at=stopped_at),
                 since=stopped_at)
    check_within("guard's kill after its verdict", kill_at - stall_at, KILL_AFTER_VERDICT_S, since=stall_at)
    assert stacks["status"] == "captured", stacks
    assert {"api", "engine_core", "worker"} <= set(stacks["processes"]), stacks
    text = open(stacks["path"], encoding="utf-8").read()
    assert f"=== pid {worker} (worker): captured" in text and "vllm" in text   # the stopped worker's own frames
    assert kill["survivors"] == [] and kill["killed"] >= 3
    assert all(_gone(proc) for proc in tree), [(p.pid, p.status()) for p in tree if not _gone(p)]
    assert events["exit"][1]["code"] == 3
    assert any(status != 200 for status in traffic.result.statuses)   # the stalled requests were cut
    assert_bundles_verify(guarded.out)


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
