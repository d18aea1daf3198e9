"""`servewatch proxy` against the built-in simulator over real loopback HTTP: bytes unchanged, one
record per request in load's format, errors by layer, bounded bad input."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from servewatch.load import records as R
from servewatch.proxy import Proxy, ProxyConfig
from tests.test_load_sim import SimServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["compiled", "pure Python"])
def count_path(request):
    """Each test that takes it runs once per way the proxy counts a read on its inline path: the compiled
    servewatch.proxy._inline (skipped where it was not built; under CI=true, where `pip install -e .` builds
    it, a failure) and the pure-Python methods."""
    from servewatch.proxy import server
    from tests.tools import in_ci

    compiled = request.param == "compiled"
    if compiled and server._compiled is None:
        if in_ci():
            pytest.fail("servewatch.proxy._inline was not built; under CI=true `pip install -e .` builds it",
                        pytrace=False)
        pytest.skip("servewatch.proxy._inline was not built (pip install -e . builds it where a C compiler is)")
    assert server.count_path(compiled) == request.param
    yield request.param
    server.count_path()


class Running:
    """A proxy on an ephemeral loopback port in this loop, its records collected."""

    def __init__(self, upstream: str, **config):
        self.records: list[R.RequestRecord] = []
        self.exchanges = []
        self.proxy = Proxy(ProxyConfig(upstream=upstream, **config), on_record=self._on_record)
        self.port = None

    def _on_record(self, ex, rec) -> None:
        self.exchanges.append(ex)
        self.records.append(rec)

    async def __aenter__(self) -> "Running":
        self.port = await self.proxy.start("127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.proxy.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _raw(port: int, request: bytes, *, read_until_close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(-1), 20) if read_until_close else b""
    writer.close()
    return data


def _post(path: str, body: dict, extra: str = "") -> bytes:
    raw = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
            f"{extra}Connection: close\r\n\r\n").encode() + raw


def _body_of(raw: bytes) -> bytes:
    """The payload of a chunked or length-delimited HTTP/1.1 response read to close."""
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"chunked" not in head.lower():
        return body
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, body = out + body[:size], body[size + 2:]
    return out


def _sse_shape(payload: bytes) -> list[dict]:
    """The events of a stream without the fields that differ between two runs (ids, times, text)."""
    out = []
    for block in payload.split(b"\n\n"):
        if not block.startswith(b"data: ") or block == b"data: [DONE]":
            continue
        obj = json.loads(block[6:])
        out.append({"choices": [{k: v for k, v in c.items() if k not in ("text",)} for c in obj.get("choices", [])],
                    "usage": obj.get("usage")})
    return out


def test_streamed_completion_passes_through_and_is_recorded():
    async def go():
        async with SimServer(profile="h100-8b", tokens_per_chunk=2, model_name="sim-model") as sim, Running(sim.url) as proxy:
            body = {"model": "sim-model", "prompt": "hello there", "max_tokens": 9, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            via = await _raw(proxy.port, _post("/v1/completions", body, "Authorization: Bearer sk-secret\r\n"))
            direct = await _raw(sim.port, _post("/v1/completions", body))
            return via, direct, proxy.records

    via, direct, records = asyncio.run(go())
    assert via.startswith(b"HTTP/1.1 200")
    assert _sse_shape(_body_of(via)) == _sse_shape(_body_of(direct))
    assert _body_of(via).endswith(b"data: [DONE]\n\n")
    [rec] = records
    assert rec.ok and rec.output_tokens == 9 and rec.input_tokens is not None
    assert rec.finish_reason == "length" and rec.token_source == "server"
    assert 0 < rec.ttft_s <= rec.e2e_s
    out = rec.to_json()
    assert out["model"] == "sim-model" and out["api"] == "completions" and "model" not in out["proxy"]
    assert out["proxy"]["tenant"] and "sk-secret" not in json.dumps(out)
    assert out["proxy"]["itl_p50_s"] is not None and out["proxy"]["first_byte_s"] <= out["ttft_s"]
    assert "hello" not in json.dumps(out)


def test_chat_non_streamed_and_other_paths():
    async def go():
        async with SimServer(profile="h100-8b", model_name="sim-model") as sim, Running(sim.url) as proxy:
            async with aiohttp.ClientSession() as s:
                async with s.post(proxy.url + "/v1/chat/completions",
                                  json={"model": "sim-model", "max_tokens": 5, "ignore_eos": True,
                                        "messages": [{"role": "user", "content": "hi"}]}) as r:
                    chat = (r.status, await r.json())
                async with s.get(proxy.url + "/v1/models") as r:
                    models = (r.status, await r.json())
                async with s.get(sim.url + "/v1/models") as r:
                    models_direct = await r.json()
            return chat, models, models_direct, proxy.records, proxy.proxy.counters

    chat, models, models_direct, records, counters = asyncio.run(go())
    assert chat[0] == 200 and chat[1]["usage"]["completion_tokens"] == 5
    assert models == (200, models_direct)
    [rec] = records                                    # /v1/models is forwarded, not recorded
    assert rec.ok and rec.output_tokens == 5 and rec.token_source == "server" and rec.ttft_s is None
    assert rec.api == "chat" and rec.proxy["stream"] is False
    assert counters.other_requests == 1 and counters.outcomes == {"ok": 1}


async def _until(condition, limit_s: float = 10.0) -> None:
    """Wait for a condition the code under test brings about (bounded; the bound is not the measure)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not condition():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.01)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_upstream_down_is_a_502_json_error_counted():
    async def go():
        async with Running(f"http://127.0.0.1:{_free_port()}") as proxy:
            raw = await _raw(proxy.port, _post("/v1/completions", {"model": "m", "prompt": "p", "stream": True}))
            return raw, proxy.records, proxy.proxy.counters

    raw, records, counters = asyncio.run(go())
    assert raw.startswith(b"HTTP/1.1 502")
    assert json.loads(_body_of(raw))["error"]["type"] == "upstream_unavailable"
    [rec] = records
    assert rec.error == R.CONNECT and rec.error_detail == "upstream refused" and rec.http_status == 502
    assert counters.outcomes == {R.CONNECT: 1}


def test_client_abort_cancels_the_upstream_request():
    async def go():
        async with SimServer(profile="h100-8b", model_name="m") as sim, Running(sim.url) as proxy:
            body = {"model": "m", "prompt": "p", "max_tokens": 8000, "ignore_eos": True, "stream": True}
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(_post("/v1/completions", body))
            await reader.readuntil(b"data: ")          # streaming has begun
            engine = sim.engine
            assert len(engine.scheduler.running) == 1
            writer.close()
            await _until(lambda: proxy.records and not engine.scheduler.running)
            return proxy.records

    [rec] = asyncio.run(go())
    assert rec.error == R.CLIENT_ABORT and rec.http_status == 200 and rec.ttft_s is not None


def test_http_errors_keep_the_upstreams_summary_not_its_text():
    async def go():
        async with SimServer(profile="h100-8b", model_name="m") as sim, Running(sim.url) as proxy:
            raw = await _raw(proxy.port, _post("/v1/completions", {"model": "nope", "prompt": "secret words"}))
            return raw, proxy.records

    raw, [rec] = asyncio.run(go())
    assert raw.startswith(b"HTTP/1.1 404") and b"does not exist" in raw     # the client sees it all
    assert rec.error == R.HTTP_4XX and rec.error_detail == "HTTP 404 NotFoundError"
    assert "secret" not in json.dumps(rec.to_json()) and "exist" not in json.dumps(rec.to_json())


def test_bad_input_is_answered_and_bounded():
    async def go():
        async with SimServer(profile="h100-8b", model_name="m") as sim, \
                Running(sim.url, max_request_bytes=1000, max_connections=3, head_timeout_s=0.3,
                        body_idle_timeout_s=0.3, sweep_interval_s=0.05) as proxy:
            out = {}
            out["garbage"] = await _raw(proxy.port, b"\x16\x03\x01 hello\r\n\r\n")
            out["header"] = await _raw(proxy.port, b"GET /v1/models HTTP/1.1\r\nbad header\r\n\r\n")
            out["chunked"] = await _raw(proxy.port, b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked"
                                                    b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
            out["big"] = await _raw(proxy.port, _post("/v1/completions", {"prompt": "x" * 2000}))
            out["drip_head"] = await _raw(proxy.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            out["drip_body"] = await _raw(proxy.port, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n"
                                                      b"\r\n{\"model\"")
            held = [await asyncio.open_connection("127.0.0.1", proxy.port) for _ in range(3)]
            await _until(lambda: len(proxy.proxy.clients) == 3)
            out["over"] = await _raw(proxy.port, b"GET /v1/models HTTP/1.1\r\n\r\n")
            for _, w in held:
                w.close()
            return out, proxy.proxy.counters, proxy.records

    out, counters, records = asyncio.run(go())
    assert out["garbage"].startswith(b"HTTP/1.1 400")
    assert out["header"].startswith(b"HTTP/1.1 400")
    assert out["chunked"].startswith(b"HTTP/1.1 411")
    assert out["big"].startswith(b"HTTP/1.1 413")
    assert out["drip_head"].startswith(b"HTTP/1.1 408")
    assert out["drip_body"].startswith(b"HTTP/1.1 408")
    assert out["over"].startswith(b"HTTP/1.1 503") and b"Retry-After: 1\r\n" in out["over"]
    for raw in out.values():
        assert json.loads(_body_of(raw))["error"]["code"] == int(raw[9:12])
    assert counters.refused == {"bad_request": 3, "too_large": 1, "slow_client": 2, "over_connections": 1}
    [rec] = records                                 # the stalled body was a completions request
    assert rec.error == R.TIMEOUT and rec.http_status == 408


class _Upstream:
    """A tiny upstream that answers every POST with the given raw HTTP response, or never."""

    def __init__(self, response: bytes | None):
        self.response = response
        self.port = None
        self.server = None

    async def __aenter__(self):
        async def handle(reader, writer):
            try:
                await reader.readuntil(b"\r\n\r\n")
                if self.response is None:
                    await reader.read()                # hold the request until the proxy gives up
                else:
                    writer.write(self.response)
                    await writer.drain()
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


def test_malformed_sse_is_passed_through_and_counted():
    events = (b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
              b'data: {not json\n\n'
              b'data: {"choices":[{"index":0,"text":"b","finish_reason":"length"}]}\n\ndata: [DONE]\n\n')
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "
                + str(len(events)).encode() + b"\r\n\r\n" + events)

    async def go():
        async with _Upstream(response) as up, Running(up.url) as proxy:
            raw = await _raw(proxy.port, _post("/v1/completions", {"model": "m", "prompt": "p", "stream": True}))
            return raw, proxy.records, proxy.proxy.counters

    raw, [rec], counters = asyncio.run(go())
    assert raw == response                           # byte for byte
    assert rec.error == R.TRUNCATED and rec.proxy["malformed_sse"] is True and counters.malformed_sse == 1
    assert rec.output_tokens == 2


def test_upstream_silence_is_a_504_timeout():
    async def go():
        async with _Upstream(None) as up, Running(up.url, first_byte_timeout_s=0.3, sweep_interval_s=0.05) as proxy:
            raw = await _raw(proxy.port, _post("/v1/completions", {"model": "m", "prompt": "p", "stream": True}))
            return raw, proxy.records

    raw, [rec] = asyncio.run(go())
    assert raw.startswith(b"HTTP/1.1 504")
    assert rec.error == R.TIMEOUT and rec.http_status == 504


def test_a_slow_reader_pauses_the_upstream():
    """Backpressure: a client that does not read holds the upstream, not the proxy's memory."""
    body = b"x" * (64 * 2**20)
    response = b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body

    async def go():
        async with _Upstream(response) as up, Running(up.url) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port, limit=2**16)
            writer.write(b"GET /big HTTP/1.1\r\n\r\n")
            ex = None
            await _until(lambda: proxy.proxy.inflight and next(iter(proxy.proxy.inflight)).upstream is not None
                         and next(iter(proxy.proxy.inflight)).upstream.paused)
            ex = next(iter(proxy.proxy.inflight))
            [client] = proxy.proxy.clients
            buffered = client.transport.get_write_buffer_size()
            got = 0
            while got < len(response):
                chunk = await reader.read(2**20)
                assert chunk
                got += len(chunk)
            writer.close()
            return buffered, ex

    buffered, ex = asyncio.run(go())
    assert buffered < 4 * 2**20                      # the proxy held a few buffers, not the 64 MiB


# -- live signals and requests_no_token ---------------------------------------------------------------

def _stream_body(max_tokens: int, prompt: str = "p") -> dict:
    return {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}


async def _stream(port: int, body: dict) -> None:
    try:
        await _raw(port, _post("/v1/completions", body))
    except (OSError, asyncio.IncompleteReadError):
        pass


def _judge(samples, config):
    from servewatch.detectors import no_token
    from servewatch.timeline.window import Window

    return no_token.detect(Window.from_samples(samples), config)


async def _warm(proxy, n: int = 8) -> None:
    await asyncio.gather(*(_stream(proxy.port, _stream_body(4)) for _ in range(n)))


def test_requests_no_token_fires_on_a_stalled_engine_within_its_threshold():
    from servewatch.detectors.config import DetectorConfig
    from servewatch.detectors.no_token import threshold_s

    config = DetectorConfig(no_token_floor_s=0.5)

    async def go():
        async with SimServer(profile="h100-8b", model_name="m") as sim, Running(sim.url, sweep_interval_s=0.05) as proxy:
            await _warm(proxy)
            tasks = [asyncio.create_task(_stream(proxy.port, _stream_body(4000))) for _ in range(4)]
            # (through the snapshot: a stream the pump moves is counted when the snapshot takes it back)
            await _until(lambda: len(sim.engine.scheduler.running) == 4
                         and proxy.proxy.snapshot(proxy.proxy.now()).waiting_first_token == 0)
            calm = proxy.proxy.snapshot(proxy.proxy.now())
            assert calm.in_flight == 4 and calm.waiting_first_token == 0 and _judge([calm], config) == []
            sim.engine.inject("stall")
            stalled_at = proxy.proxy.now()
            verdicts = []
            while not verdicts:
                sample = proxy.proxy.snapshot(proxy.proxy.now())
                verdicts = _judge([sample], config)
                await asyncio.sleep(0.05)
            fired_after = proxy.proxy.now() - stalled_at
            for task in tasks:
                task.cancel()
            return verdicts, sample, fired_after

    [verdict], sample, fired_after = asyncio.run(go())
    limit = threshold_s(sample, config)
    assert verdict.name == "requests_no_token" and sample.in_flight == 4
    assert limit < fired_after < limit + 0.5           # the threshold, plus the sampling allowance
    assert "4 request(s) in flight got no byte" in verdict.why


def test_requests_no_token_is_silent_through_an_overload_served_in_turn():
    from servewatch.detectors.config import DetectorConfig

    # a floor above this shared machine's event-loop hiccups (the sim, the proxy and the clients share one loop)
    config = DetectorConfig(no_token_floor_s=1.0)

    async def go():
        async with SimServer(profile="h100-8b", model_name="m", max_num_seqs=4) as sim, \
                Running(sim.url, sweep_interval_s=0.05) as proxy:
            await _warm(proxy)
            tasks = [asyncio.create_task(_stream(proxy.port, _stream_body(150))) for _ in range(24)]
            samples = []
            peak_wait = 0.0
            while not all(t.done() for t in tasks):
                sample = proxy.proxy.snapshot(proxy.proxy.now())
                samples.append(sample)
                peak_wait = max(peak_wait, sample.oldest_waiting_s or 0.0)
                assert _judge(samples[-1:], config) == [], sample
                await asyncio.sleep(0.05)
            return peak_wait, samples, proxy.records

    peak_wait, samples, records = asyncio.run(go())
    assert max(s.waiting_first_token for s in samples) >= 10      # a real queue
    assert peak_wait > 2 * 1.0                        # waits past twice the floor, served in turn
    assert sum(r.ok for r in records) == 8 + 24


def test_requests_no_token_is_silent_through_long_requests_that_are_not_streamed():
    from servewatch.detectors.config import DetectorConfig

    config = DetectorConfig(no_token_floor_s=0.3)

    async def go():
        async with SimServer(profile="h100-8b", model_name="m") as sim, \
                Running(sim.url, sweep_interval_s=0.05) as proxy:
            await _warm(proxy)
            whole = {**_stream_body(600), "stream": False}
            tasks = [asyncio.create_task(_stream(proxy.port, whole)) for _ in range(4)]
            samples = []
            while not all(t.done() for t in tasks):
                sample = proxy.proxy.snapshot(proxy.proxy.now())
                samples.append(sample)
                assert _judge([sample], config) == [], sample
                await asyncio.sleep(0.05)
            return samples, proxy.records, proxy.proxy.snapshot(proxy.proxy.now())

    samples, records, after = asyncio.run(go())
    assert max(s.in_flight for s in samples) == 4 and all(s.quiet_s is None for s in samples if s.in_flight)
    assert after.ttft_count == 8          # the TTFT basis is the streams' (a whole answer's wait is its length)
    long = [r for r in records if r.output_tokens == 600]
    assert len(long) == 4 and all(r.ok and r.e2e_s > 3 * 0.3 for r in long)     # silent far past the floor


def test_requests_no_token_is_silent_through_a_long_prefill():
    from servewatch.detectors.config import DetectorConfig

    config = DetectorConfig(no_token_floor_s=0.2)

    async def go():
        async with SimServer(profile="h100-8b", model_name="m", max_model_len=200000) as sim, \
                Running(sim.url, sweep_interval_s=0.05) as proxy:
            await _warm(proxy)
            long_prompt = "word " * 60000
            task = asyncio.create_task(_stream(proxy.port, _stream_body(2, long_prompt)))
            worst = []
            while not task.done():
                sample = proxy.proxy.snapshot(proxy.proxy.now())
                assert _judge([sample], config) == [], sample
                worst.append(sample.quiet_s or 0.0)
                await asyncio.sleep(0.02)
            return max(worst), proxy.records[-1]

    worst_quiet, rec = asyncio.run(go())
    assert rec.ok and rec.ttft_s > 0.2 and worst_quiet > 0.2       # a prefill longer than the floor


# -- telemetry -----------------------------------------------------------------------------------------

def test_metrics_follow_the_genai_conventions_on_their_own_port():
    from servewatch.proxy.telemetry import TTFT_BUCKETS, Telemetry

    async def go():
        telemetry = Telemetry()
        async with SimServer(profile="h100-8b", model_name="m") as sim:
            proxy = Proxy(ProxyConfig(upstream=sim.url), on_record=telemetry.observe)
            port = await proxy.start("127.0.0.1", 0)
            runner, mport = await telemetry.serve_metrics(proxy, "127.0.0.1", 0)
            try:
                await _stream(port, _stream_body(6))
                await _raw(port, _post("/v1/completions", {"model": "nope", "prompt": "p"}))
                async with aiohttp.ClientSession() as s:
                    async with s.get(f"http://127.0.0.1:{mport}/metrics") as r:
                        text = await r.text()
                    async with s.get(f"http://127.0.0.1:{port}/metrics") as r:     # the engine's, through
                        engine = await r.text()
            finally:
                await runner.cleanup()
                await proxy.close()
        return text, engine

    text, engine = asyncio.run(go())
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    ttft = families["gen_ai_server_time_to_first_token_seconds"]
    bounds = sorted({float(s.labels["le"]) for s in ttft.samples if s.name.endswith("_bucket")} - {float("inf")})
    assert tuple(bounds) == TTFT_BUCKETS
    [count] = [s for s in ttft.samples if s.name.endswith("_count")]
    assert count.labels == {"gen_ai_operation_name": "text_completion", "gen_ai_request_model": "m", "outcome": "ok"}
    assert count.value == 1
    durations = {s.labels["outcome"]: s.value for s in families["gen_ai_server_request_duration_seconds"].samples
                 if s.name.endswith("_count")}
    assert durations == {"ok": 1.0, "http_4xx": 1.0}
    tokens = {s.labels["gen_ai_token_type"]: s.value for s in families["gen_ai_client_token_usage"].samples
              if s.name.endswith("_sum") and s.labels["outcome"] == "ok"}
    assert tokens["output"] == 6.0
    assert 'servewatch_proxy_requests_total{outcome="http_4xx"} 1' in text
    assert "vllm:" in engine and "gen_ai_" not in engine


def test_traces_export_over_otlp_keeping_errors():
    import http.server
    import threading

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from servewatch.proxy.telemetry import Telemetry

    received: list[bytes] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    telemetry = Telemetry(otlp_endpoint=f"http://127.0.0.1:{server.server_port}", sample=0.0, seed=1)

    async def go():
        async with SimServer(profile="h100-8b", model_name="m") as sim:
            proxy = Proxy(ProxyConfig(upstream=sim.url), on_record=telemetry.observe)
            telemetry.proxy = proxy
            port = await proxy.start("127.0.0.1", 0)
            try:
                for _ in range(3):
                    await _stream(port, _stream_body(3))             # sampled out (rate 0)
                await _raw(port, _post("/v1/completions", {"model": "nope", "prompt": "p", "stream": True}))
            finally:
                await proxy.close()

    try:
        asyncio.run(go())
        telemetry.close()                                            # flushes the batch
    finally:
        server.shutdown()
    spans = []
    for path, body in received:
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                spans.extend(ss.spans)
    [span] = spans
    attrs = {a.key: a.value for a in span.attributes}
    assert span.name == "text_completion nope"
    assert attrs["gen_ai.operation.name"].string_value == "text_completion"
    assert attrs["gen_ai.request.model"].string_value == "nope"
    assert attrs["error.type"].string_value == "http_4xx"
    assert attrs["http.response.status_code"].int_value == 404
    assert span.status.code == 2                                     # STATUS_CODE_ERROR


class _Wire:
    """A transport that keeps what is written (for the proxy's protocols driven without sockets)."""

    def __init__(self):
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def get_extra_info(self, name, default=None):
        return default


def _completion_event(text: str, reason: str | None, usage: tuple[int, int] | None) -> bytes:
    body: dict = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
                  "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                               "stop_reason": None}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "total_tokens": sum(usage), "completion_tokens": usage[1]}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


@pytest.mark.parametrize("usage", [False, True], ids=["plain", "continuous-usage"])
def test_the_inline_read_path_records_what_the_parser_records(usage, count_path):
    """One chunk per read takes Upstream's inline path; the same bytes in reads cut anywhere take the
    parser's. Both forward the bytes unchanged and end in the same counts, reason and per-chunk tokens."""
    texts = ["a", "", " b", "c\\u00e9", "d", " e"]      # an empty piece and an escaped one among them
    events = [_completion_event(t, "length" if i == len(texts) - 1 else None, (7, i + 1) if usage else None)
              for i, t in enumerate(texts)]
    events.append(b"data: [DONE]\n\n")
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]
    request = _post("/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 6, "stream": True})

    whole = head + b"".join(chunks)
    inline = _drive(request, [head, *chunks])
    cut = _drive(request, [whole[i:i + 37] for i in range(0, len(whole), 37)])
    assert inline[0] == cut[0] == whole                  # forwarded unchanged either way
    # the first run's reads were whole chunks on the inline path; the second's, 37 bytes each, are shorter
    # than any event's chunk, so the inline path never completes on one and the parser reads them all
    assert inline[3] >= len(texts) - 1 and min(map(len, chunks[:len(texts)])) > 37
    for (_, state, rec, _) in (inline, cut):
        assert rec.error is None and rec.finish_reason == "length"
    (_, a, ra, _), (_, b, rb, _) = inline, cut
    assert list(a.chunk_k) == list(b.chunk_k) and len(a.chunk_t) == len(b.chunk_t)
    assert (a.completion_tokens, a.prompt_tokens, a.client_tokens, a.counts_exact) == \
           (b.completion_tokens, b.prompt_tokens, b.client_tokens, b.counts_exact)
    assert (ra.output_tokens, ra.input_tokens, ra.token_source, ra.itl_exact) == \
           (rb.output_tokens, rb.input_tokens, rb.token_source, rb.itl_exact)
    assert ra.output_tokens == (6 if usage else 5)


def _drive(request: bytes, reads: list[bytes]):
    """The proxy's Client and Upstream driven without sockets: (bytes the client got, stream state, record,
    reads that took the inline path)."""
    from servewatch.proxy.server import Client, Upstream

    async def run():
        records = []
        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), on_record=lambda ex, rec: records.append((ex, rec)))
        client, wire = Client(proxy), _Wire()
        client.connection_made(wire)
        up = Upstream(proxy, 2**20)
        up.connection_made(_Wire())
        up.idle_since = proxy.now()
        proxy.idle.append(up)
        client.data_received(request)
        inline_reads = 0
        for data in reads:
            before = up.inline
            up.data_received(data)
            inline_reads += before
        [(ex, rec)] = records
        return b"".join(wire.out), ex.state, rec, inline_reads

    return asyncio.run(run())


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_inline_path_with_events_that_change_shape_midstream(api, count_path):
    """The inline path matches only the rest of an event that starts as the last whole one did; events
    whose start changes (another id, model, member order, a member before "choices"), escaped text, a
    chat delta with or without content, an error object, odd chunk framing (upper-case hex, an extension)
    end exactly as the parser reads them."""
    import random

    rng = random.Random(26)
    texts = ["a", " b", "", "c\u00e9", "x y", '"q"', "ok", "back\\slash"]
    events = []
    for i in range(400):
        body: dict = {"id": f"cmpl-{rng.choice('aaaab')}", "object": "text_completion", "created": 1,
                      "model": rng.choice(["m", "m", "m", "m2"])}
        if rng.random() < 0.1:
            body = {"t": rng.random()}                                  # a member that changes before choices
        reason = rng.choice([None] * 12 + ["length", "stop", "abort", "", "Stop"])
        if api == "chat":
            delta = rng.choice([{"content": rng.choice(texts)}] * 8 + [{"role": "assistant", "content": ""},
                                {"content": None}, {}, {"role": "assistant"}, {"content": "a", "content2": 1},
                                {"tool_calls": []}, {"content": rng.choice(texts), "reasoning_content": None}])
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            if rng.random() < 0.05:
                choice = {"index": 0, "delta": None, "finish_reason": None}
        else:
            choice = {"index": 0, "text": rng.choice(texts), "logprobs": None, "finish_reason": reason,
                      "stop_reason": None}
        if rng.random() < 0.1:
            choice = {"index": 0, "text": "z", "delta": {"content": "y"}, "finish_reason": None, "text2": "w"}
        body["choices"] = [choice]
        if rng.random() < 0.5:
            body["usage"] = {"prompt_tokens": 7, "total_tokens": 7 + i, "completion_tokens": i + rng.choice([0, 1])}
        if rng.random() < 0.03:
            body = {"object": "error", "message": "boom"}
        elif rng.random() < 0.03:
            body["choices"] = []
        events.append(b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    chunks = []
    for e in events:
        size = b"%x" % len(e)
        r = rng.random()
        if r < 0.05:
            size = size.upper()
        elif r < 0.08:
            size += b";ext=1"
        chunks.append(size + b"\r\n" + e + b"\r\n")
    chunks.append(b"0\r\n\r\n")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    request = _post(path, {"model": "m", "prompt": "p", "max_tokens": 400, "stream": True})
    whole = head + b"".join(chunks)
    inline = _drive(request, [head, *chunks])
    cut = _drive(request, [whole[i:i + 29] for i in range(0, len(whole), 29)])
    assert inline[0] == cut[0] == whole
    assert inline[3] > 100                                              # many reads took the inline path
    (_, a, ra, _), (_, b, rb, _) = inline, cut
    assert list(a.chunk_k) == list(b.chunk_k) and len(a.chunk_t) == len(b.chunk_t)
    assert (a.completion_tokens, a.prompt_tokens, a.client_tokens, a.counts_exact, a.finish_reason,
            a.stream_error, a.malformed) == (b.completion_tokens, b.prompt_tokens, b.client_tokens,
                                             b.counts_exact, b.finish_reason, b.stream_error, b.malformed)
    assert (ra.output_tokens, ra.input_tokens, ra.token_source, ra.itl_exact, ra.error, ra.finish_reason) == \
           (rb.output_tokens, rb.input_tokens, rb.token_source, rb.itl_exact, rb.error, rb.finish_reason)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_inline_path_with_events_of_one_rest(api, count_path):
    """Reads that start with the same bytes up to the piece as the last whole event and end with the same
    bytes after it as the last matched one take the inline path's shortest way (that rest's reading kept,
    only the piece checked): a rest that differs (a finish reason where null was, usage counts, an extra
    member), an escaped piece, and a piece with a raw control byte or an unescaped quote (not JSON: the
    parser calls the stream malformed) end exactly as the parser reads them."""
    import random

    rng = random.Random(2026)
    # in JSON: 2 bytes each ("ab" ...), 3 ("abc", an escaped quote, an escaped backslash), 6 ("abcdef", é)
    pieces = ["ab", "cd", " e", "zz", "abc", '"x', "\\q", "abcdef", "\u00e9"]
    events = []
    for i in range(300):
        reason = rng.choice([None] * 8 + ["ab", "st"])      # "ab" and null: the same length
        piece = rng.choice(pieces)
        if api == "chat":
            choice = {"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": reason}
        body: dict = {"id": "cmpl-1", "object": "x", "created": 1, "model": "m", "choices": [choice]}
        if rng.random() < 0.3:
            body["usage"] = {"prompt_tokens": 7, "total_tokens": 100 + i % 10, "completion_tokens": 10 + i % 90}
        if rng.random() < 0.05:
            body["zz"] = 1
        raw = json.dumps(body, separators=(",", ":")).encode()
        if i in (150, 220):         # a piece that no JSON reader takes, between events of one rest
            raw = raw.replace(b'"' + piece.encode() + b'"', b'"a\x01b"' if i == 150 else b'"a"b"', 1)
        events.append(b"data: " + raw + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    request = _post(path, {"model": "m", "prompt": "p", "max_tokens": 300, "stream": True})
    whole = head + b"".join(chunks)
    inline = _drive(request, [head, *chunks])
    cut = _drive(request, [whole[i:i + 29] for i in range(0, len(whole), 29)])
    assert inline[0] == cut[0] == whole
    assert inline[3] > 100
    (_, a, ra, _), (_, b, rb, _) = inline, cut
    assert list(a.chunk_k) == list(b.chunk_k) and len(a.chunk_t) == len(b.chunk_t)
    assert (a.completion_tokens, a.prompt_tokens, a.client_tokens, a.counts_exact, a.finish_reason,
            a.stream_error, a.malformed) == (b.completion_tokens, b.prompt_tokens, b.client_tokens,
                                             b.counts_exact, b.finish_reason, b.stream_error, b.malformed)
    assert (ra.output_tokens, ra.input_tokens, ra.token_source, ra.itl_exact, ra.error, ra.finish_reason) == \
           (rb.output_tokens, rb.input_tokens, rb.token_source, rb.itl_exact, rb.error, rb.finish_reason)


def test_the_piece_check_takes_exactly_the_bytes_the_transport_reads_plain():
    """The inline path's piece check (a search for a byte that needs decoding) passes a piece exactly when
    the transport's plain-characters pattern matches it whole: every byte value, alone and inside a range."""
    import re

    from servewatch.proxy.fastpath import impure_piece
    from servewatch.transport.stream import CHARS

    plain = re.compile(CHARS).fullmatch
    passed = 0
    for b in range(256):
        data = b'xx"a' + bytes([b]) + b'b"xx'
        assert (impure_piece(data, 3, 6) is None) == (plain(data, 3, 6) is not None), b
        assert impure_piece(data, 0, 4) is not None            # the quote before the range counts there
        passed += impure_piece(data, 3, 6) is None
    assert passed == 256 - 32 - 1 - 2 - 128      # controls, DEL, the quote and the backslash, non-ASCII
    assert impure_piece(b"", 0, 0) is None


@pytest.mark.parametrize("tail", [b"", b"data: [DONE]\n\n", b"data: {\"x\":1}\n\ndata: [DONE]\n\n", b"data: [DO"],
                         ids=["one", "done", "json-then-done", "half"])
@pytest.mark.parametrize("first", ["plain", "escaped", "usage"])
def test_a_read_of_several_events_records_what_the_parser_records(first, tail, count_path):
    """A chunk holding an event and more (the last event and [DONE] in one read, as an upstream that
    writes them at once sends them) takes the first event without JSON where the completions pattern
    matches it; it ends as the same bytes read a few at a time do."""
    last = _completion_event("\u00e9" if first == "escaped" else "z", "length", (7, 3) if first == "usage" else None)
    events = [_completion_event(t, None, (7, i + 1) if first == "usage" else None) for i, t in enumerate("ab")]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    both = last + tail
    chunks.append(b"%x\r\n%s\r\n" % (len(both), both) + (b"0\r\n\r\n" if not tail.endswith(b"[DO") else b""))
    if tail.endswith(b"[DO"):
        rest = b"NE]\n\n"
        chunks.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(rest), rest))
    request = _post("/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 3, "stream": True})
    whole = head + b"".join(chunks)
    inline = _drive(request, [head, *chunks])
    cut = _drive(request, [whole[i:i + 7] for i in range(0, len(whole), 7)])
    assert inline[0] == cut[0] == whole
    (_, a, ra, _), (_, b, rb, _) = inline, cut
    assert list(a.chunk_k) == list(b.chunk_k) and len(a.chunk_t) == len(b.chunk_t) == 3
    assert (a.completion_tokens, a.prompt_tokens, a.client_tokens, a.counts_exact, a.finish_reason, a.saw_done,
            a.stream_error, a.malformed) == (b.completion_tokens, b.prompt_tokens, b.client_tokens,
                                             b.counts_exact, b.finish_reason, b.saw_done, b.stream_error,
                                             b.malformed)
    assert (ra.output_tokens, ra.input_tokens, ra.token_source, ra.itl_exact, ra.error, ra.finish_reason) == \
           (rb.output_tokens, rb.input_tokens, rb.token_source, rb.itl_exact, rb.error, rb.finish_reason)
    assert ra.finish_reason == "length" and ra.output_tokens == 3


def test_the_request_body_is_read_as_json_loads_reads_it():
    """The body's shortcut past json.loads' checks gives json.loads' answer or its error class."""
    from servewatch.proxy.exchange import _loads

    cases = [b'{"a":1}', b'{"a":1} x', b"{}", b"{", b'{"a":"\xff"}', b'{"a":"\xed\xa0\x80"}', b' {"a":1}',
             b'{"a":1}\n', b"[1]", b"{\x00", b"", b"\xef\xbb\xbf{\"a\":1}", '{"a":1}'.encode("utf-16-le"),
             '{"\u00e9":1}'.encode(), b'{"model":"m","max_tokens":3,"stream":true}']

    def read(f, raw):
        try:
            return "ok", json.dumps(f(raw), sort_keys=True)
        except ValueError as exc:
            return "error", type(exc).__name__

    for raw in cases:
        assert read(_loads, raw) == read(json.loads, raw), raw


def test_a_kept_alive_exchange_is_recorded_after_the_next_request_is_forwarded():
    """On a kept-alive connection the client sends its next request as soon as it has read a response's
    end: that request goes upstream before the last one's record is made (the record a moment later, or
    at once when a snapshot or close asks); a connection that closes is recorded at the end, as before."""
    from servewatch.proxy.server import Client, Upstream

    events = [_completion_event(t, "length" if i == 1 else None, None) for i, t in enumerate(["a", "b"])]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    response = head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events + [b"data: [DONE]\n\n"]) + b"0\r\n\r\n"
    body = json.dumps({"model": "m", "prompt": "p", "max_tokens": 2, "stream": True}).encode()
    kept = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    async def run():
        records = []
        second = asyncio.Event()

        def on_record(ex, rec):
            records.append(rec)
            if len(records) == 2:
                second.set()

        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), on_record=on_record)
        client, wire = Client(proxy), _Wire()
        client.connection_made(wire)
        up, upstream_wire = Upstream(proxy, 2**20), _Wire()
        up.connection_made(upstream_wire)
        up.idle_since = proxy.now()
        proxy.idle.append(up)
        client.data_received(kept)
        up.data_received(response)
        assert b"".join(wire.out) == response and records == []      # forwarded; the record is to come
        assert proxy.idle == [up]                                    # the upstream connection is free again
        client.data_received(kept)                                   # the next request on the connection
        assert len(upstream_wire.out) == 2 and records == []         # went upstream before the record
        sample = proxy.snapshot(proxy.now())                         # a snapshot makes it first
        assert len(records) == 1 and records[0].ok and records[0].output_tokens == 2
        assert sample.outcomes == {"ok": 1} and sample.ttft_count == 1
        up.data_received(response)
        assert len(records) == 1
        await asyncio.wait_for(second.wait(), 5)                     # and the loop makes it soon after
        assert len(records) == 2 and proxy._later == []
        closing = kept.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
        client.data_received(closing)
        up.data_received(response)
        assert len(records) == 3                                     # a closing connection: at once

    asyncio.run(run())


@pytest.mark.parametrize("p99, expected, words", [
    (0.052, None, "(threshold 2.0 s = max(2 s, 4 x recent TTFT p99 0.052 s))"),
    (0.9, None, "(threshold 3.6 s = max(2 s, 4 x recent TTFT p99 0.900 s))"),
    (0.2, 1.5, "(threshold 6.0 s = max(2 s, 4 x the oldest waiting request's expected TTFT 1.500 s))"),
    (None, None, "(threshold 2.0 s = the 2 s floor: no stream has finished yet to give a recent TTFT)"),
], ids=["floor-over-p99", "p99", "expected", "no-ttft"])
def test_requests_no_token_says_how_its_threshold_was_made(p99, expected, words):
    """The why names every term of the threshold with its figure: a 2 s floor over 4 x a 0.052 s p99 reads
    as the floor, not as if 4 x 0.052 s made 2 s (a TP=2 vLLM drill of 2026-12-03 said it that way)."""
    from servewatch.detectors.config import DetectorConfig
    from servewatch.timeline.samples import RequestsSample

    config = DetectorConfig(no_token_floor_s=2.0, no_token_k=4.0)
    quiet = max(2.0, 4 * max(p99 or 0, expected or 0)) + 0.1
    sample = RequestsSample(t=100.0, in_flight=4, waiting_first_token=0, oldest_s=30.0, oldest_waiting_s=None,
                            quiet_s=quiet, ttft_p99_s=p99, ttft_count=8 if p99 else 0, expected_ttft_s=expected)
    [verdict] = _judge([sample], config)
    assert words in verdict.why


def test_a_pooled_connection_the_engine_closed_unseen_is_not_reused():
    """The engine closes an idle kept-alive connection while the proxy's loop is held up (starved of CPU: its
    FIN not yet read). The next request must go on a fresh connection, not get a 502 from the dead one (a TP=2
    vLLM drill of 2026-12-03 on a loaded machine: "upstream closed without answering" after 10 ms)."""
    import socket
    import threading

    close_now, closed = threading.Event(), threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    answers = []

    def read_request(conn) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += conn.recv(65536)

    def upstream() -> None:          # blocking sockets in a thread: it closes while the test holds the loop
        first, _ = listener.accept()
        read_request(first)
        first.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
        close_now.wait(10)
        first.close()                # the engine's keep-alive ends: a FIN the proxy has not read yet
        closed.set()
        listener.settimeout(10)
        try:
            fresh, _ = listener.accept()
        except OSError:
            return
        read_request(fresh)
        answers.append("fresh")
        fresh.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
        fresh.close()

    thread = threading.Thread(target=upstream, daemon=True)
    thread.start()
    request = (b"POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")

    async def go():
        async with Running(f"http://127.0.0.1:{port}") as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(request)
            first = await asyncio.wait_for(reader.readexactly(len(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")), 10)
            await _until(lambda: len(proxy.proxy.idle) == 1)      # the connection is back in the pool
            close_now.set()
            assert closed.wait(10)   # the loop is held here: the proxy cannot read the FIN before the next request
            [client] = proxy.proxy.clients
            client.data_received(request)                          # the next request, read before the FIN
            second = await asyncio.wait_for(reader.read(65536), 10)
            writer.close()
            return first, second

    try:
        first, second = asyncio.run(go())
    finally:
        listener.close()
        thread.join(5)
    assert first.endswith(b"first")
    assert second.startswith(b"HTTP/1.1 200") and second.endswith(b"fresh"), second
    assert answers == ["fresh"]
