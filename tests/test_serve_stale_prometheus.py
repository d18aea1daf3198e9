"""A real Prometheus (the Debian package) scrapes `servewatch serve` watching `servewatch sim`; the sim is stopped:
within one poll interval of serve and one scrape interval of Prometheus (plus what this machine measurably adds),
a query for the dead target's token rate returns no sample, while `servewatch_target_up` for it reads 0.
Every wait is bounded."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse

import pytest
import yaml

from scripts.replay_alerts import free_port, get
from tests.processes import stop
from tests.test_rules_prometheus import ROOT, _start_sim
from tests.tools import needs_tool, tool_path

pytestmark = [pytest.mark.prometheus, needs_tool("prometheus")]
SERVE_INTERVAL_S = 0.5
SCRAPE_S = 1.0
RATE = 'servewatch_generation_tokens_per_second{target="sim"}'


def _query(base: str, expr: str) -> tuple[list, float]:
    """The query's result, and how long asking took."""
    asked = time.monotonic()
    status, body = get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10)
    took = time.monotonic() - asked
    reply = json.loads(body or b"{}")
    assert status == 200 and reply.get("status") == "success", f"{expr}\n-> {status} {body[:300]!r}"
    return reply["data"]["result"], took


def _until(what: str, seconds: float, check):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds:g} s: {what}")


def _largest_gap(base: str, expr: str) -> float:
    """The largest gap between the samples of `expr` over the last 10 s (a range query)."""
    result, _ = _query(base, f"{expr}[10s]")
    times = sorted(float(t) for series in result for t, _ in series["values"])
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


@pytest.mark.timeout(180)
def test_prometheus_has_no_token_rate_for_a_target_that_stopped(tmp_path):
    sim, sim_port = _start_sim("vllm")
    serve_port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "servewatch", "serve", "--target",
                              f"sim=http://127.0.0.1:{sim_port}", "--listen", f"127.0.0.1:{serve_port}",
                              "--interval", str(SERVE_INTERVAL_S), "--no-probe"],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": f"{SCRAPE_S:g}s", "scrape_timeout": f"{SCRAPE_S:g}s"},
        "scrape_configs": [{"job_name": "servewatch",
                            "static_configs": [{"targets": [f"127.0.0.1:{serve_port}"]}]}],
    }))
    prom = subprocess.Popen([tool_path("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{prom_port}"
    try:
        _until("Prometheus ready", 30, lambda: get(f"{base}/-/ready")[0] == 200)
        _until("the sim's token rate in Prometheus", 40, lambda: _query(base, RATE)[0])
        _until("ten seconds of scrapes of serve", 30,
               lambda: sum(len(r["values"]) for r in _query(base, 'up{job="servewatch"}[10s]')[0]) >= 8)
        # the allowance over serve's interval and Prometheus's, measured here: how late Prometheus's scrapes of
        # serve came, how late serve's event loop woke, and what a query takes
        scrape_late = _largest_gap(base, 'up{job="servewatch"}') - SCRAPE_S
        lag = max((float(v) for r in _query(base, "servewatch_event_loop_lag_seconds[10s]")[0]
                   for _, v in r["values"]), default=0.0)
        query_s = max(_query(base, RATE)[1] for _ in range(3))
        allowance = max(0.0, scrape_late) + lag + 2 * query_s + 0.1     # 0.1: the wait's own poll period

        stop(sim)
        stopped = time.monotonic()
        _until("no token rate for the stopped sim", 30, lambda: not _query(base, RATE)[0])
        took = time.monotonic() - stopped
        assert took <= SERVE_INTERVAL_S + SCRAPE_S + allowance, (took, allowance)
        (up,), _ = _query(base, 'servewatch_target_up{target="sim"}')
        assert float(up["value"][1]) == 0.0
        assert not _query(base, 'servewatch_engine_steps_per_second{target="sim"}')[0]
    finally:
        stop(prom)
        stop(serve)
        stop(sim)
        for proc in (prom, serve, sim):
            proc.stderr.close()
