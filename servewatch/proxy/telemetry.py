"""The proxy's own telemetry, by the OpenTelemetry GenAI semantic conventions (status: Development).

Metrics: Prometheus histograms named as the OpenTelemetry-to-Prometheus translation names the
conventions' instruments, with the conventions' advisory bucket boundaries, labelled by operation,
requested model and outcome (`ok` or the record's error class); plus the proxy's live state. Served
on a port of their own, so the engine's /metrics stays reachable through the proxy.

Traces (optional, the `[otel]` extra): one span per request with `gen_ai.*` attributes, exported over
OTLP/HTTP. Head-sampled at a rate; errors and the slowest requests (TTFT over the recent p99) are
always kept. The decision is made when the request ends, so the span is built only when kept.
"""

from __future__ import annotations

import random
import sys

# The conventions' ExplicitBucketBoundaries advice, per instrument.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

OPERATION = {"completions": "text_completion", "chat": "chat"}
MAX_MODELS = 32            # distinct model label values; a client can send any name, the rest are "other"


class Telemetry:
    def __init__(self, *, otlp_endpoint: str | None = None, sample: float = 0.1, seed: int | None = None):
        from prometheus_client import CollectorRegistry, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("gen_ai_operation_name", "gen_ai_request_model", "outcome")
        self.ttft = Histogram("gen_ai_server_time_to_first_token_seconds",
                              "Time to generate first token for successful responses (measured at the proxy).",
                              labels, buckets=TTFT_BUCKETS, registry=self.registry)
        self.tpot = Histogram("gen_ai_server_time_per_output_token_seconds",
                              "Time per output token generated after the first token for successful responses.",
                              labels, buckets=TPOT_BUCKETS, registry=self.registry)
        self.duration = Histogram("gen_ai_server_request_duration_seconds",
                                  "Generative AI server request duration, to the last byte.",
                                  labels, buckets=DURATION_BUCKETS, registry=self.registry)
        self.tokens = Histogram("gen_ai_client_token_usage", "Number of input and output tokens used.",
                                (*labels, "gen_ai_token_type"), buckets=TOKEN_BUCKETS, registry=self.registry)
        self._models: set[str] = set()
        self._children: dict[tuple[str, str, str], list] = {}
        self.proxy = None
        self.log = None            # the proxy's RecordLog, when it keeps records (its lost records exported)
        self.tracer = None
        self._provider = None
        self.sample = sample
        self._rng = random.Random(seed)
        self.spans_kept = 0
        if otlp_endpoint:
            self._start_tracing(otlp_endpoint)

    # -- metrics
    def _model(self, model: str | None) -> str:
        if not model:
            return "unknown"
        if model in self._models:
            return model
        if len(self._models) < MAX_MODELS:
            self._models.add(model)
            return model
        return "other"

    def observe(self, ex, rec) -> None:
        op = OPERATION.get(ex.api, "other")
        outcome = "ok" if rec.error is None else rec.error
        key = (op, self._model(ex.model), outcome)
        children = self._children.get(key)
        if children is None:   # labels() locks and hashes: once per label set, and a series only once observed
            children = self._children[key] = [None] * 5
        if rec.e2e_s is not None:
            self._child(children, 0, self.duration, key).observe(rec.e2e_s)
        if rec.error is None:
            if rec.ttft_s is not None:
                self._child(children, 1, self.ttft, key).observe(rec.ttft_s)
            if rec.tpot_s is not None:
                self._child(children, 2, self.tpot, key).observe(rec.tpot_s)
        if rec.input_tokens is not None:
            self._child(children, 3, self.tokens, (*key, "input")).observe(rec.input_tokens)
        if rec.output_tokens is not None:
            self._child(children, 4, self.tokens, (*key, "output")).observe(rec.output_tokens)
        if self.tracer is not None:
            self._trace(ex, rec, op, outcome)

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry) + (self._state() if self.proxy is not None else b"")

    def _state(self) -> bytes:
        """The proxy's live state and counters, read at scrape time."""
        proxy = self.proxy
        s = proxy.snapshot(proxy.now())
        c = proxy.counters
        lines = [
            "# HELP servewatch_proxy_in_flight Completions and chat completions in flight through the proxy.",
            "# TYPE servewatch_proxy_in_flight gauge", f"servewatch_proxy_in_flight {s.in_flight}",
            "# HELP servewatch_proxy_waiting_first_token Streamed requests sent upstream with no token yet.",
            "# TYPE servewatch_proxy_waiting_first_token gauge",
            f"servewatch_proxy_waiting_first_token {s.waiting_first_token}",
            "# HELP servewatch_proxy_oldest_in_flight_seconds Age of the oldest request in flight (0 when none).",
            "# TYPE servewatch_proxy_oldest_in_flight_seconds gauge",
            f"servewatch_proxy_oldest_in_flight_seconds {s.oldest_s or 0.0:.6f}",
            "# HELP servewatch_proxy_oldest_waiting_first_token_seconds The longest wait for a first token now.",
            "# TYPE servewatch_proxy_oldest_waiting_first_token_seconds gauge",
            f"servewatch_proxy_oldest_waiting_first_token_seconds {s.oldest_waiting_s or 0.0:.6f}",
            "# HELP servewatch_proxy_requests_total Requests ended, by outcome (ok or the error class).",
            "# TYPE servewatch_proxy_requests_total counter",
            *(f'servewatch_proxy_requests_total{{outcome="{k}"}} {v}' for k, v in sorted(c.outcomes.items())),
            "# HELP servewatch_proxy_refused_total Requests the proxy answered itself, by reason.",
            "# TYPE servewatch_proxy_refused_total counter",
            *(f'servewatch_proxy_refused_total{{reason="{k}"}} {v}' for k, v in sorted(c.refused.items())),
            "# HELP servewatch_proxy_malformed_sse_total Streams with an event that is not JSON (passed through).",
            "# TYPE servewatch_proxy_malformed_sse_total counter",
            f"servewatch_proxy_malformed_sse_total {c.malformed_sse}",
            "# HELP servewatch_proxy_other_requests_total Requests to other paths, forwarded untouched.",
            "# TYPE servewatch_proxy_other_requests_total counter",
            f"servewatch_proxy_other_requests_total {c.other_requests}",
        ]
        if self.log is not None:
            lines += ["# HELP servewatch_proxy_records_lost_total Request records the disk did not take (counted, "
                      "never fatal).", "# TYPE servewatch_proxy_records_lost_total counter",
                      f"servewatch_proxy_records_lost_total {self.log.lost}"]
        return ("\n".join(lines) + "\n").encode()

    async def serve_metrics(self, proxy, host: str, port: int):
        """GET /metrics on its own listener. Returns (runner, bound port)."""
        from aiohttp import web

        self.proxy = proxy

        async def metrics(_request):
            return web.Response(body=self.exposition(), content_type="text/plain", charset="utf-8",
                                headers={"X-Content-Type-Options": "nosniff"})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1] if site._server and site._server.sockets else port
        return runner, bound

    @staticmethod
    def _child(children: list, i: int, metric, labels: tuple):
        child = children[i]
        if child is None:
            child = children[i] = metric.labels(*labels)
        return child

    # -- traces
    def _start_tracing(self, endpoint: str) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            from servewatch.errors import ServewatchError

            raise ServewatchError("--otlp-endpoint needs the OpenTelemetry SDK: pip install 'servewatch[otel]'") from None
        url = endpoint.rstrip("/")
        if not url.endswith("/v1/traces"):
            url += "/v1/traces"
        provider = TracerProvider(resource=Resource.create({"service.name": "servewatch-proxy"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url, timeout=5),
                                                       max_queue_size=2048, schedule_delay_millis=1000))
        self._provider = provider
        self.tracer = provider.get_tracer("servewatch.proxy")

    def _keep(self, rec) -> bool:
        if rec.error is not None:
            return True
        proxy = self.proxy
        if rec.ttft_s is not None and proxy is not None and len(proxy.recent) >= 20:
            ttfts = sorted(t for t, _ in proxy.recent)
            if rec.ttft_s >= ttfts[int(0.99 * (len(ttfts) - 1))]:
                return True          # among the slowest
        return self._rng.random() < self.sample

    def _trace(self, ex, rec, op: str, outcome: str) -> None:
        if not self._keep(rec):
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode

        start = int(rec.scheduled * 1e9)
        end = int(((rec.sent or rec.scheduled) + (rec.e2e_s or 0.0)) * 1e9)
        attrs = {"gen_ai.operation.name": op, "gen_ai.provider.name": "openai",
                 "servewatch.outcome": outcome}
        for key, value in (("gen_ai.request.model", ex.model or None),
                           ("gen_ai.request.max_tokens", rec.max_tokens),
                           ("gen_ai.usage.input_tokens", rec.input_tokens),
                           ("gen_ai.usage.output_tokens", rec.output_tokens),
                           ("gen_ai.response.finish_reasons", (rec.finish_reason,) if rec.finish_reason else None),
                           ("gen_ai.server.time_to_first_token", rec.ttft_s),
                           ("gen_ai.server.time_per_output_token", rec.tpot_s),
                           ("http.response.status_code", rec.http_status),
                           ("error.type", rec.error)):
            if value is not None:       # an attribute only for what this request has
                attrs[key] = value
        name = f"{op} {ex.model}" if ex.model else op
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, start_time=start, attributes=attrs)
        if rec.error is not None:
            span.set_status(Status(StatusCode.ERROR, rec.error))
        span.end(end_time=max(end, start))
        self.spans_kept += 1

    def close(self) -> None:
        if self._provider is not None:
            try:
                self._provider.shutdown()
            except Exception as exc:  # noqa: BLE001 - an exporter failing at exit must not hide the exit status
                print(f"servewatch proxy: trace export at exit failed ({type(exc).__name__})", file=sys.stderr)
