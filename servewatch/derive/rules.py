"""Prometheus rules from an SLO and an engine's series: SLI recording rules, multi-window multi-burn-rate
alerts, leading indicators, absent() guards, and alerts on `servewatch serve`'s own series.

Every ratio aggregates its numerator and its denominator by the same labels (SLI_BY or TARGET_BY), and
a numerator whose series the engine creates lazily falls back to 0 times its denominator, so a ratio
is 0 - not missing - before the first bad event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.derive import alert_runbook
from servewatch.derive.engine_series import EngineSeries, LatencyHistogram
from servewatch.derive.slo import Objective, Slo, duration_text
from servewatch.detectors import registry
from servewatch.detectors.config import DetectorConfig

SLI_BY = ("job",)
TARGET_BY = ("job", "instance")
KV_FULL = DetectorConfig().kv_high   # KV usage at which waiting requests wait for memory: kv_pressure's own threshold
KV_LOW = 0.5            # below this with running at the slot limit, the limit is slots, not memory
QUEUE_RISE = 2          # queue wait over 5 m this many times its 1 h mean
SEVERITY_LEADING = "warning"
SERVEWATCH_GROUP = "servewatch-serve"
NODE_RANK = "servewatch_node_rank_state"
NODE_RANK_BY = ("node", "engine", "pod_uid", "role", "rank")


@dataclass(frozen=True)
class Rule:
    expr: str
    record: str = ""
    alert: str = ""
    for_: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    probes: tuple[str, ...] = ()     # sub-queries that return data on a live, healthy engine

    @property
    def name(self) -> str:
        return self.record or self.alert

    def to_dict(self) -> dict:
        out: dict = {"record": self.record} if self.record else {"alert": self.alert}
        out["expr"] = self.expr
        if self.for_:
            out["for"] = self.for_
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


@dataclass(frozen=True)
class RuleGroup:
    name: str
    rules: tuple[Rule, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "rules": [r.to_dict() for r in self.rules]}


# --- PromQL helpers ---------------------------------------------------------------------------
def matchers(selector: dict[str, str], *extra: str) -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in sorted(selector.items())] + [e for e in extra if e]
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _by(labels: tuple[str, ...]) -> str:
    return f"sum by ({', '.join(labels)})"


def _rate(name: str, sel: str, window: str, by: tuple[str, ...]) -> str:
    return f"{_by(by)} (rate({name}{sel}[{window}]))"


def le_text(edge: float) -> str:
    """An `le` label value as prometheus_client writes it (the client vLLM and SGLang use)."""
    from prometheus_client.utils import floatToGoString

    return floatToGoString(edge)


def error_ratio(objective: Objective, series: EngineSeries, selector: dict[str, str], window: str) -> tuple[str, str]:
    """(bad-fraction expression, total-rate expression) for one SLI over one window."""
    by = SLI_BY
    if objective.kind in ("availability", "success"):
        ratio = series.availability if objective.kind == "availability" else series.success
        total = _rate(ratio.counter, matchers(selector, ratio.total), window, by)
        if ratio.bad_counter:
            bad = _rate(ratio.bad_counter, matchers(selector), window, by)
        else:
            bad = _rate(ratio.counter, matchers(selector, ratio.total, ratio.bad), window, by)
        return f"({bad} or 0 * {total})\n/\n{total}", total
    hist = series.histogram(objective.kind)
    count = _rate(hist.name + "_count", matchers(selector), window, by)
    good = _rate(hist.name + "_bucket", matchers(selector, f'le="{le_text(objective.threshold_s)}"'), window, by)
    return f"({count} - {good})\n/\n{count}", count


def sli_error_name(window: str) -> str:
    return f"slo:sli_error:ratio_rate{window}"


def sli_requests_name(window: str) -> str:
    return f"slo:sli_requests:rate{window}"


# --- rule groups ---------------------------------------------------------------------------------
def build_rules(slo: Slo, series: EngineSeries, *, with_serve: bool = True) -> list[RuleGroup]:
    groups = [sli_group(slo, series), burn_group(slo), leading_group(slo, series), guard_group(slo, series)]
    if with_serve:
        groups.append(servewatch_group())
    return [g for g in groups if g.rules]


def windows_used(slo: Slo) -> list[int]:
    return sorted({w.long_s for w in slo.windows} | {w.short_s for w in slo.windows})


def sli_group(slo: Slo, series: EngineSeries) -> RuleGroup:
    rules = []
    for objective in slo.objectives:
        labels = {"sli": objective.kind, "slo": slo.service}
        for seconds in windows_used(slo):
            window = duration_text(seconds)
            bad, total = error_ratio(objective, series, slo.selector, window)
            rules.append(Rule(expr=bad, record=sli_error_name(window), labels=labels, probes=(bad,)))
            rules.append(Rule(expr=total, record=sli_requests_name(window), labels=labels, probes=(total,)))
    return RuleGroup(f"servewatch-slo-{slo.service}-sli", tuple(rules))


def burn_group(slo: Slo) -> RuleGroup:
    rules = []
    for objective in slo.objectives:
        sel = matchers({"sli": objective.kind, "slo": slo.service})
        for window in slo.windows:
            long_w, short_w = duration_text(window.long_s), duration_text(window.short_s)
            factor = window.burn_rate(slo.budget_s)
            limit = f"({factor:g} * {objective.error_budget:g})"
            expr = (f"{sli_error_name(long_w)}{sel} > {limit}\n"
                    f"and\n{sli_error_name(short_w)}{sel} > {limit}\n"
                    f"and\n{sli_requests_name(long_w)}{sel} * {window.long_s} >= {slo.min_requests}")
            rules.append(Rule(
                expr=expr, alert=burn_alert_name(window.severity),
                for_="2m" if window.severity == "page" else "15m",
                labels={"severity": window.severity, "sli": objective.kind, "long_window": long_w, "short_window": short_w,
                        "burn_rate": f"{factor:g}"},
                annotations=alert_runbook.burn(objective.kind, window.severity).annotations(),
                probes=(f"{sli_error_name(long_w)}{sel}", f"{sli_error_name(short_w)}{sel}",
                        f"{sli_requests_name(long_w)}{sel}"),
            ))
    return RuleGroup(f"servewatch-slo-{slo.service}-burn", tuple(rules))


def burn_alert_name(severity: str) -> str:
    return "ErrorBudgetBurnPage" if severity == "page" else "ErrorBudgetBurnTicket"


def _leading(name: str, expr: str, for_: str, probes: tuple[str, ...], severity: str = SEVERITY_LEADING) -> Rule:
    return Rule(expr=expr, alert=name, for_=for_, labels={"severity": severity},
                annotations=alert_runbook.ENGINE[name].annotations(), probes=probes)


def leading_group(slo: Slo, series: EngineSeries) -> RuleGroup:
    sel = matchers(slo.selector)
    by = TARGET_BY
    on = f"on ({', '.join(by)})"
    waiting = f"{_by(by)} ({series.waiting}{sel})"
    kv = f"max by ({', '.join(by)}) ({series.kv_usage}{sel})"
    running = f"max by ({', '.join(by)}) ({series.running}{sel})"
    rules = [_leading("LLMRequestsWaiting", f"{waiting} > 0", "2m", (waiting,))]

    queue_now, queue_hour = _queue_means(series, sel, by)
    if queue_now:
        ttft = slo.objective("ttft")
        floor = ttft.threshold_s / 2 if ttft else 1.0
        rules.append(_leading(
            "LLMQueueTimeRising",
            f"({queue_now}) > {QUEUE_RISE} * ({queue_hour})\nand {on}\n({queue_now}) > {floor:g}", "5m",
            (queue_now, queue_hour)))

    preempt = _rate(series.preemptions, sel, "5m", by)
    if series.preemptions_lazy:
        preempt = f"({preempt} or 0 * {_by(by)} ({series.running}{sel}))"
    rules.append(_leading("LLMPreempting", f"{preempt} > 0", "5m", (preempt,)))
    rules.append(_leading("LLMKVCacheFullWithWaiting", f"{kv} >= {KV_FULL:g}\nand {on}\n{waiting} > 0", "5m",
                          (kv, waiting)))
    slot_limit = slo.slot_limit or series.default_slot_limit
    if slot_limit:
        rules.append(_leading("LLMOutOfSlots", f"{running} >= {slot_limit}\nand {on}\n{kv} < {KV_LOW:g}", "5m",
                              (running, kv)))
    if series.availability is not None:
        http = series.availability
        total = _rate(http.counter, matchers(slo.selector, http.total), "5m", by)
        bad = _rate(http.counter, matchers(slo.selector, http.total, http.bad), "5m", by)
        errors = f"({bad} or 0 * {total})"
        rules.append(_leading("LLMServerErrors", f"{errors} > 0", "2m", (errors,), severity="ticket"))
    return RuleGroup(f"servewatch-{series.dialect}-leading", tuple(rules))


def _queue_means(series: EngineSeries, sel: str, by: tuple[str, ...]) -> tuple[str, str]:
    hist: LatencyHistogram | None = series.histogram("queue")
    if hist is not None:
        def mean(window: str) -> str:
            return f"{_rate(hist.name + '_sum', sel, window, by)} / {_rate(hist.name + '_count', sel, window, by)}"
        return mean("5m"), mean("1h")
    return "", ""


def guard_group(slo: Slo, series: EngineSeries) -> RuleGroup:
    sel = matchers(slo.selector)
    by = ", ".join(TARGET_BY)
    up = f"up{sel}"
    engine = f"count by ({by}) ({series.running}{sel})"
    rules = (
        Rule(expr=f"{up} == 0", alert="LLMTargetDown", for_="2m", labels={"severity": "page"},
             annotations=alert_runbook.ENGINE["LLMTargetDown"].annotations(), probes=(up,)),
        Rule(expr=f"absent({series.running}{sel})", alert="LLMEngineSeriesAbsent", for_="5m",
             labels={"severity": "page"}, annotations=alert_runbook.ENGINE["LLMEngineSeriesAbsent"].annotations(),
             probes=(f"{series.running}{sel}",)),
        Rule(expr=f"count by ({by}) ({up} == 1)\nunless on ({by})\n{engine}", alert="LLMEngineMetricsMissing",
             for_="5m", labels={"severity": "ticket"},
             annotations=alert_runbook.ENGINE["LLMEngineMetricsMissing"].annotations(),
             probes=(f"count by ({by}) ({up} == 1)", engine)),
    )
    return RuleGroup(f"servewatch-{series.dialect}-guards", rules)


def servewatch_alert_name(verdict: str) -> str:
    return registry.ALERT_NAMES.get(verdict) or "Servewatch" + "".join(p.title() for p in verdict.split("_"))


GPU_FAULT_ALERTS = {"drain": "ServewatchGpuHardwareFault", "restart": "ServewatchGpuFaultRestart",
                    "page": "ServewatchGpuFaultPage"}


def gpu_fault_rules() -> list[Rule]:
    """gpu_fault by GPU, one alert per action class its firings carry: servewatch_gpu_fault's `action` label is the
    fault's NVIDIA action word, and xid.ACTION_CLASS (the mapping the verdict's own action comes from) says which
    words make which class, so the alert's `action` is the firing's. A hardware fault drains the node (guard exits 6
    and is not restarted); restart_app is restarted (livez, guard); the rest pages a person."""
    from servewatch.detectors import xid

    spec = registry.spec(registry.GPU_FAULT)
    rules = []
    for action, alert in GPU_FAULT_ALERTS.items():
        words = "|".join(xid.words_of_class(action))
        text = alert_runbook.SERVEWATCH[registry.GPU_FAULT] if action == "drain" else alert_runbook.for_verdict(spec)
        rules.append(Rule(expr=f'max by (target, gpu_uuid, xid, action) (servewatch_gpu_fault{{action=~"{words}"}}) '
                               "== 1", alert=alert, labels={"severity": spec.severity, "action": action},
                          annotations=text.annotations()))
    return rules


def servewatch_group() -> RuleGroup:
    """Alerts on the series `servewatch serve` exports; the only way to alert on tokens that stopped
    while /health stays 200. A verdict's severity comes from its series unless the verdict always pages."""
    rules = []
    for spec in registry.specs():
        if spec.action_by:
            continue         # its firings carry their own action: alerted per action class (gpu_fault_rules)
        pages = spec.severity == "page"
        labels = {"severity": "page"} if pages else {}
        rules.append(Rule(
            expr=f'servewatch_verdict_active{{verdict="{spec.name}"}} == 1', alert=servewatch_alert_name(spec.name),
            for_="" if pages else "1m", labels={**labels, "action": spec.action},
            annotations=alert_runbook.for_verdict(spec).annotations()))
    rules += [
        Rule(expr="servewatch_target_up == 0", alert="ServewatchTargetDown", for_="1m", labels={"severity": "page"},
             annotations=alert_runbook.SERVEWATCH["target_up"].annotations()),
        Rule(expr="increase(servewatch_probe_failures_total[5m]) >= 3", alert="ServewatchProbeFailing",
             for_="5m", labels={"severity": "ticket"},
             annotations=alert_runbook.SERVEWATCH["probe_failures"].annotations()),
        *gpu_fault_rules(),
        Rule(expr="absent(servewatch_target_up)", alert="ServewatchAbsent", for_="10m",
             labels={"severity": "ticket"}, annotations=alert_runbook.SERVEWATCH["absent"].annotations()),
        # `serve --node` on every node: a rank the API node cannot see (another host of a multi-node engine).
        Rule(expr=f"max by ({', '.join(NODE_RANK_BY)}) ({NODE_RANK}{{state=~\"T|t|D|Z\"}}) == 1",
             alert="ServewatchNodeRankStuck", for_="1m", labels={"severity": "page"},
             annotations=alert_runbook.SERVEWATCH["node_rank"].annotations()),
        # The join with the cluster, done by Prometheus: each node rank with its pod's namespace, name and owner
        # (kube-state-metrics' kube_pod_info, by pod UID), so the ranks of one deployment on many nodes group;
        # a rank whose pod kube-state-metrics does not know (or not in a pod) is kept as it is.
        Rule(expr=f"{NODE_RANK}\n* on (pod_uid) group_left (namespace, pod, created_by_kind, created_by_name)\n"
                  f'max by (pod_uid, namespace, pod, created_by_kind, created_by_name) '
                  f'(label_replace(kube_pod_info, "pod_uid", "$1", "uid", "(.+)"))\n'
                  f"or on ({', '.join(NODE_RANK_BY)}, state) {NODE_RANK}",
             record="servewatch:node_rank_state:by_pod"),
    ]
    return RuleGroup(SERVEWATCH_GROUP, tuple(rules))


# --- output ------------------------------------------------------------------------------------
def render_rule_file(groups: list[RuleGroup], header: str) -> str:
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper, value: str):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    body = yaml.dump({"groups": [g.to_dict() for g in groups]}, Dumper=_Dumper, sort_keys=False, width=110,
                     allow_unicode=True)
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + body


# Alertmanager: a page for a job silences its tickets and warnings, a ticket its warnings (burn alerts
# carry job; leading indicators carry job and instance).
INHIBIT_RULES = (
    {"source_matchers": ['severity="page"'], "target_matchers": ['severity=~"ticket|warning"'], "equal": ["job"]},
    {"source_matchers": ['severity="ticket"'], "target_matchers": ['severity="warning"'], "equal": ["job"]},
)


def inhibit_rules_yaml() -> str:
    import yaml

    return yaml.safe_dump({"inhibit_rules": [dict(r) for r in INHIBIT_RULES]}, sort_keys=False, width=110)


# Alertmanager routes by the verdicts' action class (the `action` label servewatch's alerts carry): a restart is
# done by guard or the kubelet on livez, so a person hears of it as a ticket unless it repeats (crash_loop pages);
# a drain goes to whoever owns the hardware; a page to the on-call; info to no one. Receivers are the user's to
# define: these names are placeholders to rename.
ACTION_ROUTES = (
    ("restart", "servewatch-restarts", "restarted by guard or the kubelet on livez; a ticket unless it repeats"),
    ("drain", "servewatch-hardware", "the hardware under the engine is at fault: drain the node"),
    ("page", "servewatch-oncall", "a person decides"),
    ("info", "servewatch-null", "to know; nothing to do now"),
)


def action_routes_yaml() -> str:
    """The child routes of alertmanager.yml's route: one per action class, matched on the `action` label."""
    import yaml

    from servewatch.detectors.verdict import ACTION_CLASSES

    assert [a for a, _, _ in ACTION_ROUTES] == list(ACTION_CLASSES), "a route per action class, in order"
    routes = [{"matchers": [f'action="{action}"'], "receiver": receiver} for action, receiver, _ in ACTION_ROUTES]
    return yaml.safe_dump({"route": {"routes": routes}}, sort_keys=False, width=110)
