"""The severity labels work for inhibition in a real Alertmanager (Debian package prometheus-alertmanager):
with the inhibit rules the rule file's header prints, a burn page for a job silences that job's ticket
and its leading-indicator warning, and nothing of another job. Every wait is bounded."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import yaml

from servewatch.derive.rules import inhibit_rules_yaml
from tests.processes import stop

from tests.tools import needs_tool, tool_path

pytestmark = [pytest.mark.prometheus, needs_tool("alertmanager", "amtool")]


def _config() -> dict:
    return {"route": {"receiver": "none", "group_wait": "1h"}, "receivers": [{"name": "none"}],
            **yaml.safe_load(inhibit_rules_yaml())}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"},
                                     method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read(2**20)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(2**20)
    except OSError:
        return 0, b""


def test_amtool_accepts_the_inhibit_rules(tmp_path):
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(_config()))
    result = subprocess.run([tool_path("amtool"), "check-config", str(tmp_path / "alertmanager.yml")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 inhibit rules" in result.stdout


@pytest.mark.timeout(90)
def test_a_page_inhibits_the_same_jobs_ticket_and_warning_in_a_real_alertmanager(tmp_path):
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(_config()))
    port = _free_port()
    proc = subprocess.Popen([tool_path("alertmanager"), f"--config.file={tmp_path / 'alertmanager.yml'}",
                             f"--storage.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--cluster.listen-address=", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/api/v2"
    try:
        deadline = time.monotonic() + 30
        while _request(f"{base}/status")[0] != 200:
            assert time.monotonic() < deadline, "alertmanager not ready within 30 s"
            time.sleep(0.25)
        alerts = [
            {"alertname": "ErrorBudgetBurnPage", "severity": "page", "job": "llm", "sli": "availability"},
            {"alertname": "ErrorBudgetBurnTicket", "severity": "ticket", "job": "llm", "sli": "availability"},
            {"alertname": "LLMRequestsWaiting", "severity": "warning", "job": "llm", "instance": "a:8000"},
            {"alertname": "LLMRequestsWaiting", "severity": "warning", "job": "other", "instance": "b:8000"},
        ]
        status, body = _request(f"{base}/alerts", json.dumps([{"labels": a} for a in alerts]).encode())
        assert status == 200, body
        status, body = _request(f"{base}/alerts")
        seen = {(a["labels"]["alertname"], a["labels"]["job"]): a["status"] for a in json.loads(body)}
        assert seen[("ErrorBudgetBurnPage", "llm")]["inhibitedBy"] == []
        assert seen[("ErrorBudgetBurnTicket", "llm")]["inhibitedBy"] != []
        assert seen[("LLMRequestsWaiting", "llm")]["inhibitedBy"] != []
        assert seen[("LLMRequestsWaiting", "other")]["inhibitedBy"] == []
    finally:
        stop(proc)


def test_amtool_routes_each_servewatch_alert_by_its_action_class(tmp_path):
    """The routes the rule file's header prints, in a real alertmanager.yml: every verdict's alert (the labels the
    Alertmanager sink sends) reaches the receiver of its action class."""
    from servewatch.derive.rules import ACTION_ROUTES, action_routes_yaml
    from servewatch.detectors import registry
    from servewatch.sinks.delivery.alertmanager import _labels

    receivers = {action: receiver for action, receiver, _ in ACTION_ROUTES}
    config = _config()
    config["route"]["routes"] = yaml.safe_load(action_routes_yaml())["route"]["routes"]
    config["receivers"] += [{"name": name} for name in receivers.values()]
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    amtool = tool_path("amtool")
    for name in registry.names():
        labels = _labels("engine-a", name)
        result = subprocess.run([amtool, "config", "routes", "test", f"--config.file={tmp_path / 'alertmanager.yml'}",
                                 *(f"{k}={v}" for k, v in labels.items())], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip() == receivers[registry.action_of(name)], (name, result.stdout)
    assert receivers[registry.action_of("rank_stalled")] == "servewatch-restarts"
