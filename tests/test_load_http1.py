"""The hand-written HTTP/1.1 client against a scripted raw server: framing, bounds, keep-alive."""

from __future__ import annotations

import asyncio

import pytest

from servewatch.transport.http1 import BodyTooLarge, ConnectFailed, Endpoint, Http1Client, StreamCut

pytestmark = pytest.mark.timeout(30)


async def _scripted(responses, *, split=None, close_after=False):
    """A server answering each request on a connection with the next scripted bytes; `split`
    writes in pieces of that many bytes with a tiny pause, so the client sees arbitrary reads."""
    connections = []

    async def handle(reader, writer):
        connections.append(writer)
        try:
            for raw in responses:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if length:
                    await reader.readexactly(length)
                if raw is None:                       # read the request, answer nothing, close
                    break
                if split:
                    for i in range(0, len(raw), split):
                        writer.write(raw[i:i + split])
                        await writer.drain()
                        await asyncio.sleep(0.001)
                else:
                    writer.write(raw)
                    await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


def _chunked(*pieces: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body


async def _collect(client, path="/x"):
    response = await client.request("POST", path, b"{}")
    parts = []
    try:
        await response.stream_into(parts.append)
    finally:
        response.release()
    return response.status, b"".join(parts)


@pytest.mark.parametrize("split", [None, 1, 3, 7])
def test_chunked_body_decoded_whatever_the_read_boundaries(split):
    async def go():
        server, port, _ = await _scripted([_chunked(b"data: a\n\n", b"data: bb\n\n", b"x" * 300)], split=split)
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"))
        try:
            return await _collect(client)
        finally:
            await client.close()
            server.close()
    status, body = asyncio.run(go())
    assert status == 200 and body == b"data: a\n\ndata: bb\n\n" + b"x" * 300


def test_keep_alive_reuses_one_connection_and_content_length_bodies():
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"

    async def go():
        server, port, conns = await _scripted([resp, _chunked(b"abc"), resp])
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"))
        try:
            out = [await _collect(client) for _ in range(3)]
        finally:
            await client.close()
            server.close()
        return out, len(conns)
    out, n_conns = asyncio.run(go())
    assert out == [(200, b"hello"), (200, b"abc"), (200, b"hello")]
    assert n_conns == 1


def test_server_closing_an_idle_connection_is_retried_on_a_fresh_one():
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    async def go():
        server, port, conns = await _scripted([resp], close_after=True)
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"))
        try:
            first = await _collect(client)
            await asyncio.sleep(0.05)          # the server has closed the pooled connection by now
            second = await _collect(client)
        finally:
            await client.close()
            server.close()
        return first, second, len(conns)
    first, second, n = asyncio.run(go())
    assert first == second == (200, b"ok") and n == 2


def test_read_until_close_body():
    async def go():
        server, port, _ = await _scripted([b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"], close_after=True)
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"))
        try:
            return await _collect(client)
        finally:
            await client.close()
            server.close()
    assert asyncio.run(go()) == (200, b"all of it")


@pytest.mark.parametrize("raw,exc", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", StreamCut),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc", StreamCut),          # cut mid-chunk
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", StreamCut),                        # cut short
    (b"garbage\r\n\r\n", StreamCut),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n", BodyTooLarge),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n", StreamCut),                  # header bound
])
def test_malformed_cut_or_oversized_responses_raise_stream_cut(raw, exc):
    async def go():
        server, port, _ = await _scripted([raw], close_after=True)
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"), max_body=1 << 20)
        try:
            with pytest.raises(exc):
                await _collect(client)
        finally:
            await client.close()
            server.close()
    asyncio.run(go())


def test_read_all_is_bounded():
    async def go():
        server, port, _ = await _scripted([_chunked(b"x" * 5000)])
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"))
        try:
            response = await client.request("GET", "/metrics")
            try:
                with pytest.raises(BodyTooLarge):
                    await response.read_all(1000)
            finally:
                response.release()
        finally:
            await client.close()
            server.close()
    asyncio.run(go())


def test_connect_refused_and_bad_urls():
    async def go():
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"))
        with pytest.raises(ConnectFailed):
            await client.request("GET", "/")
    asyncio.run(go())
    assert Endpoint.parse("127.0.0.1:8000/base/") == Endpoint("http", "127.0.0.1", 8000, "/base")
    for bad in ("ftp://x", "http://", "http://h:notaport"):
        with pytest.raises(ValueError):
            Endpoint.parse(bad)


def test_send_now_writes_at_once_and_complete_retries_a_stale_connection():
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    async def go():
        # on each connection: answer the first request, then close on the second without a word
        server, port, conns = await _scripted([resp, None])
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"))
        stamps = []
        try:
            assert client.send_now("POST", "/x", b"{}") is None          # nothing idle yet
            assert await _collect(client) == (200, b"ok")               # leaves one pooled connection
            pending = client.send_now("POST", "/x", b"{}", on_sent=lambda: stamps.append(1))
            assert pending is not None and len(stamps) == 1             # written at once
            response = await client.complete(pending)                   # stale: retried on a new one
            body = await response.read_all(100)
            response.release()
            return response.status, body, len(stamps), len(conns)
        finally:
            await client.close()
            server.close()
    assert asyncio.run(go()) == (200, b"ok", 2, 2)


def test_extra_headers_go_with_every_request_and_bad_ones_are_refused():
    """`load --header` (and a drill workload's dp_rank): the headers go on every request; a name that is not
    an HTTP token, a value with a line break, or a header the client writes itself is refused up front."""
    from servewatch.transport.http1 import checked_headers

    heads = []

    async def go():
        async def handle(reader, writer):
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            await reader.readexactly(2)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = Http1Client(Endpoint.parse(f"http://127.0.0.1:{port}"), headers=(("X-data-parallel-rank", "1"),))
        try:
            return await _collect(client)
        finally:
            await client.close()
            server.close()

    assert asyncio.run(go()) == (200, b"ok")
    assert b"\r\nX-data-parallel-rank: 1\r\n" in heads[0]
    for bad, said in ((("X Rank", "1"),), "not an HTTP token"), ((("X-Rank", "1\r\nHost: evil"),), "one line"), \
                     ((("Content-Length", "3"),), "the client's own"):
        with pytest.raises(ValueError, match=said):
            checked_headers(bad)
