"""A real Prometheus (the Debian package) scrapes `servewatch sim` under load from `servewatch load`, and
`servewatch serve` watching that sim, with the generated rules loaded; every rule expression and every
dashboard query is executed through its HTTP API and must return data (alert conditions are executed
whole, and the series they compare must return data; a panel listing the verdicts that hold, `== 1`,
is empty on a healthy server).
Every wait is bounded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from servewatch.derive.dashboard import dashboard_queries, panels, to_grafana
from servewatch.derive.engine_series import engine_series
from servewatch.derive.rules import build_rules, render_rule_file
from servewatch.derive.slo import load_slo
from scripts.replay_alerts import free_port as _free_port, get as _get
from tests.processes import stop
from tests.test_node_view import API, CORE, RANK
from tests.tools import needs_tool, tool_path

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.prometheus, needs_tool("prometheus")]
SLO = (ROOT / "tests" / "rules" / "slo.yaml").read_text()


def _query(base: str, expr: str) -> dict:
    status, body = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10)
    reply = json.loads(body or b"{}")
    assert status == 200 and reply.get("status") == "success", f"{expr}\n-> {status} {body[:300]!r}"
    return reply["data"]


def _until(what: str, seconds: float, check) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"not within {seconds:g} s: {what}")


def _start_sim(dialect: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", "0", "--dialect", dialect,
                             "--profile", "tiny-cpu", "--log-file", os.devnull],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise AssertionError(f"sim printed no address: {line!r}")
    return proc, int(match.group(1))


_stop = stop


@pytest.mark.timeout(240)
@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_every_rule_and_dashboard_query_returns_data_from_a_real_prometheus(tmp_path, dialect):
    series = engine_series(dialect)
    slo = load_slo(SLO, "slo.yaml")
    groups = build_rules(slo, series)
    (tmp_path / "rules.yml").write_text(render_rule_file(groups, "live test"))
    dashboard = to_grafana(series, panels(series, slo.slot_limit))

    sim, sim_port = _start_sim(dialect)
    serve_port = _free_port()
    # A titled fake engine on this node for `serve --node` (servewatch_node_rank_state and the join rule).
    node_engine = subprocess.Popen([sys.executable, "-c", API, CORE, RANK], stdout=subprocess.PIPE, text=True,
                                   start_new_session=True)
    node_engine.stdout.readline()
    serve = subprocess.Popen([sys.executable, "-m", "servewatch", "serve", "--target", f"sim=http://127.0.0.1:{sim_port}",
                              "--listen", f"127.0.0.1:{serve_port}", "--interval", "0.5", "--no-probe",
                              "--node", "ci-node"],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    prom_port = _free_port()
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(tmp_path / "rules.yml")],
        "scrape_configs": [
            {"job_name": slo.selector["job"], "static_configs": [{"targets": [f"127.0.0.1:{sim_port}"]}]},
            {"job_name": "servewatch", "static_configs": [{"targets": [f"127.0.0.1:{serve_port}"]}]}],
    }))
    prom = subprocess.Popen([tool_path("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{prom_port}"
    try:
        _until("Prometheus ready", 30, lambda: _get(f"{base}/-/ready")[0] == 200)
        load = subprocess.run([sys.executable, "-m", "servewatch", "load", f"http://127.0.0.1:{sim_port}",
                               "--scenario", "normal", "--duration", "6", "--timeout", "20",
                               "--out", str(tmp_path / "load")],
                              cwd=ROOT, capture_output=True, text=True, timeout=90)
        assert load.returncode == 0, load.stderr[-2000:]
        # the last requests' series scraped, and the SLI rules evaluated on them
        _until("SLI rules produce data", 30, lambda: all(
            _query(base, f'slo:sli_error:ratio_rate5m{{sli="{o.kind}"}}')["result"] for o in slo.objectives))

        _until("servewatch serve scraped", 30, lambda: _query(base, "servewatch_target_up == 1")["result"])
        empty = []
        for group in groups:
            for rule in group.rules:
                result = _query(base, rule.expr)       # the whole expression runs
                if rule.record and not result["result"]:
                    empty.append(f"{group.name}/{rule.record}{rule.labels}: {rule.expr}")
                for probe in rule.probes:
                    if not _query(base, probe)["result"]:
                        empty.append(f"{group.name}/{rule.name}: {probe}")
        checked_panels = 0
        for title, expr in dashboard_queries(dashboard):
            concrete = expr.replace("$__rate_interval", "1m").replace("$job", ".*").replace("$instance", ".*")
            if not _query(base, concrete)["result"] and not concrete.endswith("== 1"):   # no verdict holds now
                empty.append(f"panel {title!r}: {concrete}")
            checked_panels += 1
        assert not empty, "no data for:\n" + "\n".join(empty)
        assert checked_panels >= 14
        # the availability SLI read real traffic: the sim answered the load with 2xx, so its error ratio is 0
        ratio = _query(base, 'slo:sli_error:ratio_rate5m{sli="availability"}')["result"]
        requests = _query(base, 'slo:sli_requests:rate5m{sli="availability"}')["result"]
        assert [float(r["value"][1]) for r in ratio] == [0.0]
        assert float(requests[0]["value"][1]) > 0
    finally:
        _stop(prom)
        _stop(serve)
        _stop(sim)
        os.killpg(node_engine.pid, 9)
        node_engine.wait(timeout=10)
        for proc in (prom, serve, sim):
            proc.stderr.close()
