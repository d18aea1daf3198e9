"""Multi-rank truth on a real SGLang 0.5.23 on CPU: data parallel 2 (`--dp-size 2`, one scheduler per DP rank,
`sglang::scheduler_DP0`/`_DP1` under `sglang::data_parallel_controller`). The scheduler of DP rank 1 stopped
under load: the stall verdict names DP rank 1 and its process while /health keeps answering, and every request
completes after SIGCONT. (`--tp-size 2` does not start on CPU: see tests/fixtures/sglang_real/
tp2_cpu_startup_failure.log and test_postmortem.)"""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request

import psutil
import pytest
from lab_cli import Watcher, assert_bundles_verify
from lab_observations import log_excerpt
from lab_servers import assert_no_stand_in_call, start_ready
from lab_signals import status_within
from lab_timing import expect_stall
from lab_traffic import Traffic

from servewatch.sources.process import title_of

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(900)]

INTERVAL = 0.5
DP_ENV = (("SGLANG_CPU_OMP_THREADS_BIND", "0|1"),)     # SGLang asks for it with more ranks than NUMA nodes


def running_by_dp_rank(url: str) -> dict[str, float]:
    """dp_rank -> sglang:num_running_reqs from one /metrics read."""
    with urllib.request.urlopen(url + "/metrics", timeout=15) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for labels, value in re.findall(r"^sglang:num_running_reqs\{([^}]*)\} (\S+)$", text, re.M):
        rank = re.search(r'dp_rank="(\d+)"', labels)
        if rank:
            out[rank.group(1)] = out.get(rank.group(1), 0.0) + float(value)
    return out


def scheduler_pid(server, title: str) -> int:
    for proc in psutil.Process(server.pid).children(recursive=True):
        try:
            if title_of(proc) == title:
                return proc.pid
        except psutil.Error:
            continue
    raise AssertionError(f"no {title} under the server")


def test_dp2_scheduler_of_dp_rank_1_stopped_is_a_stall_naming_dp_rank_1(sglang_lab, sglang_run_dir):
    server = start_ready(sglang_lab, "sglang-dp2", max_total_tokens=8192, context_length=2048,
                         max_running_requests=8, extra_args=("--dp-size", "2"), extra_env=DP_ENV)
    out = sglang_run_dir / "dp2-bundles"
    try:
        scheduler = scheduler_pid(server, "sglang::scheduler_DP1")
        with Watcher(server.url, out, pid=server.pid, interval=INTERVAL, log_file=server.log_path) as watcher:
            traffic = Traffic(server.url, model=str(sglang_lab.model.path), n=8, concurrency=8, max_tokens=300,
                              timeout_s=400).start()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and running_by_dp_rank(server.url).get("1", 0) < 1:
                time.sleep(0.5)   # bounded poll of /metrics until DP rank 1 runs requests
            os.kill(scheduler, signal.SIGSTOP)
            stopped_at = time.monotonic()
            try:
                assert status_within(scheduler, psutil.STATUS_STOPPED, timeout_s=2.0) == psutil.STATUS_STOPPED
                frozen = running_by_dp_rank(server.url)
                stall = expect_stall(watcher, after=stopped_at, cadence_s=INTERVAL, wait_s=30,
                                     where=lambda d: "DP rank 1" in d.get("why", ""))
            finally:
                os.kill(scheduler, signal.SIGCONT)
            finished = traffic.wait(400)
            seen = sorted({v.name for v in watcher.verdicts(after=stopped_at)})
    finally:
        server.stop()
        sglang_lab.obs.save_text("sglang_dp2_server.log", log_excerpt(server.log_text(), max_lines=600))
    why = stall.data["why"]
    sglang_lab.obs.record("sglang_dp2_stop", {"running_while_stopped": frozen, "why": why, "verdicts": seen,
                                              "stall_s": round(stall.arrived - stopped_at, 2)})
    sglang_lab.obs.say(f"SGLang DP=2, scheduler_DP1 SIGSTOP under load: running by DP rank {frozen}; stall "
                       f"after {stall.arrived - stopped_at:.1f} s: {why}; verdicts {seen}")
    assert frozen.get("1", 0) >= 1, frozen
    assert f"(sglang::scheduler_DP1, pid {scheduler})" in why, why
    assert why.count("DP rank 1") == 2, why      # the engine's words and the stopped process, once each
    assert "engine_dead" not in seen and "process_exit" not in seen, seen
    assert finished and set(traffic.result.statuses) == {200}, traffic.result
    assert_bundles_verify(out)
    assert_no_stand_in_call(server)
