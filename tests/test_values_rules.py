"""Values of servewatch/derive/rules.py (issue 50: the mutation rule finds it), beside the kept rule files that
tests/test_rules_promtool.py compares whole: label matchers and their escapes, `le` values as the Prometheus client
writes them, a rule and a group as YAML keys, the alert names, the rule file's header and block scalars, and
Alertmanager's inhibit rules and routes."""

from __future__ import annotations

from servewatch.derive.rules import (KV_FULL, KV_LOW, QUEUE_RISE, SLI_BY, TARGET_BY, Rule, RuleGroup,
                                     action_routes_yaml, burn_alert_name, inhibit_rules_yaml, le_text, matchers,
                                     render_rule_file, servewatch_alert_name, sli_error_name, sli_requests_name)


def test_the_constants():
    assert (SLI_BY, TARGET_BY) == (("job",), ("job", "instance"))
    assert (KV_FULL, KV_LOW, QUEUE_RISE) == (0.9, 0.5, 2)


def test_matchers_sorted_escaped_and_extended():
    assert matchers({"job": 'a"b\\c\nd', "a": "x"}, 'le="1"', "") == '{a="x",job="a\\"b\\\\c\\nd",le="1"}'
    assert matchers({}) == ""
    assert matchers({}, 'x="1"') == '{x="1"}'


def test_le_as_the_client_writes_it():
    assert [le_text(v) for v in (0.1, 1.0, 2.5, float("inf"))] == ["0.1", "1.0", "2.5", "+Inf"]


def test_a_rule_and_a_group_as_yaml_keys():
    assert Rule("e", record="r", labels={"a": "b"}).to_dict() == {"record": "r", "expr": "e", "labels": {"a": "b"}}
    assert Rule("e", alert="A", for_="5m", annotations={"x": "y"}).to_dict() == {
        "alert": "A", "expr": "e", "for": "5m", "annotations": {"x": "y"}}
    assert Rule("e", alert="A").name == "A" and Rule("e", record="r").name == "r"
    assert RuleGroup("g", (Rule("e", record="r"),)).to_dict() == {"name": "g", "rules": [{"record": "r", "expr": "e"}]}


def test_the_names():
    assert (burn_alert_name("page"), burn_alert_name("ticket")) == ("ErrorBudgetBurnPage", "ErrorBudgetBurnTicket")
    assert servewatch_alert_name("engine_dead") == "ServewatchEngineDead"
    assert servewatch_alert_name("brand_new_thing") == "ServewatchBrandNewThing"
    assert (sli_error_name("5m"), sli_requests_name("1h")) == ("slo:sli_error:ratio_rate5m", "slo:sli_requests:rate1h")


def test_the_rule_file_header_and_block_scalars():
    text = render_rule_file([RuleGroup("g", (Rule("a\nb", record="r"), Rule("x", alert="A", for_="1m")))],
                            "line one\n\nline three")
    assert text == ("# line one\n#\n# line three\ngroups:\n- name: g\n  rules:\n  - record: r\n    expr: |-\n      a\n"
                    "      b\n  - alert: A\n    expr: x\n    for: 1m\n")


def test_alertmanager_inhibitions_and_routes():
    assert inhibit_rules_yaml() == (
        'inhibit_rules:\n- source_matchers:\n  - severity="page"\n  target_matchers:\n  - severity=~"ticket|warning"\n'
        '  equal:\n  - job\n- source_matchers:\n  - severity="ticket"\n  target_matchers:\n  - severity="warning"\n'
        '  equal:\n  - job\n')
    assert action_routes_yaml() == (
        'route:\n  routes:\n  - matchers:\n    - action="restart"\n    receiver: servewatch-restarts\n'
        '  - matchers:\n    - action="drain"\n    receiver: servewatch-hardware\n  - matchers:\n'
        '    - action="page"\n    receiver: servewatch-oncall\n  - matchers:\n    - action="info"\n'
        '    receiver: servewatch-null\n')


def test_each_recording_rule_probes_its_own_expression():
    from pathlib import Path

    from servewatch.derive.engine_series import engine_series
    from servewatch.derive.rules import build_rules
    from servewatch.derive.slo import load_slo

    slo = load_slo((Path(__file__).parent / "rules" / "slo.yaml").read_text(), "slo.yaml")
    groups = build_rules(slo, engine_series("vllm"))
    assert [g.name for g in groups] == ["servewatch-slo-chat-sli", "servewatch-slo-chat-burn",
                                        "servewatch-vllm-leading", "servewatch-vllm-guards", "servewatch-serve"]
    records = [r for r in groups[0].rules]
    assert records and all(r.record and r.probes == (r.expr,) for r in records)


def _kept_groups():
    from pathlib import Path

    from servewatch.derive.engine_series import engine_series
    from servewatch.derive.rules import build_rules
    from servewatch.derive.slo import load_slo

    slo = load_slo((Path(__file__).parent / "rules" / "slo.yaml").read_text(), "slo.yaml")
    return {g.name: g for g in build_rules(slo, engine_series("vllm"))}


def test_each_burn_alert_probes_its_two_error_ratios_and_its_request_rate():
    burn = _kept_groups()["servewatch-slo-chat-burn"].rules
    assert len(burn) == 16                                   # 4 objectives x 4 window pairs
    assert burn[0].probes == ('slo:sli_error:ratio_rate1h{sli="availability",slo="chat"}',
                              'slo:sli_error:ratio_rate5m{sli="availability",slo="chat"}',
                              'slo:sli_requests:rate1h{sli="availability",slo="chat"}')
    for rule in burn:
        sel = f'{{sli="{rule.labels["sli"]}",slo="chat"}}'
        long_w, short_w = rule.labels["long_window"], rule.labels["short_window"]
        assert rule.probes == (f"slo:sli_error:ratio_rate{long_w}{sel}", f"slo:sli_error:ratio_rate{short_w}{sel}",
                               f"slo:sli_requests:rate{long_w}{sel}")


def test_each_leading_alert_probes_the_series_it_compares():
    waiting = 'sum by (job, instance) (vllm:num_requests_waiting{job="llm"})'
    kv = 'max by (job, instance) (vllm:kv_cache_usage_perc{job="llm"})'
    queue = 'sum by (job, instance) (rate(vllm:request_queue_time_seconds_{}{{job="llm"}}[{}]))'
    assert {r.alert: r.probes for r in _kept_groups()["servewatch-vllm-leading"].rules} == {
        "LLMRequestsWaiting": (waiting,),
        "LLMQueueTimeRising": (queue.format("sum", "5m") + " / " + queue.format("count", "5m"),
                               queue.format("sum", "1h") + " / " + queue.format("count", "1h")),
        "LLMPreempting": ('sum by (job, instance) (rate(vllm:num_preemptions_total{job="llm"}[5m]))',),
        "LLMKVCacheFullWithWaiting": (kv, waiting),
        "LLMOutOfSlots": ('max by (job, instance) (vllm:num_requests_running{job="llm"})', kv),
        "LLMServerErrors": ('(sum by (job, instance) (rate(http_requests_total{job="llm",status="5xx"}[5m])) '
                            'or 0 * sum by (job, instance) (rate(http_requests_total{job="llm"}[5m])))',),
    }


def test_the_routes_must_follow_the_action_classes(monkeypatch):
    import pytest

    from servewatch.derive import rules

    monkeypatch.setattr(rules, "ACTION_ROUTES", rules.ACTION_ROUTES[::-1])
    with pytest.raises(AssertionError, match=r"^a route per action class, in order$"):
        rules.action_routes_yaml()


def test_the_queue_rise_floor_without_a_ttft_objective_is_1_s_and_no_queue_histogram_no_alert():
    import dataclasses

    from servewatch.derive.engine_series import engine_series
    from servewatch.derive.rules import leading_group
    from servewatch.derive.slo import load_slo

    vllm = engine_series("vllm")
    slo = load_slo("service: chat\nbudget: 30d\nselector: {job: llm}\nobjectives:\n  availability: 99.9\n", "slo.yaml")
    (rising,) = [r for r in leading_group(slo, vllm).rules if r.alert == "LLMQueueTimeRising"]
    assert rising.expr.endswith("[5m]))) > 1") and ") > 2 * (" in rising.expr   # no ttft: a floor of 1 s
    kept = _kept_groups()["servewatch-vllm-leading"].rules                     # ttft threshold 1 s: floor 0.5 s
    assert [r.expr.rsplit(" > ", 1)[1] for r in kept if r.alert == "LLMQueueTimeRising"] == ["0.5"]
    no_queue = dataclasses.replace(vllm, histograms={k: v for k, v in vllm.histograms.items() if k != "queue"})
    assert [r.alert for r in leading_group(slo, no_queue).rules] == [
        "LLMRequestsWaiting", "LLMPreempting", "LLMKVCacheFullWithWaiting", "LLMOutOfSlots", "LLMServerErrors"]


def test_each_guard_probes_its_series():
    assert {r.alert: r.probes for r in _kept_groups()["servewatch-vllm-guards"].rules} == {
        "LLMTargetDown": ('up{job="llm"}',),
        "LLMEngineSeriesAbsent": ('vllm:num_requests_running{job="llm"}',),
        "LLMEngineMetricsMissing": ('count by (job, instance) (up{job="llm"} == 1)',
                                    'count by (job, instance) (vllm:num_requests_running{job="llm"})'),
    }
