"""A minimal Grafana dashboard for one engine dialect: every panel says which action it leads to.

Panels are plain data first (PanelSpec, with PromQL built from the dialect's series); `to_grafana`
turns them into a dashboard with Grafana's own foundation SDK.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.derive.engine_series import EngineSeries, LatencyHistogram
from servewatch.derive.rules import le_text

SEL = 'job=~"$job", instance=~"$instance"'
RATE = "$__rate_interval"
# Measured with a real vLLM on this project's CPU lab: 23,955 of 23,984 inter-token latencies fell in the
# first bucket (le=0.01 s), so every quantile of that histogram read about 9.9 ms.
ITL_FIRST_BUCKET_MEASURED = "a real vLLM CPU run put 23,955 of 23,984 inter-token latencies in the first bucket"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str              # what the panel shows and which action it leads to
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"      # timeseries | statetimeline
    threshold: float | None = None
    from_serve: bool = False      # reads servewatch serve's series, not the engine's


def _sel(*extra: str) -> str:
    return "{" + ", ".join((SEL,) + tuple(e for e in extra if e)) + "}"


def _quantiles(hist: LatencyHistogram) -> tuple[Query, ...]:
    return tuple(Query(f"histogram_quantile({q}, sum by (le) (rate({hist.name}_bucket{_sel()}[{RATE}])))",
                       f"p{round(q * 100)}") for q in (0.5, 0.95))


def _first_bucket_share(kind: str, hist: LatencyHistogram) -> Query:
    first = _sel(f'le="{le_text(hist.edges[0])}"')
    return Query(f"sum(rate({hist.name}_bucket{first}[{RATE}])) / sum(rate({hist.name}_count{_sel()}[{RATE}]))",
                 f"{kind} (le {hist.edges[0]:g} s)")


def _edges_note(hist: LatencyHistogram) -> str:
    return (f"Buckets run from {hist.edges[0]:g} s to {hist.edges[-1]:g} s: a quantile is interpolated between two "
            f"edges, and everything faster than {hist.edges[0]:g} s shares the first bucket, so a quantile there "
            f"cannot tell those latencies apart.")


def panels(series: EngineSeries, slot_limit: int | None = None) -> list[PanelSpec]:
    h = series.histogram
    out = [
        PanelSpec("Time to first token (p50, p95)",
                  "Above the TTFT objective with requests waiting: shed load or add replicas. Above it with "
                  "nothing waiting: prefill itself is slow (long prompts) - check prompt lengths. "
                  + _edges_note(h("ttft")), _quantiles(h("ttft")), unit="s"),
        PanelSpec("Time per output token (p50, p95)",
                  "Rising with running near the slot limit: the batch is too large for the latency target - "
                  "lower the slot limit or add replicas. " + _edges_note(h("tpot")) + " On fast hardware most "
                  "tokens take less than the first edge, so check the first-bucket share panel before trusting "
                  f"p50 ({ITL_FIRST_BUCKET_MEASURED}).", _quantiles(h("tpot")), unit="s"),
        PanelSpec("End-to-end latency (p50, p95)",
                  "The user-visible symptom: when it rises, look left at waiting, queue wait and preemptions "
                  "for the cause, and at the burn-rate alerts for how fast the budget goes. "
                  + _edges_note(h("e2e")), _quantiles(h("e2e")), unit="s"),
        PanelSpec("Share of observations in the first bucket",
                  "Above 50 % for a histogram, its p50 reads inside the first bucket: do not alert on that "
                  "quantile; measure client-side (servewatch load) or add bucket edges with "
                  f"{h('itl').edge_flag}.",
                  tuple(_first_bucket_share(kind, h(kind)) for kind in ("ttft", "tpot", "itl", "e2e") if h(kind)),
                  unit="percentunit", threshold=0.5),
        PanelSpec("Queue wait (p95) and requests waiting",
                  "Waiting above 0 for minutes is the earliest sign of overload, about a minute before "
                  "preemption and minutes before end-to-end latency: shed or rate-limit at the router, or add "
                  "replicas. Queue wait against the TTFT objective says how much of it the queue eats.",
                  (Query(f"histogram_quantile(0.95, sum by (le) (rate({h('queue').name}_bucket{_sel()}[{RATE}])))",
                         "queue wait p95 (s)"),
                   Query(f"sum by (instance) ({series.waiting}{_sel()})", "waiting {{instance}}"))),
        PanelSpec("Running vs slot limit",
                  "Running flat at the slot limit while KV usage is low: out of slots, not memory - add "
                  f"replicas, or raise {series.slot_limit_flag} only with memory headroom. Below the limit with "
                  "requests waiting: the KV cache is the limit.",
                  (Query(f"max by (instance) ({series.running}{_sel()})", "running {{instance}}"),),
                  threshold=float(slot_limit) if slot_limit else None),
        PanelSpec("KV cache usage",
                  "At or above 90 % while requests wait: admission waits for memory and preemptions follow - "
                  "cap concurrency or output length, or add KV capacity.",
                  (Query(f"max by (instance) ({series.kv_usage}{_sel()})", "KV {{instance}}"),),
                  unit="percentunit", threshold=0.9),
        PanelSpec("Preemptions per second",
                  "Above 0 sustained: each preempted request redoes its prefill and end-to-end latency follows "
                  "within minutes - lower concurrency or cap output tokens.",
                  (Query(f"sum by (instance) (rate({series.preemptions}{_sel()}[{RATE}])) or "
                         f"0 * sum by (instance) ({series.running}{_sel()})", "{{instance}}"),), unit="ops"),
        PanelSpec("Unfinished requests (running + waiting)",
                  "Climbing while finished requests per second stay flat: requests are stuck, not slow - check "
                  "servewatch's stall panel and take a stack of the engine before restarting it.",
                  (Query(f"sum by (instance) ({series.running}{_sel()}) + sum by (instance) ({series.waiting}{_sel()})",
                         "unfinished {{instance}}"),)),
        _errors_panel(series),
        _serve_states("servewatch: stalled (tokens stopped while /health is 200)",
                      "1 = servewatch serve sees admitted requests but no token for longer than the step cadence "
                      "allows (collective hang: ranks wait in a collective another rank has not entered, from "
                      "the Flight Recorder or NCCL RAS). Keep its incident bundle and a stack dump, then drain the "
                      "replica.",
                      Query('servewatch_verdict_active{verdict="alive_health_ok_no_progress"}', "{{target}}"),
                      Query('servewatch_verdict_active{verdict="collective_hang"}', "collective hang {{target}}")),
        _serve_states("servewatch: engine ranks not running or sleeping",
                      "Each line is an engine rank (tensor-, pipeline- or data-parallel worker, engine core) in state "
                      "T (stopped), D (uninterruptible) or Z (zombie) on a target servewatch serve watches with its "
                      "pid. One rank there while its siblings run is the stuck rank: take stacks of every rank, then "
                      "drain the replica (rank_stalled pages when requests hang on it).",
                      Query('servewatch_rank_state{state=~"T|t|D|Z"} == 1',
                            "{{target}} {{role}} {{rank}} {{state}}")),
        _serve_states("servewatch: active verdicts and reachability",
                      "Each line is a verdict servewatch serve holds for a target (engine dead, overload, KV "
                      "pressure, ...); each verdict's alert carries its runbook branch. Target up at 0: servewatch "
                      "cannot reach the server - route away from it.",
                      Query("servewatch_verdict_active == 1", "{{target}} {{verdict}}"),
                      Query("servewatch_target_up", "up {{target}}")),
    ]
    return out


def _serve_states(title: str, description: str, *queries: Query) -> PanelSpec:
    """A state-timeline panel of servewatch serve's own series (verdicts, ranks, reachability)."""
    return PanelSpec(title, description, queries, kind="statetimeline", from_serve=True)


def _errors_panel(series: EngineSeries) -> PanelSpec:
    http, success = series.availability, series.success
    status = http.bad_labels[-1][0]        # the label that holds the status (class or code)
    if not success.bad_counter:
        queries = (Query(f"sum by ({status}) (rate({http.counter}{_sel()}[{RATE}]))", f"HTTP {{{{{status}}}}}"),
                   Query(f"sum by (finished_reason) (rate({success.counter}{_sel()}[{RATE}]))",
                         "finished {{finished_reason}}"))
    else:
        queries = (Query(f"sum by ({status}) (rate({http.counter}{_sel(http.total)}[{RATE}]))",
                         f"HTTP {{{{{status}}}}}"),
                   Query(f"sum(rate({success.bad_counter}{_sel()}[{RATE}])) or "
                         f"0 * sum(rate({success.counter}{_sel()}[{RATE}]))", "aborted"))
    return PanelSpec("Errors by class",
                     "5xx: the server failed the request - check the log and engine health, take a failing "
                     "replica out of routing. 4xx: the client sent something wrong - no server action. "
                     "Aborts and errors among finished requests: clients gave up (latency) or the engine failed.",
                     queries, unit="reqps")


def to_grafana(series: EngineSeries, specs: list[PanelSpec]) -> dict:
    """The dashboard model (a dict ready for json.dumps) built with grafana-foundation-sdk."""
    import json

    from grafana_foundation_sdk.builders import dashboard, prometheus, statetimeline, timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import DataSourceRef, Threshold, VariableRefresh

    datasource = DataSourceRef(type_val="prometheus", uid="${datasource}")
    board = (dashboard.Dashboard(f"servewatch - {series.dialect}")
             .uid(f"servewatch-{series.dialect}")
             .description(f"The minimal set for {series.dialect} ({series.naming} metric names): every panel "
                          "says which action it leads to.")
             .tags(["servewatch", series.dialect])
             .refresh("30s").time("now-3h", "now")
             .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
             .with_variable(dashboard.QueryVariable("job").label("job").datasource(datasource)
                            .query(f"label_values({series.running}, job)").refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                            .multi(True).include_all(True).all_value(".*"))
             .with_variable(dashboard.QueryVariable("instance").label("instance").datasource(datasource)
                            .query(f'label_values({series.running}{{job=~"$job"}}, instance)')
                            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                            .multi(True).include_all(True).all_value(".*")))
    for spec in specs:
        panel = (statetimeline.Panel() if spec.kind == "statetimeline" else timeseries.Panel().unit(spec.unit))
        panel = panel.title(spec.title).description(spec.description).datasource(datasource).height(8).span(12)
        for i, query in enumerate(spec.queries):
            panel = panel.with_target(prometheus.Dataquery().expr(query.expr).legend_format(query.legend)
                                      .ref_id(chr(ord("A") + i)))
        if spec.threshold is not None:
            panel = panel.thresholds(dashboard.ThresholdsConfig().mode("absolute").steps(
                [Threshold(value=None, color="green"), Threshold(value=spec.threshold, color="red")]))
        board = board.with_panel(panel)
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def dashboard_queries(model: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every query in a dashboard model."""
    return [(panel.get("title", ""), target["expr"]) for panel in model.get("panels", [])
            for target in panel.get("targets", []) if target.get("expr")]
