"""The router leg of a prefill/decode pair: `servewatch proxy --prefill URL... --decode URL...`.

It does what vLLM's toy disaggregation router does (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py
in vLLM's repository), with a bound on each leg where that router waits forever, and a record of both legs:

1. the request goes to the next prefill instance (round robin) as one whole answer: `max_tokens` 1
   (`max_completion_tokens` 1 where the request has it), not streamed, without `stream_options`, `min_tokens`
   or `min_completion_tokens`, with `kv_transfer_params` asking for a remote decode;
2. the request as the client sent it, with the `kv_transfer_params` of the prefill's answer, goes to the next
   decode instance (round robin);
3. decode's answer reaches the client as decode sends it.

Both legs' upstream side is servewatch.transport: the prefill's one bounded JSON answer through the contract's
`send` (Http1Transport), decode's stream read as it arrives from the HTTP/1.1 client (`Http1Client`, each
instance a keep-alive pool), and every way a leg ends without an answer (refused, timeout, cut, too large ...)
is the contract's one mapping (`outcome_of`) before it is the leg's words (`PairProxy.leg_failed`). aiohttp is
the client-facing server only.

A leg that fails fails the request, and says which leg: the proxy's own JSON error (502; 504 past a leg's bound)
naming the leg and the instance (host:port) while nothing was sent; a 4xx answer of either leg reaches the client
as the engine gave it (the request is at fault, and the engine's words say how). The client's status line goes
out only with decode's first body bytes, so a 200 never goes out with an empty body; a decode stream that breaks
after that ends with an error event and a cut connection, never with a clean end.

The record is the single path's (servewatch.proxy.exchange; `Proxy.finished` makes it, counts it and hands it
on), its times counted from the prefill leg's send, what the client waits; its `proxy` part's inter-token gaps
are decode's, and its `pd` part holds the legs (see PairExchange.finish). Nothing of a request's text, path or
id enters it.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from servewatch.load import records as R
from servewatch.proxy.config import ProxyConfig
from servewatch.proxy.exchange import API_PATHS, ERROR_BODY_BYTES, JSON_BODY_BYTES, Exchange, tenant_id
from servewatch.proxy.server import Proxy, ProxyCounters
from servewatch.transport.contract import (CONNECT, CONNECT_TIMEOUT_WORDS, DNS, PROTOCOL, REFUSED, TIMEOUT,
                                           TLS, TOO_LARGE, Failed, Http1Transport, HttpRequest, Transport,
                                           outcome_of)
from servewatch.transport.http1 import Endpoint, Http1Client, encoded_headers

PREFILL, DECODE = "prefill", "decode"
# what the prefill is asked to do with its KV (the toy router's words): keep it for a remote decode
REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                 "remote_block_ids": None, "remote_host": None, "remote_port": None}
# what decode does not take from a prefill's own request, or the prefill cannot do (the toy router drops them)
NOT_FOR_PREFILL = ("stream_options", "min_tokens", "min_completion_tokens")
STOP_WAIT_S = 0.1        # what a stop waits for a request in flight before it is cancelled (see PairProxy.start)
RELAY_HIGH_BYTES = 2**16  # decode's bytes waiting for a slow client past which its socket is not read (_Relay)


@dataclass(frozen=True, slots=True)
class Instance:
    role: str            # "prefill" | "decode"
    index: int           # its place among its role's --prefill / --decode URLs, from 0
    base: str            # the URL requests are sent under (scheme, host, port, base path)
    where: str           # host:port: what records and errors name (never a path)

    @classmethod
    def parse(cls, role: str, index: int, url: str) -> "Instance":
        """ValueError (a BadUrl) when `url` is not a server's URL."""
        end = Endpoint.parse(url)
        if end.scheme != "http":
            raise ValueError("a plain http:// URL is expected")
        host = f"[{end.host}]" if ":" in end.host else end.host
        return cls(role, index, f"http://{host}:{end.port}{end.base_path}", f"{host}:{end.port}")

    @property
    def words(self) -> str:
        return f"{self.role} {self.index} ({self.where})"


class PairExchange(Exchange):
    """One request through a pair: the single path's Exchange (decode's answer is its response) and the legs."""

    __slots__ = ("prefill", "decode", "prefill_sent", "prefill_end", "prefill_status", "kv_params",
                 "decode_sent", "decode_end", "failed_leg")

    def __init__(self, ident: int, arrival: float, api: str, raw: bytes, keep_text: bool):
        super().__init__(ident, arrival, api, b"POST", True, None, 0, len(raw), keep_text)
        self.body_size = len(raw)
        self.body_copy = [raw]
        self.pending = None
        self.request_complete()            # model, stream, max_tokens, ignore_eos (and the prompt with keep_text)
        self.prefill: Instance | None = None
        self.decode: Instance | None = None
        self.prefill_sent: float | None = None
        self.prefill_end: float | None = None
        self.prefill_status: int | None = None
        self.kv_params: bool | None = None       # the prefill's answer carried kv_transfer_params for decode
        self.decode_sent: float | None = None
        self.decode_end: float | None = None
        self.failed_leg: str | None = None

    def fail(self, leg: str, error: str, detail: str) -> None:
        if self.error is None:
            self.error, self.error_detail, self.failed_leg = error, detail, leg

    def finish(self, now: float, keep_itl: bool = False) -> R.RequestRecord:
        """The single path's record, with `pd`: each leg's instance (`prefill`, `decode`: host:port;
        `prefill_index`, `decode_index`), `prefill_s` (the prefill leg, send to its answer's end),
        `prefill_status`, `kv_params` (its answer carried kv_transfer_params), `decode_ttft_s` (decode's send
        to its first token), `kv_wait_s` (decode's first token minus the prefill's end), `decode_s` (decode's
        send to its answer's end) and `failed_leg` (prefill, decode, or null). Whether decode used transferred KV
        is not per request: vLLM 0.32's decode answer does not say it (no `kv_transfer_params` — the NIXL
        connector's request_finished returns none on decode — and `usage.prompt_tokens_details.cached_tokens` is
        the prefill's own prefix-cache hits, vllm/v1/engine/output_processor.py remote_prefill_cached_tokens);
        the pair's /metrics say it (prompt_tokens_by_source_total{source="external_kv_transfer"})."""
        if self.decode_end is None and self.decode_sent is not None:
            self.decode_end = now
        rec = Exchange.finish(self, now, keep_itl)
        first = None if rec.ttft_s is None or self.sent is None else self.sent + rec.ttft_s
        rec.proxy["pd"] = {
            "prefill": None if self.prefill is None else self.prefill.where,
            "prefill_index": None if self.prefill is None else self.prefill.index,
            "decode": None if self.decode is None else self.decode.where,
            "decode_index": None if self.decode is None else self.decode.index,
            "prefill_s": _span(self.prefill_sent, self.prefill_end),
            "prefill_status": self.prefill_status,
            "kv_params": self.kv_params,
            "decode_ttft_s": _span(self.decode_sent, first),
            "kv_wait_s": _span(self.prefill_end, first),
            "decode_s": _span(self.decode_sent, self.decode_end),
            "failed_leg": self.failed_leg,
        }
        return rec


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 7)


def _error(status: int, message: str, kind: str, retry_after: int | None = None) -> web.Response:
    """The proxy's own answer, in the single path's shape (servewatch.proxy.server.error_response)."""
    body = json.dumps({"error": {"message": message, "type": kind, "code": status}}, separators=(",", ":"))
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.Response(status=status, text=body, content_type="application/json", headers=headers)


class _LegFailed(Exception):
    """A leg ended without an answer to relay: the record's error class, its words and the client's status."""

    def __init__(self, error: str, detail: str, status: int):
        super().__init__(detail)
        self.error, self.detail, self.status = error, detail, status


class _Refused(Exception):
    """A leg answered with an error of its own (status and up to ERROR_BODY_BYTES of its body)."""

    def __init__(self, status: int, headers, body: bytes):
        super().__init__(status)
        self.status, self.headers, self.body = status, headers, body


class PairProxy(Proxy):
    """The pair's request path: aiohttp's server towards the client, servewatch.transport towards the legs. What
    happens at a request's end (its record, the counters, the recent TTFTs, on_record) and the live snapshot are
    the single proxy's (Proxy.finished, Proxy.snapshot), so telemetry, --records and the requests source read a
    pair as they read one upstream.
    `transport`: the contract's Transport for the prefill leg and the other paths (default an Http1Transport
    made at start; a MockTransport in a test)."""

    def __init__(self, config: ProxyConfig, *, on_record: Callable[[Exchange, R.RequestRecord], None] | None = None,
                 now: Callable[[], float] = time.time, transport: Transport | None = None):
        if not config.prefill or not config.decode:
            raise ValueError("a pair needs at least one prefill and one decode URL")
        self.config = config
        self.instances = {PREFILL: [Instance.parse(PREFILL, i, u) for i, u in enumerate(config.prefill)],
                          DECODE: [Instance.parse(DECODE, i, u) for i, u in enumerate(config.decode)]}
        self._turn = {PREFILL: 0, DECODE: 0}
        self.now = now
        self.on_record = on_record
        self.counters = ProxyCounters()
        self.clients: set = set()
        self.inflight: set[Exchange] = set()
        self.idle: list = []
        self._ids = 0
        self.recent = deque(maxlen=256)
        self.last_end: float | None = None
        self._server = None
        self._sweeper = None
        self._later: list = []
        self._later_handle = None
        self._plain = False
        self._hub = None                                      # (no compiled pump: aiohttp moves decode's body)
        self.pumped: dict = {}
        self._runner: web.AppRunner | None = None
        self._transport = transport                           # the prefill leg and other paths (the contract)
        self._streams: dict[int, Http1Client] = {}            # decode instance's index -> its streaming client
        self._active = 0

    def pick(self, role: str) -> Instance:
        """The next instance of a side, in turn."""
        instances = self.instances[role]
        turn = self._turn[role]
        self._turn[role] = (turn + 1) % len(instances)
        return instances[turn]

    # -- lifecycle
    async def start(self, host: str, port: int) -> int:
        c = self.config
        if self._transport is None:
            self._transport = Http1Transport(max_idle=c.max_connections, connect_timeout_s=c.connect_timeout_s)
        self._streams = {inst.index: Http1Client(Endpoint.parse(inst.base), connect_timeout=c.connect_timeout_s,
                                                 max_idle=c.max_connections, max_body=c.max_response_bytes)
                         for inst in self.instances[DECODE]}
        app = web.Application(client_max_size=c.max_request_bytes)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # a stop ends the requests in flight at once (their records made), as the single path's close aborts its
        # clients: aiohttp waits this long for handlers to end, then cancels them (0 would mean no bound at all)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True,
                                     keepalive_timeout=c.keepalive_timeout_s, shutdown_timeout=STOP_WAIT_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024, reuse_address=True)
        await site.start()
        return self._runner.addresses[0][1]

    async def close(self) -> None:
        self.record_ended()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._transport is not None:
            await self._transport.close()
        for client in self._streams.values():
            await client.close()

    # -- a request
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        api = API_PATHS.get(request.path.encode()) if request.method == "POST" else None
        c = self.config
        if self._active >= c.max_connections:
            self.counters.refuse("over_connections")
            return _error(503, "the proxy is at its request limit", "overloaded", retry_after=c.retry_after_s)
        self._active += 1
        try:
            if api is None:
                self.counters.other_requests += 1
                return await self._other(request)
            return await self._pair(request, api)
        finally:
            self._active -= 1

    async def _pair(self, request: web.Request, api: str) -> web.StreamResponse:
        c = self.config
        arrival = self.now()
        if request.content_length is not None and request.content_length > c.max_request_bytes:
            self.counters.refuse("too_large")
            return _error(413, f"request body over {c.max_request_bytes} bytes", "invalid_request")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.counters.refuse("too_large")
            return _error(413, f"request body over {c.max_request_bytes} bytes", "invalid_request")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            self.counters.refuse("bad_request")
            return _error(400, "the request body is not a JSON object", "invalid_request")
        auth = request.headers.get("Authorization")
        headers = [("X-Request-Id", uuid.uuid4().hex)]                  # one id, both legs' logs
        if auth is not None:
            headers.append(("Authorization", auth))
        refused = self._unsendable(headers)
        if refused is not None:
            return refused
        ex = PairExchange(self.next_id(), arrival, api, raw, c.keep_text)
        tenant = request.headers.get(c.tenant_header)
        if tenant is None and auth is not None and auth[:7].lower() == "bearer ":
            tenant = auth[7:].strip()
        if tenant:
            ex.tenant = tenant_id(tenant.encode("utf-8", "surrogateescape"), c.tenant_key)
        self.inflight.add(ex)
        try:
            return await self._legs(request, ex, body, headers)
        except asyncio.CancelledError:
            ex.client_gone = True
            raise
        finally:
            ex.done = True
            self.finished(ex)

    def _unsendable(self, headers) -> web.Response | None:
        """A 400 when a header the legs are to get is not one the transport writes (the client's Authorization
        past printable ASCII), said without its value; else None."""
        try:
            encoded_headers(headers)
        except ValueError:
            self.counters.refuse("bad_request")
            return _error(400, "the Authorization header is not printable ASCII on one line", "invalid_request")
        return None

    async def _legs(self, request: web.Request, ex: PairExchange, body: dict, headers: list) -> web.StreamResponse:
        c = self.config
        path = request.path_qs
        # 1. prefill: one whole answer
        prefill = ex.prefill = self.pick(PREFILL)
        asked = dict(body)
        for key in NOT_FOR_PREFILL:
            asked.pop(key, None)
        asked.update(kv_transfer_params=dict(REMOTE_DECODE), stream=False, max_tokens=1)
        if "max_completion_tokens" in asked:
            asked["max_completion_tokens"] = 1
        ex.sent = ex.prefill_sent = self.now()
        ex.last = ex.sent
        try:
            answer = await self._prefill(prefill, path, json.dumps(asked).encode(), headers)
        except _LegFailed as failed:
            ex.prefill_end = self.now()
            return self._failed(ex, PREFILL, failed)
        except _Refused as refused:
            ex.prefill_end = self.now()
            ex.prefill_status = refused.status
            return self._refused(ex, prefill, refused)
        ex.prefill_end = self.now()
        ex.prefill_status = 200
        params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
        ex.kv_params = isinstance(params, dict) and bool(params)
        if ex.kv_params:
            body = dict(body, kv_transfer_params=params)
        # 2. decode: the request as sent, with the prefill's kv_transfer_params; its answer relayed
        decode = ex.decode = self.pick(DECODE)
        return await self._decode(request, ex, decode, path, json.dumps(body).encode(), headers)

    async def _prefill(self, inst: Instance, path: str, data: bytes, headers: list):
        """The prefill's answer as JSON; _Refused for an answer other than 200, _LegFailed for no answer (the
        contract's outcome, said by leg_failed)."""
        c = self.config
        got = await self._transport.send(HttpRequest("POST", inst.base + path, c.prefill_timeout_s, JSON_BODY_BYTES,
                                                     data, tuple(headers)))
        if isinstance(got, Failed):
            raise self.leg_failed(got, inst, c.prefill_timeout_s, "answer")
        if got.status != 200:
            if len(got.body) > ERROR_BODY_BYTES:             # an error's words are bounded tighter than an answer
                raise self.leg_failed(Failed(TOO_LARGE, "", got.elapsed_s, got.status), inst, c.prefill_timeout_s,
                                      "answer")
            raise _Refused(got.status, got.headers, got.body)
        try:
            return json.loads(got.body)
        except (ValueError, UnicodeDecodeError):
            raise _LegFailed(R.STREAM_CUT, f"prefill leg: {inst.words} answered HTTP 200 with a body that is "
                             "not JSON", 502) from None

    async def _decode(self, request: web.Request, ex: PairExchange, inst: Instance, path: str, data: bytes,
                      headers: list) -> web.StreamResponse:
        c = self.config
        client = self._streams[inst.index]
        ex.decode_sent = self.now()
        up = None
        relay = None
        out = None
        try:
            try:
                async with asyncio.timeout(c.decode_first_byte_timeout_s):
                    up = await client.request("POST", path, data, headers=encoded_headers(headers))
                    ex.first_byte = ex.last = self.now()
                    if up.status != 200:
                        raise _Refused(up.status, up.headers, await up.read_all(ERROR_BODY_BYTES))
                    relay = _Relay(up)
                    first = await relay.next()
            except (_Refused, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - the contract's outcome, said by leg_failed
                raise self._broke(exc, inst, c.decode_first_byte_timeout_s, "first byte") from None
            if not first:
                raise _LegFailed(R.STREAM_CUT, f"decode leg: {inst.words} answered HTTP 200 with an empty body", 502)
            ctype = up.headers.get("content-type", "")
            ex.on_head(200, {"content-type": ctype})
            out = web.StreamResponse(status=200, headers={"Content-Type": ctype} if ctype else None)
            length = up.headers.get("content-length")
            if length is not None and length.isdigit():
                out.content_length = int(length)
            await out.prepare(request)
            data = first
            while data:
                ex.last = self.now()
                await out.write(data)
                ex.on_body(data)
                try:
                    async with asyncio.timeout(c.read_idle_timeout_s):
                        data = await relay.next()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the contract's outcome, said by leg_failed
                    raise self._broke(exc, inst, c.read_idle_timeout_s, "next byte") from None
            ex.decode_end = self.now()
            await out.write_eof()
            return out
        except _Refused as refused:
            return self._refused(ex, inst, refused)
        except _LegFailed as failed:
            ex.decode_end = self.now()
            if out is None:
                return self._failed(ex, DECODE, failed)
            ex.fail(DECODE, failed.error, failed.detail)
            await self._cut(request, ex, out, failed)
            return out
        except ConnectionError:                   # the client went away while its answer was written
            ex.client_gone = True
            return out
        finally:
            if relay is not None:
                relay.close()
            if up is not None:
                up.release()                      # (pooled when read to its end; else closed: the engine sees a cancel)

    async def _cut(self, request: web.Request, ex: PairExchange, out: web.StreamResponse, failed: _LegFailed) -> None:
        """Decode broke after the client had its first bytes: an error event where the answer is a stream, then
        the connection closed without the body's end, so no client takes what it got for a whole answer."""
        if ex.state is not None:
            event = json.dumps({"error": {"message": failed.detail, "type": "decode_failed", "code": failed.status}},
                               separators=(",", ":"))
            try:
                await out.write(b"data: " + event.encode() + b"\n\n")
            except ConnectionError:
                pass
        transport = request.transport
        if transport is not None:
            transport.close()

    def _broke(self, exc: BaseException, inst: Instance, bound: float, what: str) -> _LegFailed:
        """An error that ended decode's streamed read, as the contract's outcome (`outcome_of`), said by
        leg_failed."""
        outcome, detail = outcome_of(exc, host=self._streams[inst.index].endpoint.host, timeout_s=bound)
        return self.leg_failed(Failed(outcome, detail), inst, bound, what)

    def leg_failed(self, failed: Failed, inst: Instance, bound: float, what: str) -> _LegFailed:
        """A leg's transport outcome as the request's error: its class, its words naming the leg and the
        instance, and the client's status (504 past the leg's bound `bound`, else 502). `what`: what did not
        come ("answer", "first byte", "next byte")."""
        leg, outcome = inst.role, failed.outcome
        if outcome == REFUSED:
            return _LegFailed(R.CONNECT, f"{leg} leg: {inst.words} refused the connection", 502)
        if outcome in (DNS, TLS, CONNECT):
            return _LegFailed(R.CONNECT, f"{leg} leg: {inst.words} could not be connected to ({failed.detail})", 502)
        if outcome == TIMEOUT and failed.detail == CONNECT_TIMEOUT_WORDS:
            return _LegFailed(R.CONNECT, f"{leg} leg: no connection to {inst.words} in "
                              f"{self.config.connect_timeout_s:g} s", 502)
        if outcome == TIMEOUT:
            return _LegFailed(R.TIMEOUT, f"{leg} leg: {inst.words} sent no {what} in {bound:g} s", 504)
        if outcome == TOO_LARGE:
            return _LegFailed(R.STREAM_CUT, f"{leg} leg: {inst.words} answered over the size bound", 502)
        if outcome == PROTOCOL:
            return _LegFailed(R.STREAM_CUT, f"{leg} leg: {inst.words}: {failed.detail}", 502)   # "malformed answer ..."
        when = "mid-answer" if what == "next byte" else "before answering"      # no_answer, cut
        return _LegFailed(R.STREAM_CUT, f"{leg} leg: {inst.words} closed the connection {when}", 502)

    def _failed(self, ex: PairExchange, leg: str, failed: _LegFailed) -> web.Response:
        """A leg ended without an answer and the client has nothing yet: the proxy's JSON error, naming the leg."""
        ex.fail(leg, failed.error, failed.detail)
        ex.status = failed.status
        self.counters.refuse("upstream_timeout" if failed.error == R.TIMEOUT else "upstream_unavailable")
        kind = "upstream_timeout" if failed.status == 504 else "upstream_unavailable"
        return _error(failed.status, failed.detail, kind)

    def _refused(self, ex: PairExchange, inst: Instance, refused: _Refused) -> web.Response:
        """A leg answered with an error: a 4xx as the engine gave it (the request is at fault), anything else as
        the proxy's 502 naming the leg, its instance and the engine's status and error type."""
        ex.status, ex.collected = refused.status, [refused.body]
        words = ex._error_summary()
        error = R.error_for_status(refused.status) or R.HTTP_5XX
        ex.fail(inst.role, error, f"{inst.role} leg: {inst.words} answered {words}")
        ex.decode_end = self.now() if inst.role == DECODE else None
        if 400 <= refused.status < 500:
            ctype = refused.headers.get("content-type", "application/json")
            return web.Response(status=refused.status, body=refused.body, headers={"Content-Type": ctype})
        ex.status = 502
        return _error(502, ex.error_detail, "upstream_error")

    async def _other(self, request: web.Request) -> web.StreamResponse:
        """Any other path (/v1/models, /health, /metrics) goes to the next decode instance, its answer relayed
        whole; it is counted, not recorded."""
        c = self.config
        inst = self.pick(DECODE)
        try:
            data = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.counters.refuse("too_large")
            return _error(413, f"request body over {c.max_request_bytes} bytes", "invalid_request")
        auth = request.headers.get("Authorization")
        headers = (("Authorization", auth),) if auth is not None else ()
        refused = self._unsendable(headers)
        if refused is not None:
            return refused
        got = await self._transport.send(HttpRequest(
            request.method, inst.base + request.path_qs, c.first_byte_timeout_s, JSON_BODY_BYTES, data or None,
            headers, request.headers.get("Content-Type", "application/json")))
        if isinstance(got, Failed):
            failed = self.leg_failed(got, inst, c.first_byte_timeout_s, "answer")
            self.counters.refuse("upstream_timeout" if failed.error == R.TIMEOUT else "upstream_unavailable")
            return _error(failed.status, failed.detail, "upstream_unavailable")
        ctype = got.headers.get("content-type")
        return web.Response(status=got.status, body=got.body, headers={"Content-Type": ctype} if ctype else None)


class _Relay:
    """Decode's body as it arrives, pushed by the connection's protocol (`Response.stream_into`) and taken by one
    awaiting writer (`next`); while more than RELAY_HIGH_BYTES wait for a slow client, the socket is not read,
    so the engine's stream waits in its own buffers, not in the proxy's memory."""

    __slots__ = ("response", "parts", "size", "wake", "paused", "reading")

    def __init__(self, response):
        self.response = response
        self.parts: list[bytes] = []
        self.size = 0
        self.wake: asyncio.Future | None = None
        self.paused = False
        self.reading = asyncio.ensure_future(response.stream_into(self.push))
        self.reading.add_done_callback(self._woken)

    def push(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)
        if self.size > RELAY_HIGH_BYTES and not self.paused:
            self.paused = True
            self.response.pause_reading()
        self._woken()

    def _woken(self, _=None) -> None:
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def next(self) -> bytes:
        """The bytes that came since the last call; b"" at the body's end; the read's error (StreamCut,
        BodyTooLarge) once the bytes before it are taken."""
        while not self.parts:
            if self.reading.done():
                self.reading.result()
                return b""
            self.wake = asyncio.get_running_loop().create_future()
            await self.wake
        parts, self.parts, self.size = self.parts, [], 0
        if self.paused:
            self.paused = False
            self.response.resume_reading()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        if self.paused:                           # (a connection read to its end goes back to the pool reading)
            self.paused = False
            self.response.resume_reading()
        if not self.reading.done():
            self.reading.cancel()
        elif not self.reading.cancelled():
            self.reading.exception()              # (said, or not needed: never "an exception never retrieved")
