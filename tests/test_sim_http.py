"""The simulator over real HTTP on an ephemeral loopback port: the OpenAI-compatible API, SSE format,
disconnect -> abort, and the stall / engine-death signatures through POST /_sim/fault."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
from aiohttp import web

from servewatch.clock import RealClock, VirtualClock
from servewatch.sim import SimConfig, SimEngine, tokens
from servewatch.sim.server import build_app

TIMEOUT = aiohttp.ClientTimeout(total=20)


@contextlib.asynccontextmanager
async def serving(engine: SimEngine, *, step_loop: bool):
    # A short drain: a test that leaves a stream unfinished must not wait aiohttp's default 60 s.
    runner = web.AppRunner(build_app(engine), handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    loop_task = asyncio.create_task(engine.run_realtime()) if step_loop else None
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=TIMEOUT) as session:
            yield session
    finally:
        await runner.cleanup()
        if loop_task is not None:
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def _events(body: str) -> list:
    assert body.endswith("\n\n")
    events = []
    for block in body.strip("\n").split("\n\n"):
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


async def _until(predicate, seconds: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def _real_engine(**kw) -> SimEngine:
    return SimEngine(SimConfig(profile="tiny-cpu", seed=9, **kw), RealClock())


def test_streaming_completion_is_well_formed_sse_with_usage():
    async def go():
        engine = _real_engine()
        async with serving(engine, step_loop=True) as http:
            body = {"prompt": "zebracorn " * 30, "max_tokens": 12, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}
            async with http.post("/v1/completions", json=body) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                events = _events(await resp.text())
        assert events[-1] == "[DONE]"
        usage = events[-2]
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
        assert usage["usage"]["prompt_tokens"] == tokens.count_tokens("zebracorn " * 30)
        content = events[:-2]
        assert len(content) == 12                       # one token per chunk by default
        assert all(e["object"] == "text_completion" and "usage" not in e for e in content)
        assert [e["choices"][0]["finish_reason"] for e in content] == [None] * 11 + ["length"]
        text = "".join(e["choices"][0]["text"] for e in content)
        assert tokens.count_tokens(text) == 12 and "zebracorn" not in text
    _run(go())


def test_chat_stream_with_continuous_usage_stats():
    async def go():
        engine = _real_engine()
        async with serving(engine, step_loop=True) as http:
            body = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            async with http.post("/v1/chat/completions", json=body) as resp:
                events = _events(await resp.text())
        chunks = events[:-1]
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        counts = [c["usage"]["completion_tokens"] for c in chunks]
        assert counts == sorted(counts) and counts[-1] == 5
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    _run(go())


def test_non_streaming_completion_and_chat_report_usage():
    async def go():
        engine = _real_engine()
        async with serving(engine, step_loop=True) as http:
            async with http.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 7, "ignore_eos": True}) as r:
                assert r.status == 200
                done = await r.json()
            async with http.post("/v1/chat/completions",
                                 json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}) as r:
                chat = await r.json()
        choice = done["choices"][0]
        assert choice["finish_reason"] == "length" and done["usage"]["completion_tokens"] == 7
        assert tokens.count_tokens(choice["text"]) == 7
        assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
        assert chat["usage"]["prompt_tokens"] == tokens.count_chat_tokens(["hi"])
        assert chat["choices"][0]["finish_reason"] in ("stop", "length")
    _run(go())


def test_tokens_per_chunk_packs_several_tokens_per_sse_event():
    async def go():
        engine = _real_engine(tokens_per_chunk=4)
        async with serving(engine, step_loop=True) as http:
            body = {"prompt": "x", "max_tokens": 10, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            async with http.post("/v1/completions", json=body) as resp:
                events = _events(await resp.text())
        content = [e for e in events[:-1] if e["choices"]]
        per_chunk = [tokens.count_tokens(e["choices"][0]["text"]) for e in content]
        assert per_chunk == [1, 4, 4, 1]
        assert [e["usage"]["completion_tokens"] for e in content] == [1, 5, 9, 10]
    _run(go())


def test_bad_requests_get_the_servers_error_shapes():
    async def go():
        engine = _real_engine()
        async with serving(engine, step_loop=True) as http:
            async with http.post("/v1/completions", json={"prompt": "x " * 2100, "max_tokens": 10}) as r:
                assert r.status == 400
                error = (await r.json())["error"]
                assert error["code"] == 400 and "maximum context length is 2048 tokens" in error["message"]
            async with http.post("/v1/completions", json={"model": "other", "prompt": "x"}) as r:
                assert r.status == 404
            async with http.post("/v1/completions", data=b"{not json") as r:
                assert r.status == 400
            async with http.post("/_sim/fault", json={"kind": "meltdown"}) as r:
                assert r.status == 400
            async with http.get("/v1/models") as r:
                assert (await r.json())["data"][0]["id"] == "tiny"
            async with http.get("/version") as r:
                assert (await r.json())["version"] == "0.32.0"
            async with http.get("/load") as r:
                assert (await r.json()) == {"server_load": 0}
            async with http.post("/tokenize", json={"model": "tiny", "prompt": "hello, world"}) as r:
                answer = await r.json()
                assert answer["count"] == tokens.count_tokens("hello, world") == 5
                assert len(answer["tokens"]) == 5 and answer["max_model_len"] == 2048
            async with http.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}) as r:
                assert (await r.json())["count"] == tokens.count_chat_tokens(["hi"])
    _run(go())


def test_client_disconnect_aborts_the_request_answered_200_and_counted_nowhere_as_vllm_does():
    async def go():
        engine = SimEngine(SimConfig(profile="rtx3060-7b", seed=9), RealClock())
        async with serving(engine, step_loop=True) as http:
            resp = await http.post("/v1/completions", json={"prompt": "x", "max_tokens": 3000, "ignore_eos": True,
                                                             "stream": True})
            assert resp.status == 200
            await resp.content.readuntil(b"\n\n")       # the first token arrived
            assert engine.num_running == 1
            resp.close()                                 # drop the connection mid-stream
            await _until(lambda: engine.num_running == 0 and engine.num_waiting == 0)
            async with http.get("/metrics") as r:
                text = await r.text()
        # as a real vLLM 0.32: the stream was answered 200, and the abort is counted nowhere
        aborts = [l for l in text.splitlines() if l.startswith("vllm:request_success_total")
                  and 'finished_reason="abort"' in l]
        assert aborts and all(l.endswith(" 0.0") for l in aborts)
        assert 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 1.0' in text, [l for l in text.splitlines() if l.startswith("http_requests_total")]
        assert engine.kv_usage == 0.0
    _run(go())


def _progress(text: str) -> tuple:
    wanted = ("vllm:iteration_tokens_total_count", "vllm:generation_tokens_total", "vllm:prompt_tokens_total")
    return tuple(float(l.rsplit(" ", 1)[1]) for name in wanted for l in text.splitlines() if l.startswith(name + "{"))


def test_stall_over_http_health_200_metrics_answering_counters_frozen_for_10_virtual_seconds():
    async def go():
        clock = VirtualClock()
        engine = SimEngine(SimConfig(profile="tiny-cpu", seed=9), clock)
        async with serving(engine, step_loop=False) as http:
            body = {"prompt": "x", "max_tokens": 1500, "ignore_eos": True, "stream": True}
            streams = [asyncio.create_task(_collect(http, body)) for _ in range(4)]
            await _until(lambda: engine.in_flight == 4)
            engine.run_until(clock.now() + 0.5)
            async with http.post("/_sim/fault", json={"kind": "stall"}) as r:
                assert r.status == 200 and (await r.json())["state"] == "ready"
            async with http.get("/metrics") as r:
                frozen = _progress(await r.text())
            assert frozen[0] > 0 and len(frozen) == 3
            for _ in range(20):
                engine.run_until(clock.now() + 0.5)
                async with http.get("/health") as r:
                    assert r.status == 200
                async with http.get("/metrics") as r:
                    assert r.status == 200
                    assert _progress(await r.text()) == frozen
            assert engine.num_running == 4
            async with http.post("/_sim/fault", json={"kind": "clear"}) as r:
                assert r.status == 200
            while not all(s.done() for s in streams):
                engine.run_until(clock.now() + 0.5)
                await asyncio.sleep(0)
            results = [s.result() for s in streams]
        assert all(status == 200 and n == 1500 and reason == "length" for status, n, reason in results)
    _run(go())


def test_engine_death_over_http_503_and_in_flight_requests_end_200_with_a_short_body():
    async def go():
        clock = VirtualClock()
        engine = SimEngine(SimConfig(profile="tiny-cpu", seed=9), clock)
        async with serving(engine, step_loop=False) as http:
            stream = asyncio.create_task(_collect(http, {"prompt": "x", "max_tokens": 1500, "ignore_eos": True,
                                                         "stream": True}))
            plain = asyncio.create_task(http.post("/v1/completions", json={"prompt": "x", "max_tokens": 1500,
                                                                          "ignore_eos": True}))
            await _until(lambda: engine.in_flight == 2)
            engine.run_until(clock.now() + 0.3)
            async with http.post("/_sim/fault", json={"kind": "engine-death", "exit_code": 0}) as r:
                assert r.status == 200
            async with http.get("/health") as r:
                assert r.status == 503
            status, n, reason = await stream
            assert status == 200 and 0 < n < 1500 and reason == "abort"
            resp = await plain
            assert resp.status == 200
            body = await resp.json()
            assert body["choices"][0]["finish_reason"] == "abort" and body["usage"]["completion_tokens"] < 1500
            async with http.post("/v1/completions", json={"prompt": "x", "max_tokens": 3}) as r:
                assert r.status == 500
            engine.run_until(clock.now() + engine.config.exit_delay)
        assert engine.state == "exited" and engine.exit_code == 0
    _run(go())


def test_sglang_health_runs_a_generation():
    async def go():
        engine = SimEngine(SimConfig(dialect="sglang", profile="tiny-cpu"), RealClock())
        async with serving(engine, step_loop=True) as http:
            async with http.get("/health") as r:
                assert r.status == 200
            async with http.get("/health_generate") as r:
                assert r.status == 200
            async with http.get("/metrics") as r:
                text = await r.text()
        passes = [l for l in text.splitlines() if l.startswith("sglang:cuda_graph_passes_total")]
        assert passes and sum(float(l.rsplit(" ", 1)[1]) for l in passes) >= 2
        assert "sglang:prompt_tokens_total" not in text          # the probe is not counted as a request
    _run(go())


async def _collect(http, body) -> tuple[int, int, str | None]:
    async with http.post("/v1/completions", json=body) as resp:
        events = _events(await resp.text())
    content = [e for e in events if e != "[DONE]" and e["choices"]]
    text = "".join(e["choices"][0]["text"] for e in content)
    return resp.status, tokens.count_tokens(text), content[-1]["choices"][0]["finish_reason"]


def test_sglang_health_probe_times_out_503_during_a_stall_and_recovers_after_clear():
    async def go():
        import io
        log = io.StringIO()
        engine = SimEngine(SimConfig(dialect="sglang", profile="tiny-cpu", health_timeout=0.3), RealClock(),
                           log_stream=log)
        async with serving(engine, step_loop=True) as http:
            async with http.get("/health") as r:
                assert r.status == 200
            async with http.post("/_sim/fault", json={"kind": "stall"}) as r:
                assert r.status == 200
            async with http.get("/health") as r:
                assert r.status == 503
            async with http.get("/metrics") as r:
                assert r.status == 200                   # served from the HTTP process, frozen
            async with http.post("/_sim/fault", json={"kind": "clear"}) as r:
                assert r.status == 200
            async with http.get("/health") as r:
                assert r.status == 200
        assert "Health check failed. Server couldn't get a response from detokenizer for last 0.3 seconds." \
            in log.getvalue()
    _run(go())


def test_load_counts_in_flight_requests_only_with_vllms_tracking_flag():
    async def in_flight_load(tracking: bool) -> int:
        engine = _real_engine(enable_server_load_tracking=tracking)
        async with serving(engine, step_loop=True) as http:
            body = {"prompt": "hello", "max_tokens": 500, "ignore_eos": True, "stream": True}
            async with http.post("/v1/completions", json=body) as stream:
                await stream.content.readline()            # the first chunk: the request is in flight
                async with http.get("/load") as r:
                    return (await r.json())["server_load"]

    assert _run(in_flight_load(True)) == 1
    assert _run(in_flight_load(False)) == 0
