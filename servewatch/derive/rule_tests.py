"""`promtool test rules` cases for a generated rule file: synthetic series whose expected alerts follow
from the SLO's arithmetic.

Traffic is 600 requests a minute. A burn of m times the budget b is a bad fraction m*b; over a
window that holds d minutes of it after a clean baseline, the window's error ratio is m*b*d/window,
so the 1 h / 5 m page at factor F fires once d > 60*F/m minutes (plus its `for`).
"""

from __future__ import annotations

import math

from servewatch.derive.engine_series import EngineSeries
from servewatch.derive.rules import RuleGroup, burn_alert_name, le_text, servewatch_alert_name
from servewatch.derive.slo import Objective, Slo, duration_text

PER_MINUTE = 600.0
INSTANCE = "engine-a:8000"
BASELINE_MIN = 360            # a clean 6 h before a burn, so the 6 h windows hold only clean traffic first


def counter_values(*segments: tuple[float, int]) -> str:
    """promtool expanding notation for a counter that grows by `per_min` for `minutes`, segment after segment."""
    parts, value, first = [], 0.0, True
    for per_min, minutes in segments:
        if first:
            parts.append(f"{_num(value)}+{_num(per_min)}x{minutes}")
            value += per_min * minutes
            first = False
        else:
            value += per_min
            parts.append(f"{_num(value)}+{_num(per_min)}x{minutes - 1}")
            value += per_min * (minutes - 1)
    return " ".join(parts)


def gauge_values(*segments: tuple[float, int]) -> str:
    return " ".join(f"{_num(v)}x{n - 1}" if n > 1 else _num(v) for v, n in segments)


def _num(x: float) -> str:
    return f"{x:.6g}" if not float(x).is_integer() else str(int(x))


def _series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


class _Case:
    def __init__(self, name: str):
        self.name, self.inputs, self.checks = name, [], []

    def series(self, name: str, labels: dict[str, str], values: str) -> None:
        self.inputs.append({"series": _series(name, labels), "values": values})

    def expect(self, minute: int, alertname: str, alerts: list[dict]) -> None:
        self.checks.append({"eval_time": f"{minute}m", "alertname": alertname, "exp_alerts": alerts})

    def to_dict(self) -> dict:
        return {"name": self.name, "interval": "1m", "input_series": self.inputs, "alert_rule_test": self.checks}


def _rule(groups: list[RuleGroup], alert: str, **labels: str):
    for group in groups:
        for rule in group.rules:
            if rule.alert == alert and all(rule.labels.get(k) == v for k, v in labels.items()):
                return rule
    raise KeyError(alert)


def _fired(rule, **expr_labels: str) -> dict:
    return {"exp_labels": {**expr_labels, **rule.labels}, "exp_annotations": dict(rule.annotations)}


def build_tests(slo: Slo, series: EngineSeries, groups: list[RuleGroup], rule_file: str) -> dict:
    job = slo.selector.get("job", "")
    base = {**slo.selector, "instance": INSTANCE}
    cases = []
    ratio = next((o for o in slo.objectives if o.kind in ("availability", "success")), None)
    if ratio is not None:
        cases += _burn_cases(slo, series, groups, ratio, base)
    latency = next((o for o in slo.objectives if o.kind == "e2e"), None)
    if latency is not None:
        cases.append(_leading_before_burn(slo, series, groups, latency, base))
    cases += _leading_cases(slo, series, groups, base)
    cases += _guard_cases(slo, series, groups, base, job)
    if any(g.name.startswith("servewatch-serve") for g in groups):
        cases += _servewatch_cases(groups)
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": [c.to_dict() for c in cases]}


# --- burn-rate cases -------------------------------------------------------------------------------
def _traffic(case: _Case, series: EngineSeries, objective: Objective, base: dict, segments) -> None:
    """`segments`: (requests per minute, bad fraction, minutes)."""
    ratio = series.availability if objective.kind == "availability" else series.success
    good = counter_values(*((rate * (1 - f), n) for rate, f, n in segments))
    bad = counter_values(*((rate * f, n) for rate, f, n in segments))
    if ratio.bad_counter:
        total = counter_values(*((rate, n) for rate, _, n in segments))
        case.series(ratio.counter, {**base, **dict(ratio.good_labels)}, total)
        case.series(ratio.bad_counter, base, bad)
    else:
        case.series(ratio.counter, {**base, **dict(ratio.good_labels)}, good)
        case.series(ratio.counter, {**base, **dict(ratio.bad_labels)}, bad)


def _burn_cases(slo: Slo, series: EngineSeries, groups, objective: Objective, base: dict) -> list[_Case]:
    b = objective.error_budget
    fast = next(w for w in slo.windows if w.severity == "page")
    factor = fast.burn_rate(slo.budget_s)
    long_w, short_w = duration_text(fast.long_s), duration_text(fast.short_s)
    page = _rule(groups, burn_alert_name("page"), sli=objective.kind, long_window=long_w)
    expr_labels = {"job": slo.selector.get("job", ""), "slo": slo.service}
    cases = []

    multiple = 2 * factor
    if multiple * b <= 1:
        case = _Case(f"{objective.kind}: a {multiple:g}x burn pages within {long_w} x {factor:g}/{multiple:g}")
        _traffic(case, series, objective, base, [(PER_MINUTE, 0.0, BASELINE_MIN), (PER_MINUTE, multiple * b, 120)])
        detect = fast.long_s / 60 * factor / multiple           # minutes of burn until the long window crosses
        case.expect(BASELINE_MIN + math.floor(detect) - 5, page.alert, [])
        case.expect(BASELINE_MIN + math.ceil(detect) + 7, page.alert, [_fired(page, **expr_labels)])
        cases.append(case)

    slow = next(w for w in reversed(slo.windows) if w.severity == "ticket")
    ticket = _rule(groups, burn_alert_name("ticket"), sli=objective.kind,
                   long_window=duration_text(slow.long_s))
    slow_factor = slow.burn_rate(slo.budget_s)
    case = _Case(f"{objective.kind}: a burn of 1.5x the slowest ticket factor opens only that ticket")
    _traffic(case, series, objective, base, [(PER_MINUTE, 1.5 * slow_factor * b, 180)])
    case.expect(120, ticket.alert, [_fired(ticket, **expr_labels)])
    case.expect(120, page.alert, [])
    cases.append(case)

    blip = min(50.0, 1 / b)
    case = _Case(f"{objective.kind}: a five-minute blip at {blip:g}x the budget pages nothing")
    _traffic(case, series, objective, base,
             [(PER_MINUTE, 0.0, BASELINE_MIN), (PER_MINUTE, blip * b, 5), (PER_MINUTE, 0.0, 90)])
    for minute in (5, 10, 30, 60, 90):
        case.expect(BASELINE_MIN + minute, page.alert, [])
        case.expect(BASELINE_MIN + minute, ticket.alert, [])
    cases.append(case)

    case = _Case(f"{objective.kind}: zero traffic pages nothing")
    _traffic(case, series, objective, base, [(0.0, 0.0, 120)])
    for minute in (30, 60, 120):
        case.expect(minute, page.alert, [])
        case.expect(minute, ticket.alert, [])
    cases.append(case)

    case = _Case(f"{objective.kind}: one failing request every 10 minutes (under min_requests) pages nothing")
    _traffic(case, series, objective, base, [(0.1, 1.0, 180)])
    for minute in (15, 60, 180):
        case.expect(minute, page.alert, [])
    cases.append(case)
    return cases


def _leading_before_burn(slo: Slo, series: EngineSeries, groups, objective: Objective, base: dict) -> _Case:
    """Waiting climbs first; two minutes later every request misses the latency threshold."""
    hist = series.histogram(objective.kind)
    fast = next(w for w in slo.windows if w.severity == "page")
    page = _rule(groups, burn_alert_name("page"), sli=objective.kind, long_window=duration_text(fast.long_s))
    waiting = _rule(groups, "LLMRequestsWaiting")
    case = _Case(f"{objective.kind}: requests waiting fires before the {objective.kind} burn pages")
    onset, slow_from = 60, 62
    case.series(series.waiting, base, gauge_values((0, onset), (5, 120)))
    case.series(hist.name + "_count", base, counter_values((PER_MINUTE, 180)))
    case.series(hist.name + "_bucket", {**base, "le": le_text(objective.threshold_s)},
                counter_values((PER_MINUTE, slow_from), (0.0, 180 - slow_from)))
    case.expect(onset + 5, waiting.alert, [_fired(waiting, **{k: base[k] for k in ("job", "instance") if k in base})])
    case.expect(onset + 5, page.alert, [])
    factor = fast.burn_rate(slo.budget_s)
    detect = fast.long_s / 60 * factor * objective.error_budget   # all requests bad: ratio = d / 60
    check = slow_from + math.ceil(detect) + 7
    fired = [_fired(r, job=base.get("job", ""), slo=slo.service)
             for r in _page_rules(groups, objective.kind) if _burn_holds(r, slo, objective, slow_from, check)]
    case.expect(check, page.alert, fired)
    return case


def _page_rules(groups, kind: str):
    return [r for g in groups for r in g.rules if r.alert == burn_alert_name("page") and r.labels.get("sli") == kind]


def _burn_holds(rule, slo: Slo, objective: Objective, bad_from: int, at: int) -> bool:
    """Whether a page window of `rule` has held since `for` before `at`, all requests bad from `bad_from`
    (minutes; windows reach back at most to minute 0, where the series start)."""
    window = next(w for w in slo.windows if duration_text(w.long_s) == rule.labels["long_window"]
                  and duration_text(w.short_s) == rule.labels["short_window"])
    limit = window.burn_rate(slo.budget_s) * objective.error_budget
    since = at - 2 - 1

    def ratio(seconds: int, t: int) -> float:
        span = min(seconds / 60, t)
        return max(0.0, min(span, t - bad_from)) / span

    return all(ratio(window.long_s, t) > limit * 1.1 and ratio(window.short_s, t) > limit * 1.1
               for t in range(since, at + 1))


# --- leading indicators and guards -------------------------------------------------------------------
def _leading_cases(slo: Slo, series: EngineSeries, groups, base: dict) -> list[_Case]:
    target = {k: base[k] for k in ("job", "instance") if k in base}
    cases = []
    limit = slo.slot_limit or series.default_slot_limit
    if limit:
        rule = _rule(groups, "LLMOutOfSlots")
        case = _Case("running at the slot limit with KV at 20 % is out of slots, not memory")
        case.series(series.running, base, gauge_values((limit / 2, 10), (limit, 30)))
        case.series(series.kv_usage, base, gauge_values((0.2, 40)))
        case.expect(9, rule.alert, [])
        case.expect(25, rule.alert, [_fired(rule, **target)])
        cases.append(case)
        case = _Case("running at the slot limit with KV at 95 % is memory, not slots")
        case.series(series.running, base, gauge_values((limit, 40)))
        case.series(series.kv_usage, base, gauge_values((0.95, 40)))
        case.series(series.waiting, base, gauge_values((3, 40)))
        kv_rule = _rule(groups, "LLMKVCacheFullWithWaiting")
        case.expect(25, rule.alert, [])
        case.expect(25, kv_rule.alert, [_fired(kv_rule, **target)])
        cases.append(case)
    rule = _rule(groups, "LLMPreempting")
    case = _Case("preemptions every minute fire the preemption indicator; none, nothing")
    case.series(series.preemptions, base, counter_values((0, 20), (6, 30)))
    if series.preemptions_lazy:
        case.series(series.running, base, gauge_values((4, 50)))
    case.expect(19, rule.alert, [])
    case.expect(35, rule.alert, [_fired(rule, **target)])
    cases.append(case)

    queue = series.histogram("queue")
    if queue is not None:
        rule = _rule(groups, "LLMQueueTimeRising")
        ttft = slo.objective("ttft")
        slow_wait = 4 * (ttft.threshold_s if ttft else 1.0)      # well above the floor and twice the hour's mean
        case = _Case(f"queue wait jumping from 0.05 s to {slow_wait:g} s fires the queue indicator")
        case.series(queue.name + "_count", base, counter_values((PER_MINUTE, 120)))
        case.series(queue.name + "_sum", base,
                    counter_values((PER_MINUTE * 0.05, 90), (PER_MINUTE * slow_wait, 30)))
        case.expect(89, rule.alert, [])
        case.expect(105, rule.alert, [_fired(rule, **target)])
        cases.append(case)

    if series.availability is not None:
        rule = _rule(groups, "LLMServerErrors")
        http = series.availability
        case = _Case("a trickle of 5xx fires the server-error indicator; 2xx alone does not")
        case.series(http.counter, {**base, **dict(http.good_labels)}, counter_values((PER_MINUTE, 40)))
        case.series(http.counter, {**base, **dict(http.bad_labels)}, counter_values((0, 20), (1, 20)))
        case.expect(19, rule.alert, [])
        case.expect(30, rule.alert, [_fired(rule, **target)])
        cases.append(case)
    return cases


def _guard_cases(slo: Slo, series: EngineSeries, groups, base: dict, job: str) -> list[_Case]:
    target = {k: base[k] for k in ("job", "instance") if k in base}
    absent = _rule(groups, "LLMEngineSeriesAbsent")
    down = _rule(groups, "LLMTargetDown")
    case = _Case("a target that vanishes fires absent() and target-down")
    case.series(series.running, base, gauge_values((2, 11)) + " stale")
    case.series("up", target, gauge_values((1, 11), (0, 30)))
    case.expect(10, absent.alert, [])
    case.expect(10, down.alert, [])
    case.expect(25, absent.alert, [_fired(absent, **slo.selector)])
    case.expect(25, down.alert, [_fired(down, **target)])
    return [case]


def _servewatch_cases(groups) -> list[_Case]:
    cases = []
    stall = _rule(groups, servewatch_alert_name("alive_health_ok_no_progress"))
    overload = _rule(groups, servewatch_alert_name("overload"))
    case = _Case("servewatch serve's stall verdict pages; an overload verdict keeps its own severity")
    labels = {"target": "engine-a", "verdict": "alive_health_ok_no_progress", "severity": "page"}
    case.series("servewatch_verdict_active", labels, gauge_values((0, 5), (1, 10)))
    over = {"target": "engine-a", "verdict": "overload", "severity": "ticket"}
    case.series("servewatch_verdict_active", over, gauge_values((0, 5), (1, 10)))
    case.expect(4, stall.alert, [])
    case.expect(6, stall.alert, [_fired(stall, target="engine-a", verdict="alive_health_ok_no_progress")])
    case.expect(9, overload.alert, [_fired(overload, **over)])
    cases.append(case)
    down = _rule(groups, "ServewatchTargetDown")
    failing = _rule(groups, "ServewatchProbeFailing")
    case = _Case("servewatch serve: a target it cannot reach, and failing probes")
    case.series("servewatch_target_up", {"target": "engine-a"}, gauge_values((1, 5), (0, 20)))
    case.series("servewatch_probe_failures_total", {"target": "engine-a"}, counter_values((0, 5), (1, 20)))
    case.expect(4, down.alert, [])
    case.expect(10, down.alert, [_fired(down, target="engine-a")])
    case.expect(20, failing.alert, [_fired(failing, target="engine-a")])
    cases.append(case)
    stuck = _rule(groups, "ServewatchNodeRankStuck")
    case = _Case("serve --node: a rank stopped for a minute on another node pages; a running one does not")
    rank = {"node": "node-b", "engine": "8000", "pod_uid": "none", "role": "worker", "rank": "TP1"}
    case.series("servewatch_node_rank_state", {**rank, "state": "R"}, gauge_values((1, 5)))
    case.series("servewatch_node_rank_state", {**rank, "state": "T"}, "_x4 " + gauge_values((1, 10)))  # from 5 m
    case.series("servewatch_node_rank_state", {**rank, "rank": "TP0", "state": "S"}, gauge_values((1, 10)))
    case.expect(4, stuck.alert, [])
    case.expect(7, stuck.alert, [_fired(stuck, **rank)])
    cases.append(case)
    return cases


def render_tests(tests: dict) -> str:
    import yaml

    return "# Generated by scripts/generate_rule_tests.py from tests/rules/slo.yaml; run: promtool test rules\n" + \
        yaml.safe_dump(tests, sort_keys=False, width=120)



def kept_files(directory) -> dict:
    """{path: text} of the rule files and their tests for every dialect and metric naming, from
    `directory`/slo.yaml."""
    from pathlib import Path

    from servewatch.derive.engine_series import NAMINGS, engine_series
    from servewatch.derive.rules import build_rules, render_rule_file
    from servewatch.derive.slo import check_thresholds, load_slo

    directory = Path(directory)
    slo = load_slo((directory / "slo.yaml").read_text(encoding="utf-8"), "slo.yaml")
    out = {}
    for dialect, namings in NAMINGS.items():
        for naming in namings:
            series = engine_series(dialect, naming)
            check_thresholds(slo, series, "slo.yaml")
            groups = build_rules(slo, series)
            header = f"servewatch rules for SLO '{slo.service}' on {dialect} ({naming} metric names)."
            out[directory / naming / "rules.yml"] = render_rule_file(groups, header)
            out[directory / naming / "tests.yml"] = render_tests(build_tests(slo, series, groups, "rules.yml"))
    return out
