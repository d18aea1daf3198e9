"""One bounded async fetch over aiohttp: a timeout and a byte bound, and a typed failure (in the
scrape vocabulary of `sources.scrape`) instead of an exception.

Also the `Transport` seam: a source asks a transport for (status, body); over HTTP that is `fetch`,
in-process (the simulator in virtual time) it is a plain callable.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from servewatch.exposition.parser import DEFAULT_MAX_BYTES
from servewatch.sources.deadline import within
from servewatch.sources.scrape import CONNECT, PROTOCOL, TIMEOUT, TOO_LARGE, ScrapeFailure
from servewatch.transport.http1 import connect_words
from servewatch.transport.urls import unresolved_words

_CHUNK = 64 * 1024

FetchFailure = ScrapeFailure       # the name transports and sources have always used


@dataclass(frozen=True, slots=True)
class FetchResponse:
    status: int
    body: bytes
    elapsed_s: float


Answer = FetchResponse | ScrapeFailure
Transport = Callable[[], Awaitable[Answer]]


def too_large_detail(max_bytes: int, declared: int | None = None) -> str:
    if declared is not None:
        return f"body of {declared:,} bytes exceeds the {max_bytes:,}-byte bound"
    return f"body exceeds the {max_bytes:,}-byte bound"


async def fetch(session, url: str, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES) -> Answer:
    """GET `url` with aiohttp: the answer, or a typed failure. Never raises (except cancellation)."""
    # aiohttp: a GET of any URL (inspect, serve's Prometheus discovery, a DCGM exporter); scrapes take http1_transport.
    import aiohttp

    started = time.monotonic()

    def failed(kind: str, detail: str) -> ScrapeFailure:
        return ScrapeFailure(kind, time.monotonic() - started, detail)

    async def get() -> Answer:
        async with session.get(url, allow_redirects=False, headers=_ACCEPT) as response:
            declared = response.content_length
            if declared is not None and declared > max_bytes:
                return failed(TOO_LARGE, too_large_detail(max_bytes, declared))
            chunks, size = [], 0
            while True:
                chunk = await response.content.read(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    return failed(TOO_LARGE, too_large_detail(max_bytes))
                chunks.append(chunk)
            return FetchResponse(response.status, b"".join(chunks), time.monotonic() - started)

    try:
        return await within(get(), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return failed(TIMEOUT, f"no answer within {timeout_s:g} s")
    except aiohttp.ClientConnectionError as exc:
        return failed(CONNECT, connect_reason(exc))
    except (aiohttp.ClientError, ValueError, UnicodeError) as exc:
        return failed(PROTOCOL, f"malformed answer ({type(exc).__name__})")
    except OSError as exc:
        return failed(CONNECT, connect_reason(exc))


_ACCEPT = {"Accept": "text/plain;version=0.0.4,*/*;q=0.1"}      # Prometheus text, not OpenMetrics


def connect_reason(exc: BaseException) -> str:
    """Why no connection could be made, in words ("connection refused", "the host name HOST could not be
    resolved", ...)."""
    # aiohttp: its failures (the probe's and fetch's) worded; transport.http1's are worded by connect_words.
    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return unresolved_words(getattr(exc, "host", None))
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without answering"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS failed ({type(exc).__name__})"
    cause = getattr(exc, "os_error", None) or exc
    return connect_words(cause) if isinstance(cause, OSError) else type(exc).__name__


def http_transport(session, url: str, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES) -> Transport:
    async def get() -> Answer:
        return await fetch(session, url, timeout_s=timeout_s, max_bytes=max_bytes)
    return get


def http1_transport(client, path: str, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES) -> Http1Transport:
    """GET `path` through the project's own HTTP/1.1 client (`servewatch.transport.http1.Http1Client`, one keep-alive
    pool per server): the answers and failure kinds of `fetch`, for about half aiohttp's client CPU
    per scrape (benchmarks/scrape_client.py: 145 vs 272 µs a 51 kB /metrics, 99 vs 183 µs a /health)."""
    return Http1Transport(client, path, timeout_s, max_bytes)


class Http1Transport:
    def __init__(self, client, path: str, timeout_s: float, max_bytes: int):
        self.client, self.path, self.timeout_s, self.max_bytes = client, path, timeout_s, max_bytes

    async def _exchange(self) -> FetchResponse:
        started = time.monotonic()
        response = await self.client.request("GET", self.path)
        try:
            body = await response.read_all(self.max_bytes)
        finally:
            response.release()
        return FetchResponse(response.status, body, time.monotonic() - started)

    async def __call__(self) -> Answer:
        from servewatch.errors import BodyTooLarge
        from servewatch.transport.http1 import failure_kind

        started = time.monotonic()
        try:
            return await within(self._exchange(), self.timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            return ScrapeFailure(TIMEOUT, time.monotonic() - started, f"no answer within {self.timeout_s:g} s")
        except BodyTooLarge:
            return ScrapeFailure(TOO_LARGE, time.monotonic() - started, too_large_detail(self.max_bytes))
        except Exception as exc:  # noqa: BLE001 - a failing server is data, not a crash
            kind = failure_kind(exc)
            detail = str(exc) or type(exc).__name__
            if kind == PROTOCOL:
                detail = f"malformed answer ({detail})"
            return ScrapeFailure(kind, time.monotonic() - started, detail)

    async def close(self) -> None:
        """Close the idle keep-alive connections (the next request opens a new one)."""
        await self.client.close()


def in_process_transport(call: Callable[[], object], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Transport:
    """Wrap a callable (sync or async) returning a status int, a body (str/bytes, status 200), or a
    (status, body) pair. An exception from it becomes a `connect` failure, as a dead server would."""
    async def get() -> Answer:
        started = time.monotonic()
        try:
            value = call()
            if inspect.isawaitable(value):
                value = await value
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing target is data, not a crash
            return ScrapeFailure(CONNECT, time.monotonic() - started, type(exc).__name__)
        status, body = _split(value)
        if len(body) > max_bytes:
            return ScrapeFailure(TOO_LARGE, time.monotonic() - started, too_large_detail(max_bytes))
        return FetchResponse(status, body, time.monotonic() - started)
    return get


def _split(value) -> tuple[int, bytes]:
    if isinstance(value, tuple):
        status, body = value
    elif isinstance(value, int):
        status, body = value, b""
    else:
        status, body = 200, value
    if isinstance(body, str):
        body = body.encode()
    return int(status), bytes(body or b"")
