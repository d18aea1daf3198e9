"""The one HTTP/1.1 client of the project (servewatch.transport), shared by the load generator
(`servewatch.load`), the proxy's upstream side (`Conn`, `servewatch.proxy.server`), the proxy pair's legs
(`servewatch.proxy.pair`) and the recorder's
scrapes and health checks (`servewatch.sources.http`). A caller on another client says why at its import.

A minimal HTTP/1.1 client on asyncio protocols, built for many concurrent streaming POSTs on one
light event loop: a keep-alive pool, incremental chunked decoding inside `data_received`, bounded
sizes. A streamed body is pushed to the caller's callback as it arrives, with no task wake-up per
read (measured: this and skipping json per chunk halve the client CPU per token against aiohttp).

It does no timing of its own: deadlines are enforced by the caller cancelling the task (see
`servewatch.load.runner.Watchdog`), so the hot path has no timer per read.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl as ssl_module
import time
from collections.abc import Callable
from dataclasses import dataclass

from servewatch.errors import BodyTooLarge, TooManySeries
from servewatch.transport.urls import parse as parse_url
from servewatch.transport.urls import unresolved_words

MAX_HEADER_BYTES = 64 * 1024
MAX_CHUNK_SIZE_LINE = 1024


class ConnectFailed(Exception):
    """No TCP (or TLS) connection could be made; `cause` is the socket's, TLS's or the timer's error (the
    contract in `transport.contract` words each kind once)."""

    def __init__(self, words: str, cause: BaseException | None = None):
        super().__init__(words)
        self.cause = cause


class StreamCut(Exception):
    """The connection ended or broke before the response was complete, or was malformed."""


class NoAnswer(StreamCut):
    """The connection closed before any byte of the response."""


class StreamBroken(StreamCut):
    """The connection closed after part of the response (in its headers or mid-body): an answer cut, not a
    malformed one."""


BODY_CHECK_FROM = 256 * 1024   # bytes: a body this large is looked at by its reader's check while it arrives
_BROKEN = (StreamCut, BodyTooLarge, TooManySeries)   # what ends one response (the bounds' classes, from errors)


def connect_words(exc: OSError, host: str | None = None) -> str:
    """Why a connection could not be made, as a reader says it: "connection refused", "connection
    reset", "the host name HOST could not be resolved", else the system's own words."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, socket.gaierror):
        return unresolved_words(host)
    return exc.strerror or str(exc) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str          # e.g. "" or "/proxy", no trailing slash

    @classmethod
    def parse(cls, url: str) -> "Endpoint":
        """BadUrl (a ValueError; one line, status 2) when `url` is not a server's URL (transport.urls)."""
        parsed = parse_url(url)
        return cls(parsed.scheme, parsed.host, parsed.port, parsed.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


STATE_IDLE, STATE_HEAD, STATE_BODY, STATE_CLOSED = range(4)


class Conn(asyncio.Protocol):
    """One connection: parses the status line and headers, then decodes the body as it arrives."""

    def __init__(self, max_body: int):
        self.transport: asyncio.Transport | None = None
        self.state = STATE_IDLE
        self.reused = False
        self.max_body = max_body
        self._loop = asyncio.get_running_loop()
        self._head_waiter: asyncio.Future | None = None
        self._body_waiter: asyncio.Future | None = None
        self._buf = b""
        self.sink: Callable[[bytes], None] | None = None
        self._pending: list[bytes] = []
        self._received = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self._chunked = False
        self._until_close = False
        self._left = 0
        self._need_crlf = False
        self._trailer = False
        self.body_done = False
        self._error: Exception | None = None

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state == STATE_BODY:
            self._body(data)
        elif state == STATE_HEAD:
            self._head(data)
        else:                          # bytes nobody asked for: this connection is not reusable
            self._abort()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc) -> None:
        state, self.state = self.state, STATE_CLOSED
        if state == STATE_HEAD:
            self._fail(_EmptyHead() if not self._buf else StreamBroken("connection closed in headers"))
        elif state == STATE_BODY and not self.body_done:
            if self._until_close:
                self._complete()
            else:
                self._fail(StreamBroken("connection closed mid-body"))

    # -- request side
    def start(self, raw: bytes) -> asyncio.Future:
        waiter = self.expect()
        self.transport.write(raw)
        return waiter

    def expect(self) -> asyncio.Future:
        """Await a response from now on, without writing anything (another thread writes it)."""
        self.state = STATE_HEAD
        self._buf = b""
        self._pending = []
        self._received = 0
        self.sink = None
        self.body_done = False
        self._error = None
        self._head_waiter = self._loop.create_future()
        self._body_waiter = None
        return self._head_waiter

    def write_rest(self, rest: bytes) -> None:
        """The part of a request another thread could not write at once (the transport has nothing
        queued before it, so the order on the wire is kept)."""
        if not self.closed:
            self.transport.write(rest)

    def unsent(self) -> None:
        """Another thread could not write the request at all: safe to retry on a fresh connection."""
        if self.state == STATE_HEAD:
            self._fail(_EmptyHead())

    def body_future(self) -> asyncio.Future:
        if self._body_waiter is None:
            self._body_waiter = self._loop.create_future()
            if self.body_done:
                self._body_waiter.set_result(None)
            elif self._error is not None:
                self._body_waiter.set_exception(self._error)
        return self._body_waiter

    def take_pending(self) -> list[bytes]:
        pending, self._pending = self._pending, []
        return pending

    @property
    def closed(self) -> bool:
        return self.state == STATE_CLOSED or self.transport is None or self.transport.is_closing()

    # -- internals
    def _abort(self) -> None:
        self.state = STATE_CLOSED
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: Exception) -> None:
        self._error = without_traceback(exc)
        for waiter in (self._head_waiter, self._body_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
                waiter.exception()         # mark retrieved: a cancelled caller may never await it
        if self.state != STATE_CLOSED:
            self._abort()

    def _complete(self) -> None:
        self.body_done = True
        if self.state != STATE_CLOSED:
            self.state = STATE_IDLE
        if self._body_waiter is not None and not self._body_waiter.done():
            self._body_waiter.set_result(None)

    def _head(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        end = buf.find(b"\r\n\r\n", 0, MAX_HEADER_BYTES + 4)
        if end < 0:
            self._buf = buf
            if len(buf) > MAX_HEADER_BYTES:
                self._fail(StreamCut("response headers too large"))
            return
        self._buf = b""
        try:
            self.status, self.headers = _parse_head(buf[:end])
            self._setup_body()
        except _BROKEN as exc:
            self._fail(exc)
            return
        self.state = STATE_BODY
        waiter = self._head_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        rest = buf[end + 4:]
        if self.body_done:
            self._complete()
        elif rest:
            self._body(rest)

    def _setup_body(self) -> None:
        h = self.headers
        self.keep_alive = h.get("connection", "").lower() != "close"
        self._chunked = "chunked" in h.get("transfer-encoding", "").lower()
        self._until_close = False
        self._left = 0
        self._need_crlf = self._trailer = False
        if self._chunked:
            return
        length = h.get("content-length")
        if length is None:
            self._until_close = True
            self.keep_alive = False
            return
        try:
            self._left = int(length)
        except ValueError:
            raise StreamCut("bad content-length") from None
        if self._left < 0:
            raise StreamCut("bad content-length")
        if self._left > self.max_body:
            raise BodyTooLarge(f"content-length {self._left} over {self.max_body}")
        if self._left == 0:
            self.body_done = True

    def _body(self, data: bytes) -> None:
        try:
            out = self._decode(data)
        except _BROKEN as exc:
            self._fail(exc)
            return
        if out:
            self._received += len(out)
            if self._received > self.max_body:
                self._fail(BodyTooLarge(f"body over {self.max_body} bytes"))
                return
            sink = self.sink
            if sink is None:
                self._pending.append(out)
            else:
                try:
                    sink(out)
                except _BROKEN as exc:
                    self._fail(exc)
                    return
                except Exception as exc:  # noqa: BLE001 - a consumer failure ends this response only
                    self._fail(StreamCut(f"consumer: {type(exc).__name__}"))
                    return
        if self.body_done:
            self._complete()

    def _decode(self, data: bytes) -> bytes:
        if not self._chunked:
            if self._until_close:
                return data
            take = min(self._left, len(data))
            self._left -= take
            if len(data) > take:
                raise StreamCut("bytes after the end of the body")
            if self._left == 0:
                self.body_done = True
            return data
        if not self._buf and not self._left and not self._need_crlf and not self._trailer:
            whole = one_whole_chunk(data)      # the common case on a stream: exactly one whole chunk per read
            if whole is not None:
                return data[whole[0]:whole[1]]
        buf = self._buf + data if self._buf else data
        pos = 0
        size = len(buf)
        out: list[bytes] = []
        while True:
            if self._left:
                take = min(self._left, size - pos)
                if take == 0:
                    break
                out.append(buf[pos:pos + take])
                pos += take
                self._left -= take
                if self._left:
                    break
                self._need_crlf = True
            if self._need_crlf:
                if size - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise StreamCut("malformed chunk terminator")
                pos += 2
                self._need_crlf = False
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if size - pos > MAX_CHUNK_SIZE_LINE:
                    raise StreamCut("chunk size line too long")
                break
            line = buf[pos:eol]
            pos = eol + 2
            if self._trailer:
                if not line:
                    self.body_done = True
                    if pos != size:
                        raise StreamCut("bytes after the end of the body")
                    break
                continue
            try:
                chunk = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise StreamCut("malformed chunk size") from None
            if chunk < 0:
                raise StreamCut("malformed chunk size")
            if chunk == 0:
                self._trailer = True
            else:
                self._left = chunk
        self._buf = buf[pos:] if pos < size else b""
        if len(out) == 1:
            return out[0]
        return b"".join(out)


def without_traceback(exc: BaseException) -> BaseException:
    """`exc` (and the exceptions it was raised from or during) without its traceback. A failure this client keeps
    (a connection's error, a waiter's exception) or a caller maps to an outcome is known by its type: its traceback
    only holds the frames it passed through (the connection, the body read so far), and through the connection
    back to itself, a cycle that refcounting cannot free: each failed scrape's body then waited for the cyclic
    collector (serve's young collections are 700x rarer than the default: serve.heap)."""
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:     # a chain that loops back is walked once
        seen.add(id(at))
        at.__traceback__ = None
        at = at.__cause__ or at.__context__
    return exc


def one_whole_chunk(data: bytes) -> tuple[int, int] | None:
    """(start, end) of the payload when `data` is exactly one whole, non-empty HTTP/1.1 chunk ("SIZE\\r\\n"
    payload "\\r\\n") — how a streaming server's every write usually arrives; else None."""
    eol = data.find(b"\r\n", 0, 10)
    if eol <= 0:
        return None
    try:
        size = int(data[:eol], 16)
    except ValueError:
        return None
    end = eol + 2 + size
    if size > 0 and len(data) == end + 2 and data.endswith(b"\r\n"):
        return eol + 2, end
    return None


class Response:
    """Status and headers; then either `stream_into(callback)` or `read_all(limit)`; then `release()`."""

    __slots__ = ("status", "headers", "_conn", "_pool")

    def __init__(self, conn: Conn, pool: "Http1Client"):
        self.status = conn.status
        self.headers = conn.headers
        self._conn = conn
        self._pool = pool

    async def stream_into(self, on_body: Callable[[bytes], None]) -> None:
        """Push body bytes to `on_body` as they arrive (inside the protocol callback); return at the
        end of the body; raise StreamCut / BodyTooLarge if it breaks."""
        conn = self._conn
        for data in conn.take_pending():
            on_body(data)
        conn.sink = on_body
        await conn.body_future()

    async def read_all(self, limit: int, check: Callable[[bytes], None] | None = None) -> bytes:
        """The whole body, at most `limit` bytes (BodyTooLarge). `check(head)`: looked at once BODY_CHECK_FROM
        bytes have come and at each doubling; what it raises ends the read (a series bound: the body of 200,000
        series is refused after its first megabyte, never held whole)."""
        parts: list[bytes] = []
        size = 0
        look_at = BODY_CHECK_FROM if check is not None else limit + 1

        def collect(data: bytes) -> None:
            nonlocal size, look_at
            size += len(data)
            if size > limit:
                raise BodyTooLarge(f"body over {limit} bytes")
            parts.append(data)
            if size >= look_at:
                look_at = 2 * size
                check(b"".join(parts))

        await self.stream_into(collect)
        return b"".join(parts)

    def pause_reading(self) -> None:
        """Stop reading the body from the socket (a relay's backpressure: its reader is behind)."""
        conn = self._conn
        if conn is not None and conn.transport is not None:
            conn.transport.pause_reading()

    def resume_reading(self) -> None:
        conn = self._conn
        if conn is not None and conn.transport is not None:
            conn.transport.resume_reading()

    def release(self) -> None:
        """Give the connection back to the pool if the body was read to its end, else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.sink = None
        if conn.body_done and conn.keep_alive and conn.state == STATE_IDLE:
            self._pool._give_back(conn)
        else:
            conn._abort()


_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def checked_headers(headers) -> tuple[tuple[str, str], ...]:
    """Extra request headers as given, or ValueError saying which one is not a header: the name an HTTP token,
    the value printable ASCII on one line, and none of the headers the client writes itself."""
    out = []
    for name, value in headers:
        if not name or any(c not in _TOKEN for c in name):
            raise ValueError(f"header name {name!r} is not an HTTP token")
        if any(not (" " <= c <= "~") and c != "\t" for c in value):
            raise ValueError(f"header {name}: its value must be printable ASCII on one line")
        if name.lower() in ("host", "content-length", "transfer-encoding", "connection", "content-type"):
            raise ValueError(f"header {name} is the client's own")
        out.append((name, value.strip()))
    return tuple(out)


def encoded_headers(headers) -> bytes:
    """Header lines on the wire, each checked (`checked_headers`)."""
    if not headers:
        return b""
    return "".join(f"{name}: {value}\r\n" for name, value in checked_headers(headers)).encode("ascii")


class Http1Client:
    """One endpoint, a pool of idle keep-alive connections, no global state."""

    def __init__(self, endpoint: Endpoint, *, connect_timeout: float = 10.0, max_idle: int = 1024,
                 max_body: int = 64 * 2**20, ssl_context: ssl_module.SSLContext | None = None,
                 headers: tuple[tuple[str, str], ...] = ()):
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self.max_body = max_body
        self._idle: list[Conn] = []
        self._ssl = ssl_context if ssl_context is not None else (
            ssl_module.create_default_context() if endpoint.scheme == "https" else None)
        self._head = (f"Host: {endpoint.host_header}\r\nUser-Agent: servewatch-load\r\n"
                      f"Accept: */*\r\n").encode("ascii") + encoded_headers(headers)

    async def _connect(self) -> Conn:
        loop = asyncio.get_running_loop()
        max_body = self.max_body
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: Conn(max_body), self.endpoint.host, self.endpoint.port, ssl=self._ssl,
                    server_hostname=self.endpoint.host if self._ssl else None)
        except TimeoutError as exc:
            raise ConnectFailed("connect timeout", exc) from None
        except OSError as exc:
            raise ConnectFailed(connect_words(exc, self.endpoint.host), exc) from None
        return conn

    async def prewarm(self, count: int) -> int:
        """Open up to `count` idle connections ahead of a run, so the first requests do not pay for
        connecting on a busy loop. Returns how many were opened."""
        count = max(0, min(count, self.max_idle) - len(self._idle))
        results = await asyncio.gather(*(self._connect() for _ in range(count)), return_exceptions=True)
        opened = 0
        for conn in results:
            if isinstance(conn, Conn):
                self._idle.append(conn)
                opened += 1
        return opened

    def _give_back(self, conn: Conn) -> None:
        if len(self._idle) < self.max_idle and not conn.closed:
            conn.reused = True
            self._idle.append(conn)
        else:
            conn._abort()

    async def request(self, method: str, path: str, body: bytes | None = None,
                      content_type: str = "application/json", on_sent=None, headers: bytes = b"") -> Response:
        """Send one request and wait for the status line and headers.

        `on_sent()` is called right before the request bytes are written. A pooled connection that
        the server closed before answering anything is retried once on a fresh one. `headers`: this
        request's own header lines besides the client's, encoded (`encoded_headers`).
        """
        raw = self._encode(method, path, body, content_type, headers)
        while self._idle:
            conn = self._idle.pop()
            if conn.closed:
                continue
            try:
                return await self._exchange(conn, raw, on_sent)
            except _EmptyHead:
                continue
        conn = await self._connect()
        try:
            return await self._exchange(conn, raw, on_sent)
        except _EmptyHead:
            raise NoAnswer("connection closed before the response") from None

    def send_now(self, method: str, path: str, body: bytes | None = None,
                 content_type: str = "application/json", on_sent=None) -> "Pending | None":
        """Write the request at once on an idle pooled connection, without waiting for a task to
        run (so a dispatcher's send time is its wake-up time); None when no connection is idle.
        Finish with `await client.complete(pending)`."""
        raw = self._encode(method, path, body, content_type)
        while self._idle:
            conn = self._idle.pop()
            if conn.closed:
                continue
            sent = time.time()
            if on_sent is not None:
                on_sent()
            return Pending(conn, conn.start(raw), raw, on_sent, sent=sent)
        return None

    def prepare(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json", due: float | None = None) -> "Pending | None":
        """Claim an idle plain-TCP pooled connection for a request that another thread will write
        at `due` (epoch seconds; see sender.TimedSender), and expect its response from now on.
        `Pending.fd` is a duplicate of the socket's descriptor for that writer, which closes it
        (a duplicate, so the descriptor cannot be reused under it if the connection closes
        meanwhile). None when nothing is idle or the endpoint is TLS."""
        if self._ssl is not None:
            return None
        raw = self._encode(method, path, body, content_type)
        while self._idle:
            conn = self._idle.pop()
            if conn.closed:
                continue
            sock = conn.transport.get_extra_info("socket")
            if sock is None:
                self._give_back(conn)
                return None
            fd = os.dup(sock.fileno())
            return Pending(conn, conn.expect(), raw, None, fd=fd, due=due)
        return None

    async def complete(self, pending: "Pending") -> Response:
        """The response to a request written by `send_now` (retried on a fresh connection if the
        pooled one turned out to be closed before answering)."""
        try:
            await pending.head
        except _EmptyHead:
            if pending.due is not None:         # a prepared request is never sent before its time
                early = pending.due - time.time()
                if early > 0:
                    await asyncio.sleep(early)
            conn = await self._connect()
            try:
                return await self._exchange(conn, pending.raw, pending.on_sent)
            except _EmptyHead:
                raise NoAnswer("connection closed before the response") from None
        except BaseException:
            pending.conn._abort()
            raise
        return Response(pending.conn, self)

    def _encode(self, method: str, path: str, body: bytes | None, content_type: str, extra: bytes = b"") -> bytes:
        target = self.endpoint.base_path + path
        head = f"{method} {target} HTTP/1.1\r\n".encode("ascii") + self._head + extra
        if body is not None:
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n".encode("ascii")
        return head + b"\r\n" + (body or b"")

    async def _exchange(self, conn: Conn, raw: bytes, on_sent) -> Response:
        if on_sent is not None:
            on_sent()
        try:
            await conn.start(raw)
        except BaseException:
            conn._abort()
            raise
        return Response(conn, self)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn._abort()


@dataclass(slots=True)
class Pending:
    """A request whose response is awaited by `Http1Client.complete`. `sent` is the epoch time its
    bytes were handed to the socket (None until then); a retry on a fresh connection stamps the
    send again through `on_sent`. `fd`/`due`: see `Http1Client.prepare`."""
    conn: Conn
    head: asyncio.Future
    raw: bytes
    on_sent: Callable[[], None] | None
    sent: float | None = None
    fd: int = -1
    due: float | None = None


class _EmptyHead(NoAnswer):
    """The connection closed before any byte of the response: safe to retry on a fresh one."""


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise StreamCut("malformed status line")
    try:
        status = int(parts[1])
    except ValueError:
        raise StreamCut("malformed status line") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise StreamCut("malformed header line")
        key = name.strip().decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return status, headers
