"""`servewatch rules`: the SLO file's checks (one line naming the key, exit 2, nothing written), the
burn-rate arithmetic, and that every ratio's numerator and denominator aggregate to the same labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from servewatch.cli import main
from servewatch.derive.engine_series import NAMINGS, engine_series
from servewatch.derive.rules import build_rules, error_ratio
from servewatch.derive.slo import STANDARD_WINDOWS, SloInvalid, check_selector, check_thresholds, load_slo
from servewatch.dialects import sglang, vllm

SLO_FILE = Path(__file__).parent / "rules" / "slo.yaml"
GOOD = SLO_FILE.read_text()
ALL_NAMINGS = [(d, g) for d, gens in NAMINGS.items() for g in gens]


def _run(tmp_path, text: str, *args: str, capsys) -> tuple[int, str, Path]:
    slo = tmp_path / "slo.yaml"
    slo.write_text(text)
    out = tmp_path / "rules.yml"
    code = main(["rules", "--slo", str(slo), "--out", str(out), *args])
    return code, capsys.readouterr().err, out


@pytest.mark.parametrize("edit, key, reason", [
    (lambda t: t + "latency_budget: 3\n", "latency_budget", "unknown key"),
    (lambda t: t.replace("availability: 99.9", "availability: 100.5"), "objectives.availability", "over 100 %"),
    (lambda t: t.replace("availability: 99.9", "availability: 100"), "objectives.availability", "no error budget"),
    (lambda t: t.replace("budget: 30d", "budget: 2d"), "budget", "window 3d is longer than the budget 2d"),
    (lambda t: t.replace("threshold: 20}", "threshold: 25}"), "objectives.e2e.threshold",
     "25 s is not a bucket edge of vllm:e2e_request_latency_seconds (nearest: 20 and 30 s)"),
    (lambda t: t.replace("ttft:", "ttfb:"), "objectives.ttfb", "unknown key"),
    (lambda t: t.replace("min_requests: 100", "min_requests: 0"), "min_requests", "whole number"),
    (lambda t: t + "windows:\n  - {severity: page, long: 40d, short: 1h, budget_spent: 2}\n",
     "windows[0].long", "window 40d is longer than the budget 30d"),
    (lambda t: t.replace("selector: {job: llm}", "selector: {job: llm, model_name: m}"), "selector.model_name",
     "http_requests_total has no model_name label"),
])
def test_bad_slo_is_one_line_naming_the_key_exit_2_and_nothing_written(tmp_path, capsys, edit, key, reason):
    code, err, out = _run(tmp_path, edit(GOOD), capsys=capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert f": {key}: " in err and reason in err, err
    assert not out.exists()


def test_a_threshold_off_the_edges_names_the_flag_that_adds_an_edge(tmp_path, capsys):
    text = GOOD.replace("threshold: 1}", "threshold: 1.2}")
    _, err, _ = _run(tmp_path, text, capsys=capsys)
    assert "nearest: 1 and 2.5 s" in err and "--custom-histogram-buckets" in err and "time_to_first_token" in err
    _, err, _ = _run(tmp_path, text, "--dialect", "sglang", capsys=capsys)
    assert "nearest: 1 and 2 s" in err and "--bucket-time-to-first-token" in err


def test_declared_custom_edges_make_a_threshold_valid(tmp_path, capsys):
    text = GOOD.replace("threshold: 1}", "threshold: 1.2}") + "  buckets: {ttft: [0.5, 1.2, 3]}\n"
    code, err, out = _run(tmp_path, text, capsys=capsys)
    assert code == 0, err
    assert 'vllm:time_to_first_token_seconds_bucket{job="llm",le="1.2"}' in out.read_text()


def test_every_edge_of_every_engine_histogram_is_accepted_and_read_with_the_le_the_engine_writes():
    from prometheus_client.utils import floatToGoString

    for dialect, naming in ALL_NAMINGS:
        series = engine_series(dialect, naming)
        for kind in ("ttft", "tpot", "e2e"):
            for edge in series.histogram(kind).edges:
                text = f"service: s\nobjectives:\n  {kind}: {{target: 99, threshold: {edge!r}}}\n"
                slo = load_slo(text, "slo.yaml")
                check_thresholds(slo, series, "slo.yaml")
                bad, _ = error_ratio(slo.objectives[0], series, {}, "5m")
                assert f'le="{floatToGoString(edge)}"' in bad


def test_an_unknown_generation_is_refused(tmp_path, capsys):
    code, err, out = _run(tmp_path, GOOD, "--names", "vllm-0.1", capsys=capsys)
    assert code == 2 and "vllm-0.1" in err and "vllm-0.32" in err and not out.exists()


def test_standard_windows_give_the_standard_burn_rates_and_other_budgets_scale():
    assert [w.burn_rate(30 * 86400) for w in STANDARD_WINDOWS] == [14.4, 6, 3, 1]
    # a 28-day budget: the same shares of budget in the same windows burn 28/30 as fast
    assert [w.burn_rate(28 * 86400) for w in STANDARD_WINDOWS] == [13.44, 5.6, 2.8, 0.933333]


def test_names_follow_the_dialect_and_generation(tmp_path, capsys):
    texts = {}
    for dialect, naming in ALL_NAMINGS:
        code, err, out = _run(tmp_path, GOOD, "--dialect", dialect, "--names", naming, capsys=capsys)
        assert code == 0, err
        texts[naming] = out.read_text()
    assert vllm.KV_USAGE in texts["vllm-0.32"] and vllm.KV_USAGE_LEGACY not in texts["vllm-0.32"]
    assert vllm.KV_USAGE_LEGACY in texts["vllm-legacy"] and vllm.KV_USAGE not in texts["vllm-legacy"]
    assert "vllm:time_per_output_token_seconds" not in texts["vllm-0.11"]
    assert sglang.RUNNING in texts["sglang-0.5.23"] and "vllm:" not in texts["sglang-0.5.23"]
    assert 'le="20.0"' in texts["vllm-0.32"] and 'le="20.0"' in texts["sglang-0.5.23"]


_BY = re.compile(r"\b(sum|max|count) by \(([^)]*)\)")


def _aggregations(expr: str) -> set[str]:
    return {labels.replace(" ", "") for _, labels in _BY.findall(expr)}


@pytest.mark.parametrize("dialect, naming", ALL_NAMINGS)
def test_every_ratio_aggregates_numerator_and_denominator_to_the_same_labels(dialect, naming):
    series = engine_series(dialect, naming)
    slo = load_slo(GOOD, "slo.yaml")
    for objective in slo.objectives:
        bad, total = error_ratio(objective, series, slo.selector, "5m")
        numerator, denominator = bad.split("\n/\n")
        assert _aggregations(numerator) == _aggregations(denominator) == {"job"}, (objective.kind, bad)
    for group in build_rules(slo, series):
        for rule in group.rules:
            # every binary operation in a rule joins vectors aggregated the same way
            assert len(_aggregations(rule.expr)) <= 1, (rule.name, rule.expr)


def test_an_engine_label_in_the_selector_would_empty_the_availability_ratio():
    slo = load_slo(GOOD.replace("selector: {job: llm}", "selector: {job: llm, engine_type: unified}"), "s.yaml")
    with pytest.raises(SloInvalid, match="selector.engine_type: sglang:http_responses_total has no engine_type"):
        check_selector(slo, engine_series("sglang"), "s.yaml")


def test_every_alert_carries_its_runbook_branch_and_a_severity_for_inhibition():
    slo = load_slo(GOOD, "slo.yaml")
    for dialect, naming in ALL_NAMINGS:
        for group in build_rules(slo, engine_series(dialect, naming)):
            for rule in group.rules:
                if not rule.alert:
                    continue
                assert set(rule.annotations) == {"summary", "check_next", "expected_range", "safe_action",
                                                 "rollback"}, rule.alert
                assert all(len(v) >= 15 for v in rule.annotations.values()), rule.alert
                if group.name != "servewatch-serve" or rule.alert in ("ServewatchStall", "ServewatchEngineDead"):
                    assert rule.labels.get("severity") in ("page", "ticket", "warning"), rule.alert


def test_the_written_file_is_valid_yaml_with_the_expected_groups(tmp_path, capsys):
    code, _, out = _run(tmp_path, GOOD, capsys=capsys)
    assert code == 0
    groups = [g["name"] for g in yaml.safe_load(out.read_text())["groups"]]
    assert groups == ["servewatch-slo-chat-sli", "servewatch-slo-chat-burn", "servewatch-vllm-leading",
                      "servewatch-vllm-guards", "servewatch-serve"]
    code, _, out = _run(tmp_path, GOOD, "--no-serve", capsys=capsys)
    assert "servewatch-serve" not in out.read_text()


def test_unreadable_or_broken_slo_files_are_one_line(tmp_path, capsys):
    code, err, out = _run(tmp_path, "service: chat\nobjectives: [\n", capsys=capsys)
    assert code == 2 and "not valid YAML" in err and len(err.strip().splitlines()) == 1 and not out.exists()
    code = main(["rules", "--slo", str(tmp_path / "missing.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "--slo " in err and ": cannot be read (" in err and len(err.strip().splitlines()) == 1


def test_without_out_the_rules_go_to_stdout_with_the_inhibit_rules_in_the_header(tmp_path, capsys):
    (tmp_path / "slo.yaml").write_text(GOOD)
    assert main(["rules", "--slo", str(tmp_path / "slo.yaml"), "--dialect", "sglang"]) == 0
    text = capsys.readouterr().out
    header = "".join(line[2:] + "\n" for line in text.splitlines() if line.startswith("# "))
    printed = yaml.safe_load(header[header.index("inhibit_rules:"):])
    assert printed["inhibit_rules"][0]["source_matchers"] == ['severity="page"']
    assert [r["matchers"] for r in printed["route"]["routes"]] == [
        ['action="restart"'], ['action="drain"'], ['action="page"'], ['action="info"']]
    assert yaml.safe_load(text)["groups"][0]["name"] == "servewatch-slo-chat-sli"
    assert str(tmp_path) not in text
