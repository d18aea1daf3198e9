"""SIGSTOP of a vLLM worker while requests are really running, as the stall tests need it."""

from __future__ import annotations

import os
import signal
import time

import psutil
from lab_scrape import describe_wait, scrape, wait_for_steady_progress


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
    for _ in range(tries):
        moving = wait_for_steady_progress(server.url, span_s=1.5)
        assert moving is not None, f"the requests never kept generating: {describe_wait()}; traffic {traffic.result}"
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
