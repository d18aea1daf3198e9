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
