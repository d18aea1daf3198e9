"""The transport contract (servewatch.transport.contract): each error that can end a request becomes its ONE
outcome, once through the in-process MockTransport (the handler raises what a connection would) and once
through the real Http1Transport against a loopback server that misbehaves in that way."""

from __future__ import annotations

import asyncio
import errno
import inspect
import socket
import ssl

import pytest

from servewatch import kinds
from servewatch.errors import BodyTooLarge, TooManySeries
from servewatch.transport import contract as C
from servewatch.transport.http1 import NoAnswer, StreamBroken, StreamCut


def _request(url: str = "http://127.0.0.1:9/x", *, timeout_s: float = 2.0, max_bytes: int = 1000, **kw) -> C.HttpRequest:
    return C.HttpRequest("GET", url, timeout_s=timeout_s, max_bytes=max_bytes, **kw)


def _mock_send(handler, request=None) -> C.Outcome:
    async def go():
        return await C.MockTransport(handler).send(request or _request())
    return asyncio.run(go())


def _raise(exc):
    def handler(request):
        raise exc
    return handler


# -- through the mock: the mapping, one error each ---------------------------------------------------------------

@pytest.mark.parametrize("error, outcome, kind, words", [
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), C.REFUSED, "connect", "connection refused"),
    (socket.gaierror(-2, "Name or service not known"), C.DNS, "dns", "the host name 127.0.0.1 could not be resolved"),
    (ssl.SSLCertVerificationError(1, "certificate verify failed"), C.TLS, "connect", "TLS failed"),
    (ssl.SSLError(1, "wrong version number"), C.TLS, "connect", "TLS failed"),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), C.CONNECT, "connect", "Network is unreachable"),
    (TimeoutError(), C.TIMEOUT, "timeout", "no answer within 2 s"),
    (NoAnswer("x"), C.NO_ANSWER, "connect", "closed the connection without answering"),
    (StreamBroken("connection closed mid-body"), C.CUT, "protocol", "cut off (connection closed mid-body)"),
    (ConnectionResetError(errno.ECONNRESET, "reset"), C.CUT, "protocol", "connection reset"),
    (BodyTooLarge("over"), C.TOO_LARGE, "too_large", "exceeds the 1,000-byte bound"),
    (StreamCut("malformed status line"), C.PROTOCOL, "protocol", "malformed answer (malformed status line)"),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), C.PROTOCOL, "protocol", "malformed answer"),
])
def test_mock_maps_each_error_to_one_outcome(error, outcome, kind, words):
    got = _mock_send(_raise(error))
    assert isinstance(got, C.Failed)
    assert (got.outcome, got.kind) == (outcome, kind)
    assert words in got.detail


def test_mock_connect_failure_is_worded_by_its_cause():
    from servewatch.transport.http1 import ConnectFailed

    for cause, outcome in [(socket.gaierror(-2, "x"), C.DNS), (ConnectionRefusedError(111, "x"), C.REFUSED),
                           (ssl.SSLError(1, "x"), C.TLS), (TimeoutError(), C.TIMEOUT),
                           (OSError(errno.EHOSTUNREACH, "No route to host"), C.CONNECT)]:
        got = _mock_send(_raise(ConnectFailed("words", cause)))
        assert got.outcome == outcome, cause


def test_mock_answers_bounds_and_deadline():
    got = _mock_send(lambda r: (503, "busy"))
    assert (got.status, got.body, got.ok) == (503, b"busy", False)
    assert (got.failure().outcome, got.failure().kind, got.failure().detail) == (C.HTTP_STATUS, "http_503", "HTTP 503")
    assert _mock_send(lambda r: "ok").failure() is None
    over = _mock_send(lambda r: b"x" * 1001)
    assert (over.outcome, over.status) == (C.TOO_LARGE, 200)
    assert _mock_send(lambda r: b"x" * 1000).body == b"x" * 1000

    async def never(request):
        await asyncio.Event().wait()
    late = _mock_send(never, _request(timeout_s=0.2))
    assert late.outcome == C.TIMEOUT and 0.2 <= late.elapsed_s < 1.0


def test_scrape_kinds_cover_every_outcome():
    assert set(C.SCRAPE_KIND) == set(C.OUTCOMES)
    assert set(C.SCRAPE_KIND.values()) - {kinds.HTTP_STATUS} <= set(kinds.FAILURE_KINDS)
    assert kinds.failure_words("dns") == "host name not resolved"


# -- through a real loopback server: the same outcomes from real sockets ------------------------------------------

async def _serve(reply):
    """A raw TCP server on 127.0.0.1 whose every connection is handed to `reply(reader, writer)`."""
    async def handle(reader, writer):
        try:
            await reply(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _head(reader):
    await reader.readuntil(b"\r\n\r\n")


def _loopback(reply, path="/x", *, timeout_s=2.0, max_bytes=1000, scheme="http", request=None) -> C.Outcome:
    async def go():
        server, port = await _serve(reply)
        transport = C.Http1Transport()
        try:
            return await transport.send(request or _request(f"{scheme}://127.0.0.1:{port}{path}", timeout_s=timeout_s,
                                                            max_bytes=max_bytes))
        finally:
            await transport.close()
            server.close()
    return asyncio.run(go())


async def _answer(reader, writer, raw: bytes):
    await _head(reader)
    writer.write(raw)
    await writer.drain()


def test_loopback_answer_and_http_status():
    got = _loopback(lambda r, w: _answer(r, w, b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\nX-A: b\r\n\r\nbusy"))
    assert isinstance(got, C.Reply)
    assert (got.status, got.body, got.headers["x-a"], got.failure().kind) == (503, b"busy", "b", "http_503")


def test_loopback_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]        # bound, never listening: the kernel refuses
        got = asyncio.run(C.Http1Transport().send(_request(f"http://127.0.0.1:{port}/")))
    assert (got.outcome, got.kind, got.detail) == (C.REFUSED, "connect", "connection refused")


def test_loopback_dns():
    got = asyncio.run(C.Http1Transport().send(_request("http://servewatch-no-such-host.invalid:8000/metrics")))
    assert (got.outcome, got.kind) == (C.DNS, "dns")
    assert got.detail == "the host name servewatch-no-such-host.invalid could not be resolved"


def test_loopback_tls_against_plain_http():
    async def plain(reader, writer):                 # answers in plain HTTP before any TLS hello
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read(1)
    got = _loopback(plain, scheme="https")
    assert (got.outcome, got.kind) == (C.TLS, "connect")
    assert got.detail.startswith("TLS failed")


def test_loopback_timeout():
    async def silent(reader, writer):
        await _head(reader)
        await asyncio.Event().wait()
    got = _loopback(silent, timeout_s=0.3)
    assert (got.outcome, got.kind, got.detail) == (C.TIMEOUT, "timeout", "no answer within 0.3 s")
    assert 0.3 <= got.elapsed_s < 1.5


def test_loopback_no_answer():
    got = _loopback(lambda r, w: _head(r))      # reads the request, closes without a byte
    assert (got.outcome, got.kind) == (C.NO_ANSWER, "connect")


def test_loopback_cut_mid_body():
    got = _loopback(lambda r, w: _answer(r, w, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b"))
    assert (got.outcome, got.kind, got.detail) == (C.CUT, "protocol", "the answer was cut off (connection closed mid-body)")


def test_loopback_too_large_declared_and_read():
    declared = _loopback(lambda r, w: _answer(r, w, b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"))
    assert (declared.outcome, declared.status) == (C.TOO_LARGE, 200)
    assert declared.detail == "body of 5,000 bytes exceeds the 1,000-byte bound"
    chunk = b"%x\r\n%s\r\n" % (600, b"y" * 600)
    read = _loopback(lambda r, w: _answer(r, w, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 2))
    assert (read.outcome, read.detail) == (C.TOO_LARGE, "body exceeds the 1,000-byte bound")


def _looked_at(body: bytes, *, refuse_from: int | None = None) -> tuple[C.Outcome, list[int]]:
    """The outcome of a body sent whole (Content-Length) to a request with a body_check that records the length
    of each head it is shown, and raises from `refuse_from` bytes on."""
    heads: list[int] = []

    def check(head: bytes) -> None:
        heads.append(len(head))
        assert body.startswith(head)
        if refuse_from is not None and len(head) >= refuse_from:
            raise TooManySeries("more than 3 series (the series bound)", 4)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)

    async def go():
        server, port = await _serve(lambda r, w: _answer(r, w, head + body))
        transport = C.Http1Transport()
        try:
            return await transport.send(_request(f"http://127.0.0.1:{port}/metrics", max_bytes=16 * 2**20,
                                                 body_check=check))
        finally:
            await transport.close()
            server.close()
    got = asyncio.run(go())
    return got, heads


def test_a_body_check_sees_the_body_from_its_threshold_and_at_each_doubling_only():
    small, heads = _looked_at(b"# x\n" * (C.BODY_CHECK_FROM // 4 - 1))       # one line under the threshold
    assert isinstance(small, C.Reply) and heads == []                       # a normal scrape is never looked at
    body = b"# x\n" * (3 * C.BODY_CHECK_FROM // 4)                          # 3x the threshold, read whole
    whole, heads = _looked_at(body)
    assert isinstance(whole, C.Reply) and whole.body == body
    assert heads and heads[0] >= C.BODY_CHECK_FROM
    assert all(later >= 2 * earlier for earlier, later in zip(heads, heads[1:])) and len(heads) <= 2


def test_a_body_check_that_refuses_ends_the_read_as_too_many_series():
    body = b"up 1\n" * (2**20)                                               # 5 MiB
    got, heads = _looked_at(body, refuse_from=C.BODY_CHECK_FROM)
    assert (got.outcome, got.kind, got.status) == (C.TOO_MANY_SERIES, "too_many_series", 200)
    assert got.detail == "line 4: more than 3 series (the series bound)" and len(heads) == 1
    assert heads[0] < 2 * C.BODY_CHECK_FROM                                # refused at the first look
    shown = []
    mocked = _mock_send(lambda r: body, _request(max_bytes=16 * 2**20,
                                                 body_check=lambda head: check_over(shown.append(head))))
    assert (mocked.outcome, mocked.detail) == (C.TOO_MANY_SERIES, "line 4: more than 3 series (the series bound)")
    assert (mocked.status, shown == [body], 0 <= mocked.elapsed_s < 1) == (200, True, True)
    at, under = (_mock_send(lambda r: body[:size], _request(max_bytes=2**20, body_check=check_over))
                 for size in (C.BODY_CHECK_FROM, C.BODY_CHECK_FROM - 1))   # the mock looks where a socket would
    assert at.outcome == C.TOO_MANY_SERIES and isinstance(under, C.Reply)


def check_over(head: bytes) -> None:
    raise TooManySeries("more than 3 series (the series bound)", 4)


def test_a_failed_exchange_leaves_no_cycle_holding_its_frames_or_body():
    """Each failure the transport maps to an outcome (a body refused by its check after its first 256 KiB, a
    declared length over the bound, a reset) is freed by refcounting: no traceback, frame or body of it waits for
    the cyclic collector (serve runs it 700x rarer than the default). At 5980e45, 38 of servewatch's frames waited
    there, with 1.6 MB of bytes in their locals."""
    import gc

    endless = b"HTTP/1.1 200 OK\r\nContent-Length: 5242880\r\n\r\n" + b"up 1\n" * (2**20)
    answers = [lambda r, w: _answer(r, w, endless),
               lambda r, w: _answer(r, w, b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n"),
               lambda r, w: _head(r)]

    async def go():
        outcomes = []
        for reply in answers * 2:
            server, port = await _serve(reply)
            async with C.Http1Transport() as transport:
                got = await transport.send(_request(f"http://127.0.0.1:{port}/metrics", max_bytes=16 * 2**20,
                                                    body_check=check_over))
            outcomes.append(got.outcome)
            server.close()
            await server.wait_closed()
        return outcomes

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        outcomes = asyncio.run(go())
        gc.collect()
        garbage = list(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    assert outcomes == [C.TOO_MANY_SERIES, C.TOO_LARGE, C.NO_ANSWER] * 2
    # the client's own: frames of servewatch's code, its errors (the test's server, asyncio streams writing into a
    # reset connection, leaves cycles of its own)
    frames = [o for o in garbage if inspect.isframe(o) and o.f_globals.get("__name__", "").startswith("servewatch.")]
    errors = [type(o).__name__ for o in garbage if type(o).__module__.startswith("servewatch")]
    held = sum(len(value) for frame in frames for value in frame.f_locals.values() if isinstance(value, bytes))
    assert (len(frames), errors, held) == (0, [], 0)


def test_loopback_protocol():
    got = _loopback(lambda r, w: _answer(r, w, b"SSH-2.0-OpenSSH\r\n\r\n"))
    assert (got.outcome, got.kind, got.detail) == (C.PROTOCOL, "protocol", "malformed answer (malformed status line)")


def test_loopback_request_carries_method_body_headers_and_query():
    seen = {}

    async def echo(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        seen["head"] = head.decode()
        seen["body"] = await reader.readexactly(7)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()

    async def go():
        server, port = await _serve(echo)
        try:
            return await C.Http1Transport(keep_alive=False).send(C.HttpRequest(
                "POST", f"http://127.0.0.1:{port}/v1/completions?a=1", timeout_s=2.0, max_bytes=100,
                body=b'{"a":1}', headers=(("X-Route", "r1"),)))
        finally:
            server.close()
    got = asyncio.run(go())
    assert (got.status, got.body) == (200, b"{}")
    assert seen["head"].startswith("POST /v1/completions?a=1 HTTP/1.1\r\n")
    assert "X-Route: r1\r\n" in seen["head"] and "Content-Type: application/json\r\n" in seen["head"]
    assert seen["body"] == b'{"a":1}'


def test_send_blocking_without_a_loop():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            size = int(self.headers["Content-Length"])
            body = self.rfile.read(size)
            self.send_response(202)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        got = C.send_blocking(C.HttpRequest("POST", f"http://127.0.0.1:{server.server_port}/hook", timeout_s=2.0,
                                        max_bytes=100, body=b"hello"))
    finally:
        server.shutdown()
        server.server_close()
    assert (got.status, got.body, got.ok) == (202, b"hello", True)


def test_outcome_of_words_each_error_exactly():
    """The one line each outcome carries, to the word (what a terminal, a sink's complaint and a probe say)."""
    from servewatch.transport.http1 import ConnectFailed

    tls = ssl.SSLError(1, "x")
    tls.reason = "WRONG_VERSION_NUMBER"
    cases = [
        (ConnectFailed("", OSError(errno.EHOSTUNREACH, "No route to host")), {}, (C.CONNECT, "could not connect")),
        (ConnectFailed("no route to host", OSError(errno.EHOSTUNREACH, "x")), {}, (C.CONNECT, "no route to host")),
        (ConnectFailed("connect timeout", TimeoutError()), {}, (C.TIMEOUT, "could not connect in time")),
        (TimeoutError(), {}, (C.TIMEOUT, "timed out")),
        (TimeoutError(), {"timeout_s": 1.5}, (C.TIMEOUT, "no answer within 1.5 s")),
        (BodyTooLarge("body over 10 bytes"), {}, (C.TOO_LARGE, "body over 10 bytes")),
        (BodyTooLarge("x"), {"max_bytes": 10}, (C.TOO_LARGE, "body exceeds the 10-byte bound")),
        (NoAnswer("x"), {}, (C.NO_ANSWER, "the server closed the connection without answering")),
        (tls, {}, (C.TLS, "TLS failed (WRONG_VERSION_NUMBER)")),
        (ssl.SSLError(), {}, (C.TLS, "TLS failed (SSLError)")),
        (ConnectionResetError(), {}, (C.CUT, "connection reset")),
        (BrokenPipeError(), {}, (C.CUT, "connection reset")),
        (socket.gaierror(-2, "x"), {"host": "vllm.internal"}, (C.DNS, "the host name vllm.internal could not be resolved")),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), {"host": "h"}, (C.CONNECT, "Network is unreachable")),
        (KeyError("k"), {}, (C.PROTOCOL, "malformed answer (KeyError)")),
    ]
    for exc, given, expected in cases:
        assert C.outcome_of(exc, **given) == expected, exc
    # a ConnectFailed whose cause is a DNS failure names the host it was given
    assert C.outcome_of(ConnectFailed("w", socket.gaierror(-2, "x")), host="a.b") == (
        C.DNS, "the host name a.b could not be resolved")


def test_mock_keeps_its_requests_and_passes_answers_through():
    given = C.Failed(C.REFUSED, "connection refused", 0.5)
    transport = C.MockTransport(lambda r: given if r.url.endswith("/down") else C.Reply(201, b"made", 9.0, {"x": "y"}))

    async def go():
        down = await transport.send(_request("http://127.0.0.1:9/down"))
        up = await transport.send(_request("http://127.0.0.1:9/up", max_bytes=4))
        small = await transport.send(_request("http://127.0.0.1:9/up", max_bytes=3))
        await transport.close()
        return down, up, small
    down, up, small = asyncio.run(go())
    assert down is given
    assert (up.status, up.body, dict(up.headers)) == (201, b"made", {"x": "y"}) and up.elapsed_s < 1.0
    assert (small.outcome, small.status, small.detail) == (C.TOO_LARGE, 201, "body exceeds the 3-byte bound")
    assert [r.url for r in transport.requests] == ["http://127.0.0.1:9/down", "http://127.0.0.1:9/up",
                                                   "http://127.0.0.1:9/up"]
    assert transport.closed
    assert C.answer_parts(404) == (404, b"", {}) and C.answer_parts("t") == (200, b"t", {})
    assert C.answer_parts((503, "busy")) == (503, b"busy", {})


def test_a_keep_alive_connection_is_reused_and_a_fresh_one_is_not():
    connections = []

    async def answer_twice(reader, writer):
        connections.append(writer)
        for _ in range(2):
            await _head(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async def go():
        server, port = await _serve(answer_twice)
        url = f"http://127.0.0.1:{port}/x"
        try:
            async with C.Http1Transport() as transport:
                pooled = [await transport.send(_request(url)) for _ in range(2)]
                pooled_connections = len(connections)
                fresh = [await transport.send(_request(url, fresh=True)) for _ in range(2)]
            return pooled, pooled_connections, fresh, len(connections)
        finally:
            server.close()
    pooled, after_pooled, fresh, after_fresh = asyncio.run(go())
    assert [r.body for r in pooled + fresh] == [b"ok"] * 4
    assert (after_pooled, after_fresh) == (1, 3)


def test_without_traceback_walks_a_chain_once_even_where_it_loops():
    from servewatch.transport.http1 import without_traceback

    def raised(exc):
        try:
            raise exc
        except BaseException as caught:
            return caught
    first, second = raised(ValueError("a")), raised(KeyError("b"))
    first.__context__, second.__context__ = second, first             # a loop: each the other's context
    assert without_traceback(first) is first
    assert (first.__traceback__, second.__traceback__) == (None, None)
