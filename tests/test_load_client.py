"""The load client against a tiny aiohttp server of our own with known behaviour and timing."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from servewatch.errors import ServewatchError
from servewatch.load import LoadConfig, run_load_async
from servewatch.load import records as R
from servewatch.load.runner import resolve_model

pytestmark = pytest.mark.timeout(60)


class FakeServer:
    """OpenAI-style streaming completions. `behaviour` decides what each request gets:
    tokens_per_chunk, gap_s, and a fault: None | "abort" | "short" | "status500" | "status400" |
    "cut" | "error_event" | "no_usage" | "stall"."""

    def __init__(self, **behaviour):
        self.behaviour = {"tokens_per_chunk": 1, "gap_s": 0.0, "fault": None, "prompt_tokens": 7}
        self.behaviour.update(behaviour)
        self.bodies: list[dict] = []
        self.metrics_text = ""
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        if behaviour.get("tokenize"):
            app.router.add_post("/tokenize", self.tokenize)
        self.server = TestServer(app, host="127.0.0.1")

    async def __aenter__(self) -> "FakeServer":
        await self.server.start_server()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    async def models(self, request):
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def tokenize(self, request):
        body = await request.json()
        self.tokenized = getattr(self, "tokenized", 0) + 1
        if self.tokenized > self.behaviour.get("tokenize_fails_after", 10**9):
            return web.json_response({"error": "overloaded"}, status=503)
        if self.tokenized > self.behaviour.get("tokenize_hangs_after", 10**9):
            await asyncio.sleep(5)
        return web.json_response({"count": len(body["prompt"].split()) + 1, "max_model_len": 4096})  # + BOS

    async def metrics(self, request):
        return web.Response(text=self.metrics_text, content_type="text/plain")

    async def completions(self, request):
        body = await request.json()
        self.bodies.append(body)
        b = self.behaviour
        fault = b["fault"]
        if fault == "status500":
            return web.json_response({"error": "boom"}, status=500)
        if fault == "status400":
            return web.json_response({"error": "too long"}, status=400)
        n = body["max_tokens"]
        if fault == "short":
            n = max(1, n // 3)
        k = b["tokens_per_chunk"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        sent = 0
        pt = b["prompt_tokens"]
        while sent < n:
            if sent and b["gap_s"]:
                await asyncio.sleep(b["gap_s"])
            step = min(k, n - sent)
            sent += step
            last = sent >= n
            reason = None
            if last:
                reason = "abort" if fault == "abort" else "length"
            chunk = {"id": "cmpl-x", "object": "text_completion", "model": "fake-model",
                     "choices": [{"index": 0, "text": " tok" * step, "finish_reason": reason}]}
            if fault != "no_usage":
                chunk["usage"] = {"prompt_tokens": pt, "completion_tokens": sent, "total_tokens": pt + sent}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if fault == "cut" and sent >= n // 2:
                request.transport.abort()
                return resp
            if fault == "stall" and sent >= 2:
                await asyncio.sleep(30)
        if fault == "error_event":
            await resp.write(b'data: {"error": {"message": "engine dead", "code": 500}}\n\n')
        final = {"id": "cmpl-x", "object": "text_completion", "model": "fake-model", "choices": [],
                 "usage": {"prompt_tokens": pt, "completion_tokens": sent, "total_tokens": pt + sent}}
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _config(url: str, **kw) -> LoadConfig:
    base = dict(url=url, scenario="custom", rate=50.0, arrival="constant", requests=4, prompt_tokens=5,
                output_tokens=12, tokenizer="approx", model="fake-model", metrics_interval_s=0.0)
    base.update(kw)
    return LoadConfig(**base)


def _run(server_kw: dict, **config_kw):
    async def go():
        async with FakeServer(**server_kw) as srv:
            result = await run_load_async(_config(srv.url, **config_kw))
            return srv, result
    return asyncio.run(go())


@pytest.mark.parametrize("client", ["http1", "aiohttp"])
def test_chunk_packing_gives_exact_per_token_itl(client):
    srv, result = _run({"tokens_per_chunk": 3, "gap_s": 0.03}, requests=2, output_tokens=12, client=client)
    assert [r.error for r in result.records] == [None, None]
    for rec in result.records:
        assert list(rec.chunk_tokens) == [3, 3, 3, 3]
        assert rec.output_tokens == 12 and rec.token_source == "server"
        assert rec.itl_exact is True
        gaps = [b - a for a, b in zip(rec.chunk_t_s, rec.chunk_t_s[1:])]
        assert list(rec.itl_chunk_s) == pytest.approx(gaps)
        # the rule: each later chunk of k=3 tokens arriving Δ after the previous adds 3 × Δ/3
        expected = [g / 3 for g in gaps for _ in range(3)]
        assert list(rec.itl_token_s) == pytest.approx(expected)
        assert len(rec.itl_token_s) == 12 - 3
        assert sum(rec.itl_token_s) == pytest.approx(rec.chunk_t_s[-1] - rec.chunk_t_s[0])
        # the server sleeps 30 ms between chunks, so the span is at least 90 ms even if a loaded
        # machine delivers two chunks in one read
        assert 0.085 <= rec.chunk_t_s[-1] - rec.chunk_t_s[0] < 2.0
        assert rec.tpot_s == pytest.approx((rec.chunk_t_s[-1] - rec.chunk_t_s[0]) / 11)
        assert rec.ttft_s == pytest.approx(rec.chunk_t_s[0])
    s = result.summary
    assert s["itl_s"]["count"] == 18 and s["itl_chunk_s"]["count"] == 6
    # per-token ITL is a third of per-chunk ITL: the per-chunk figure would be 3x off
    assert s["itl_chunk_s"]["mean"] == pytest.approx(3 * s["itl_s"]["mean"])
    assert s["itl_s"]["mean"] >= 0.085 / 9


def test_tokenizer_auto_uses_the_servers_tokenize_for_exact_prompts():
    srv, result = _run({"tokenize": True}, requests=2, tokenizer="auto", prompt_tokens=9)
    assert [len(b["prompt"].split()) for b in srv.bodies] == [8, 8]      # 8 words + BOS = 9 tokens
    assert result.summary["prompt_token_source"] == "server" and result.summary["prompts_exact"] is True
    srv, result = _run({}, requests=1, tokenizer="auto", prompt_tokens=9)   # no /tokenize: approx, flagged
    assert result.summary["prompt_token_source"] == "approx" and result.notes


def test_a_tokenize_that_fails_midway_is_one_line_naming_it_not_a_traceback():
    from servewatch.errors import ServewatchError

    with pytest.raises(ServewatchError) as caught:
        _run({"tokenize": True, "tokenize_fails_after": 3}, requests=2, tokenizer="auto", prompt_tokens=9)
    message = str(caught.value)
    assert "/tokenize: /tokenize answered HTTP 503 while the prompts were being measured" in message
    assert "--tokenizer DIR" in message and "\n" not in message


def test_a_tokenize_that_stops_answering_is_one_line_naming_the_timeout(monkeypatch):
    from servewatch.errors import ServewatchError
    from servewatch.load import prompts

    plain = prompts.ServerCounter.__init__
    monkeypatch.setattr(prompts.ServerCounter, "__init__",
                        lambda self, client, model, timeout_s: plain(self, client, model, 0.3))
    with pytest.raises(ServewatchError, match=r"/tokenize: no answer within 0.3 s while the prompts were"):
        _run({"tokenize": True, "tokenize_hangs_after": 3}, requests=2, tokenizer="auto", prompt_tokens=9)


def test_request_body_controls_output_length_and_asks_for_usage():
    srv, result = _run({}, requests=1)
    body = srv.bodies[0]
    assert body["ignore_eos"] is True and body["max_tokens"] == 12 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert result.records[0].ok and result.records[0].input_tokens == 7


@pytest.mark.parametrize("fault,detail", [("abort", "finish reason abort"), ("short", "4 of 12 tokens"),
                                          ("error_event", "error event in the stream")])
def test_http_200_cut_short_is_truncated_not_success(fault, detail):
    srv, result = _run({"fault": fault}, requests=3)
    assert [r.http_status for r in result.records] == [200, 200, 200]
    assert [r.error for r in result.records] == [R.TRUNCATED] * 3
    assert result.records[0].error_detail == detail
    assert result.summary["ok"] == 0 and result.summary["errors"]["truncated"] == 3
    assert result.summary["ttft_s"]["count"] == 0        # failures never enter the latency stats


def test_5xx_and_4xx_are_counted_per_request_and_the_run_goes_on():
    srv, result = _run({"fault": "status500"}, requests=5)
    assert [r.error for r in result.records] == [R.HTTP_5XX] * 5
    assert all(r.http_status == 500 for r in result.records)
    assert result.summary["errors"]["http_5xx"] == 5 and result.summary["requests"] == 5
    srv, result = _run({"fault": "status400"}, requests=2)
    assert [r.error for r in result.records] == [R.HTTP_4XX] * 2


def test_connection_cut_mid_stream_is_stream_cut():
    srv, result = _run({"fault": "cut"}, requests=2)
    assert [r.error for r in result.records] == [R.STREAM_CUT] * 2
    assert all(r.chunk_tokens for r in result.records)    # it did get part of the answer


def test_idle_timeout_cancels_a_stalled_stream():
    srv, result = _run({"fault": "stall"}, requests=1, idle_timeout_s=0.5)
    rec = result.records[0]
    assert rec.error == R.TIMEOUT and rec.http_status == 200
    assert 0.5 <= rec.e2e_s < 5


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_connect_error_on_a_dead_port():
    url = f"http://127.0.0.1:{_dead_port()}"
    result = asyncio.run(run_load_async(_config(url, requests=3)))
    assert [r.error for r in result.records] == [R.CONNECT] * 3
    assert all(r.sent is None and r.http_status is None for r in result.records)
    assert result.summary["errors"]["connect"] == 3


def test_dead_port_without_model_is_one_clear_error():
    url = f"http://127.0.0.1:{_dead_port()}"
    with pytest.raises(ServewatchError, match="/v1/models"):
        asyncio.run(run_load_async(_config(url, model=None)))


def test_model_resolved_from_v1_models():
    async def go():
        async with FakeServer() as srv:
            from servewatch.transport.http1 import Endpoint, Http1Client
            client = Http1Client(Endpoint.parse(srv.url))
            try:
                return await resolve_model(client)
            finally:
                await client.close()
    assert asyncio.run(go()) == "fake-model"


def test_without_continuous_usage_falls_back_and_says_so():
    srv, result = _run({"fault": "no_usage", "tokens_per_chunk": 2, "gap_s": 0.01}, requests=1)
    rec = result.records[0]
    # each chunk counted as one token by the client, the final usage says 12: inexact, flagged
    assert rec.output_tokens == 12 and rec.token_source == "server"
    assert rec.itl_exact is False
    assert list(rec.chunk_tokens) == [1] * 6
    assert result.summary["itl_exact"] is False


def test_schedule_is_absolute_and_records_scheduled_and_sent():
    srv, result = _run({}, requests=10, rate=20.0, arrival="constant")
    sched = [r.scheduled for r in result.records]
    steps = [b - a for a, b in zip(sched, sched[1:])]
    assert steps == pytest.approx([0.05] * 9, abs=1e-6)
    assert all(r.sent >= r.scheduled for r in result.records)
    assert all(r.schedule_delay_s < 5.0 for r in result.records)   # loose: a shared machine
    assert [r.id for r in result.records] == list(range(10))


def test_fixed_concurrency_caps_in_flight():
    srv, result = _run({"gap_s": 0.005}, concurrency=3, rate=None, requests=9)
    assert len(result.records) == 9 and all(r.ok for r in result.records)
    events = sorted([(r.sent, 1) for r in result.records] + [(r.sent + r.e2e_s, -1) for r in result.records],
                    key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 3


def test_interrupted_run_keeps_what_it_recorded():
    async def go():
        async with FakeServer(gap_s=0.005) as srv:
            holder = {}

            def on_progress(p):
                if p.done >= 3 and "cancelled" not in holder:
                    holder["cancelled"] = True
                    holder["task"].cancel()

            holder["task"] = asyncio.create_task(run_load_async(
                _config(srv.url, rate=20.0, requests=1000), on_progress=on_progress, salvage_on_cancel=True))
            return await holder["task"]

    result = asyncio.run(go())
    assert result.summary["interrupted"] is True
    assert 3 <= result.summary["requests"] < 1000 and result.summary["ok"] == result.summary["requests"]
    assert any("interrupted" in n for n in result.notes)


def test_keep_text_off_by_default_and_on_when_asked(tmp_path):
    from servewatch.load.output import write_outputs

    srv, result = _run({}, requests=1)
    write_outputs(result, tmp_path)
    line = json.loads((tmp_path / "requests.jsonl").read_text())
    assert "text" not in line and "prompt" not in line
    srv, result = _run({}, requests=1, keep_text=True)
    write_outputs(result, tmp_path)
    line = json.loads((tmp_path / "requests.jsonl").read_text())
    assert line["text"] == " tok" * 12 and len(line["prompt"].split()) == 5
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("scenario", "requests", "ok", "errors", "requested_rate", "achieved_rate", "schedule_delay_s",
                "ttft_s", "itl_s", "tpot_s", "e2e_s", "goodput", "tokens_in", "tokens_out", "signature",
                "token_count_source"):
        assert key in summary


# ---------------------------------------------------------------- the CLI

class ThreadedFakeServer:
    """FakeServer on its own loop in a thread, so the CLI can run its own asyncio.run()."""

    def __init__(self, **behaviour):
        import threading

        self._behaviour = behaviour
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.url = None

    def _main(self):
        async def serve():
            async with FakeServer(**self._behaviour) as srv:
                self.url = srv.url
                self._stop = asyncio.Event()
                self._loop = asyncio.get_running_loop()
                self._ready.set()
                await self._stop.wait()
        asyncio.run(serve())

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def test_cli_writes_outputs_and_prints_json(tmp_path, capsys):
    from servewatch.cli import main

    out = tmp_path / "run"
    with ThreadedFakeServer(tokens_per_chunk=2) as srv:
        rc = main(["load", srv.url, "--scenario", "custom", "--rate", "40", "--requests", "3", "--output-tokens", "6",
                   "--tokenizer", "approx", "--metrics-interval", "0", "--out", str(out), "--json",
                   "--goodput", "ttft=5000,e2e=10000"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] == 3 and summary["ok"] == 3 and summary["goodput_fraction"] == 1.0
    assert summary["model"] == "fake-model" and summary["prompt_token_source"] == "approx"
    assert any("APPROXIMATE" in n for n in summary["notes"])
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all("text" not in json.loads(x) for x in lines)
    assert json.loads((out / "summary.json").read_text()) == summary
    assert (out / "server.jsonl").exists()


def test_cli_prints_a_summary_table(capsys):
    from servewatch.cli import main

    with ThreadedFakeServer() as srv:
        rc = main(["load", srv.url, "--scenario", "custom", "--rate", "40", "--requests", "2", "--output-tokens", "4",
                   "--tokenizer", "approx", "--metrics-interval", "0"])
    out = capsys.readouterr().out
    assert rc == 0 and "signature" in out and "TTFT" in out and "2 ok" in out


@pytest.mark.parametrize("argv,needle", [
    (["--arrival", "burst"], "--arrival must be"),
    (["--prompt-tokens", "x:y"], "--prompt-tokens"),
    (["--goodput", "ttft=fast"], "--goodput"),
    (["--scenario", "custom"], "needs --rate"),
    (["--header", "A: b", "--header", "Bearer-secret"], "--header (the second given): expected 'NAME: VALUE'"),
    (["--header", "Host: elsewhere"], "--header: header Host is the client's own"),
])
def test_cli_bad_input_is_one_clear_line(argv, needle, capsys):
    from servewatch.cli import main

    rc = main(["load", "http://127.0.0.1:9", "--requests", "1", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and err[0].startswith("servewatch load:") and needle in err[0]


def test_cli_unreachable_target_and_unwritable_out(tmp_path, capsys):
    from servewatch.cli import main

    rc = main(["load", f"http://127.0.0.1:{_dead_port()}", "--requests", "1", "--metrics-interval", "0"])
    err = capsys.readouterr().err
    assert rc != 0 and "/v1/models" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["load", "http://127.0.0.1:9", "--requests", "1", "--out", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert rc != 0 and "--out" in err


def test_a_closed_loop_worker_pauses_after_a_refused_connection():
    """Four workers against a port nobody listens on, for one second: each waits REFUSED_PAUSE_S after a
    refused connection instead of sending again at once (at a stopped vLLM four workers sent 118,858 requests
    in 20 s before the pause: about 1,500 a second per worker)."""
    from servewatch.load.runner import REFUSED_PAUSE_S

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]     # bound, never listening: every connection is refused
        result = asyncio.run(run_load_async(_config(f"http://127.0.0.1:{port}", rate=None, concurrency=4,
                                                    requests=None, duration_s=1.0)))
    assert result.records and all(r.error == R.CONNECT for r in result.records)
    # at most one request per pause per worker, plus the first of each
    assert len(result.records) <= 4 * (1.0 / REFUSED_PAUSE_S + 1), len(result.records)


def test_a_closed_loop_worker_pauses_after_a_5xx_answered_at_once():
    """A vLLM whose engine core stopped first during a graceful stop answers 500 at once: four workers sent it
    17,836 requests in 20 s. Each now waits REFUSED_PAUSE_S after a 5xx, as after a refused connection; a 4xx
    (the client's own fault, not retried by a real client either) is not paused for."""
    from servewatch.load.runner import REFUSED_PAUSE_S

    _, result = _run({"fault": "status500"}, rate=None, concurrency=4, requests=None, duration_s=1.0)
    assert result.records and all(r.error == R.HTTP_5XX for r in result.records)
    assert len(result.records) <= 4 * (1.0 / REFUSED_PAUSE_S + 1), len(result.records)
    _, result = _run({"fault": "status400"}, rate=None, concurrency=4, requests=None, duration_s=1.0)
    assert len(result.records) > 4 * (1.0 / REFUSED_PAUSE_S + 1), len(result.records)
