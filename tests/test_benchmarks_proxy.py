"""benchmarks/proxy.py's measure of nginx: its CPU is its worker's, and nginx's master listens before it forks the
worker, so the worker is waited for (a run that listed the master's children at once measured nginx's CPU as 0
and failed on a division by zero in the clean-clone CI's benchmark stage)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROXY_PY = Path(__file__).resolve().parents[1] / "benchmarks" / "proxy.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("benchmarks_proxy", PROXY_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# a parent that forks its one child only once told to (a line on stdin), as nginx's master forks its worker after
# it listens; the child waits for the parent's stdin to close
_LATE_PARENT = ("import os, sys\nsys.stdin.readline()\nif os.fork() == 0:\n    sys.stdin.read()\n    os._exit(0)\n"
                "sys.stdin.read()\nos.wait()\n")


def test_the_worker_of_a_master_that_forks_late_is_waited_for(bench):
    parent = subprocess.Popen([sys.executable, "-c", _LATE_PARENT], stdin=subprocess.PIPE, text=True)
    try:
        assert bench.children(parent.pid) == []          # listening, say, and no worker yet
        parent.stdin.write("fork\n")
        parent.stdin.flush()
        found = bench.worker_pids(parent.pid, limit=10)
        assert len(found) == 1 and found[0] != parent.pid
        assert bench.children(parent.pid) == found
    finally:
        parent.stdin.close()
        parent.wait(10)


def test_a_master_without_a_worker_is_said_so(bench):
    parent = subprocess.Popen([sys.executable, "-c", _LATE_PARENT], stdin=subprocess.PIPE, text=True)
    try:
        with pytest.raises(SystemExit, match=rf"process {parent.pid} started no worker within 0.3 s"):
            bench.worker_pids(parent.pid, limit=0.3)
    finally:
        parent.stdin.close()
        parent.wait(10)


def _phase(tokens: int, cpu_s: float, ttft_ms: float, beside_cores: float = 0.0) -> dict:
    return {"ttft": [ttft_ms / 1e3] * 3, "lag": [0.001] * 3, "req_leg": [0.0005] * 3, "tokens": tokens,
            "cpu_s": cpu_s, "user_s": cpu_s / 2, "rss_peak_kb": 1, "beside_cores": beside_cores,
            "voluntary": tokens // 2, "involuntary": int(cpu_s * 1000)}


def test_each_condition_has_figures_of_its_own_rounds(bench):
    """--competitor both: the quiet rounds and the competitor's are summed apart, each against its own direct
    route, so the JSON's `competitor` figures are those of the rounds measured beside it alone."""
    names = ["direct", "servewatch proxy", "nginx"]
    quiet = [{"direct": _phase(1000, 0, 5), "servewatch proxy": _phase(1000, 0.03, 6), "nginx": _phase(1000, 0.02, 5.5)}]
    loaded = [{"direct": _phase(1000, 0, 5, 1.0), "servewatch proxy": _phase(1000, 0.06, 9, 1.0),
               "nginx": _phase(1000, 0.03, 6, 0.9)},
              {"direct": _phase(1000, 0, 5, 1.0), "servewatch proxy": _phase(1000, 0.06, 9, 1.0),
               "nginx": _phase(1000, 0.02, 6, 0.9)}]
    a = bench.condition_figures(quiet, names, {})
    b = bench.condition_figures(loaded, names, {})
    assert a["vs_nginx"]["cpu_per_token_ratio"] == pytest.approx(1.5)
    assert a["vs_nginx"]["added_ttft_p50_ms_minus_ms"] == pytest.approx(0.5)
    assert a["competitor_cores"] == 0
    assert b["vs_nginx"]["cpu_per_token_ratio"] == pytest.approx(0.12 / 0.05)
    assert b["cpu_ratio_per_round"] == pytest.approx([2.0, 3.0])
    assert b["vs_nginx"]["added_ttft_p50_ms_minus_ms"] == pytest.approx(3.0)
    assert b["competitor_cores"] == pytest.approx((1.0 * 4 + 0.9 * 2) / 6)
    assert a["routes"]["servewatch proxy"]["preempted_per_1k_tokens"] == pytest.approx(30)     # 30 in 1,000 tokens
    assert b["routes"]["nginx"]["preempted_per_1k_tokens"] == pytest.approx(25)                # (30 + 20) in 2,000
    assert b["routes"]["nginx"]["switches_per_1k_tokens"] == pytest.approx(500)


def test_beside_the_competitor_the_per_token_p99_is_the_better_round_s(bench):
    """A stall of the whole proxy in one round (its lags 175 ms) takes the pooled p99 with it; the better round's
    p99 (proxy's added minus nginx's added, each against direct) is what run.py holds beside the competitor."""
    def lags(ms_at_p99: float) -> list[float]:
        return [0.001] * 98 + [ms_at_p99 / 1e3] * 2       # p99 = the 99th of 100 sorted = ms_at_p99

    def route(ms):
        return {**_phase(1000, 0.01, 5), "lag": lags(ms)}

    names = ["direct", "servewatch proxy", "nginx"]
    stalled = {"direct": route(2.0), "servewatch proxy": route(175.0), "nginx": route(3.0)}
    calm = {"direct": route(2.0), "servewatch proxy": route(4.5), "nginx": route(3.0)}
    doc = bench.condition_figures([stalled, calm], names, {})
    assert doc["vs_nginx"]["added_token_p99_ms_minus_ms"] == pytest.approx(172.0)          # pooled: the stall
    assert doc["vs_nginx"]["added_token_p99_ms_minus_ms_best_round"] == pytest.approx(1.5)  # (4.5-2) - (3-2)
    assert bench.best_round_token_p99([calm, {**calm, "servewatch proxy": route(2.5)}]) == pytest.approx(-0.5)
    assert bench.best_round_token_p99([{"direct": route(2.0)}]) is None


def test_a_process_s_switches_are_counted_over_its_threads(bench):
    """A process's context switches are its threads' together: a thread that waits 20 times adds 20 voluntary ones,
    counted while it lives (the main thread meanwhile waits once)."""
    import threading
    import time as _time

    ready, done = threading.Event(), threading.Event()

    def waits():
        for _ in range(20):
            _time.sleep(0.001)
        ready.set()
        done.wait(10)

    before = bench.switches([os.getpid()])
    t = threading.Thread(target=waits)
    t.start()
    try:
        assert ready.wait(10)
        during = bench.switches([os.getpid()])
    finally:
        done.set()
        t.join()
    assert during[0] - before[0] >= 20 and during[1] >= before[1]


def test_the_competitor_runs_while_on_and_is_gone_when_stopped(bench):
    if shutil.which("stress-ng") is None:
        pytest.skip("stress-ng is not installed (apt-get install -y stress-ng)")
    competitor = bench.Competitor()
    competitor.start()
    try:
        group = competitor.proc.pid
        assert len(competitor.pids) >= 2            # stress-ng's parent and its one stressor, started
        assert os.getpriority(os.PRIO_PROCESS, competitor.pids[-1]) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        competitor.stop()
    assert competitor.proc is None and competitor.pids == []
    with pytest.raises(ProcessLookupError):          # the whole group is gone, stressor included
        os.killpg(group, 0)
