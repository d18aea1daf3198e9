"""`servewatch guard` supervising a real SGLang it started: a stopped scheduler → the stall verdict → stacks
of every process → the tree killed → exit 3."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import psutil
import pytest
from lab_cli import SERVEWATCH, assert_bundles_verify
from lab_observations import log_excerpt
from lab_sglang import probe, stop_scheduler_on_running_work
from lab_traffic import Traffic

from servewatch.lab.server import free_port
from servewatch.lab.sgl_kernel_stand_in import stand_in_calls
from servewatch.lab.sglang_server import SCHEDULER_TITLE, sglang_command, sglang_environment, sglang_tmp_dir

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]

READY_S = 240
# On SGLang 0.5.23 /health waits on a generation through the scheduler, so a stopped scheduler shows
# as health_loss (no /health answer) rather than alive_health_ok_no_progress (/health green).
ACT_ON = "alive_health_ok_no_progress,health_loss,engine_dead"


class GuardedSglang:
    """`servewatch guard URL --json ... -- <sglang command>`; its JSON lines collected as they arrive.
    SGLang's own output goes to guard's stderr (a file here). Whatever is left is killed on exit."""

    def __init__(self, lab, run_dir, name: str, *guard_args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = lab.config(port=self.port)
        self.stderr_path = run_dir / f"{name}.guard-stderr.txt"
        self.stacks_dir = run_dir / "stacks"
        self.out = run_dir / "bundles"
        self.args = ["guard", self.url, "--json", "--interval", "0.5", "--stacks-dir", str(self.stacks_dir),
                     "--out", str(self.out), *guard_args, "--",
                     *sglang_command(lab.venv.python, self.config, self.port)]
        self.lines: list[tuple[float, dict]] = []
        self.tree: list[psutil.Process] = []

    def __enter__(self) -> GuardedSglang:
        self._stderr = open(self.stderr_path, "w+", encoding="utf-8")
        self.proc = subprocess.Popen([*SERVEWATCH, *self.args], stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, env=sglang_environment(self.config, self.port))
        self.started = time.monotonic()
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), json.loads(raw)))

    def wait_ready(self) -> float:
        deadline = self.started + READY_S
        while time.monotonic() < deadline:
            if probe(self.url, "/health", 1.0) == 200:
                break
            assert self.proc.poll() is None, f"guard exited {self.proc.returncode}: {self.stderr_tail()}"
            time.sleep(0.5)    # SGLang's start-up: nothing to wait on but its port
        else:
            raise AssertionError(f"SGLang under guard not ready after {READY_S} s: {self.stderr_tail()}")
        ready = time.monotonic() - self.started
        self.tree = psutil.Process(self.proc.pid).children(recursive=True)
        return ready

    def role_pid(self, title: str) -> int:
        for proc in self.tree:
            try:
                if " ".join(proc.cmdline()).startswith(title):
                    return proc.pid
            except psutil.Error:
                continue
        raise AssertionError(f"no {title} process under guard: {[p.pid for p in self.tree]}")

    def events(self) -> dict[str, tuple[float, dict]]:
        return {(line.get("guard") or line.get("verdict")): (at, line) for at, line in self.lines}

    def stderr_text(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def stderr_tail(self) -> str:
        return log_excerpt(self.stderr_text(), max_lines=40)

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
        import shutil
        shutil.rmtree(sglang_tmp_dir(self.config, self.port), ignore_errors=True)


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_guard_dumps_the_stacks_of_a_stalled_sglang_and_kills_its_tree(sglang_lab, sglang_run_dir):
    with GuardedSglang(sglang_lab, sglang_run_dir, "stall", "--act-on", ACT_ON) as guarded:
        ready = guarded.wait_ready()
        scheduler = guarded.role_pid(SCHEDULER_TITLE)
        traffic = Traffic(guarded.url, n=6, concurrency=6, max_tokens=1500, timeout_s=300).start()
        stopped_at, _ = stop_scheduler_on_running_work(guarded.url, scheduler)
        try:
            code = guarded.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"guard did not act within 90 s of the stop; its lines: "
                                 f"{[line for _, line in guarded.lines]}") from None
        events = guarded.events()
        tree = list(guarded.tree)
        log = guarded.stderr_text()
    traffic.wait(60)
    assert code == 3, log_excerpt(log, max_lines=40)
    verdict = next(name for name in ("alive_health_ok_no_progress", "health_loss", "engine_dead") if name in events)
    verdict_at, _ = events[verdict]
    stacks_at, stacks = events["stacks"]
    kill_at, kill = events["kill"]
    sglang_lab.obs.record("guard_stall", {"ready_s": round(ready, 1), "verdict": verdict,
                                          "verdict_after_s": round(verdict_at - stopped_at, 2),
                                          "stacks": stacks["processes"],
                                          "stacks_after_s": round(stacks_at - stopped_at, 2),
                                          "killed": kill["killed"], "killed_after_s": round(kill_at - stopped_at, 2)})
    sglang_lab.obs.say(f"guard: scheduler SIGSTOP → {verdict} {verdict_at - stopped_at:.2f} s → stacks "
                       f"{stacks['processes']} {stacks_at - stopped_at:.2f} s → {kill['killed']} processes killed "
                       f"{kill_at - stopped_at:.2f} s; guard exit {code}")
    assert verdict != "engine_dead", "a stopped SGLang was acted on as dead"
    assert stacks["status"] == "captured", stacks
    assert {"engine_core", "worker"} <= set(stacks["processes"]), stacks
    text = open(stacks["path"], encoding="utf-8").read()
    assert f"=== pid {scheduler} (engine_core): captured" in text and "sglang" in text  # the stopped scheduler's frames
    assert kill["survivors"] == [] and kill["killed"] >= 3
    assert all(_gone(proc) for proc in tree), [(p.pid, p.status()) for p in tree if not _gone(p)]
    assert events["exit"][1]["code"] == 3
    assert traffic.result.statuses != [200] * 6    # the stalled requests were cut, not completed
    assert stand_in_calls(log) == [], "SGLang called a stubbed op of the test-only stand-in"
    assert_bundles_verify(guarded.out)
