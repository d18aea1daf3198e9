"""`servewatch serve` watching a real vLLM: a SIGSTOPped worker turns the target's livez to failing while
vLLM's own /health keeps answering 200, and livez passes again once the worker continues."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import json
import time
import urllib.error
import urllib.request

import pytest
from lab_cli import VerdictLine
from lab_scrape import health_over
from lab_servers import start_ready
from lab_signals import stop_on_running_work
from lab_timing import STALL_FLOOR_S, FreezeExplainedMiss, check_within, longest_freeze, stall_bound
from lab_traffic import Traffic

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_status(url: str, wanted: int, timeout_s: float, *, since: float | None = None) -> float | None:
    """When (monotonic) `url` answered `wanted`, or None at the deadline `timeout_s` after `since` (now)."""
    started = time.monotonic() if since is None else since
    while time.monotonic() - started < timeout_s:
        try:
            if status_of(url) == wanted:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.2)   # another process's state over HTTP: nothing to wait on but polling
    return None


def _active_stall(base: str) -> dict | None:
    with urllib.request.urlopen(f"{base}/api/v1/verdicts", timeout=5) as response:
        active = json.load(response)["active"]
    return next((v for v in active if v["verdict"] == "alive_health_ok_no_progress"), None)


def test_serve_livez_fails_on_a_stopped_worker_while_health_says_200(lab, run_dir):
    server = start_ready(lab, "serve", max_num_seqs=16, kv_cache_memory_bytes=4 * 2**20, max_model_len=2048)
    serve = None
    try:
        tree = server.process_tree()
        serve = subprocess.Popen([sys.executable, "-m", "servewatch", "serve", "--target", f"vllm={server.url}",
                                  "--listen", "127.0.0.1:0", "--interval", "0.5", "--out", str(run_dir / "bundles")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        match = re.match(r"servewatch serve: listening on (http://\S+),", serve.stderr.readline())
        assert match, "serve did not start"
        livez = f"{match[1]}/targets/vllm/livez"
        assert wait_status(livez, 200, 30) is not None
        # Sixteen waves of 4 x 1800 tokens: three (21,600 tokens) were done in ~7 s by the CPU vLLM here,
        # before a stop could land on running work.
        traffic = Traffic(server.url, n=64, concurrency=4, max_tokens=1800, timeout_s=300).start()
        stopped_at, _, _ = stop_on_running_work(server, tree.worker, traffic)
        try:
            failed_at = wait_status(livez, 503, 30, since=stopped_at)
            stall = _active_stall(match[1])
            statuses = health_over(server.url, seconds=1.0)
        finally:
            os.kill(tree.worker, signal.SIGCONT)
        if failed_at is None:
            raise (FreezeExplainedMiss if longest_freeze(stopped_at) >= 30 - STALL_FLOOR_S else AssertionError)(
                f"livez never failed within 30 s of the stop; longest freeze {longest_freeze(stopped_at):.1f} s")
        assert stall is not None, "livez failed without an active stall verdict"
        # livez fails within the stall's own threshold plus two 0.5 s cadences plus one 0.2 s poll of livez.
        bound = stall_bound(VerdictLine(failed_at, stall), 0.5, stopped_at=stopped_at) + 0.2
        check_within("serve livez 503 after the stop", failed_at - stopped_at, bound, since=stopped_at)
        lab.obs.say(f"serve: SIGSTOP → livez 503 after {failed_at - stopped_at:.2f} s (bound {bound:.2f} s: stall "
                    f"threshold {stall['details']['threshold_s']:.2f} s + 2 cadences + a poll); vLLM /health "
                    f"{sorted(set(statuses))} meanwhile")
        assert set(statuses) == {200}, statuses
        assert wait_status(livez, 200, 60) is not None, "livez did not recover after SIGCONT"
        traffic.cancel()
        assert traffic.wait(60)
    finally:
        if serve is not None:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
        server.stop()
