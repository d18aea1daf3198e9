"""`servewatch proxy --prefill URL... --decode URL...`: the router leg of a disaggregated pair, over real loopback
HTTP against stand-in engines that answer as vLLM's prefill and decode do (kv_transfer_params from the prefill,
a stream from decode): each request's legs recorded with the instances that served them, round robin on each
side, a bound on each leg, a failed leg told apart, never a 200 with an empty body, no prompt in a record."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import pytest
from aiohttp import web

from servewatch.proxy import ProxyConfig
from servewatch.proxy.exchange import ERROR_BODY_BYTES, JSON_BODY_BYTES
from servewatch.proxy.pair import PairProxy
from servewatch.proxy.recordlog import RecordLog, record_sink
from servewatch.transport.contract import MockTransport
from servewatch.transport.http1 import ConnectFailed, NoAnswer, StreamBroken, StreamCut

pytestmark = pytest.mark.timeout(60)

PROMPT = "the secret prompt zebra-17 says"


class Engine:
    """One stand-in instance on an ephemeral port: a prefill answers one JSON with kv_transfer_params naming
    itself; a decode streams `tokens` events, saying with `said` how many prompt tokens came by transfer.
    `mode`: "ok", "hang" (no answer until the test ends), "500", "cut" (two events, then the connection
    closed mid-body), "empty" (200 with no body)."""

    def __init__(self, role: str, mode: str = "ok", *, tokens: int = 4, said: int | None = None,
                 delay_s: float = 0.0):
        self.role, self.mode, self.tokens, self.said, self.delay_s = role, mode, tokens, said, delay_s
        self.bodies: list[dict] = []
        self.request_ids: list[str] = []
        self.release = asyncio.Event()
        self.abandoned = 0                         # requests whose connection the proxy closed while they hung
        self.runner = None
        self.port = None

    async def __aenter__(self) -> "Engine":
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.release.set()
        await self.runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def where(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def models(self, request):
        return web.json_response({"object": "list", "data": [{"id": f"m-{self.role}"}]})

    async def completions(self, request):
        body = await request.json()
        self.bodies.append(body)
        self.request_ids.append(request.headers.get("X-Request-Id", ""))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)          # the stand-in's own prefill time, measured by the proxy
        if self.mode == "hang":                    # until the test ends, or the proxy closes the connection
            while not self.release.is_set():
                if request.transport is None or request.transport.is_closing():
                    self.abandoned += 1
                    return web.Response()
                try:
                    await asyncio.wait_for(self.release.wait(), 0.02)
                except TimeoutError:
                    pass
        if self.mode == "500":
            return web.json_response({"error": {"message": f"boom on {PROMPT}", "type": "InternalServerError"}},
                                     status=500)
        if self.role == "prefill":
            return web.json_response({
                "id": "cmpl-p", "object": "text_completion",
                "choices": [{"index": 0, "text": "a", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
                "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                       "remote_engine_id": f"engine-{self.port}", "remote_block_ids": [1, 2],
                                       "remote_host": "127.0.0.1", "remote_port": self.port}})
        if self.mode == "empty":
            return web.Response(status=200, content_type="text/event-stream")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for i in range(self.tokens):
            if self.mode == "cut" and i == 2:
                request.transport.close()
                return out
            event = {"id": "cmpl-d", "object": "text_completion",
                     "choices": [{"index": 0, "text": f"t{i}", "finish_reason": "length" if i == self.tokens - 1
                                  else None}],
                     "usage": {"prompt_tokens": 7, "completion_tokens": i + 1, "total_tokens": 8 + i}}
            if i == self.tokens - 1 and self.said is not None:
                event["kv_transfer_params"] = {"external_prompt_tokens": self.said}
            await out.write(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n")
            await asyncio.sleep(0.01)
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out


class Pair:
    """A PairProxy on an ephemeral port in this loop, its records collected (and written with `log`)."""

    def __init__(self, prefill, decode, log: RecordLog | None = None, transport=None, **config):
        self.records = []
        self.lines = []
        self.log = log

        def on_record(ex, rec):
            self.records.append(rec)
            self.lines.append(rec.to_json())
            if log is not None:
                log.write(rec.to_json())

        urls = [tuple(e if isinstance(e, str) else e.url for e in side) for side in (prefill, decode)]
        self.proxy = PairProxy(ProxyConfig(upstream="", prefill=urls[0], decode=urls[1], **config),
                               on_record=on_record, transport=transport)

    async def __aenter__(self) -> "Pair":
        self.port = await self.proxy.start("127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.proxy.close()

    async def post(self, body: dict, *, path: str = "/v1/completions"):
        """(status, body bytes, error while reading or None)."""
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://127.0.0.1:{self.port}{path}", json=body,
                              headers={"Authorization": "Bearer key-1"}) as r:
                data = b""
                try:
                    async for piece in r.content.iter_any():
                        data += piece
                except aiohttp.ClientPayloadError as exc:
                    return r.status, data, exc
                return r.status, data, None

    async def settled(self, count: int) -> None:
        """Until `count` records are made (the record follows the answer's end)."""
        async with asyncio.timeout(10):
            while len(self.records) < count:
                await asyncio.sleep(0.01)


def _stream(max_tokens: int = 4) -> dict:
    return {"model": "m", "prompt": PROMPT, "max_tokens": max_tokens, "stream": True, "min_tokens": 2,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def _events(data: bytes) -> list:
    return [json.loads(b[6:]) for b in data.split(b"\n\n") if b.startswith(b"data: {")]


def test_each_leg_is_recorded_with_the_instances_that_served_it_in_turn():
    async def go():
        async with Engine("prefill", delay_s=0.05) as p0, Engine("prefill", delay_s=0.05) as p1, \
                Engine("decode", said=7) as d0, Engine("decode") as d1, Engine("decode", said=0) as d2:
            async with Pair([p0, p1], [d0, d1, d2]) as pair:
                answers = [await pair.post(_stream()) for _ in range(6)]
                await pair.settled(6)
                return answers, pair.records, (p0, p1), (d0, d1, d2)

    answers, records, prefills, decodes = asyncio.run(go())
    for status, data, error in answers:
        assert status == 200 and error is None
        assert [e["choices"][0]["text"] for e in _events(data)] == ["t0", "t1", "t2", "t3"]
    # round robin, each side on its own turn: prefill 0 1 0 1 0 1, decode 0 1 2 0 1 2
    assert [r.proxy["pd"]["prefill_index"] for r in records] == [0, 1, 0, 1, 0, 1]
    assert [r.proxy["pd"]["decode_index"] for r in records] == [0, 1, 2, 0, 1, 2]
    assert [r.proxy["pd"]["prefill"] for r in records] == [prefills[i % 2].where for i in range(6)]
    assert [r.proxy["pd"]["decode"] for r in records] == [decodes[i % 3].where for i in range(6)]
    assert [len(p.bodies) for p in prefills] == [3, 3] and [len(d.bodies) for d in decodes] == [2, 2, 2]
    # the prefill is asked for one whole token and a remote decode; decode gets the request and the prefill's params
    asked = prefills[0].bodies[0]
    assert (asked["max_tokens"], asked["stream"]) == (1, False)
    assert "stream_options" not in asked and "min_tokens" not in asked
    assert asked["kv_transfer_params"]["do_remote_decode"] is True
    assert asked["kv_transfer_params"]["do_remote_prefill"] is False
    for i in range(6):
        sent = decodes[i % 3].bodies[i // 3]
        assert (sent["max_tokens"], sent["stream"], sent["min_tokens"], sent["prompt"]) == (4, True, 2, PROMPT)
        assert sent["kv_transfer_params"]["remote_engine_id"] == f"engine-{prefills[i % 2].port}"
    # one request id on both legs (each engine's log can be joined), a new one per request
    assert prefills[0].request_ids[0] == decodes[0].request_ids[0] != prefills[1].request_ids[0]
    for rec in records:
        pd = rec.proxy["pd"]
        assert rec.error is None and rec.http_status == 200 and rec.output_tokens == 4
        assert pd["failed_leg"] is None and pd["prefill_status"] == 200 and pd["kv_params"] is True
        assert pd["prefill_s"] >= 0.05                          # the stand-in's own 50 ms
        # the client's TTFT is the prefill, the wait between the legs and decode's first token
        assert pd["decode_ttft_s"] <= pd["kv_wait_s"] <= rec.ttft_s - pd["prefill_s"] + 1e-6
        assert rec.ttft_s >= pd["prefill_s"] + pd["decode_ttft_s"] - 1e-6
        assert pd["decode_s"] >= 3 * 0.01 and rec.proxy["itl_max_s"] is not None
    # no per-request word on transferred KV (no engine sends one: see the test of the record's fields), whatever
    # a decode's answer carries (decode 0 and 2 put a kv_transfer_params in their last event)
    assert all(set(r.proxy["pd"]) == PD_FIELDS for r in records)


def test_a_prefill_past_its_bound_fails_the_request_naming_the_prefill_leg():
    async def go():
        async with Engine("prefill", mode="hang") as p0, Engine("decode") as d0:
            async with Pair([p0], [d0], prefill_timeout_s=0.5) as pair:
                answer = await pair.post(_stream())
                await pair.settled(1)
                return answer, pair.records[0], p0, d0

    (status, data, error), rec, p0, d0 = asyncio.run(go())
    assert status == 504 and error is None
    message = json.loads(data)["error"]["message"]
    assert message == f"prefill leg: prefill 0 ({p0.where}) sent no answer in 0.5 s"
    assert rec.error == "timeout" and rec.error_detail == message and rec.http_status == 504
    assert rec.proxy["pd"]["failed_leg"] == "prefill" and rec.proxy["pd"]["decode"] is None
    assert 0.5 <= rec.proxy["pd"]["prefill_s"] < 0.5 + 2.0      # the bound, and the sweep of a loaded machine
    assert d0.bodies == []                                       # decode never asked


def test_a_decode_that_breaks_mid_stream_ends_in_an_error_event_and_a_cut_not_a_clean_end():
    async def go():
        async with Engine("prefill") as p0, Engine("decode", mode="cut") as d0:
            async with Pair([p0], [d0]) as pair:
                answer = await pair.post(_stream())
                await pair.settled(1)
                return answer, pair.records[0], d0

    (status, data, error), rec, d0 = asyncio.run(go())
    assert status == 200 and isinstance(error, aiohttp.ClientPayloadError)   # the body never ended cleanly
    events = _events(data)
    assert [e["choices"][0]["text"] for e in events[:-1]] == ["t0", "t1"]
    assert events[-1]["error"]["type"] == "decode_failed"
    assert events[-1]["error"]["message"] == f"decode leg: decode 0 ({d0.where}) closed the connection mid-answer"
    assert rec.error == "stream_cut" and rec.proxy["pd"]["failed_leg"] == "decode"
    assert rec.error_detail.startswith("decode leg: ") and rec.output_tokens == 2


@pytest.mark.parametrize("bad", ["prefill", "decode"])
def test_a_leg_that_answers_500_is_a_502_naming_that_leg(bad):
    async def go():
        async with Engine("prefill", mode="500" if bad == "prefill" else "ok") as p0, \
                Engine("decode", mode="500" if bad == "decode" else "ok") as d0:
            async with Pair([p0], [d0]) as pair:
                answer = await pair.post(_stream())
                await pair.settled(1)
                return answer, pair.records[0], {"prefill": p0, "decode": d0}

    (status, data, error), rec, engines = asyncio.run(go())
    message = json.loads(data)["error"]["message"]
    assert status == 502
    assert message == f"{bad} leg: {bad} 0 ({engines[bad].where}) answered HTTP 500 InternalServerError"
    assert rec.error == "http_5xx" and rec.proxy["pd"]["failed_leg"] == bad and rec.http_status == 502
    assert rec.proxy["pd"]["prefill_status"] == (500 if bad == "prefill" else 200)
    assert PROMPT not in json.dumps(rec.to_json()) and PROMPT not in message   # the engine's words stay out


def test_an_empty_200_from_decode_is_never_passed_on_as_a_200():
    async def go():
        async with Engine("prefill") as p0, Engine("decode", mode="empty") as d0:
            async with Pair([p0], [d0]) as pair:
                answer = await pair.post(_stream())
                await pair.settled(1)
                return answer, pair.records[0], d0

    (status, data, error), rec, d0 = asyncio.run(go())
    assert status == 502
    assert json.loads(data)["error"]["message"] == f"decode leg: decode 0 ({d0.where}) answered HTTP 200 with an empty body"
    assert rec.error == "stream_cut" and rec.proxy["pd"]["failed_leg"] == "decode"


def test_a_decode_that_refuses_connections_is_a_502_naming_decode():
    async def go():
        async with Engine("decode") as d0:
            dead = d0.url                       # a port that listened, and no longer does
        async with Engine("prefill") as p0:
            async with Pair([p0], [dead]) as pair:
                answer = await pair.post(_stream())
                await pair.settled(1)
                return answer, pair.records[0], dead

    (status, data, error), rec, dead = asyncio.run(go())
    assert status == 502
    assert json.loads(data)["error"]["message"] == (f"decode leg: decode 0 ({dead[len('http://'):]}) refused the "
                                                    "connection")
    assert rec.error == "connect" and rec.proxy["pd"]["failed_leg"] == "decode"
    assert rec.proxy["pd"]["prefill_status"] == 200


def test_records_carry_no_prompt_path_or_request_id(tmp_path):
    async def go():
        log = RecordLog(str(tmp_path / "requests.jsonl"))
        async with Engine("prefill") as p0, Engine("decode", said=7) as d0:
            pair = Pair([p0], [d0])
            pair.proxy.on_record = record_sink(log, _NoTelemetry())     # what `proxy --records` writes
            async with pair:
                for body in (_stream(), {"model": "m", "messages": [{"role": "user", "content": PROMPT}],
                                         "max_tokens": 3}):
                    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
                    status, _, _ = await pair.post(body, path=path)
                    assert status == 200
        log.close()
        return (tmp_path / "requests.jsonl").read_text(), p0.request_ids + d0.request_ids

    text, ids = asyncio.run(go())
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == 2 and [line["api"] for line in lines] == ["completions", "chat"]
    assert all(line["proxy"]["pd"]["decode_index"] == 0 for line in lines)
    assert "zebra" not in text and "/v1" not in text and "Bearer" not in text and "key-1" not in text
    assert all(i and i not in text for i in ids)


def test_other_paths_go_to_a_decode_instance():
    async def go():
        async with Engine("prefill") as p0, Engine("decode") as d0:
            async with Pair([p0], [d0]) as pair:
                async with aiohttp.ClientSession() as s:
                    async with s.get(f"http://127.0.0.1:{pair.port}/v1/models") as r:
                        return r.status, await r.json(), pair.proxy.counters.other_requests

    status, body, counted = asyncio.run(go())
    assert (status, body["data"][0]["id"], counted) == (200, "m-decode", 1)


PD_FIELDS = {"prefill", "prefill_index", "decode", "decode_index", "prefill_s", "prefill_status", "kv_params",
             "decode_ttft_s", "kv_wait_s", "decode_s", "failed_leg"}


def test_a_record_has_no_per_request_kv_transferred_field():
    """vLLM 0.32's decode answer says nothing per request of KV that came by transfer: the NIXL connector's
    request_finished returns no kv_transfer_params on decode (nixl/pull_scheduler.py), and
    usage.prompt_tokens_details.cached_tokens is the prefill's own prefix-cache hits
    (v1/engine/output_processor.py, remote_prefill_cached_tokens). So the record has no such field (it read
    `external_prompt_tokens`, which no engine sends, and was always null); the pair's /metrics are the evidence."""
    import inspect

    from servewatch.proxy import pair as pair_module

    assert "kv_transferred" not in pair_module.PairExchange.__slots__
    assert "external_prompt_tokens" not in inspect.getsource(pair_module)


class _NoTelemetry:
    def observe(self, ex, rec) -> None:
        pass


# --- against the simulator's P/D pair (servewatch.sim.pd), which speaks vLLM's connector protocol -----------------

def _sim_pair(**config):
    from tests.pd_harness import pd_pair

    return pd_pair("vllm", **config)


def test_the_sim_pair_serves_through_the_proxy_with_its_prompt_transferred():
    async def go():
        async with _sim_pair() as sims:
            model = sims.decode.engine.config.model_name
            async with Pair([sims.prefill.url], [sims.decode.url]) as pair:
                body = {"model": model, "prompt": "hello " * 40, "max_tokens": 6, "stream": True, "ignore_eos": True,
                        "stream_options": {"include_usage": True}}
                answers = [await pair.post(body) for _ in range(2)]
                await pair.settled(2)
                return answers, pair.records, sims.decode.engine.pd.received

    answers, records, received = asyncio.run(go())
    assert [a[0] for a in answers] == [200, 200] and all(a[2] is None for a in answers)
    assert received == 2                           # decode read both prompts' KV from the prefill
    for rec in records:
        pd = rec.proxy["pd"]
        assert rec.error is None and rec.output_tokens == 6
        assert pd["kv_params"] is True and pd["prefill_status"] == 200 and pd["failed_leg"] is None
        assert pd["prefill_index"] == pd["decode_index"] == 0
        assert pd["kv_wait_s"] is not None and pd["decode_ttft_s"] <= pd["kv_wait_s"]
        assert set(pd) == PD_FIELDS                # nothing per request on transferred KV: decode's counters say it


def test_a_stalled_kv_transfer_is_a_504_naming_the_decode_leg_past_its_bound():
    async def go():
        async with _sim_pair() as sims:
            model = sims.decode.engine.config.model_name
            async with aiohttp.ClientSession() as s:
                await sims.decode.fault(s, "kv-stall")
            async with Pair([sims.prefill.url], [sims.decode.url], decode_first_byte_timeout_s=1.0) as pair:
                answer = await pair.post({"model": model, "prompt": "hello " * 40, "max_tokens": 6, "stream": True})
                await pair.settled(1)
                return answer, pair.records[0], sims.decode.url

    (status, data, error), rec, decode = asyncio.run(go())
    where = decode.removeprefix("http://")
    assert status == 504
    assert json.loads(data)["error"]["message"] == f"decode leg: decode 0 ({where}) sent no first byte in 1 s"
    assert rec.error == "timeout" and rec.proxy["pd"]["failed_leg"] == "decode"
    assert rec.proxy["pd"]["prefill_status"] == 200 and rec.proxy["pd"]["kv_params"] is True


def test_a_stop_ends_the_requests_in_flight_at_once_with_their_records():
    async def go():
        async with Engine("prefill") as p0, Engine("decode", mode="hang") as d0:
            pair = Pair([p0], [d0])
            async with pair:
                task = asyncio.create_task(pair.post(_stream()))
                async with asyncio.timeout(10):
                    while not d0.bodies:                  # the request is at decode, which does not answer
                        await asyncio.sleep(0.01)
                loop = asyncio.get_running_loop()
                started = loop.time()
                await pair.proxy.close()
                took = loop.time() - started
            await asyncio.gather(task, return_exceptions=True)
            return took, pair.records

    took, records = asyncio.run(go())
    assert took < 2.0                                     # not aiohttp's 60 s wait for handlers to finish
    assert len(records) == 1 and records[0].error == "client_abort"
    assert records[0].proxy["pd"]["prefill_status"] == 200 and records[0].proxy["pd"]["decode_index"] == 0


def test_the_proxys_metrics_count_a_pairs_requests():
    from servewatch.proxy.telemetry import Telemetry

    async def go():
        telemetry = Telemetry()
        async with Engine("prefill") as p0, Engine("decode") as d0, Engine("decode", mode="500") as d1:
            pair = Pair([p0], [d0, d1])
            pair.proxy.on_record = record_sink(None, telemetry)
            telemetry.proxy = pair.proxy
            async with pair:
                statuses = [(await pair.post(_stream()))[0] for _ in range(2)]
                return statuses, telemetry.exposition().decode()

    statuses, text = asyncio.run(go())
    assert statuses == [200, 502]
    assert 'servewatch_proxy_requests_total{outcome="ok"} 1' in text
    assert 'servewatch_proxy_requests_total{outcome="http_5xx"} 1' in text
    assert ('gen_ai_server_time_to_first_token_seconds_count{gen_ai_operation_name="text_completion",'
            'gen_ai_request_model="m",outcome="ok"} 1.0') in text


def test_a_client_that_leaves_during_the_prefill_cancels_it_and_decode_is_never_asked():
    async def go():
        async with Engine("prefill", mode="hang") as p0, Engine("decode") as d0:
            async with Pair([p0], [d0]) as pair:
                task = asyncio.create_task(pair.post(_stream()))
                async with asyncio.timeout(10):
                    while not p0.bodies:
                        await asyncio.sleep(0.01)
                task.cancel()                             # the client closes its connection
                await pair.settled(1)
                async with asyncio.timeout(10):
                    while not p0.abandoned:               # the prefill sees its request's connection closed
                        await asyncio.sleep(0.01)
                return pair.records[0], d0.bodies

    rec, decoded = asyncio.run(go())
    assert rec.error == "client_abort" and rec.proxy["pd"]["failed_leg"] is None
    assert rec.proxy["pd"]["decode"] is None and decoded == []


# --- each leg's transport outcome (servewatch.transport.contract) is the request's clear error -------------------

PREFILL_AT = "http://127.0.0.1:9"          # never connected to: the prefill leg is a MockTransport's


def _hang_forever(request):
    return asyncio.Event().wait()                        # an answer that never comes (the leg's deadline ends it)


@pytest.mark.parametrize("answer, status, error, words", [
    (ConnectionRefusedError(111, "Connection refused"), 502, "connect",
     "prefill 0 (127.0.0.1:9) refused the connection"),
    (ConnectFailed("connect timeout", TimeoutError()), 502, "connect",
     "no connection to prefill 0 (127.0.0.1:9) in 7 s"),
    (socket.gaierror(-2, "Name or service not known"), 502, "connect",
     "prefill 0 (127.0.0.1:9) could not be connected to (the host name 127.0.0.1 could not be resolved)"),
    (OSError(101, "Network is unreachable"), 502, "connect",
     "prefill 0 (127.0.0.1:9) could not be connected to (Network is unreachable)"),
    (NoAnswer("connection closed before the response"), 502, "stream_cut",
     "prefill 0 (127.0.0.1:9) closed the connection before answering"),
    (StreamBroken("connection closed mid-body"), 502, "stream_cut",
     "prefill 0 (127.0.0.1:9) closed the connection before answering"),
    (StreamCut("malformed status line"), 502, "stream_cut",
     "prefill 0 (127.0.0.1:9): malformed answer (malformed status line)"),
    (_hang_forever, 504, "timeout", "prefill 0 (127.0.0.1:9) sent no answer in 0.3 s"),
    ((200, b"x" * (JSON_BODY_BYTES + 1)), 502, "stream_cut", "prefill 0 (127.0.0.1:9) answered over the size bound"),
    ((500, b"x" * (ERROR_BODY_BYTES + 1)), 502, "stream_cut", "prefill 0 (127.0.0.1:9) answered over the size bound"),
], ids=["refused", "connect_timeout", "dns", "unreachable", "no_answer", "cut", "protocol", "timeout", "too_large",
        "error_too_large"])
def test_a_prefill_legs_transport_outcome_is_the_requests_clear_error(answer, status, error, words):
    """Whatever way the prefill leg's exchange ends without an answer, the contract's one mapping (outcome_of)
    decides its outcome and the pair says it: the status, the record's error class, words naming the leg and the
    instance; decode is never asked."""
    def handler(request):
        if callable(answer):
            return answer(request)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def go():
        mock = MockTransport(handler)
        async with Engine("decode") as d0:
            async with Pair([PREFILL_AT], [d0], transport=mock, prefill_timeout_s=0.3, connect_timeout_s=7) as pair:
                answer_ = await pair.post(_stream())
                await pair.settled(1)
                return answer_, pair.records[0], d0, mock

    (got_status, data, _), rec, d0, mock = asyncio.run(go())
    message = json.loads(data)["error"]["message"]
    assert (got_status, message) == (status, f"prefill leg: {words}")
    assert (rec.error, rec.error_detail, rec.http_status) == (error, message, status)
    assert rec.proxy["pd"]["failed_leg"] == "prefill" and d0.bodies == []
    sent = mock.requests[0]                              # the leg's own bounds went with the request
    assert (sent.url, sent.timeout_s, sent.max_bytes) == (PREFILL_AT + "/v1/completions", 0.3, JSON_BODY_BYTES)
    assert json.loads(sent.body)["max_tokens"] == 1 and dict(sent.headers)["Authorization"] == "Bearer key-1"


class RawDecode:
    """A decode instance on a real socket that answers with `reply` bytes to the first request, then closes."""

    def __init__(self, reply: bytes):
        self.reply = reply
        self.server = None

    async def __aenter__(self) -> "RawDecode":
        async def answer(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(self.reply)
            await writer.drain()
            writer.close()

        self.server = await asyncio.start_server(answer, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.mark.parametrize("reply, status, words", [
    (b"", 502, "closed the connection before answering"),
    (b"SPDY/3 200 OK\r\n\r\n", 502, ": malformed answer (malformed status line)"),
    (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n", 502,
     "closed the connection before answering"),
    (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
     b"10\r\ndata: [DONE]\n\n..\r\n5\r\nda", 200, "closed the connection mid-answer"),
], ids=["no_answer", "protocol", "cut_before_a_byte", "cut_mid_answer"])
def test_a_decode_legs_outcome_on_a_real_socket_is_the_requests_clear_error(reply, status, words):
    """Decode's stream is read by the transport's HTTP/1.1 client; its outcome is the contract's mapping too:
    before the client has a byte, the proxy's own 502 naming decode (never a 200 with an empty body); after,
    an error event and a cut."""
    async def go():
        async with Engine("prefill") as p0, RawDecode(reply) as d0:
            async with Pair([p0], [d0.url]) as pair:
                answer = await pair.post(_stream())
                await pair.settled(1)
                return answer, pair.records[0], d0

    (got_status, data, error), rec, d0 = asyncio.run(go())
    where = d0.url.removeprefix("http://")
    message = f"decode leg: decode 0 ({where}){'' if words.startswith(':') else ' '}{words}"
    assert got_status == status and rec.error == "stream_cut" and rec.error_detail == message
    assert rec.proxy["pd"]["failed_leg"] == "decode" and rec.proxy["pd"]["prefill_status"] == 200
    if status == 502:
        assert json.loads(data)["error"]["message"] == message and error is None
    else:                          # the 16 + 2 bytes that came, as they came, then the error event and a cut
        event = {"error": {"message": message, "type": "decode_failed", "code": 502}}
        assert data == b"data: [DONE]\n\n..da" + b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        assert isinstance(error, aiohttp.ClientPayloadError)


def test_a_relay_stops_reading_decode_while_a_slow_client_is_behind():
    """Backpressure: past RELAY_HIGH_BYTES waiting, decode's socket is not read; taking them reads it again."""
    from servewatch.proxy.pair import RELAY_HIGH_BYTES, _Relay

    class Response:
        def __init__(self):
            self.calls = []
            self.sink = None
            self.end = asyncio.get_running_loop().create_future()

        async def stream_into(self, sink):
            self.sink = sink
            await self.end

        def pause_reading(self):
            self.calls.append("pause")

        def resume_reading(self):
            self.calls.append("resume")

    async def go():
        response = Response()
        relay = _Relay(response)
        async with asyncio.timeout(5):
            while response.sink is None:
                await asyncio.sleep(0)
        response.sink(b"a" * RELAY_HIGH_BYTES)
        before = list(response.calls)
        response.sink(b"b")
        response.sink(b"c")
        paused = list(response.calls)
        first = await relay.next()
        resumed = list(response.calls)
        response.sink(b"d")
        response.end.set_exception(StreamBroken("connection closed mid-body"))
        second = await relay.next()
        try:
            await relay.next()
            third = None
        except StreamBroken as exc:
            third = str(exc)
        relay.close()
        return before, paused, first, resumed, second, third

    before, paused, first, resumed, second, third = asyncio.run(go())
    assert (before, paused, resumed) == ([], ["pause"], ["pause", "resume"])    # one pause, one resume
    assert first == b"a" * RELAY_HIGH_BYTES + b"bc" and second == b"d"
    assert third == "connection closed mid-body"                               # the bytes before the cut first


def test_an_authorization_header_that_cannot_go_to_a_leg_is_a_400_and_no_leg_is_asked():
    """A header value the transport will not write (a character past ASCII) is the client's fault, said without
    the value; neither leg is asked."""
    async def go():
        async with Engine("prefill") as p0, Engine("decode") as d0:
            async with Pair([p0], [d0]) as pair:
                reader, writer = await asyncio.open_connection("127.0.0.1", pair.port)
                body = json.dumps(_stream()).encode()
                writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\xc3\xa9y-1\r\n"
                             b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                             % (len(body), body))
                async with asyncio.timeout(10):
                    answer = await reader.read()
                writer.close()
                return answer, p0.bodies, d0.bodies, pair.proxy.counters.refused, pair.records

    answer, prefilled, decoded, refused, records = asyncio.run(go())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"k\xc3\xa9y" not in answer
    assert json.loads(body)["error"] == {"message": "the Authorization header is not printable ASCII on one line",
                                         "type": "invalid_request", "code": 400}
    assert prefilled == [] and decoded == [] and refused == {"bad_request": 1} and records == []
