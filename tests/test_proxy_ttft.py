"""The proxy's TTFT from an upstream with a known delay before its first byte (issue 50).

An engine takes its time to prefill: nothing, not even the response head, comes back until then. The TTFT the
proxy records must hold that time: it is counted from the request (written upstream), never from the upstream's
first byte. Planted in a clone, the inline read path's chunk times measured from the first byte (server.py's
`t - ex.first_byte`) passed the whole suite: every TTFT short by the engine's first-byte time.

The upstream here reads the request, waits DELAY_S, then sends the head, then each event as a chunk of its own,
each only after the client has the bytes before it (so each is a read of its own: the inline path for the
events). A second shape sends the head and the first event in one write after the delay (the parser's path).
Bounds: at least DELAY_S (the upstream waited that long after it had the request) and at most what the client
itself measured from writing its request to holding the first event's bytes (the proxy's interval lies inside)."""

from __future__ import annotations

import asyncio
import time

import pytest

from servewatch.proxy import server as proxy_server
from tests.test_proxy import Running, _completion_event, _post, count_path  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(60)

DELAY_S = 0.3        # the upstream's time before its first byte (its prefill): a behaviour under test
EVENTS = [_completion_event(text, "length" if i == 2 else None, None) for i, text in enumerate(("a", " b", " c"))]
EVENTS.append(b"data: [DONE]\n\n")
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
CHUNKS = [b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS] + [b"0\r\n\r\n"]


class DelayedUpstream:
    """Answers one streamed completion: DELAY_S after the request, then piece by piece, each piece only once
    the client has every byte before it (`pieces`: the writes, after the delay, in order)."""

    def __init__(self, pieces: list[bytes]):
        self.pieces = pieces
        self.client_has = [asyncio.Event() for _ in pieces]
        self.had_request: float | None = None
        self.server = None
        self.port = None

    def client_read(self, total: int) -> None:
        """The client holds `total` bytes of the response: each piece it holds whole is marked."""
        end = 0
        for piece, has in zip(self.pieces, self.client_has):
            end += len(piece)
            if total >= end:
                has.set()

    async def __aenter__(self):
        async def handle(reader, writer):
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                self.had_request = time.time()
                await asyncio.sleep(DELAY_S)          # the engine's prefill: no byte before it ends
                for piece, has in zip(self.pieces, self.client_has):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.wait_for(has.wait(), 10)
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _through_the_proxy(pieces: list[bytes], monkeypatch):
    """One streamed request through a proxy to a DelayedUpstream: (its record, the client's own TTFT, the
    upstream reads that took the inline path, what the client got, the proxy's live sample after it)."""
    inline_reads = []
    plain = proxy_server.Upstream.data_received

    def counted(self, data):
        if self.exchange is not None:
            inline_reads.append(self.inline)
        plain(self, data)

    monkeypatch.setattr(proxy_server.Upstream, "data_received", counted)
    compiled = proxy_server._reader        # the compiled data_received, set on each Upstream (count_path)
    if compiled is not None:
        def reader(up):
            inner = compiled(up)

            def counted_compiled(data):
                if up.exchange is not None:
                    inline_reads.append(up.inline)
                inner(data)
            return counted_compiled

        monkeypatch.setattr(proxy_server, "_reader", reader)
    first_event_at = len(HEAD) + len(CHUNKS[0])

    async def go():
        async with DelayedUpstream(pieces) as up, Running(up.url) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            request = _post("/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 3, "stream": True})
            asked = time.time()
            writer.write(request)
            got, first = b"", None
            while not got.endswith(b"0\r\n\r\n"):
                data = await asyncio.wait_for(reader.read(65536), 10)
                assert data, got
                got += data
                if first is None and len(got) >= first_event_at:
                    first = time.time()
                up.client_read(len(got))
            writer.close()
            await _until(lambda: proxy.records)
            live = proxy.proxy.snapshot(time.time())
            return proxy.records[0], first - asked, inline_reads, got, live

    return asyncio.run(go())


async def _until(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("shape", ["inline", "parser", "pump"])
def test_ttft_holds_the_upstreams_delay_before_its_first_byte(shape, count_path, monkeypatch):
    if shape == "pump" and proxy_server._pump_built is None:
        pytest.skip("servewatch.proxy._pump was not built (tests/test_proxy_pump.py says so under CI=true)")
    # the loop's two read paths with the event loop moving the body; then the body moved by the compiled pump
    monkeypatch.setattr(proxy_server, "_pump", proxy_server._pump_built if shape == "pump" else None)
    if shape in ("inline", "pump"):     # the head, then each event: reads of their own (the inline path's)
        pieces = [HEAD, *CHUNKS]
    else:                       # the head and the first event in one read (the parser's path), then the rest
        pieces = [HEAD + CHUNKS[0], *CHUNKS[1:]]
    rec, client_ttft, inline_reads, got, live = _through_the_proxy(pieces, monkeypatch)
    assert got == HEAD + b"".join(CHUNKS)                       # forwarded unchanged
    assert (rec.error, rec.http_status, rec.output_tokens, rec.finish_reason) == (None, 200, 3, "length")
    # the path under test was the one taken: the first event's read inline or not, or the pump's (the loop read
    # the head alone)
    if shape == "pump":
        assert inline_reads == [False]
    else:
        assert inline_reads[1 if shape == "inline" else 0] is (shape == "inline")
    # from the request: at least the upstream's delay, at most what the client saw around it
    assert DELAY_S <= rec.ttft_s <= client_ttft, (rec.ttft_s, client_ttft)
    assert DELAY_S <= rec.proxy["first_byte_s"] <= round(rec.ttft_s, 7)         # (kept to 7 decimals)
    assert DELAY_S <= rec.e2e_s and rec.ttft_s <= rec.e2e_s
    # the live TTFT p99 that requests_no_token's threshold rests on: this one stream's TTFT
    assert (live.ttft_p99_s, live.ttft_count, live.in_flight) == (rec.ttft_s, 1, 0)
