"""Values of servewatch/sources/http.py (issue 50 item 8: the seam every scrape's status, body and time pass through):
the contract's outcome in the scrape vocabulary, the GET each source sends, and the in-process transport's answers,
failures and byte bound. Each figure by hand beside the assertion."""

from __future__ import annotations

import asyncio

import pytest

from servewatch.sources import http as h
from servewatch.sources.scrape import ScrapeFailure
from servewatch.transport.contract import Failed, HttpRequest, MockTransport, Reply


def _run(coro):
    return asyncio.run(coro)


def test_answer_of_keeps_status_body_time_and_a_failures_kind():
    assert h.answer_of(Reply(503, b"down", 0.25)) == h.FetchResponse(503, b"down", 0.25)
    got = h.answer_of(Failed("refused", "connection refused", 1.5))
    assert got == ScrapeFailure("connect", 1.5, "connection refused")
    assert h.FetchFailure is ScrapeFailure


def test_fetch_sends_one_get_with_its_bounds():
    mock = MockTransport(lambda request: (200, b"ok"))
    got = _run(h.fetch(mock, "http://127.0.0.1:9/metrics", timeout_s=2.5, max_bytes=100))
    assert (got.status, got.body) == (200, b"ok")
    (request,) = mock.requests
    assert (request.method, request.url, request.timeout_s, request.max_bytes, request.body) == (
        "GET", "http://127.0.0.1:9/metrics", 2.5, 100, None)
    big = _run(h.fetch(MockTransport(lambda r: b"x" * 101), "http://127.0.0.1:9/m", timeout_s=1.0, max_bytes=100))
    assert (big.kind, big.detail) == ("too_large", "body exceeds the 100-byte bound")
    default = MockTransport(lambda r: b"")
    _run(h.fetch(default, "http://127.0.0.1:9/m", timeout_s=1.0))
    assert default.requests[0].max_bytes == h.DEFAULT_MAX_BYTES


def test_http_get_sends_the_same_request_each_time_and_closes_its_servers_idle_connections():
    mock = MockTransport(lambda request: (204, b""))
    closed = []

    async def close_idle(url):
        closed.append(url)
    mock.close_idle = close_idle
    get = h.http_transport(mock, "http://127.0.0.1:9/health", timeout_s=3.0, max_bytes=10)
    assert isinstance(get, h.HttpGet) and (get.transport, get.url) == (mock, "http://127.0.0.1:9/health")
    assert get.request == HttpRequest("GET", "http://127.0.0.1:9/health", timeout_s=3.0, max_bytes=10)
    assert _run(get()).status == 204 and _run(get()).status == 204
    assert mock.requests == [get.request, get.request]
    _run(get.close())
    assert closed == ["http://127.0.0.1:9/health"]
    assert h.http_transport(mock, "http://x/", timeout_s=1.0).request.max_bytes == h.DEFAULT_MAX_BYTES
    _run(h.HttpGet(MockTransport(lambda r: 200), "http://x/", 1.0, 1).close())        # no close_idle: nothing


@pytest.mark.parametrize("value, status, body", [
    (204, 204, b""), ("text", 200, b"text"), (b"raw", 200, b"raw"), ((503, "busy"), 503, b"busy"),
    ((200, None), 200, b""),
])
def test_in_process_answers(value, status, body):
    got = _run(h.in_process_transport(lambda: value)())
    assert (got.status, got.body) == (status, body) and 0.0 <= got.elapsed_s < 5.0


def test_in_process_async_callables_failures_and_the_bound():
    async def later():
        return (201, b"made")
    assert _run(h.in_process_transport(later)()).status == 201
    failed = _run(h.in_process_transport(lambda: {}["x"])())
    assert (failed.kind, failed.detail) == ("connect", "KeyError") and failed.elapsed_s >= 0.0
    assert _run(h.in_process_transport(lambda: b"x" * 8, max_bytes=8)()).body == b"x" * 8
    big = _run(h.in_process_transport(lambda: b"x" * 9, max_bytes=8)())
    assert (big.kind, big.detail) == ("too_large", "body exceeds the 8-byte bound")
    assert _run(h.in_process_transport(lambda: b"x" * h.DEFAULT_MAX_BYTES)()).status == 200
    assert _run(h.in_process_transport(lambda: b"x" * (h.DEFAULT_MAX_BYTES + 1))()).kind == "too_large"

    async def cancelled():
        raise asyncio.CancelledError
    with pytest.raises(asyncio.CancelledError):
        _run(h.in_process_transport(cancelled)())


def test_in_process_time_is_the_calls_own():
    import time

    def slow():
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            pass
        return "x"

    def slow_failure():
        slow()
        raise OSError("down")
    assert 0.05 <= _run(h.in_process_transport(slow)()).elapsed_s < 5.0
    assert 0.05 <= _run(h.in_process_transport(slow_failure)()).elapsed_s < 5.0
    too_big = _run(h.in_process_transport(lambda: slow() * 2, max_bytes=1)())
    assert too_big.kind == "too_large" and 0.05 <= too_big.elapsed_s < 5.0
