"""A minimal HTTP/1.1 client on asyncio streams, built for many concurrent streaming POSTs on one
light event loop: a keep-alive pool, incremental chunked decoding, bounded sizes.

It does no timing of its own: deadlines are enforced by the caller cancelling the task (see
runner.Watchdog), so the hot path has no timer per read.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024
MAX_CHUNK_SIZE_LINE = 1024
READ_SIZE = 256 * 1024


class ConnectFailed(Exception):
    """No TCP (or TLS) connection could be made."""


class StreamCut(Exception):
    """The connection ended or broke before the response was complete, or was malformed."""


class BodyTooLarge(StreamCut):
    """A response over the configured size bound."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str          # e.g. "" or "/proxy", no trailing slash

    @classmethod
    def parse(cls, url: str) -> "Endpoint":
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


class Connection:
    __slots__ = ("reader", "writer", "reused")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.reused = False

    def close(self) -> None:
        try:
            self.writer.transport.abort()
        except Exception:  # noqa: BLE001 - closing a broken transport must never raise
            pass


class Response:
    """Status and headers of one response; the body is read incrementally with `read_some`."""

    __slots__ = ("status", "headers", "_conn", "_pool", "_buf", "_chunked", "_left", "_need_crlf",
                 "_trailer", "_done", "_until_close", "_received", "_max_body", "_keep_alive")

    def __init__(self, status: int, headers: dict[str, str], conn: Connection, pool: "Http1Client",
                 leftover: bytes, max_body: int):
        self.status = status
        self.headers = headers
        self._conn = conn
        self._pool = pool
        self._buf = leftover
        self._max_body = max_body
        self._received = 0
        self._need_crlf = False
        self._trailer = False
        self._done = False
        self._until_close = False
        self._keep_alive = headers.get("connection", "").lower() != "close"
        encoding = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in encoding
        self._left = 0
        if not self._chunked:
            length = headers.get("content-length")
            if length is not None:
                try:
                    self._left = int(length)
                except ValueError:
                    raise StreamCut("bad content-length") from None
                if self._left < 0:
                    raise StreamCut("bad content-length")
                if self._left > max_body:
                    raise BodyTooLarge(f"content-length {self._left} over {max_body}")
                self._done = self._left == 0
            else:
                self._until_close = True
                self._keep_alive = False

    @property
    def done(self) -> bool:
        return self._done

    async def read_some(self) -> bytes:
        """Body bytes available after at most one socket read; b"" once the body is complete."""
        while True:
            if self._done:
                return b""
            if self._buf:
                out = self._decode()
                if out:
                    self._received += len(out)
                    if self._received > self._max_body:
                        raise BodyTooLarge(f"body over {self._max_body} bytes")
                    return out
                if self._done:
                    return b""
            data = await self._conn.reader.read(READ_SIZE)
            if not data:
                if self._until_close:
                    self._done = True
                    return b""
                raise StreamCut("connection closed mid-body")
            self._buf = self._buf + data if self._buf else data

    async def read_all(self, limit: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            data = await self.read_some()
            if not data:
                return b"".join(parts)
            size += len(data)
            if size > limit:
                raise BodyTooLarge(f"body over {limit} bytes")
            parts.append(data)

    def release(self) -> None:
        """Give the connection back to the pool if the body was read to its end, else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep_alive and not self._buf and not self._until_close:
            self._pool._give_back(conn)
        else:
            conn.close()

    def _decode(self) -> bytes:
        buf = self._buf
        if not self._chunked:
            take = len(buf) if self._until_close else min(self._left, len(buf))
            out = buf[:take]
            self._buf = buf[take:]
            if not self._until_close:
                self._left -= take
                self._done = self._left == 0
            return out
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
                    self._done = True
                    break
                continue
            try:
                chunk = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise StreamCut("malformed chunk size") from None
            if chunk < 0:
                raise StreamCut("malformed chunk size")
            if chunk == 0:
                self._trailer = True
            else:
                self._left = chunk
        self._buf = buf[pos:]
        return b"".join(out) if len(out) != 1 else out[0]


class Http1Client:
    """One endpoint, a pool of idle keep-alive connections, no global state."""

    def __init__(self, endpoint: Endpoint, *, connect_timeout: float = 10.0, max_idle: int = 1024,
                 max_body: int = 64 * 2**20, ssl_context: ssl_module.SSLContext | None = None):
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self.max_body = max_body
        self._idle: list[Connection] = []
        self._ssl = ssl_context if ssl_context is not None else (
            ssl_module.create_default_context() if endpoint.scheme == "https" else None)
        self._head = (f"Host: {endpoint.host_header}\r\nUser-Agent: servewatch-load\r\n"
                      "Accept: */*\r\n").encode("ascii")

    async def _connect(self) -> Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.endpoint.host, self.endpoint.port, ssl=self._ssl, limit=READ_SIZE)
        except TimeoutError:
            raise ConnectFailed("connect timeout") from None
        except OSError as exc:
            raise ConnectFailed(type(exc).__name__) from None
        return Connection(reader, writer)

    def _give_back(self, conn: Connection) -> None:
        if len(self._idle) < self.max_idle and not conn.writer.transport.is_closing():
            conn.reused = True
            self._idle.append(conn)
        else:
            conn.close()

    async def request(self, method: str, path: str, body: bytes | None = None,
                      content_type: str = "application/json", on_sent=None) -> Response:
        """Send one request and read the status line and headers.

        `on_sent()` is called right before the request bytes are written. A pooled connection that
        turns out to be closed by the server before any response byte is retried once on a fresh one.
        """
        raw = self._encode(method, path, body, content_type)
        while self._idle:
            conn = self._idle.pop()
            if conn.writer.transport.is_closing() or conn.reader.at_eof():
                conn.close()
                continue
            try:
                return await self._exchange(conn, raw, on_sent)
            except _StaleConnection:
                continue
        conn = await self._connect()
        try:
            return await self._exchange(conn, raw, on_sent)
        except _StaleConnection:
            raise StreamCut("connection closed before the response") from None

    def _encode(self, method: str, path: str, body: bytes | None, content_type: str) -> bytes:
        target = self.endpoint.base_path + path
        head = f"{method} {target} HTTP/1.1\r\n".encode("ascii") + self._head
        if body is not None:
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n".encode("ascii")
        return head + b"\r\n" + (body or b"")

    async def _exchange(self, conn: Connection, raw: bytes, on_sent) -> Response:
        try:
            if on_sent is not None:
                on_sent()
            conn.writer.write(raw)
            head, leftover = await self._read_head(conn)
        except (ConnectionError, _EmptyHead) as exc:
            conn.close()
            if conn.reused:
                raise _StaleConnection() from None
            raise StreamCut(type(exc).__name__) from None
        except BaseException:
            conn.close()
            raise
        try:
            status, headers = _parse_head(head)
            return Response(status, headers, conn, self, leftover, self.max_body)
        except BaseException:
            conn.close()
            raise

    async def _read_head(self, conn: Connection) -> tuple[bytes, bytes]:
        buf = b""
        while True:
            data = await conn.reader.read(READ_SIZE)
            if not data:
                if not buf:
                    raise _EmptyHead()
                raise StreamCut("connection closed in headers")
            buf += data
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                return buf[:end], buf[end + 4:]
            if len(buf) > MAX_HEADER_BYTES:
                raise StreamCut("response headers too large")

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _StaleConnection(Exception):
    pass


class _EmptyHead(Exception):
    pass


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
