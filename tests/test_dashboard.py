"""`servewatch dashboard`: the minimal panel set, in each dialect's names, each panel saying which action
it leads to, the bucket-blindness caveat with that engine's own first edge. (Its queries are executed
against a real Prometheus in test_rules_prometheus.py.)"""

from __future__ import annotations

import json

import pytest

from servewatch.cli import main
from servewatch.derive.dashboard import dashboard_queries, panels, to_grafana
from servewatch.derive.engine_series import engine_series
from servewatch.dialects import sglang, vllm

MINIMAL = ("Time to first token", "Time per output token", "End-to-end latency", "first bucket", "Queue wait",
           "Running vs slot limit", "KV cache usage", "Unfinished requests", "Errors by class",
           "servewatch: stalled", "servewatch: active verdicts")


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def model(request):
    series = engine_series(request.param)
    return request.param, to_grafana(series, panels(series, 256))


def test_the_minimal_panels_are_there_each_with_its_own_action(model):
    _, board = model
    titles = [p["title"] for p in board["panels"]]
    for wanted in MINIMAL:
        assert any(wanted in t for t in titles), wanted
    descriptions = [p["description"] for p in board["panels"]]
    assert len(set(descriptions)) == len(descriptions)
    verbs = ("shed", "add", "check", "drain", "route away", "lower", "cap", "do not alert", "look left", "take")
    for panel in board["panels"]:
        assert any(v in panel["description"].lower() for v in verbs), panel["title"]


def test_queries_use_the_dialects_names_and_the_dashboard_variables(model):
    dialect, board = model
    queries = dashboard_queries(board)
    engine = [e for _, e in queries if "servewatch_" not in e]
    prefix = "vllm:" if dialect == "vllm" else "sglang:"
    assert all(prefix in e for e in engine if "http_requests_total" not in e)
    assert all('job=~"$job", instance=~"$instance"' in e for e in engine)
    running = vllm.RUNNING if dialect == "vllm" else sglang.RUNNING
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["job"]["query"] == f"label_values({running}, job)"
    assert {"datasource", "job", "instance"} <= set(variables)


def test_the_bucket_caveat_names_that_engines_first_edge(model):
    dialect, board = model
    tpot = next(p for p in board["panels"] if p["title"].startswith("Time per output token"))
    first = "0.01 s" if dialect == "vllm" else "0.002 s"
    assert f"faster than {first}" in tpot["description"]
    assert "23,955 of 23,984" in tpot["description"]
    share = next(p for p in board["panels"] if "first bucket" in p["title"])
    le = 'le="0.01"' if dialect == "vllm" else 'le="0.002"'
    assert any(le in t["expr"] and "request_time_per_output_token_seconds" in t["expr"] for t in share["targets"])


def test_the_slot_limit_is_drawn_on_the_running_panel(model):
    _, board = model
    running = next(p for p in board["panels"] if p["title"] == "Running vs slot limit")
    steps = running["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == 256


def test_panels_do_not_overlap(model):
    _, board = model
    cells = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


def test_legacy_names_reach_the_dashboard():
    series = engine_series("vllm", "vllm-legacy")
    exprs = " ".join(e for _, e in dashboard_queries(to_grafana(series, panels(series))))
    assert vllm.KV_USAGE_LEGACY in exprs and vllm.KV_USAGE not in exprs


def test_the_command_writes_importable_json_and_refuses_bad_input(tmp_path, capsys):
    out = tmp_path / "board.json"
    assert main(["dashboard", "--dialect", "sglang", "--out", str(out)]) == 0
    board = json.loads(out.read_text())
    assert board["uid"] == "servewatch-sglang" and board["panels"]
    # SGLang exports no slot limit and has no default: no threshold line unless given
    running = next(p for p in board["panels"] if p["title"] == "Running vs slot limit")
    assert "thresholds" not in running["fieldConfig"]["defaults"]
    bad = tmp_path / "bad.json"
    assert main(["dashboard", "--names", "vllm-9", "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--names" in err and not bad.exists()
