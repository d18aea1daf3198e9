"""Value tests of transport/contract.py (issue 50): the figures a transport hands back, to the value — each
outcome's elapsed time and status, the request line sent upstream, the byte bound at its edge, the bounds a
transport gives its connections, the host a mock words its DNS failure with.

Elapsed times are checked against the wall time of the whole call measured around it (0 <= elapsed <= wall):
a figure measured from the wrong instant, or none, is out of that range.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

import pytest

from servewatch.transport import contract as C
from tests.test_transport_contract import _serve as raw_server


def _request(url: str, *, timeout_s: float = 2.0, max_bytes: int = 1000, **kw) -> C.HttpRequest:
    return C.HttpRequest("GET", url, timeout_s=timeout_s, max_bytes=max_bytes, **kw)


def _timed(coro_fn):
    """(the outcome of asyncio.run(coro_fn()), the wall seconds the call took)."""
    started = time.monotonic()
    got = asyncio.run(coro_fn())
    return got, time.monotonic() - started


async def _serve(raw: bytes, seen: list[str], *, read_head: bool = True):
    """A loopback server (the contract tests' raw one) answering `raw` to each connection, keeping each request
    head in `seen`."""
    async def reply(reader, writer):
        if read_head:
            seen.append((await reader.readuntil(b"\r\n\r\n")).decode("latin-1"))
        writer.write(raw)
        await writer.drain()
        await reader.read(1)
    return await raw_server(reply)


def _loopback(raw: bytes, path: str = "/x", *, transport: C.Http1Transport | None = None, read_head: bool = True,
              **kw):
    """(outcome, wall seconds, request heads the server saw) of one request through an Http1Transport."""
    seen: list[str] = []

    async def go():
        server, port = await _serve(raw, seen, read_head=read_head)
        t = transport or C.Http1Transport()
        try:
            return await t.send(_request(f"http://127.0.0.1:{port}{path}", **kw))
        finally:
            await t.close()
            server.close()
    got, wall = _timed(go)
    return got, wall, seen


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


# -- elapsed times and statuses ----------------------------------------------------------------------------------

def test_a_reply_and_its_failure_carry_the_elapsed_time_measured():
    got, wall, _ = _loopback(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy")
    assert isinstance(got, C.Reply) and got.status == 503
    assert 0.0 <= got.elapsed_s <= wall
    failure = got.failure()
    assert (failure.outcome, failure.detail, failure.elapsed_s, failure.status) == (
        C.HTTP_STATUS, "HTTP 503", got.elapsed_s, 503)
    assert C.Reply(404, b"", 1.5).failure() == C.Failed(C.HTTP_STATUS, "HTTP 404", 1.5, 404)


def test_too_large_declared_carries_the_status_and_elapsed_time():
    got, wall, _ = _loopback(b"HTTP/1.1 206 Partial\r\nContent-Length: 1001\r\n\r\n", max_bytes=1000)
    assert (got.outcome, got.status) == (C.TOO_LARGE, 206)
    assert got.detail == "body of 1,001 bytes exceeds the 1,000-byte bound"
    assert 0.0 <= got.elapsed_s <= wall


def test_a_declared_body_of_exactly_the_bound_is_read():
    body = b"z" * 1000
    got, _, _ = _loopback(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + body, max_bytes=1000)
    assert isinstance(got, C.Reply)
    assert (got.status, got.body) == (200, body)


def test_too_large_read_carries_the_status_and_elapsed_time():
    chunk = b"%x\r\n%s\r\n" % (600, b"y" * 600)
    got, wall, _ = _loopback(b"HTTP/1.1 203 Other\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 2, max_bytes=1000)
    assert (got.outcome, got.detail, got.status) == (C.TOO_LARGE, "body exceeds the 1,000-byte bound", 203)
    assert 0.0 <= got.elapsed_s <= wall


def test_the_mock_too_large_carries_the_status_and_elapsed_time():
    async def go():
        return await C.MockTransport(lambda r: (201, b"x" * 11)).send(_request("http://h/x", max_bytes=10))
    got, wall = _timed(go)
    assert (got.outcome, got.status, got.detail) == (C.TOO_LARGE, 201, "body exceeds the 10-byte bound")
    assert 0.0 <= got.elapsed_s <= wall


# -- the request sent upstream -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path, line", [("", "GET / HTTP/1.1"), ("/metrics", "GET /metrics HTTP/1.1"),
                                        ("/m?a=1&b=2", "GET /m?a=1&b=2 HTTP/1.1")])
def test_the_request_target_is_the_urls_path_and_query(path, line):
    got, _, seen = _loopback(OK, path)
    assert (got.status, got.body) == (200, b"ok")
    assert seen[0].split("\r\n")[0] == line


def test_the_request_carries_its_own_content_type():
    seen: list[str] = []

    async def go():
        server, port = await _serve(OK, seen)
        t = C.Http1Transport()
        try:
            return await t.send(C.HttpRequest("POST", f"http://127.0.0.1:{port}/in", timeout_s=2.0, max_bytes=10,
                                              body=b"", content_type="text/plain"))
        finally:
            await t.close()
            server.close()
    got, _ = _timed(go)
    assert got.status == 200
    assert "Content-Type: text/plain\r\n" in seen[0] and "application/json" not in seen[0]


def test_a_bad_header_is_refused_naming_the_url():
    async def go():
        return await C.Http1Transport().send(_request("http://127.0.0.1:9/x", headers=(("X-A", "b\r\nX-B: c"),)))
    with pytest.raises(ValueError) as raised:
        asyncio.run(go())
    assert str(raised.value).startswith("http://127.0.0.1:9/x: ")


# -- the bounds a transport gives its connections --------------------------------------------------------------

def test_the_transport_defaults_and_the_bounds_its_clients_get():
    t = C.Http1Transport()
    assert (t.keep_alive, t.max_idle, t.connect_timeout_s, t.ssl_context) == (True, 2, 10.0, None)
    pooled = t._route("http://127.0.0.1:9/x", False)[0]
    fresh = t._route("http://127.0.0.1:9/x", True)[0]
    assert (pooled.max_idle, pooled.connect_timeout) == (2, 10.0)
    assert (fresh.max_idle, fresh.connect_timeout) == (0, 10.0)
    own = C.Http1Transport(max_idle=5, connect_timeout_s=0.5)._route("http://127.0.0.1:9/x", False)[0]
    assert (own.max_idle, own.connect_timeout) == (5, 0.5)


def test_the_transports_tls_context_is_the_one_its_connections_use():
    """A TLS context given to the transport is used even for an http:// URL: against a plain HTTP server the
    handshake fails (without it, the plain answer would come back)."""
    plain, _, _ = _loopback(OK, read_head=False)
    assert (plain.status, plain.body) == (200, b"ok")
    tls, _, _ = _loopback(OK, read_head=False, transport=C.Http1Transport(ssl_context=ssl.create_default_context()))
    assert (tls.outcome, tls.kind) == (C.TLS, "connect")


def test_a_url_is_parsed_once_and_the_routes_kept_are_bounded(monkeypatch):
    parsed = []
    real = C.parse_url

    def counting(url):
        parsed.append(url)
        return real(url)
    monkeypatch.setattr(C, "parse_url", counting)
    t = C.Http1Transport()
    first = t._route("http://127.0.0.1:9/a", False)
    assert t._route("http://127.0.0.1:9/a", False) is first
    assert parsed == ["http://127.0.0.1:9/a"]
    monkeypatch.setattr(C, "MAX_ROUTES", 2)
    t._route("http://127.0.0.1:9/b", False)
    assert len(t._routes) == 2
    t._route("http://127.0.0.1:9/c", False)             # the third: the kept ones are dropped first
    assert list(t._routes) == [("http://127.0.0.1:9/c", False)]


def test_send_blocking_uses_one_fresh_connection_bounded_by_the_request(monkeypatch):
    made = []

    class Spy(C.Http1Transport):
        def __init__(self, **kw):
            super().__init__(**kw)
            made.append(self)
    monkeypatch.setattr(C, "Http1Transport", Spy)
    context = ssl.create_default_context()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))                        # bound, never listening: the kernel refuses
        got = C.send_blocking(_request(f"http://127.0.0.1:{s.getsockname()[1]}/x", timeout_s=0.75),
                              ssl_context=context)
    assert got.outcome == C.REFUSED
    [t] = made
    assert (t.keep_alive, t.connect_timeout_s, t.ssl_context) == (False, 0.75, context)


# -- the mock --------------------------------------------------------------------------------------------------

def test_the_mock_words_dns_with_its_own_host_and_starts_open():
    def unresolved(request):
        raise socket.gaierror(-2, "Name or service not known")

    async def go(mock):
        got = await mock.send(_request("http://from-url.example/x"))
        closed_before = mock.closed
        await mock.close()
        return got, closed_before, mock.closed
    got, before, after = asyncio.run(go(C.MockTransport(unresolved, host="engine.internal")))
    assert got.detail == "the host name engine.internal could not be resolved"
    assert (before, after) == (False, True)
    got, _, _ = asyncio.run(go(C.MockTransport(unresolved)))
    assert got.detail == "the host name from-url.example could not be resolved"
