"""One bounded async fetch: a timeout and a size bound, and a typed failure instead of an exception.

Also the `Transport` seam: a source asks a transport for (status, body); over HTTP that is `fetch`,
in-process (the simulator in virtual time) it is a plain callable.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

DEFAULT_MAX_BYTES = 16 * 2**20
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class FetchFailure:
    kind: str            # "connect" | "timeout" | "too_large" | "protocol" | "unavailable"
    elapsed_s: float
    detail: str = ""     # one short line for the terminal; never stored in a bundle


Answer = Response | FetchFailure
Transport = Callable[[], Awaitable[Answer]]


async def fetch(session, url: str, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES) -> Answer:
    """GET `url` with aiohttp: the answer, or a typed failure. Never raises (except cancellation)."""
    import aiohttp

    started = time.monotonic()

    def failed(kind: str, detail: str) -> FetchFailure:
        return FetchFailure(kind, time.monotonic() - started, detail)

    async def get() -> Answer:
        async with session.get(url, allow_redirects=False) as response:
            declared = response.content_length
            if declared is not None and declared > max_bytes:
                return failed("too_large", f"declared {declared:,} bytes > bound {max_bytes:,}")
            chunks, size = [], 0
            while True:
                chunk = await response.content.read(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    return failed("too_large", f"more than {max_bytes:,} bytes")
                chunks.append(chunk)
            return Response(response.status, b"".join(chunks), time.monotonic() - started)

    try:
        return await asyncio.wait_for(get(), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return failed("timeout", f"no answer within {timeout_s:g} s")
    except aiohttp.ClientConnectionError as exc:
        return failed("connect", type(exc).__name__)
    except (aiohttp.ClientError, ValueError, UnicodeError) as exc:
        return failed("protocol", type(exc).__name__)
    except OSError as exc:
        return failed("connect", type(exc).__name__)


def http_transport(session, url: str, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES) -> Transport:
    async def get() -> Answer:
        return await fetch(session, url, timeout_s=timeout_s, max_bytes=max_bytes)
    return get


def in_process_transport(call: Callable[[], object], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Transport:
    """Wrap a callable (sync or async) returning a status int, a body (str/bytes, status 200), or a
    (status, body) pair. An exception from it becomes a "connect" failure, as a dead server would."""
    async def get() -> Answer:
        started = time.monotonic()
        try:
            value = call()
            if inspect.isawaitable(value):
                value = await value
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing target is data, not a crash
            return FetchFailure("connect", time.monotonic() - started, type(exc).__name__)
        status, body = _split(value)
        if len(body) > max_bytes:
            return FetchFailure("too_large", time.monotonic() - started, f"more than {max_bytes:,} bytes")
        return Response(status, body, time.monotonic() - started)
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
