"""Multi-rank truth on real vLLM CPU engines beyond the drill plan (plans/multirank-vllm.yaml holds the TP=2 idle,
steady-load, stop and kill cases, and guard around the TP=2 engine): data parallel 2 (the worker of DP rank 1
stopped under load: the stall on engine=1 naming DP rank 1, with a retry when the stop found engine 1's gauges
idle)."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request

import psutil
import pytest
from lab_cli import Watcher
from lab_observations import log_excerpt
from lab_scrape import health_over
from lab_servers import start_ready
from lab_traffic import Traffic

from servewatch.sources.probe import URGENT_DEADLINE_S
from servewatch.sources.process import title_of

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

RANK_ENV = (("VLLM_CPU_OMP_THREADS_BIND", "0|1"), ("VLLM_CPU_KVCACHE_SPACE", "1"))
INTERVAL = 0.5
# Routine probes as `serve` runs them; the process view asks at once with the urgent 3 s deadline.
PROBE_ARGS = ("--probe", "--probe-interval", "30", "--probe-deadline", "10")
# rank_stalled's own bound: the urgent probe's deadline, after one process sample shows the stop and the probe
# source's next look (two cadences); plus 1 s for a watcher sharing 2 cores with a saturating engine.
RANK_STALLED_BOUND_S = URGENT_DEADLINE_S + 2 * INTERVAL + 1.0


def titled(pid: int) -> dict[int, tuple[str, int]]:
    """pid -> (title, parent pid) of the server's descendants."""
    out = {}
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            out[proc.pid] = (title_of(proc), proc.ppid())
        except psutil.Error:
            pass
    return out


def pid_titled(server, title: str, parent_title: str | None = None) -> int:
    tree = titled(server.pid)
    for pid, (name, ppid) in tree.items():
        if name == title and (parent_title is None or tree.get(ppid, ("", 0))[0] == parent_title):
            return pid
    raise AssertionError(f"no {title} under {parent_title or 'the server'}: {sorted(n for n, _ in tree.values())}")


def engine_gauges(url: str) -> dict[str, tuple[float, float]]:
    """engine label -> (running, waiting) from one /metrics read."""
    with urllib.request.urlopen(url + "/metrics", timeout=15) as response:
        text = response.read().decode()
    out: dict[str, list[float]] = {}
    for name, engine, value in re.findall(r'^vllm:num_requests_(running|waiting)\{[^}]*engine="(\d+)"[^}]*\} (\S+)$',
                                          text, re.M):
        out.setdefault(engine, [0.0, 0.0])[0 if name == "running" else 1] = float(value)
    return {k: (v[0], v[1]) for k, v in out.items()}


def test_dp2_worker_of_dp_rank_1_stopped_is_a_stall_on_engine_1_naming_dp_rank_1(lab, run_dir):
    """A stop that lands while engine 1 runs work leaves its gauges at the running streams: the stall on
    engine=1 naming DP rank 1. A stop that finds engine 1's published gauges at 0 (between waves, or before the
    step's stats were published) is undone at once and tried again, up to three times; if the gauges still read
    idle, the verdict that can see it is rank_stalled, which must name the same worker (as in the TP=2 case)."""
    from lab_cli import VerdictLine
    from lab_timing import check_within, stall_bound

    server = start_ready(lab, "dp2", max_num_seqs=4, extra_args=("--data-parallel-size", "2"), extra_env=RANK_ENV)
    try:
        worker = pid_titled(server, "VLLM::Worker", parent_title="VLLM::EngineCore_DP1")
        with Watcher(server.url, run_dir / "bundles", pid=server.pid, interval=INTERVAL, extra=PROBE_ARGS) as watcher:
            traffic = Traffic(server.url, n=16, concurrency=8, max_tokens=1500, timeout_s=400).start()
            for _ in range(3):
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and engine_gauges(server.url).get("1", (0, 0))[0] < 1:
                    time.sleep(0.5)   # bounded poll of /metrics until engine 1 runs requests
                os.kill(worker, signal.SIGSTOP)
                stopped_at = time.monotonic()
                frozen = engine_gauges(server.url)
                if frozen.get("1", (0, 0))[0] >= 1:
                    break
                os.kill(worker, signal.SIGCONT)   # well under the 2 s floor: nothing can have fired
            try:
                running = frozen.get("1", (0, 0))[0] >= 1
                name = "alive_health_ok_no_progress" if running else "rank_stalled"
                named = watcher.wait_for(name, timeout_s=60, after=stopped_at,
                                         where=(lambda d: (d.get("details") or {}).get("engine") == "engine=1")
                                         if running else (lambda d: "DP rank 1 worker (VLLM::Worker, pid " in d["why"]))
                statuses = health_over(server.url, 1.0)
            finally:
                os.kill(worker, signal.SIGCONT)
            traffic.wait(400)
    finally:
        server.stop()
        lab.obs.save_text("dp2_server.log", log_excerpt(server.log_text(), max_lines=600))
    lab.obs.record("dp2_stop", {"gauges_while_stopped": frozen, "health": sorted(set(map(str, statuses))),
                                "verdict": name, "after_s": None if named is None else round(named.arrived - stopped_at, 2),
                                "why": None if named is None else named.data["why"]})
    lab.obs.say(f"DP=2 worker of DP rank 1 SIGSTOP under 8 streams: gauges {frozen}, /health "
                f"{sorted(set(map(str, statuses)))}; {name} after "
                f"{'never' if named is None else f'{named.arrived - stopped_at:.1f} s'}: "
                f"{None if named is None else named.data['why']}")
    assert named is not None, f"no {name} naming DP rank 1 (engine 1 running {frozen.get('1')}); {watcher.describe()}"
    assert "DP rank 1 worker (VLLM::Worker, pid " in named.data["why"], named.data["why"]
    if running:
        assert "on engine 1 (DP rank 1)" in named.data["why"], named.data["why"]
        bound = stall_bound(VerdictLine(named.arrived, named.data), INTERVAL, stopped_at=stopped_at)
    else:
        bound = RANK_STALLED_BOUND_S
    check_within(f"{name} on DP=2", named.arrived - stopped_at, bound, since=stopped_at)
