"""/metrics for an engine the simulator knows only by its dialect: the series its dialect declares
(`Dialect.alert_series` at its newest naming: running, waiting, KV usage, preemptions, generated tokens,
request success, the HTTP responses and the latency histograms), written by the same helpers as vLLM's and
SGLang's hand-written expositions (servewatch.sim.metrics_vllm / metrics_sglang).

This is the seam that makes a new engine's simulator free: a dialect states its naming, the simulator
renders it; nothing here names an engine.
"""

from __future__ import annotations

from servewatch.dialects.series import EngineSeries, RatioSeries
from servewatch.sim.metrics import Hist, counter, gauge, histogram, make_registry, render, sorted_labels

FINISH_ABORT = "abort"


def _base(name: str) -> str:
    return name[:-len("_total")] if name.endswith("_total") else name


class SeriesMetrics:
    """The metrics writer of a dialect with no hand-written one (the engine hooks of VllmMetrics)."""

    def __init__(self, engine, created: float, series: EngineSeries):
        self.engine = engine
        self.series = series
        self.created = created
        cfg = engine.config
        self.base = sorted_labels({label: cfg.model_name if label == "model_name" else "0"
                                   for label in series.engine_labels})
        self.generated = self.preempted = self.prompt = 0.0
        self.finished = {"good": 0.0, "bad": 0.0}
        self.responses = {"good": 0.0, "bad": 0.0}
        self.h = {kind: Hist(h.edges) for kind, h in series.histograms.items()}
        self.http = self          # the engine counts HTTP statuses through `metrics.http.observe`
        self.registry = make_registry(self.families, with_process=False)

    # --- hooks from the engine and its HTTP layer ----------------------------------------------------
    def observe(self, handler: str, method: str, status: int, seconds: float, request_bytes: int = 0,
                response_bytes: int = 0) -> None:
        if handler.startswith("/v1/"):
            self.responses["bad" if status >= 500 else "good"] += 1

    def on_admitted(self, admission) -> None:
        pass

    def on_step(self, result) -> None:
        self.preempted += len(result.plan.preempted)
        self.generated += sum(1 for r in result.sampled if r.count_in_metrics)
        self.prompt += result.plan.prefill_tokens
        if "ttft" in self.h:
            for request in result.first_tokens:
                if request.count_in_metrics:
                    self.h["ttft"].observe(result.t - request.arrival)
        if "itl" in self.h:
            for gap, n in result.itl_groups.items():
                self.h["itl"].observe(gap, n)

    def on_finished(self, request) -> None:
        if not request.count_in_metrics:
            return
        self.finished["bad" if request.finish_reason == FINISH_ABORT else "good"] += 1
        if request.scheduled_ts is None:
            return
        first, last = request.first_token_ts, request.last_token_ts
        seen = {"e2e": request.finished_ts - request.arrival, "queue": request.scheduled_ts - request.queued_ts}
        if first is not None and request.output_len > 1:
            seen["tpot"] = (last - first) / (request.output_len - 1)
        for kind, value in seen.items():
            if kind in self.h:
                self.h[kind].observe(value)

    # --- exposition ----------------------------------------------------------------------------------
    def text(self) -> str:
        return render(self.registry)

    def families(self):
        e, s, base, created = self.engine, self.series, self.base, self.created
        out = [gauge(name, text, [(base, value)]) for name, text, value in (
            (s.running, "Requests running.", e.num_running), (s.waiting, "Requests waiting.", e.num_waiting),
            (s.kv_usage, "KV cache usage (0 to 1).", e.kv_usage)) if name]
        for name, value, text in ((s.preemptions, self.preempted, "Preempted requests."),
                                  (s.generation_tokens, self.generated, "Generated tokens."),
                                  (s.prompt_tokens, self.prompt, "Prompt tokens computed."),
                                  (s.steps, e.steps, "Engine steps.")):
            if name:
                out.append(counter(_base(name), text, [(base, value)], created))
        for ratio, counts, labels in ((s.success, self.finished, base), (s.availability, self.responses, {})):
            if ratio is not None:
                out += self._ratio(ratio, counts, labels)
        for kind, spec in s.histograms.items():
            out.append(histogram(spec.name, f"Latency ({kind}) in seconds.", [(base, self.h[kind])], created))
        return out

    def _ratio(self, ratio: RatioSeries, counts: dict[str, float], labels: dict[str, str]):
        good = sorted_labels(labels, dict(ratio.good_labels))
        bad = sorted_labels(labels, dict(ratio.bad_labels))
        if ratio.bad_counter:        # the counter counts every request, the bad counter the failed ones
            return [counter(_base(ratio.counter), "Requests.", [(good, counts["good"] + counts["bad"])], self.created),
                    counter(_base(ratio.bad_counter), "Requests that failed.", [(bad, counts["bad"])], self.created)]
        rows = [(good, counts["good"] + counts["bad"])] if good == bad else [(good, counts["good"]), (bad, counts["bad"])]
        return [counter(_base(ratio.counter), "Requests.", rows, self.created)]
