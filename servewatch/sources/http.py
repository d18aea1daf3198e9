"""A source's seam to a server: a `Transport` is a callable a source awaits for (status, body) or a typed failure
in the scrape vocabulary of `sources.scrape`. Over HTTP it is `http_transport`, a GET through the one transport
contract (`servewatch.transport.contract`: the byte bound, the deadline and the one mapping of errors to
outcomes live there); in-process (the simulator in virtual time) it is a plain callable (`in_process_transport`).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from servewatch.exposition.parser import DEFAULT_MAX_BYTES, check_series
from servewatch.sources.scrape import CONNECT, TOO_LARGE, ScrapeFailure
from servewatch.transport.contract import Failed, HttpRequest, answer_parts, too_large_detail  # noqa: F401 - re-exported

FetchFailure = ScrapeFailure       # the name transports and sources have always used


@dataclass(frozen=True, slots=True)
class FetchResponse:
    status: int
    body: bytes
    elapsed_s: float


Answer = FetchResponse | ScrapeFailure
Transport = Callable[[], Awaitable[Answer]]


def get_request(url: str, timeout_s: float, max_bytes: int, max_series: int | None = None) -> HttpRequest:
    """A GET bounded in time and bytes and, for a /metrics scrape, in series: a body over `max_series` is refused
    while it arrives (`exposition.parser.check_series` on its first bytes), not read whole and then counted."""
    check = None if max_series is None else partial(check_series, max_series=max_series)
    return HttpRequest("GET", url, timeout_s=timeout_s, max_bytes=max_bytes, body_check=check)


async def fetch(transport, url: str, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES,
                max_series: int | None = None) -> Answer:
    """GET `url` through `transport` (a `transport.contract.Transport`): the answer, whatever its status, or a
    typed failure. Never raises (except cancellation)."""
    return answer_of(await transport.send(get_request(url, timeout_s, max_bytes, max_series)))


def answer_of(got) -> Answer:
    """The contract's outcome in a source's terms (the scrape vocabulary)."""
    if isinstance(got, Failed):
        return ScrapeFailure(got.kind, got.elapsed_s, got.detail)
    return FetchResponse(got.status, got.body, got.elapsed_s)


class HttpGet:
    """A source's `Transport` over HTTP: `fetch` of one URL; `close()` closes the idle connections to its server."""

    __slots__ = ("transport", "url", "request")

    def __init__(self, transport, url: str, timeout_s: float, max_bytes: int, max_series: int | None = None):
        self.transport, self.url = transport, url
        self.request = get_request(url, timeout_s, max_bytes, max_series)

    async def __call__(self) -> Answer:
        return answer_of(await self.transport.send(self.request))

    async def close(self) -> None:
        close_idle = getattr(self.transport, "close_idle", None)
        if close_idle is not None:
            await close_idle(self.url)


def http_transport(transport, url: str, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES,
                   max_series: int | None = None) -> HttpGet:
    """GET `url` through `transport` each time a source asks (`max_series`: a /metrics scrape's series bound,
    looked at while the body arrives). Over `transport.contract.Http1Transport` (the
    project's own HTTP/1.1 client, one keep-alive pool per server) a scrape costs about half aiohttp's client
    CPU (benchmarks/scrape_client.py: 145 vs 272 µs a 51 kB /metrics, 99 vs 183 µs a /health)."""
    return HttpGet(transport, url, timeout_s, max_bytes, max_series)


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
        status, body, _ = answer_parts(value)
        if len(body) > max_bytes:
            return ScrapeFailure(TOO_LARGE, time.monotonic() - started, too_large_detail(max_bytes))
        return FetchResponse(status, body, time.monotonic() - started)
    return get

