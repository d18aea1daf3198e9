"""Values of the proxy's own telemetry, servewatch/proxy/telemetry.py (issue 50): the histograms a request's record
goes into (which one, with which labels and value), the model label's cap, the live-state exposition byte for byte,
the trace sampling decision (errors, the slowest, the head-sampled rate) and the span a kept request becomes.
Records and the proxy are stand-ins: each figure is written beside the assertion."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from servewatch.proxy import telemetry as T
from servewatch.proxy.telemetry import Telemetry


def _rec(**kw):
    base = dict(error=None, e2e_s=None, ttft_s=None, tpot_s=None, input_tokens=None, output_tokens=None,
                scheduled=100.0, sent=None, max_tokens=None, finish_reason=None, http_status=None)
    base.update(kw)
    return SimpleNamespace(**base)


def _ex(api="completions", model="m"):
    return SimpleNamespace(api=api, model=model)


def _value(t: Telemetry, name: str, **labels):
    return t.registry.get_sample_value(name, labels)


OK = {"gen_ai_operation_name": "text_completion", "gen_ai_request_model": "m", "outcome": "ok"}


def test_buckets_and_operations_are_the_conventions():
    assert T.TTFT_BUCKETS == (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
    assert T.TPOT_BUCKETS == (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
    assert T.DURATION_BUCKETS[0] == 0.01 and T.DURATION_BUCKETS[-1] == 81.92 and len(T.DURATION_BUCKETS) == 14
    assert T.TOKEN_BUCKETS == tuple(4 ** i for i in range(14))
    assert T.OPERATION == {"completions": "text_completion", "chat": "chat"}
    assert T.MAX_MODELS == 32
    t = Telemetry()
    assert t.sample == 0.1 and t.tracer is None and t.spans_kept == 0
    t.observe(_ex(), _rec(e2e_s=1.0, ttft_s=0.1, tpot_s=0.1, input_tokens=1, output_tokens=1))
    for name, buckets in (("gen_ai_server_time_to_first_token_seconds", T.TTFT_BUCKETS),
                          ("gen_ai_server_time_per_output_token_seconds", T.TPOT_BUCKETS),
                          ("gen_ai_server_request_duration_seconds", T.DURATION_BUCKETS),
                          ("gen_ai_client_token_usage", T.TOKEN_BUCKETS)):
        bounds = [line.split('le="')[1].split('"')[0] for line in t.exposition().decode().splitlines()
                  if line.startswith(name + "_bucket{") and 'gen_ai_token_type="output"' not in line]
        assert [float(b) for b in bounds[:-1]] == [float(b) for b in buckets] and bounds[-1] == "+Inf", name


def test_a_successful_record_goes_into_each_histogram_with_its_value():
    t = Telemetry(sample=0.0)
    t.observe(_ex(), _rec(e2e_s=1.5, ttft_s=0.3, tpot_s=0.02, input_tokens=10, output_tokens=6))
    assert _value(t, "gen_ai_server_request_duration_seconds_sum", **OK) == 1.5
    assert _value(t, "gen_ai_server_request_duration_seconds_count", **OK) == 1
    assert _value(t, "gen_ai_server_time_to_first_token_seconds_sum", **OK) == 0.3
    assert _value(t, "gen_ai_server_time_to_first_token_seconds_bucket", **OK, le="0.25") == 0
    assert _value(t, "gen_ai_server_time_to_first_token_seconds_bucket", **OK, le="0.5") == 1
    assert _value(t, "gen_ai_server_time_per_output_token_seconds_sum", **OK) == 0.02
    assert _value(t, "gen_ai_server_time_per_output_token_seconds_bucket", **OK, le="0.01") == 0
    assert _value(t, "gen_ai_server_time_per_output_token_seconds_bucket", **OK, le="0.025") == 1
    assert _value(t, "gen_ai_client_token_usage_sum", **OK, gen_ai_token_type="input") == 10
    assert _value(t, "gen_ai_client_token_usage_sum", **OK, gen_ai_token_type="output") == 6
    assert _value(t, "gen_ai_client_token_usage_bucket", **OK, gen_ai_token_type="output", le="4.0") == 0
    assert _value(t, "gen_ai_client_token_usage_bucket", **OK, gen_ai_token_type="output", le="16.0") == 1
    assert _value(t, "gen_ai_server_request_duration_seconds_bucket", **OK, le="1.28") == 0
    assert _value(t, "gen_ai_server_request_duration_seconds_bucket", **OK, le="2.56") == 1
    # a second record of the same label set goes to the same children
    t.observe(_ex(), _rec(e2e_s=0.5, ttft_s=0.1, tpot_s=0.04, input_tokens=2, output_tokens=3))
    assert _value(t, "gen_ai_server_request_duration_seconds_sum", **OK) == 2.0
    assert _value(t, "gen_ai_server_time_to_first_token_seconds_count", **OK) == 2
    assert _value(t, "gen_ai_server_time_per_output_token_seconds_sum", **OK) == pytest.approx(0.06)
    assert _value(t, "gen_ai_client_token_usage_sum", **OK, gen_ai_token_type="input") == 12
    assert _value(t, "gen_ai_client_token_usage_sum", **OK, gen_ai_token_type="output") == 9


def test_an_error_has_its_duration_and_tokens_but_no_ttft_or_tpot():
    t = Telemetry(sample=0.0)
    t.observe(_ex(api="chat", model="x"), _rec(error="http_5xx", e2e_s=2.0, ttft_s=0.5, tpot_s=0.1,
                                               input_tokens=4, output_tokens=1))
    err = {"gen_ai_operation_name": "chat", "gen_ai_request_model": "x", "outcome": "http_5xx"}
    assert _value(t, "gen_ai_server_request_duration_seconds_sum", **err) == 2.0
    assert _value(t, "gen_ai_server_time_to_first_token_seconds_count", **err) is None
    assert _value(t, "gen_ai_server_time_per_output_token_seconds_count", **err) is None
    assert _value(t, "gen_ai_client_token_usage_sum", **err, gen_ai_token_type="input") == 4
    assert _value(t, "gen_ai_client_token_usage_sum", **err, gen_ai_token_type="output") == 1


def test_what_a_record_lacks_makes_no_series():
    t = Telemetry(sample=0.0)
    t.observe(_ex(api="embeddings", model=None), _rec())
    text = t.exposition().decode()
    assert "gen_ai_server_request_duration_seconds_count{" not in text
    assert "gen_ai_client_token_usage_count{" not in text
    t.observe(_ex(api="embeddings", model=None), _rec(ttft_s=0.2))
    other = {"gen_ai_operation_name": "other", "gen_ai_request_model": "unknown", "outcome": "ok"}
    assert _value(t, "gen_ai_server_time_to_first_token_seconds_sum", **other) == 0.2
    assert _value(t, "gen_ai_server_request_duration_seconds_count", **other) is None
    assert _value(t, "gen_ai_server_time_per_output_token_seconds_count", **other) is None
    assert _value(t, "gen_ai_client_token_usage_count", **other, gen_ai_token_type="input") is None
    assert _value(t, "gen_ai_client_token_usage_count", **other, gen_ai_token_type="output") is None
    t.observe(_ex(api="embeddings", model=None), _rec(tpot_s=0.2, output_tokens=5))
    assert _value(t, "gen_ai_server_time_per_output_token_seconds_sum", **other) == 0.2
    assert _value(t, "gen_ai_client_token_usage_sum", **other, gen_ai_token_type="output") == 5
    assert _value(t, "gen_ai_client_token_usage_count", **other, gen_ai_token_type="input") is None
    assert _value(t, "gen_ai_server_time_to_first_token_seconds_count", **other) == 1


def test_the_model_label_is_capped_at_max_models():
    t = Telemetry(sample=0.0)
    assert t._model(None) == "unknown" and t._model("") == "unknown"
    names = [f"m{i}" for i in range(T.MAX_MODELS)]
    assert [t._model(n) for n in names] == names
    assert t._model("m0") == "m0"                       # a known one stays itself
    assert t._model("new") == "other"
    assert len(t._models) == T.MAX_MODELS
    t2 = Telemetry(sample=0.0)
    for n in names[:-1]:
        t2._model(n)
    assert t2._model("last") == "last"                  # the 32nd distinct name still has its own label
    assert t2._model("after") == "other"


class _Proxy:
    def __init__(self, recent=()):
        self.recent = list(recent)
        self.counters = SimpleNamespace(outcomes={"ok": 5, "http_4xx": 2}, refused={"overload": 3},
                                        malformed_sse=1, other_requests=4)
        self.asked = []

    def now(self):
        return 42.0

    def snapshot(self, now):
        self.asked.append(now)
        return SimpleNamespace(in_flight=3, waiting_first_token=1, oldest_s=2.5, oldest_waiting_s=None)


STATE = """# HELP servewatch_proxy_in_flight Completions and chat completions in flight through the proxy.
# TYPE servewatch_proxy_in_flight gauge
servewatch_proxy_in_flight 3
# HELP servewatch_proxy_waiting_first_token Streamed requests sent upstream with no token yet.
# TYPE servewatch_proxy_waiting_first_token gauge
servewatch_proxy_waiting_first_token 1
# HELP servewatch_proxy_oldest_in_flight_seconds Age of the oldest request in flight (0 when none).
# TYPE servewatch_proxy_oldest_in_flight_seconds gauge
servewatch_proxy_oldest_in_flight_seconds 2.500000
# HELP servewatch_proxy_oldest_waiting_first_token_seconds The longest wait for a first token now.
# TYPE servewatch_proxy_oldest_waiting_first_token_seconds gauge
servewatch_proxy_oldest_waiting_first_token_seconds 0.000000
# HELP servewatch_proxy_requests_total Requests ended, by outcome (ok or the error class).
# TYPE servewatch_proxy_requests_total counter
servewatch_proxy_requests_total{outcome="http_4xx"} 2
servewatch_proxy_requests_total{outcome="ok"} 5
# HELP servewatch_proxy_refused_total Requests the proxy answered itself, by reason.
# TYPE servewatch_proxy_refused_total counter
servewatch_proxy_refused_total{reason="overload"} 3
# HELP servewatch_proxy_malformed_sse_total Streams with an event that is not JSON (passed through).
# TYPE servewatch_proxy_malformed_sse_total counter
servewatch_proxy_malformed_sse_total 1
# HELP servewatch_proxy_other_requests_total Requests to other paths, forwarded untouched.
# TYPE servewatch_proxy_other_requests_total counter
servewatch_proxy_other_requests_total 4
"""

LOST = """# HELP servewatch_proxy_records_lost_total Request records the disk did not take (counted, never fatal).
# TYPE servewatch_proxy_records_lost_total counter
servewatch_proxy_records_lost_total 7
"""


def test_the_live_state_is_exposed_byte_for_byte():
    from prometheus_client import generate_latest

    t = Telemetry(sample=0.0)
    assert t.exposition() == generate_latest(t.registry)     # no proxy: the histograms only
    proxy = _Proxy()
    t.proxy = proxy
    text = t.exposition().decode()
    assert text.endswith(STATE) and proxy.asked == [42.0]
    helps = [line for line in text.splitlines() if line.startswith("# HELP gen_ai")]
    assert helps == [
        "# HELP gen_ai_server_time_to_first_token_seconds Time to generate first token for successful responses "
        "(measured at the proxy).",
        "# HELP gen_ai_server_time_per_output_token_seconds Time per output token generated after the first token "
        "for successful responses.",
        "# HELP gen_ai_server_request_duration_seconds Generative AI server request duration, to the last byte.",
        "# HELP gen_ai_client_token_usage Number of input and output tokens used."]
    t.log = SimpleNamespace(lost=7)
    assert t._state().decode() == STATE + LOST
    idle = _Proxy()
    idle.snapshot = lambda now: SimpleNamespace(in_flight=0, waiting_first_token=0, oldest_s=None,
                                                oldest_waiting_s=1.25)
    t.proxy, t.log = idle, None
    text = t._state().decode()
    assert "\nservewatch_proxy_oldest_in_flight_seconds 0.000000\n" in text
    assert "\nservewatch_proxy_oldest_waiting_first_token_seconds 1.250000\n" in text


def test_the_metrics_listener_serves_the_exposition(caplog):
    import logging
    import socket

    import aiohttp

    t = Telemetry(sample=0.0)
    proxy = _Proxy()
    with socket.socket() as probe:          # a free port, named (not 0: the port given is the port bound)
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]

    async def go():
        runner, port = await t.serve_metrics(proxy, "127.0.0.1", free)
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                    return r.status, r.headers, await r.text(), port, runner.addresses
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.DEBUG, logger="aiohttp.access"):
        status, headers, text, port, addresses = asyncio.run(go())
    assert [r for r in caplog.records if r.name == "aiohttp.access"] == []      # no access log
    assert status == 200 and port == free and t.proxy is proxy
    assert [a[:2] for a in addresses] == [("127.0.0.1", free)]                   # on the host given only
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert text.endswith(STATE)


def test_the_sampling_decision():
    t = Telemetry(sample=0.0, seed=1)
    assert t._keep(_rec(error="timeout")) is True                 # errors always
    assert t._keep(_rec(ttft_s=9.0)) is False                     # no proxy: the rate alone (0)
    # 20 recent TTFTs 0.0 .. 1.9: the p99 index int(0.99 * 19) = 18, the value 1.8
    t.proxy = _Proxy(recent=[(i / 10, 1) for i in range(20)][::-1])
    assert t._keep(_rec(ttft_s=1.8)) is True                      # at the p99: among the slowest
    assert t._keep(_rec(ttft_s=1.79)) is False
    assert t._keep(_rec(ttft_s=None)) is False
    t.proxy = _Proxy(recent=[(i / 10, 1) for i in range(19)])
    assert t._keep(_rec(ttft_s=100.0)) is False                   # 19 recent: too few for a p99
    every = Telemetry(sample=1.0, seed=1)
    assert every._keep(_rec()) is True
    half = Telemetry(sample=0.5, seed=7)
    kept = sum(half._keep(_rec()) for _ in range(1000))
    import random
    rng = random.Random(7)
    assert kept == sum(rng.random() < 0.5 for _ in range(1000))   # the seeded generator, compared strictly


def _tracer():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_a_kept_request_becomes_a_span_with_its_attributes_and_times():
    from opentelemetry.trace import SpanKind, StatusCode

    t = Telemetry(sample=1.0, seed=1)
    t.tracer, exporter = _tracer()
    t.observe(_ex(), _rec(scheduled=100.0, sent=100.5, e2e_s=2.0, ttft_s=0.25, tpot_s=0.05, input_tokens=10,
                          output_tokens=6, max_tokens=16, finish_reason="length", http_status=200))
    [span] = exporter.get_finished_spans()
    assert span.name == "text_completion m" and span.kind == SpanKind.CLIENT
    assert span.start_time == 100_000_000_000 and span.end_time == 102_500_000_000
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "text_completion", "gen_ai.provider.name": "openai", "servewatch.outcome": "ok",
        "gen_ai.request.model": "m", "gen_ai.request.max_tokens": 16, "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 6, "gen_ai.response.finish_reasons": ("length",),
        "gen_ai.server.time_to_first_token": 0.25, "gen_ai.server.time_per_output_token": 0.05,
        "http.response.status_code": 200}
    assert span.status.status_code == StatusCode.UNSET
    assert t.spans_kept == 1


def test_an_error_span_without_a_model_or_a_send():
    from opentelemetry.trace import StatusCode

    t = Telemetry(sample=0.0, seed=1)
    t.tracer, exporter = _tracer()
    t.observe(_ex(api="chat", model=""), _rec(error="connect", scheduled=50.0, sent=None, e2e_s=None))
    [span] = exporter.get_finished_spans()
    assert span.name == "chat"
    assert span.start_time == 50_000_000_000 and span.end_time == 50_000_000_000
    assert dict(span.attributes) == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                                     "servewatch.outcome": "connect", "error.type": "connect"}
    assert span.status.status_code == StatusCode.ERROR and span.status.description == "connect"
    assert t.spans_kept == 1
    # an end before the start (a clock step) is clamped to the start
    t.observe(_ex(api="chat", model="q"), _rec(error="x", scheduled=60.0, sent=59.0, e2e_s=0.5))
    second = exporter.get_finished_spans()[1]
    assert second.start_time == 60_000_000_000 and second.end_time == 60_000_000_000
    assert t.spans_kept == 2


def test_a_request_sampled_out_makes_no_span():
    t = Telemetry(sample=0.0, seed=1)
    t.tracer, exporter = _tracer()
    t.observe(_ex(), _rec(e2e_s=1.0, ttft_s=0.1))
    assert exporter.get_finished_spans() == () and t.spans_kept == 0


def test_the_otlp_endpoint_gets_its_traces_path(monkeypatch):
    seen = []
    import opentelemetry.exporter.otlp.proto.http.trace_exporter as E

    real = E.OTLPSpanExporter

    def spy(**kw):
        seen.append(kw)
        return real(**kw)

    monkeypatch.setattr(E, "OTLPSpanExporter", spy)
    for endpoint, url in (("http://h:4318", "http://h:4318/v1/traces"), ("http://h:4318/", "http://h:4318/v1/traces"),
                          ("http://h:4318/v1/traces", "http://h:4318/v1/traces"), ("http://boX/", "http://boX/v1/traces")):
        t = Telemetry(otlp_endpoint=endpoint, sample=0.25)
        assert seen[-1] == {"endpoint": url, "timeout": 5}
        assert t.tracer is not None and t._provider is not None
        assert dict(t._provider.resource.attributes)["service.name"] == "servewatch-proxy"
        assert t.tracer._instrumentation_scope.name == "servewatch.proxy"
        [processor] = t._provider._active_span_processor._span_processors
        assert processor._batch_processor._max_queue_size == 2048
        assert processor._batch_processor._schedule_delay == 1.0
        t._provider.shutdown()
    assert Telemetry(sample=0.25).tracer is None


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch):
    import sys

    from servewatch.errors import ServewatchError

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(ServewatchError) as err:
        Telemetry(otlp_endpoint="http://h:4318")
    assert str(err.value) == "--otlp-endpoint needs the OpenTelemetry SDK: pip install 'servewatch[otel]'"
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_close_reports_a_failing_export_in_one_line(capsys):
    t = Telemetry(sample=0.0)
    t.close()                                                     # no provider: nothing
    calls = []

    class Bad:
        def shutdown(self):
            calls.append(1)
            raise ConnectionError("gone")

    t._provider = Bad()
    t.close()
    assert calls == [1]
    assert capsys.readouterr().err == "servewatch proxy: trace export at exit failed (ConnectionError)\n"
    good = []
    t._provider = SimpleNamespace(shutdown=lambda: good.append(1))
    t.close()
    assert good == [1] and capsys.readouterr().err == ""
