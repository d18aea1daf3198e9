"""The simulator over HTTP: an aiohttp app speaking the OpenAI-compatible API of vLLM / SGLang.

One asyncio loop: the engine's step loop is a task (`SimEngine.run_realtime`), handlers only queue
requests and wait for the engine's listener to wake them. Endpoints: /v1/completions,
/v1/chat/completions (streaming SSE and not), /v1/models, /health (SGLang: a real one-token
generation), /health_generate and /ready (SGLang), /ping, /version, /load, /metrics, a dialect's slot listing
(Dialect.slots_path), and the
loopback-only admin endpoints POST /_sim/fault and GET /_sim/state.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from servewatch.sim import tokens
from servewatch.sim.engine import (DEAD, EXITED, READY, STARTING, EngineDeadError, RequestFailed, RequestRejected,
                                   SimEngine)
from servewatch.sim.faults import FaultSpecError, fault_from_json
from servewatch.sim.behaviour import LOAD, TOKENIZE
from servewatch.sim.pd import PREFILL, READ_PATH

ENGINE_KEY = web.AppKey("engine", SimEngine)
STREAM_STATUS = web.RequestKey("stream_status", int)   # on the request: the status a stream began with
MAX_BODY = 4 * 2**20
SHUTDOWN_DRAIN_S = 10.0     # on SIGTERM, in-flight requests get this long to finish before they are cut


def build_app(engine: SimEngine) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_access_log])
    app[ENGINE_KEY] = engine
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    for name, (method, path, handler) in OPTIONAL_ROUTES.items():
        if name in engine.behaviour.optional_endpoints:
            app.router.add_route(method, path, handler)
    app.router.add_get("/health", health)
    app.router.add_get("/ping", health)
    app.router.add_get("/health_generate", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    if engine.behaviour.slots_path:
        app.router.add_get(engine.behaviour.slots_path, slots)
    app.router.add_post("/_sim/fault", sim_fault)
    app.router.add_get("/_sim/state", sim_state)
    if engine.pd is not None:
        app.router.add_post(READ_PATH, sim_kv_read)
    return app


@web.middleware
async def _access_log(request: web.Request, handler):
    """uvicorn-style access line and the instrumentator's counts: a stream whose client vanished counts
    with the status it had begun with (as vLLM's middleware counts it); nothing for any other vanished client."""
    started = time.monotonic()
    engine = request.app[ENGINE_KEY]
    if engine.state == STARTING and engine.behaviour.loading_message and not request.path.startswith("/_sim/"):
        # every endpoint answers 503 with the loading message until the model is loaded
        _record(request, 503, started)
        return web.json_response({"error": {"message": engine.behaviour.loading_message, "type": "unavailable_error",
                                            "code": 503}}, status=503)
    try:
        response = await handler(request)
    except asyncio.CancelledError:
        if STREAM_STATUS in request:
            _record(request, request[STREAM_STATUS], started)
        raise
    except web.HTTPException as exc:
        _record(request, exc.status, started)
        raise
    except Exception:
        _record(request, 500, started)
        raise
    _record(request, response.status, started)
    return response


def _record(request: web.Request, status: int, started: float) -> None:
    engine = request.app[ENGINE_KEY]
    peer = request.remote or "127.0.0.1"
    port = (request.transport.get_extra_info("peername") or (None, 0))[1] if request.transport else 0
    engine.log.access(f"{peer}:{port}", request.method, request.path_qs, status)
    http = getattr(engine.metrics, "http", None)
    route = request.match_info.route.resource
    if http is not None and route is not None:
        http.observe(route.canonical, request.method, status, time.monotonic() - started, request.content_length or 0)


# --- errors ------------------------------------------------------------------------------------
def _error(engine: SimEngine, status: int, message: str) -> web.Response:
    return web.json_response(engine.behaviour.error_body(status, message), status=status)


# --- simple endpoints ----------------------------------------------------------------------------
async def health(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    if not engine.behaviour.health_generates or engine.state != READY:
        return web.Response(status=engine.health() or 503)
    return web.Response(status=await _generation_probe(engine))


async def _generation_probe(engine: SimEngine) -> int:
    """SGLang's /health: submit a one-token request; 200 as soon as the engine outputs anything."""
    tic = engine.clock.now()
    woke = asyncio.Event()
    try:
        probe = engine.submit(prompt_tokens=1, max_tokens=1, listener=lambda _r: woke.set(), count_in_metrics=False)
    except EngineDeadError:
        return 503
    deadline = tic + engine.config.health_timeout
    try:
        while engine.last_output_at <= tic and engine.state == READY:
            remaining = deadline - engine.clock.now()
            if remaining <= 0:
                engine.log.health_failed(engine.last_output_at)
                return 503
            woke.clear()
            try:
                await asyncio.wait_for(woke.wait(), timeout=min(1.0, remaining))
            except asyncio.TimeoutError:
                pass
        return 200 if engine.last_output_at > tic else 503
    finally:
        if not probe.finished:
            engine.abort(probe)


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's POST /tokenize with the simulator's token counter: {"count", "max_model_len", "tokens"}."""
    engine = request.app[ENGINE_KEY]

    def prompt_pieces(body) -> list[str]:
        if not isinstance(body, dict):
            raise RequestRejected("request body must be a JSON object")
        if "messages" in body:
            return _Params({**body, "max_tokens": 1}, True, engine).pieces
        if isinstance(body.get("prompt"), str):
            return tokens.pieces(body["prompt"])
        raise RequestRejected("give a string prompt or messages")

    pieces, error = await _read_body(request, engine, prompt_pieces)
    if error is not None:
        return error
    vocab = engine.config.hw.vocab_size
    ids = [tokens.piece_id(piece, vocab) for piece in pieces]
    return web.json_response({"count": len(ids), "max_model_len": engine.config.max_model_len, "tokens": ids,
                              "token_strs": None})


async def _read_body(request: web.Request, engine, read):
    """(read(the request's JSON body), None), or (None, the OpenAI-style error response vLLM would give)."""
    try:
        return read(await request.json()), None
    except json.JSONDecodeError:
        return None, _error(engine, 400, "request body is not valid JSON")
    except LookupError as exc:
        return None, _error(engine, 404, str(exc.args[0]))
    except RequestRejected as exc:
        return None, _error(engine, 400, str(exc))


async def ready(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    return web.Response(status=200 if engine.state == READY and not engine.stalled else 503)


async def version(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    return web.json_response({"version": engine.behaviour.version})


async def load(request: web.Request) -> web.Response:
    """vLLM's /load: in-flight requests, counted only with --enable-server-load-tracking (else 0)."""
    engine = request.app[ENGINE_KEY]
    return web.json_response({"server_load": engine.in_flight if engine.config.enable_server_load_tracking else 0})


# endpoints only some engines serve (EngineBehaviour.optional_endpoints): name -> (method, path, handler)
OPTIONAL_ROUTES = {TOKENIZE: ("POST", "/tokenize", tokenize), LOAD: ("GET", "/load", load)}


async def metrics(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    await _engine_loop_answers(engine)
    body = engine.metrics_text().encode("utf-8")
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


LOOP_POLL_S = 0.05


async def _engine_loop_answers(engine: SimEngine) -> None:
    """Where /metrics and the slot listing are tasks of the engine's own loop (Dialect.metrics_wait_on_engine), a loop
    stalled with nothing running (hung outside a step) never answers them: wait until the stall ends or work is
    running (the client's timeout, or the shutdown, cancels the wait). Stalled inside a step, it answers: the engine
    hands those tasks to another thread while a step runs (see the dialect's module), its counters frozen."""
    while (engine.behaviour.metrics_wait_on_engine and engine.stalled and engine.state == READY
           and not engine.scheduler.running):
        await asyncio.sleep(LOOP_POLL_S)


async def slots(request: web.Request) -> web.Response:
    """The slot listing (in the shape of Dialect.read_slots' input): one object per slot, the running requests in
    the first slots; numbers only."""
    engine = request.app[ENGINE_KEY]
    await _engine_loop_answers(engine)
    cfg = engine.config
    running = list(engine.scheduler.running)
    listing = []
    for slot in range(cfg.max_num_seqs):
        item = {"id": slot, "n_ctx": cfg.max_model_len, "speculative": False, "is_processing": slot < len(running)}
        if slot < len(running):
            r = running[slot]
            item.update({"id_task": r.rid, "n_prompt_tokens": r.num_tokens,
                         "n_prompt_tokens_processed": min(r.num_computed, r.prompt_len),
                         "n_prompt_tokens_cache": r.prefix_hit_tokens,
                         "next_token": [{"has_next_token": True, "has_new_line": False,
                                         "n_remain": r.stop_at - r.output_len, "n_decoded": r.output_len}]})
        listing.append(item)
    return web.json_response(listing)


async def models(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    cfg = engine.config
    card = {"id": cfg.model_name, "object": "model", "created": int(time.time()),
            "owned_by": engine.behaviour.model_owner,
            "root": cfg.hw.model_name, "parent": None, "max_model_len": cfg.max_model_len}
    return web.json_response({"object": "list", "data": [card]})


def _is_loopback(request: web.Request) -> bool:
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        return False


async def sim_fault(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    if not _is_loopback(request):
        return _error(engine, 403, "fault injection is loopback-only")
    try:
        fault = fault_from_json(await request.json())
        engine.inject(fault)
    except (FaultSpecError, json.JSONDecodeError, ValueError) as exc:
        return _error(engine, 400, str(exc).splitlines()[0] if str(exc) else "bad fault")
    return web.json_response({"ok": True, "kind": fault.kind, "state": engine.state})


async def sim_kv_read(request: web.Request) -> web.Response:
    """A P/D decode reads a request's KV from this prefill (loopback only): {"outcome": "ok"|"expired"}, 404 for a
    lease it never gave. A stopped (stalled) prefill does not answer until it runs again; a dead one answers 503."""
    engine = request.app[ENGINE_KEY]
    if not _is_loopback(request):
        return _error(engine, 403, "KV reads are loopback-only")
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _error(engine, 400, "request body is not valid JSON")
    rid = body.get("remote_request_id") if isinstance(body, dict) else None
    if not isinstance(rid, str):
        return _error(engine, 400, 'body must be a JSON object with a string "remote_request_id"')
    while engine.stalled and engine.state == READY:
        await asyncio.sleep(0.1)      # a stopped process answers nothing; the reader's own deadline ends the wait
    if engine.state != READY:
        return _error(engine, 503, "the prefill's engine is not running")
    outcome = engine.pd.read(rid)
    if outcome == "unknown":
        return _error(engine, 404, "no KV held for that request")
    return web.json_response({"outcome": outcome})


async def sim_state(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    return web.json_response({
        "state": engine.state, "dialect": engine.config.dialect, "running": engine.num_running,
        "waiting": engine.num_waiting, "kv_usage": engine.kv_usage, "steps": engine.steps,
        "stalled": engine.stalled, "exit_code": engine.exit_code, "max_lag_s": engine.max_lag,
        "mean_lag_s": engine.total_lag / engine.steps if engine.steps else 0.0,
    })


# --- completions -----------------------------------------------------------------------------------
class _Params:
    def __init__(self, body: dict, chat: bool, engine: SimEngine):
        if not isinstance(body, dict):
            raise RequestRejected("request body must be a JSON object")
        cfg = engine.config
        model = body.get("model")
        if model is not None and model != cfg.model_name:
            raise LookupError(f"The model `{model}` does not exist.")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RequestRejected("messages must be a non-empty list")
            self.pieces: list[str] = []
            for message in messages:
                if not isinstance(message, dict):
                    raise RequestRejected("each message must be an object")
                content = message.get("content", "")
                if isinstance(content, list):
                    content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
                self.pieces += ["<|m|>", str(message.get("role", "user")), "<|c|>", *tokens.pieces(str(content)),
                                "<|e|>"]
            self.pieces += ["<|m|>", "assistant", "<|c|>"]
            self.prompt_tokens = None
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
                prompt = prompt[0]
            if isinstance(prompt, str):
                self.pieces = tokens.pieces(prompt)
                self.prompt_tokens = None
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                self.pieces = [str(t) for t in prompt]
                self.prompt_tokens = None
            else:
                raise RequestRejected("prompt must be a string, a list with one string, or a list of token ids")
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is None:
            limit = 16 if not chat else max(1, cfg.max_model_len - len(self.pieces))
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise RequestRejected("max_tokens must be an integer")
        self.max_tokens = limit
        if body.get("n", 1) != 1:
            raise RequestRejected("the simulator supports n=1 only")
        self.ignore_eos = bool(body.get("ignore_eos", False))
        temperature = body.get("temperature")
        self.greedy = isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0
        self.stream = bool(body.get("stream", False))
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise RequestRejected("stream_options must be an object")
        self.include_usage = bool(options.get("include_usage", False))
        self.continuous_usage = bool(options.get("continuous_usage_stats", False))
        self.kv_transfer_params = body.get("kv_transfer_params")     # P/D: vLLM's connector parameters


async def completions(request: web.Request) -> web.StreamResponse:
    return await _serve_completion(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _serve_completion(request, chat=True)


async def _serve_completion(request: web.Request, *, chat: bool) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    if engine.state in (DEAD, EXITED):
        return _error(engine, 500, str(EngineDeadError()))
    params, error = await _read_body(request, engine, lambda body: _Params(body, chat, engine))
    if error is not None:
        return error
    external = 0
    pd = engine.pd
    if pd is not None and pd.wants_remote_kv(params.kv_transfer_params):
        failure = await pd.fetch(params.kv_transfer_params, len(params.pieces))
        if failure is not None:
            return _error(engine, 500, f"KV load failure ({failure}): the request failed")
        external = len(params.pieces)
    woke = asyncio.Event()
    try:
        handle = engine.submit(prompt=params.pieces, max_tokens=params.max_tokens, ignore_eos=params.ignore_eos,
                               is_streaming=params.stream, listener=lambda _r: woke.set(), greedy=params.greedy,
                               external_tokens=external)
    except RequestRejected as exc:
        return _error(engine, exc.status, str(exc))
    except RequestFailed as exc:
        return _error(engine, exc.status, str(exc))
    except EngineDeadError as exc:
        return _error(engine, 500, str(exc))
    ident = f"{'chatcmpl' if chat else 'cmpl'}-{engine.config.seed:04x}{handle.rid:028x}"
    created = int(time.time())
    try:
        if params.stream:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                                   "Cache-Control": "no-cache"})
            try:
                await response.prepare(request)
                request[STREAM_STATUS] = response.status
                await _stream(response, engine, handle, woke, params, chat, ident, created)
            except ConnectionResetError:
                pass   # the client went away mid-stream; the request is aborted below
            return response
        while not handle.finished:
            woke.clear()
            await woke.wait()
        body = _full_body(engine, handle, chat, ident, created)
        kv = params.kv_transfer_params
        if (pd is not None and pd.role == PREFILL and isinstance(kv, dict) and kv.get("do_remote_decode")
                and handle.finish_reason != "abort"):
            body["kv_transfer_params"] = pd.lease(handle)     # what decode needs to read this prompt's KV
        return web.json_response(body)
    finally:
        if not handle.finished:
            engine.abort(handle)   # the client went away (handler cancelled) or the write failed


def _usage(handle, completion_tokens: int | None = None) -> dict:
    done = handle.output_len if completion_tokens is None else completion_tokens
    return {"prompt_tokens": handle.prompt_len, "total_tokens": handle.prompt_len + done,
            "completion_tokens": done, "prompt_tokens_details": None}


def _full_body(engine: SimEngine, handle, chat: bool, ident: str, created: int) -> dict:
    text = tokens.filler_text(handle.stream_seed, 0, handle.output_len)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None,
                                          "tool_calls": []},
                  "logprobs": None, "finish_reason": handle.finish_reason, "stop_reason": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": handle.finish_reason,
                  "stop_reason": None, "prompt_logprobs": None}
        obj = "text_completion"
    return {"id": ident, "object": obj, "created": created, "model": engine.config.model_name,
            "choices": [choice], "usage": _usage(handle)}


async def _stream(response, engine, handle, woke, params, chat, ident, created) -> None:
    obj = "chat.completion.chunk" if chat else "text_completion"
    model = engine.config.model_name
    per_chunk = engine.config.tokens_per_chunk

    head = json.dumps({"id": ident, "object": obj, "created": created, "model": model},
                      separators=(",", ":"))[:-1].encode() + b',"choices":[{"index":0,'
    plain_tail = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

    def token_chunk(text: str, reason: str | None, upto: int) -> bytes:
        if reason is None and not chat and not params.continuous_usage:   # the hot path, pre-encoded
            return b"data: " + head + b'"text":' + json.dumps(text).encode() + plain_tail
        if chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}
        return chunk(choice, upto)

    def chunk(choice: dict, usage_upto: int | None) -> bytes:
        payload = {"id": ident, "object": obj, "created": created, "model": model, "choices": [choice]}
        if params.continuous_usage and usage_upto is not None:
            payload["usage"] = _usage(handle, usage_upto)
        return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

    if chat:
        await response.write(chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                    "finish_reason": None}, 0))
    sent = 0
    reason_sent = False
    while True:
        finished = handle.finished
        available = handle.output_len
        while available > sent:
            # the first token goes out at once, then up to `tokens_per_chunk` tokens per chunk
            if sent > 0 and available - sent < per_chunk and not finished:
                break
            take = 1 if sent == 0 else min(per_chunk, available - sent)
            text = tokens.filler_text(handle.stream_seed, sent, take)
            sent += take
            reason = handle.finish_reason if finished and sent == available else None
            reason_sent = reason is not None
            await response.write(token_chunk(text, reason, sent))
        if finished:
            if not reason_sent:
                empty = {"index": 0, "delta": {}} if chat else {"index": 0, "text": "", "stop_reason": None}
                await response.write(chunk({**empty, "logprobs": None, "finish_reason": handle.finish_reason}, sent))
            break
        woke.clear()
        if handle.output_len == sent or (handle.output_len - sent < per_chunk and not handle.finished):
            await woke.wait()
    if params.include_usage:
        payload = {"id": ident, "object": obj, "created": created, "model": model, "choices": [],
                   "usage": _usage(handle)}
        await response.write(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()


# --- running the server ------------------------------------------------------------------------------
async def serve(engine: SimEngine, host: str, port: int, *, on_listening=None, stop: asyncio.Event | None = None) -> int:
    """Serve until the engine exits (return its exit code) or `stop` is set (return 0).

    An engine that does not listen while starting (vLLM) opens its port only once ready, so a startup
    hang never listens; one that does (SGLang) listens at once and answers /health 503 meanwhile."""
    loop_task = asyncio.create_task(engine.run_realtime())
    stop = stop or asyncio.Event()
    runner = None
    try:
        if not engine.behaviour.listens_while_starting:
            while engine.state == STARTING and not stop.is_set():
                await _wait_any(stop, loop_task, 0.05)
        if engine.state in (STARTING, READY) and not stop.is_set():
            runner = web.AppRunner(build_app(engine), handler_cancellation=True, access_log=None,
                                   shutdown_timeout=SHUTDOWN_DRAIN_S)
            await runner.setup()
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound = site._server.sockets[0].getsockname()[1] if site._server and site._server.sockets else port
            engine.log.listening(host, bound)
            if engine.pd is not None:
                engine.pd.host, engine.pd.port = host, bound
            if on_listening is not None:
                on_listening(bound)
        announced = False
        while not stop.is_set() and not loop_task.done():
            if engine.behaviour.logs_ready_banner and engine.state == READY and not announced:
                announced = True
                engine.log.fired_up()
            await _wait_any(stop, loop_task, 0.5)
        if loop_task.done():
            loop_task.result()
            return engine.exit_code if engine.exit_code is not None else 0
        if engine.behaviour.logs_shutdown and engine.state != EXITED:
            engine.log.shutdown()
        return 0
    finally:
        # Stop listening, then drain: the engine keeps stepping while in-flight requests finish (up to
        # SHUTDOWN_DRAIN_S), the way a server's graceful shutdown does; only then does the engine stop.
        if runner is not None:
            await runner.cleanup()
        if not loop_task.done():
            loop_task.cancel()
            try:
                await loop_task
            except asyncio.CancelledError:
                pass


async def _wait_any(stop: asyncio.Event, task: asyncio.Task, timeout: float) -> None:
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({waiter, task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
