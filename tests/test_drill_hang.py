"""The drill's `hang` fault: the test-only hook (drill.hang_hook) blocks the main thread of a process the drill
started — state S, no stop visible — for the hold, and only a process that catches its signal is ever sent it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from servewatch.cli import main
from servewatch.drill import hang_hook

# A main thread that counts: one line a 20 ms tick into a file, for at most 20 s.
TICKER = textwrap.dedent("""
    import sys, time
    with open(sys.argv[1], "w") as out:
        for i in range(1000):
            out.write(f"{i}\\n"); out.flush(); time.sleep(0.02)
""")


def ticks(path: Path) -> int:
    return len(path.read_text().splitlines())


def wait_for(predicate, timeout_s: float = 10.0) -> None:
    """Poll `predicate` (a condition on the outside world, not a clock) every 10 ms until it holds."""
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


@pytest.fixture
def ticker(tmp_path):
    env = {**os.environ, **hang_hook.environment(tmp_path)}
    out = tmp_path / "ticks"
    proc = subprocess.Popen([sys.executable, "-c", TICKER, str(out)], env=env)
    wait_for(lambda: out.exists() and ticks(out) > 0)
    yield proc, out
    proc.kill()
    proc.wait(5)


def test_the_hook_blocks_the_main_thread_in_sleep_until_released(tmp_path, ticker):
    proc, out = ticker
    assert hang_hook.catches(proc.pid)
    request = hang_hook.request(tmp_path, proc.pid, 30.0)
    os.kill(proc.pid, hang_hook.HANG_SIGNAL)
    wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_SLEEPING and _still(out))
    held = ticks(out)
    assert psutil.Process(proc.pid).status() == psutil.STATUS_SLEEPING     # state S: no stop to see
    assert _still(out) and ticks(out) == held                              # the main thread does nothing
    hang_hook.release(request)
    wait_for(lambda: ticks(out) > held + 5)                                # and goes on once released
    assert proc.poll() is None


def _still(out: Path, span_s: float = 0.3) -> bool:
    """No tick for span_s (15 ticks' worth): the loop is held."""
    before = ticks(out)
    time.sleep(span_s)
    return ticks(out) == before


def test_a_process_without_the_hook_is_never_sent_the_signal(tmp_path):
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={k: v for k, v in os.environ.items() if k != hang_hook.HANG_DIR_ENV})
    try:
        assert not hang_hook.catches(plain.pid)     # its default action would end it
        assert not hang_hook.catches(2 ** 22 + 7)   # no such process
    finally:
        plain.kill()
        plain.wait(5)


HANG = """
    name: hang
    target: {engine: sim}
    workload: {scenario: custom, rate: 4, output_tokens: 32}
    recorder: {interval_s: 0.5}
    faults:
      - name: the simulator's main thread hung
        kind: hang
        role: api
        warmup_s: 3
        hold_s: 8
        observe_s: 4
        expect:
          fire: {health_loss: 8}
          not_fire: [rank_stalled, engine_dead]
          health: failing
          recover_within_s: 4
"""


def test_the_drill_hangs_a_server_it_started_and_no_stop_is_visible(tmp_path):
    """The simulator serves from its main thread, so the hang takes /health down (health_loss), while the process
    view shows it running or sleeping, never stopped (no rank_stalled); it serves again once released."""
    path = tmp_path / "hang.yaml"
    path.write_text(textwrap.dedent(HANG))
    out = tmp_path / "out"
    assert main(["drill", str(path), "--out", str(out)]) == 0
    fault = json.loads((out / "drill.json").read_text())["faults"][0]
    assert fault["met"], fault["checks"]
    assert [t["signal"] for t in fault["touched"]] == ["SIGRTMIN+6"]
    assert fault["policy"]["demands"] == "restart"


def test_the_hang_fault_refuses_a_server_it_did_not_start(tmp_path):
    from servewatch.drill.target import DrillTarget, Process, TargetError

    target = DrillTarget.__new__(DrillTarget)
    target.hang_root = None
    with pytest.raises(TargetError, match="only in servers the drill starts itself"):
        target.hang(Process(1, 0.0, "x", "api", 0), 5.0)
    assert signal.SIGRTMIN < hang_hook.HANG_SIGNAL <= signal.SIGRTMAX
