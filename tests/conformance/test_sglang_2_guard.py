"""`servewatch guard --pid` supervising a real SGLang: a stopped scheduler → the stall verdict → stacks of
every process → the tree killed → exit 3.

Attached, not started by guard: on SGLang 0.5.23 /health waits on a generation through the scheduler,
so a stopped scheduler shows as health_loss (no /health answer), not alive_health_ok_no_progress
(/health green), and guard acts on it only when told to; told so, a guard that started SGLang itself
acted on the closed port of its 45 s start-up (seen in this suite's first run)."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import psutil
import pytest
from lab_cli import SERVEWATCH, assert_bundles_verify
from lab_observations import log_excerpt
from lab_servers import assert_no_stand_in_call, start_sglang_ready
from lab_sglang import stop_scheduler_on_running_work
from lab_traffic import Traffic

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]

ACT_ON = "alive_health_ok_no_progress,health_loss,engine_dead"


class Guard:
    """`servewatch guard URL --pid PID --json ...`; its JSON lines collected as they arrive."""

    def __init__(self, server, run_dir, *guard_args: str):
        self.stderr_path = run_dir / "guard-stderr.txt"
        self.stacks_dir = run_dir / "stacks"
        self.out = run_dir / "bundles"
        self.args = ["guard", server.url, "--pid", str(server.pid), "--json", "--interval", "0.5",
                     "--stacks-dir", str(self.stacks_dir), "--out", str(self.out),
                     "--log-file", str(server.log_path), *guard_args]
        self.lines: list[tuple[float, dict]] = []

    def __enter__(self) -> Guard:
        self._stderr = open(self.stderr_path, "w+", encoding="utf-8")
        self.proc = subprocess.Popen([*SERVEWATCH, *self.args], stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 120
        while "recording" not in self.stderr_text() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the line lands in a file; there is no event to wait on
        assert self.proc.poll() is None, f"guard exited {self.proc.returncode}: {self.stderr_text()[-1500:]}"
        return self

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), json.loads(raw)))

    def events(self) -> dict[str, tuple[float, dict]]:
        return {(line.get("guard") or line.get("verdict")): (at, line) for at, line in self.lines}

    def stderr_text(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._stderr.close()


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_guard_dumps_the_stacks_of_a_stalled_sglang_and_kills_its_tree(sglang_lab, sglang_run_dir):
    server = start_sglang_ready(sglang_lab, "sglang_guarded")
    try:
        tree = server.process_tree()
        members = [psutil.Process(tree.api_server), *psutil.Process(tree.api_server).children(recursive=True)]
        with Guard(server, sglang_run_dir, "--act-on", ACT_ON) as guard:
            traffic = Traffic(server.url, n=6, concurrency=6, max_tokens=1500, timeout_s=300).start()
            stopped_at, _ = stop_scheduler_on_running_work(server.url, tree.engine_core)
            try:
                code = guard.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"guard did not act within 90 s of the stop; its lines: "
                                     f"{[line for _, line in guard.lines]}") from None
            events = guard.events()
            stderr = guard.stderr_text()
        server_code = server.wait_exit(30)
        traffic.wait(60)
    finally:
        server.stop()
    assert code == 3, log_excerpt(stderr, max_lines=40)
    verdict = next(name for name in ("alive_health_ok_no_progress", "health_loss", "engine_dead") if name in events)
    verdict_at, _ = events[verdict]
    stacks_at, stacks = events["stacks"]
    kill_at, kill = events["kill"]
    sglang_lab.obs.record("guard_stall", {"verdict": verdict, "verdict_after_s": round(verdict_at - stopped_at, 2),
                                          "stacks": stacks["processes"],
                                          "stacks_after_s": round(stacks_at - stopped_at, 2),
                                          "killed": kill["killed"], "killed_after_s": round(kill_at - stopped_at, 2),
                                          "server_exit": server_code})
    sglang_lab.obs.say(f"guard: scheduler SIGSTOP → {verdict} {verdict_at - stopped_at:.2f} s → stacks "
                       f"{stacks['processes']} {stacks_at - stopped_at:.2f} s → {kill['killed']} processes killed "
                       f"{kill_at - stopped_at:.2f} s; guard exit {code}, SGLang exit {server_code}")
    assert verdict != "engine_dead", "a stopped SGLang was acted on as dead"
    assert stacks["status"] == "captured", stacks
    assert {"engine_core", "worker"} <= set(stacks["processes"]), stacks
    text = open(stacks["path"], encoding="utf-8").read()
    assert f"=== pid {tree.engine_core} (engine_core): captured" in text and "sglang" in text  # the stopped scheduler
    assert kill["survivors"] == [] and kill["killed"] >= 3
    assert all(_gone(proc) for proc in members), [(p.pid, p.status()) for p in members if not _gone(p)]
    assert events["exit"][1]["code"] == 3
    assert traffic.result.statuses != [200] * 6    # the stalled requests were cut, not completed
    assert_no_stand_in_call(server)
    assert_bundles_verify(guard.out)
