"""The one transport contract (in the spirit of httpx's transports): a `HttpRequest` bounded in bytes and in time goes
to a `Transport`'s `send`, which returns the answer (`Reply`, any HTTP status) or ONE typed outcome (`Failed`),
never an exception but cancellation.

    transport = Http1Transport()                     # or MockTransport(handler) in a test
    got = await transport.send(HttpRequest("GET", "http://127.0.0.1:8000/metrics", timeout_s=2.0, max_bytes=2**20))
    if isinstance(got, Failed):
        got.outcome, got.detail                      # "refused", "connection refused"
    await transport.close()

Outcomes (`OUTCOMES`), each decided in `outcome_of`, the one mapping from socket, DNS, TLS, HTTP and timer
errors:

    refused      the server's host answered, nothing listens on the port (ECONNREFUSED)
    dns          the host name could not be resolved (name resolution failed)
    tls          the TLS handshake failed (a certificate, a protocol mismatch)
    connect      no connection for another reason (unreachable network, reset while connecting)
    timeout      no whole answer within the request's deadline (connecting included)
    no_answer    the connection closed before any byte of the answer
    cut          the connection closed or was reset part-way through the answer
    too_large    the answer is over the request's byte bound (declared or read)
    too_many_series  the answer's body failed the request's `body_check` (a scrape's series bound), looked at as
                 it arrived: the read stopped there
    protocol     an answer that is not HTTP/1.x (status line, headers, chunking)
    http_status  an answer other than 2xx, for a caller that wants one (`Reply.failure()`)

`Failed.kind` is the outcome in the scrape vocabulary stored in bundles (`servewatch.kinds`: connect, dns,
timeout, protocol, too_large, too_many_series, http_<status>). `Http1Transport` runs on the project's own HTTP/1.1 client
(`transport.http1`, which scrapes /metrics for about half aiohttp's client CPU: benchmarks/scrape_client.py);
`send_blocking` is the same for a caller without an event loop; `MockTransport` answers in-process for tests.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from servewatch import kinds
from servewatch.errors import BodyTooLarge, TooManySeries
from servewatch.transport.deadline import within
from servewatch.transport.http1 import (BODY_CHECK_FROM, ConnectFailed, Endpoint, Http1Client, NoAnswer, StreamBroken,
                                        StreamCut, connect_words, encoded_headers, without_traceback)
from servewatch.transport.urls import parse as parse_url
from servewatch.transport.urls import unresolved_words

REFUSED = "refused"
DNS = "dns"
TLS = "tls"
CONNECT = "connect"
TIMEOUT = "timeout"
NO_ANSWER = "no_answer"
CUT = "cut"
TOO_LARGE = "too_large"
TOO_MANY_SERIES = kinds.TOO_MANY_SERIES
PROTOCOL = "protocol"
HTTP_STATUS = "http_status"
MAX_ROUTES = 4096          # parsed URLs an Http1Transport keeps (serve: a few per target)
CONNECT_TIMEOUT_WORDS = "could not connect in time"   # a timeout's detail when the connection's own bound ran out
OUTCOMES = (REFUSED, DNS, TLS, CONNECT, TIMEOUT, NO_ANSWER, CUT, TOO_LARGE, TOO_MANY_SERIES, PROTOCOL, HTTP_STATUS)

# Each outcome in the scrape vocabulary that bundles store (`servewatch.kinds`).
SCRAPE_KIND = {REFUSED: kinds.CONNECT, DNS: kinds.DNS, TLS: kinds.CONNECT, CONNECT: kinds.CONNECT,
               TIMEOUT: kinds.TIMEOUT, NO_ANSWER: kinds.CONNECT, CUT: kinds.PROTOCOL, TOO_LARGE: kinds.TOO_LARGE,
               TOO_MANY_SERIES: kinds.TOO_MANY_SERIES,
               PROTOCOL: kinds.PROTOCOL, HTTP_STATUS: kinds.HTTP_STATUS}


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    url: str                                  # absolute http(s) URL (checked by `transport.urls`)
    timeout_s: float                          # the whole exchange: connecting, sending, the answer read to its end
    max_bytes: int                            # the answer's body bound
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()  # besides Host, User-Agent, Accept, Content-Type, Content-Length
    content_type: str = "application/json"
    fresh: bool = False                       # a connection of its own, closed after (else a pooled keep-alive one)
    # A bound on what the body holds, looked at while it arrives: called with the body's first bytes once
    # BODY_CHECK_FROM bytes have come and again each time they double; what it raises (TooManySeries: a scrape's
    # series bound, `exposition.parser.check_series`) ends the read there. A body under BODY_CHECK_FROM is not
    # looked at: its reader checks it whole.
    body_check: Callable[[bytes], None] | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer read to its end within the bounds, whatever its status."""

    status: int
    body: bytes
    elapsed_s: float
    headers: Mapping[str, str] = field(default_factory=dict)   # names in lower case

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def failure(self) -> Failed | None:
        """None for a 2xx answer, else the `http_status` outcome."""
        return None if self.ok else Failed(HTTP_STATUS, f"HTTP {self.status}", self.elapsed_s, self.status)


@dataclass(frozen=True, slots=True)
class Failed:
    """No usable answer: one outcome (`OUTCOMES`) and one line for a terminal (never stored)."""

    outcome: str
    detail: str
    elapsed_s: float = 0.0
    status: int | None = None                 # when an answer's head had come (too_large after it, http_status)

    @property
    def kind(self) -> str:
        """The outcome in the stored scrape vocabulary: "connect", "dns", "timeout", "http_503", ..."""
        if self.outcome == HTTP_STATUS:
            return f"http_{self.status}"
        return SCRAPE_KIND[self.outcome]


Outcome = Reply | Failed


class Transport(Protocol):
    async def send(self, request: HttpRequest) -> Outcome: ...

    async def close(self) -> None: ...


def too_large_detail(max_bytes: int, declared: int | None = None) -> str:
    if declared is not None:
        return f"body of {declared:,} bytes exceeds the {max_bytes:,}-byte bound"
    return f"body exceeds the {max_bytes:,}-byte bound"


def outcome_of(exc: BaseException, *, host: str | None = None, timeout_s: float | None = None,
               max_bytes: int | None = None) -> tuple[str, str]:
    """(outcome, one line) of an error that ended a request: the one mapping, for every transport."""
    if isinstance(exc, ConnectFailed):
        cause = exc.cause
        if isinstance(cause, TimeoutError):
            return TIMEOUT, CONNECT_TIMEOUT_WORDS
        if isinstance(cause, (ssl.SSLError, ssl.CertificateError, socket.gaierror, ConnectionRefusedError)):
            return outcome_of(cause, host=host)
        return CONNECT, str(exc) or "could not connect"
    if isinstance(exc, TimeoutError):
        return TIMEOUT, f"no answer within {timeout_s:g} s" if timeout_s is not None else "timed out"
    if isinstance(exc, BodyTooLarge):
        return TOO_LARGE, too_large_detail(max_bytes) if max_bytes is not None else str(exc)
    if isinstance(exc, TooManySeries):
        return TOO_MANY_SERIES, str(exc)
    if isinstance(exc, NoAnswer):
        return NO_ANSWER, "the server closed the connection without answering"
    if isinstance(exc, StreamBroken):
        return CUT, f"the answer was cut off ({exc})"
    if isinstance(exc, StreamCut):
        return PROTOCOL, f"malformed answer ({exc})"
    if isinstance(exc, (ssl.SSLError, ssl.CertificateError)):
        return TLS, f"TLS failed ({getattr(exc, 'reason', None) or type(exc).__name__})"
    if isinstance(exc, socket.gaierror):
        return DNS, unresolved_words(host)
    if isinstance(exc, ConnectionRefusedError):
        return REFUSED, "connection refused"
    if isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return CUT, "connection reset"
    if isinstance(exc, OSError):
        return CONNECT, connect_words(exc, host)
    return PROTOCOL, f"malformed answer ({type(exc).__name__})"


def _failed(exc: BaseException, request: HttpRequest, started: float, host: str | None) -> Failed:
    without_traceback(exc)       # a failure is its outcome: its frames (the connection, the body) are let go now
    outcome, detail = outcome_of(exc, host=host, timeout_s=request.timeout_s, max_bytes=request.max_bytes)
    return Failed(outcome, detail, time.monotonic() - started)


class Http1Transport:
    """The contract over `transport.http1.Http1Client`: one client (a keep-alive pool of `max_idle`) per origin.
    A `fresh` request (or every one, with `keep_alive=False`) has a connection of its own, closed after: the
    probe's, as an API server closes idle keep-alive connections (uvicorn after 5 s) and a request sent down one
    would fail for no fault of the server. `connect_timeout_s`: a connection's own bound, within each deadline."""

    def __init__(self, *, keep_alive: bool = True, max_idle: int = 2, connect_timeout_s: float = 10.0,
                 ssl_context: ssl.SSLContext | None = None):
        self.keep_alive = keep_alive
        self.max_idle = max_idle
        self.connect_timeout_s = connect_timeout_s
        self.ssl_context = ssl_context
        self._clients: dict[tuple[str, str, int, bool], Http1Client] = {}
        self._routes: dict[tuple[str, bool], tuple[Http1Client, str, str]] = {}   # (url, fresh) -> client, target, host

    def _client(self, scheme: str, host: str, port: int, fresh: bool) -> Http1Client:
        key = (scheme, host, port, fresh)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = Http1Client(
                Endpoint(scheme, host, port, ""), connect_timeout=self.connect_timeout_s,
                max_idle=0 if fresh else self.max_idle, ssl_context=self.ssl_context)
        return client

    def _route(self, url: str, fresh: bool) -> tuple[Http1Client, str, str]:
        """(client, request target, host) of a URL, parsed once (a scrape asks the same URL every cadence:
        parsing it each time cost a quarter of a /health's client CPU)."""
        route = self._routes.get((url, fresh))
        if route is None:
            server = parse_url(url)                     # BadUrl (status 2): the caller's URL, checked before
            parts = urlsplit(url)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            if len(self._routes) >= MAX_ROUTES:
                self._routes.clear()
            route = self._routes[url, fresh] = (self._client(server.scheme, server.host, server.port, fresh), target,
                                                server.host)
        return route

    async def send(self, request: HttpRequest) -> Outcome:
        started = time.monotonic()
        client, target, host = self._route(request.url, request.fresh or not self.keep_alive)
        try:
            extra = encoded_headers(request.headers)
        except ValueError as exc:
            raise ValueError(f"{request.url}: {exc}") from None
        try:
            return await within(self._exchange(client, request, target, extra, started), request.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing server is an outcome, not a crash
            return _failed(exc, request, started, host)

    async def _exchange(self, client: Http1Client, request: HttpRequest, target: str, extra: bytes,
                        started: float) -> Outcome:
        response = await client.request(request.method, target, request.body, request.content_type, headers=extra)
        try:
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > request.max_bytes:
                return Failed(TOO_LARGE, too_large_detail(request.max_bytes, int(declared)),
                              time.monotonic() - started, response.status)
            try:
                body = await response.read_all(request.max_bytes, request.body_check)
            except (BodyTooLarge, TooManySeries) as exc:
                outcome, detail = outcome_of(without_traceback(exc), max_bytes=request.max_bytes)
                return Failed(outcome, detail, time.monotonic() - started, response.status)
        finally:
            response.release()
        return Reply(response.status, body, time.monotonic() - started, response.headers)

    async def __aenter__(self) -> Http1Transport:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close_idle(self, url: str) -> None:
        """Close the idle keep-alive connections to `url`'s origin (the next request opens a new one)."""
        server = parse_url(url)
        for (scheme, host, port, _), client in list(self._clients.items()):
            if (scheme, host, port) == (server.scheme, server.host, server.port):
                await client.close()

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        self._routes.clear()
        for client in clients.values():
            await client.close()


def send_blocking(request: HttpRequest, *, ssl_context: ssl.SSLContext | None = None) -> Outcome:
    """`send` for a caller without an event loop (a delivery thread, the drill's controller): one fresh
    connection, on a loop of its own. Not from a thread whose event loop runs (RuntimeError)."""
    async def once() -> Outcome:
        transport = Http1Transport(keep_alive=False, connect_timeout_s=request.timeout_s, ssl_context=ssl_context)
        try:
            return await transport.send(request)
        finally:
            await transport.close()
    return asyncio.run(once())


Handler = Callable[[HttpRequest], object]


class MockTransport:
    """In-process answers for tests, through the same contract: `handler(request)` (plain or async) returns a
    `Reply`/`Failed`, a status int, a body (str/bytes, status 200) or a (status, body) pair — or raises the
    error a real connection would (ConnectionRefusedError, socket.gaierror, ssl.SSLError, TimeoutError,
    transport.http1's StreamCut ...), which becomes its outcome through `outcome_of`, as from a server. The
    byte bound and the deadline hold as over a socket. `requests` keeps every request sent."""

    def __init__(self, handler: Handler, *, host: str | None = None):
        self.handler = handler
        self.host = host
        self.requests: list[HttpRequest] = []
        self.closed = False

    async def send(self, request: HttpRequest) -> Outcome:
        self.requests.append(request)
        started = time.monotonic()
        host = self.host or urlsplit(request.url).hostname
        try:
            value = await within(self._answer(request), request.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - as from a server
            return _failed(exc, request, started, host)
        if isinstance(value, Failed):
            return value
        status, body, headers = answer_parts(value)
        if len(body) > request.max_bytes:
            return Failed(TOO_LARGE, too_large_detail(request.max_bytes), time.monotonic() - started, status)
        if request.body_check is not None and len(body) >= BODY_CHECK_FROM:
            try:
                request.body_check(body)
            except TooManySeries as exc:
                return Failed(TOO_MANY_SERIES, str(exc), time.monotonic() - started, status)
        return Reply(status, body, time.monotonic() - started, headers)

    async def _answer(self, request: HttpRequest) -> object:
        value = self.handler(request)
        if inspect.isawaitable(value):
            value = await value
        return value

    async def close(self) -> None:
        self.closed = True


def answer_parts(value: object) -> tuple[int, bytes, Mapping[str, str]]:
    """(status, body, headers) of an in-process answer: a `Reply`, a status, a body (200) or (status, body)."""
    if isinstance(value, Reply):
        return value.status, value.body, value.headers
    if isinstance(value, tuple):
        status, body = value
    elif isinstance(value, int):
        status, body = value, b""
    else:
        status, body = 200, value
    if isinstance(body, str):
        body = body.encode()
    return int(status), bytes(body or b""), {}

