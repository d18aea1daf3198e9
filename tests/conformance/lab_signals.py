"""SIGSTOP of a vLLM worker while requests are really running, as the stall tests need it."""

from __future__ import annotations

import os
import signal
import time

import psutil
from lab_scrape import describe_wait, scrape, wait_for_steady_progress
from lab_timing import FreezeExplainedMiss, frozen_time, longest_freeze

STEADY_SPAN_S = 1.5     # generation seen moving this long, so a 0.5 s recorder has seen several steps


def wait_for_running_streams(url: str, *, since: float, what: str):
    """The scrape showing `what` generating steadily, or why it never came: a test process frozen at least as
    long as the span it needs to see (a TP=2 guard case met 7.3 s while all 8 streams ran and ended) is a
    FreezeExplainedMiss, retried once; anything else fails."""
    moving = wait_for_steady_progress(url, span_s=STEADY_SPAN_S)
    if moving is not None:
        return moving
    frozen = frozen_time(since)
    raise (FreezeExplainedMiss if frozen >= STEADY_SPAN_S else AssertionError)(
        f"{what} never kept generating ({frozen:.1f} s frozen meanwhile, longest freeze {longest_freeze(since):.1f} s): "
        f"{describe_wait()}")


def status_within(pid: int, wanted: str, *, timeout_s: float) -> str:
    """The process's status once it is `wanted` (a signal takes effect asynchronously: a multi-threaded
    worker is not "stopped" the instant SIGSTOP is sent), or its last status at the deadline."""
    proc = psutil.Process(pid)
    deadline = time.monotonic() + timeout_s
    while (status := proc.status()) != wanted and time.monotonic() < deadline:
        time.sleep(0.01)   # another process's state: nothing to wait on but /proc
    return status


def stop_on_running_work(server, worker: int, traffic, tries: int = 3):
    """SIGSTOP the worker while requests are running: (stopped_at, worker status, scrape while stopped).
    A stop that lands between two waves of requests (running 0 in the frozen scrape) is undone at once
    (well under the detector's 2 s floor) and tried again, up to `tries` times."""
    since = time.monotonic()
    for _ in range(tries):
        wait_for_running_streams(server.url, since=since, what=f"the requests (traffic {traffic.result})")
        os.kill(worker, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            status = status_within(worker, psutil.STATUS_STOPPED, timeout_s=2.0)
            frozen = scrape(server.url)
        except BaseException:
            os.kill(worker, signal.SIGCONT)
            raise
        if frozen.get("vllm:num_requests_running") >= 1:
            return stopped_at, status, frozen
        os.kill(worker, signal.SIGCONT)
    raise AssertionError(f"nothing running at {tries} stops of the worker; traffic so far {traffic.result.statuses}")
