"""The proxy's compiled pump (servewatch/proxy/_pump.c): a streamed body moved between the sockets by a native
thread once its head is forwarded, its reads counted afterwards. The pump itself over socket pairs (what it
forwards, keeps and says when it stops), then the proxy with the pump and with the event loop moving the body
over real loopback sockets: the same bytes, the same records, and ends (the client gone, the upstream reset or
silent, a client that does not read) as the event loop's."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import select
import socket
import struct
import time

import pytest

from servewatch.load import records as R
from servewatch.proxy import server
from tests.processes import without_module
from tests.test_proxy import Running, _completion_event, _post, _until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pump():
    """servewatch.proxy._pump (skipped where it was not built; under CI=true, where `pip install -e .` builds it,
    a failure)."""
    from tests.tools import in_ci

    if server._pump_built is None:
        if in_ci():
            pytest.fail("servewatch.proxy._pump was not built; under CI=true `pip install -e .` builds it",
                        pytrace=False)
        pytest.skip("servewatch.proxy._pump was not built (pip install -e . builds it where a C compiler is)")
    return server._pump_built


@pytest.fixture(params=["pump", "event loop"])
def pump_path(request, pump):
    """Each test that takes it runs once with the pump moving streamed bodies and once with the event loop."""
    assert server.pump_path(request.param == "pump") == request.param
    yield request.param
    server.pump_path()


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    """A coroutine run to its end on asyncio's event loop, and on uvloop's (the proxy's where it is installed:
    it sends what a callback writes only after that poll's callbacks, so a pump starts a turn later)."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory = uvloop.new_event_loop
    else:
        factory = None

    def run(coro):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    return run


# -- the pump over socket pairs -----------------------------------------------------------------------

class Pair:
    """A pump between two socket pairs: `up` is the upstream's end (this test writes it), `client` the
    client's (this test reads it)."""

    def __init__(self, module, limit: int = 2**20, drain_every: int = 0):
        self.hub = module.Hub(drain_every=drain_every)
        self.up, up_pumped = socket.socketpair()
        client_pumped, self.client = socket.socketpair()
        for s in (up_pumped, client_pumped):
            s.setblocking(False)
        self.pump = self.hub.pump(7, up_pumped.fileno(), client_pumped.fileno(), limit)
        up_pumped.close()                         # the pump holds descriptors of its own
        client_pumped.close()

    def stopped(self, limit_s: float = 10.0) -> list[int]:
        """The hub's word that the pump stopped (bounded; the bound is not the measure)."""
        ready, _, _ = select.select([self.hub.fd], [], [], limit_s)
        assert ready, "the pump did not stop"
        return self.hub.done()

    def forwarded(self, n: int) -> bytes:
        """What the client end got: `n` bytes (bounded wait)."""
        self.client.settimeout(10)
        out = b""
        while len(out) < n:
            got = self.client.recv(n - len(out))
            assert got
            out += got
        return out

    def send_each(self, parts: list[bytes], held: int = 0) -> None:
        """Each part written once the one before is forwarded, so the pump reads each on its own (of the last,
        all but its last `held` bytes)."""
        for i, part in enumerate(parts):
            self.up.sendall(part)
            part = part[:len(part) - held] if i == len(parts) - 1 else part
            assert self.forwarded(len(part)) == part

    def close(self) -> None:
        self.pump.take()
        self.hub.close()
        self.up.close()
        self.client.close()


def _chunks(events: list[bytes]) -> list[bytes]:
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events]


EVENTS = [_completion_event(t, None, None) for t in ("a", " b", "c", "")] + [b"data: [DONE]\n\n"]


@pytest.mark.parametrize("cut", ["chunk", "byte", "odd"])
def test_the_pump_forwards_each_read_and_stops_at_the_bodys_end(pump, cut):
    """Reads of whole chunks, of one byte, of cuts anywhere: each forwarded as read and kept with its time, the
    pump stopping (END, told through the hub) with the read that ends the last chunk, whose part of that chunk
    it does not send (Python sends it once it has counted the reads: Upstream.unpump)."""
    whole = b"".join(_chunks(EVENTS)) + b"0\r\n\r\n"
    if cut == "chunk":
        parts = [*_chunks(EVENTS), b"0\r\n\r\n"]
    elif cut == "byte":
        parts = [whole[i:i + 1] for i in range(len(whole))]
    else:
        parts = [whole[i:i + 23] for i in range(0, len(whole), 23)]
    pair = Pair(pump)
    try:
        before = time.time()
        held = min(len(b"0\r\n\r\n"), len(parts[-1]))     # the last chunk's bytes in the last read
        pair.send_each(parts, held)
        assert pair.stopped() == [7]
        after = time.time()
        assert pair.client.recv(16) == b""         # the pump's end of it closed: nothing more came
        data, ends, times, sent, reason, err = pair.pump.take()
        assert (data, sent, reason, err) == (whole, len(whole) - held, pump.END, 0)
        assert ends == [sum(map(len, parts[:i + 1])) for i in range(len(parts))]      # one read a part
        assert times == sorted(times) and before <= times[0] and times[-1] <= after
        assert not pair.pump.running and pair.pump.last == times[-1]
    finally:
        pair.close()


@pytest.mark.parametrize("tail, how", [
    (b"5;ext=1\r\nhello\r\n0\r\n\r\n", "a chunk extension"),
    (b"0\r\nX-Trailer: 1\r\n\r\n", "a trailer"),
    (b"0\r\n\r\nHTTP", "bytes after the end"),
    (b"5\r\nhelloXY", "no CRLF after a chunk"),
    (b"123456789\r\n", "a size of nine digits"),
    (b"\r\n", "an empty size line"),
])
def test_framing_the_pump_does_not_follow_goes_back_to_the_parser(pump, tail, how):
    """Anything but plain chunks and a last chunk without a trailer: forwarded, then handed back (FRAMING) for
    the parser in Python to read."""
    pair = Pair(pump)
    try:
        first = _chunks(EVENTS[:1])[0]
        pair.send_each([first, tail])
        assert pair.stopped() == [7]
        data, ends, _, sent, reason, _ = pair.pump.take()
        assert (data, ends, sent, reason) == (first + tail, [len(first), len(first) + len(tail)], len(data),
                                              pump.FRAMING), how
    finally:
        pair.close()


def test_the_pump_stops_at_what_it_keeps_at_most(pump):
    """LIMIT: a read that brings what it keeps to its bound is forwarded, then the pump stops."""
    chunks = _chunks(EVENTS)
    pair = Pair(pump, limit=len(chunks[0]) + 1)
    try:
        pair.send_each(chunks[:2])
        assert pair.stopped() == [7]
        data, _, _, sent, reason, _ = pair.pump.take()
        assert (data, sent, reason) == (b"".join(chunks[:2]), len(data), pump.LIMIT)
    finally:
        pair.close()


def test_a_client_that_does_not_read_stops_the_pump_with_its_rest_unsent(pump):
    """SLOW: the client's socket full, the pump stops with the read in hand, saying how much of it was sent;
    nothing more is read from the upstream (its bytes wait in the upstream's socket)."""
    pair = Pair(pump)
    chunk = _chunks([b"data: " + b"x" * 8000 + b"\n\n"])[0]
    try:
        pair.up.setblocking(False)
        written = 0
        words = []
        left = chunk
        while not words:
            try:
                n = pair.up.send(left)                 # whole chunks, however the socket takes them
                written += n
                left = left[n:] or chunk
            except (BlockingIOError, BrokenPipeError):     # (stopped: its descriptor was the socket's last)
                pass
            readable, writable, _ = select.select([pair.hub.fd], [pair.up], [], 10)
            assert readable or writable, "neither the pump stopped nor the upstream's socket took more"
            if readable:
                words = pair.hub.done()
        data, _, _, sent, reason, _ = pair.pump.take()
        assert words == [7] and reason == pump.SLOW and 0 <= sent < len(data) <= written
    finally:
        pair.close()


def test_a_client_gone_stops_the_pump_with_the_write_error(pump):
    """CLIENT: the write's errno said; what it did not send is left for the loop's transport to meet."""
    pair = Pair(pump)
    try:
        pair.client.close()
        first = _chunks(EVENTS[:1])[0]
        pair.up.sendall(first)
        assert pair.stopped() == [7]
        data, _, _, sent, reason, err = pair.pump.take()
        assert (data, sent, reason) == (first, 0, pump.CLIENT) and err in (errno.EPIPE, errno.ECONNRESET)
    finally:
        pair.close()


def test_an_upstream_end_is_left_for_the_loop_to_read(pump):
    """UPSTREAM: the pump stops without reading the end (the loop's transport reads it, and what came before it)."""
    pair = Pair(pump)
    try:
        pair.up.shutdown(socket.SHUT_WR)
        assert pair.stopped() == [7]
        data, ends, _, sent, reason, _ = pair.pump.take()
        assert (data, ends, sent, reason) == (b"", [], 0, pump.UPSTREAM)
    finally:
        pair.close()


def test_a_running_pump_hands_its_reads_over_and_goes_on(pump):
    """Pump.drain: the reads kept so far (each sent whole) handed over while the pump goes on, each once; the
    hub asks for it (Hub.drain_due) once its pumps made `drain_every` reads since Python last counted them; a
    stopped pump's reads are take's, not drain's."""
    pair = Pair(pump, drain_every=2)
    chunks = _chunks(EVENTS)
    try:
        assert pair.pump.drain() is None                   # nothing read yet
        pair.send_each(chunks[:1])
        assert pair.pump.drain() == (chunks[0], [len(chunks[0])], [pair.pump.last])
        pair.send_each(chunks[1:3])                         # the hub's second read since the last: a drain asked
        ready, _, _ = select.select([pair.hub.fd], [], [], 10)
        assert ready and pair.hub.done() == [] and pair.hub.drain_due()
        assert not pair.hub.drain_due()                     # said once; the count starts again
        data, ends, times = pair.pump.drain()
        assert (data, ends) == (chunks[1] + chunks[2], [len(chunks[1]), len(chunks[1]) + len(chunks[2])])
        assert times == sorted(times) and pair.pump.running and pair.pump.drain() is None
        pair.send_each([*chunks[3:], b"0\r\n\r\n"], held=5)
        words = []
        while not words:                                    # (a word may be a drain's: the count reached 2)
            words = pair.stopped()
        assert words == [7] and pair.pump.drain() is None   # stopped: its reads are take's
        data, ends, _, sent, reason, _ = pair.pump.take()
        rest = b"".join(chunks[3:]) + b"0\r\n\r\n"
        assert (data, sent, reason) == (rest, len(rest) - 5, pump.END) and len(ends) == len(chunks) - 2
    finally:
        pair.close()


def test_the_hub_asks_for_no_drain_unless_told_to(pump):
    """Hub() without drain_every never asks for one; a negative count is refused."""
    pair = Pair(pump)
    try:
        pair.send_each(_chunks(EVENTS)[:3])
        assert not pair.hub.drain_due() and select.select([pair.hub.fd], [], [], 0)[0] == []
    finally:
        pair.close()
    with pytest.raises(ValueError):
        pump.Hub(drain_every=-1)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_pump_taken_back_stops_at_once_and_closes_its_descriptors(pump):
    """TAKEN: Python takes a running pump back (a deadline, a snapshot, the proxy closing): no word through the
    hub, its descriptors closed at once, what it read handed over once; a second take hands over nothing."""
    pair = Pair(pump)
    try:
        before = _fds()
        first = _chunks(EVENTS[:1])[0]
        pair.send_each([first])
        assert pair.pump.running
        data, ends, _, sent, reason, _ = pair.pump.take()
        assert (data, ends, sent, reason) == (first, [len(first)], len(first), pump.TAKEN)
        assert _fds() == before - 2 and not pair.pump.running
        assert pair.pump.take()[:2] == (b"", [])
        assert pair.hub.done() == []
        with pytest.raises(BrokenPipeError):      # its descriptor was the socket's last: closed
            pair.up.sendall(first)
    finally:
        pair.close()


# -- the proxy, the pump and the event loop side by side ---------------------------------------------

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class _Scripted:
    """An upstream that answers each request by a script: a list of byte strings, each written once the one
    before is in the proxy's hands (drained), with `pause_s` between; a number waits that many seconds, an
    asyncio.Event until the test sets it, "RESET" ends the connection with a reset, "HOLD" keeps it silent until
    the proxy closes it."""

    def __init__(self, script: list, pause_s: float = 0.002):
        self.script, self.pause_s = script, pause_s
        self.server = None
        self.port = None
        self.connections = 0

    async def __aenter__(self):
        async def handle(reader, writer):
            self.connections += 1
            try:
                while await self.answer(reader, writer):
                    pass
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def answer(self, reader, writer) -> bool:
        """One request answered by the script; whether the connection is kept for the next."""
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        for part in self.script:
            if part == "RESET":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return False
            if part == "HOLD":
                await reader.read()
                return False
            if isinstance(part, float):
                await asyncio.sleep(part)
                continue
            if isinstance(part, asyncio.Event):
                await part.wait()
                continue
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(self.pause_s)
        return True

    async def __aexit__(self, *exc):
        self.server.close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


def _pumped(monkeypatch) -> list:
    """The pumps taken back during a run (each call of Upstream.unpump that found one)."""
    calls = []
    unpump = server.Upstream.unpump

    def spy(self):
        if self.pump is not None:
            calls.append(self.pump.ident)
        return unpump(self)

    monkeypatch.setattr(server.Upstream, "unpump", spy)
    return calls


async def _read_all(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = b""
    try:
        data = await asyncio.wait_for(reader.read(-1), 20)
    except ConnectionError:
        pass
    writer.close()
    return data


async def _streamed_until(port: int, got: bytes, max_tokens: int):
    """A streamed completion sent to the proxy on `port`, read until the client has `got` (the bytes so far):
    the connection's reader and writer, for the test to go on."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post("/v1/completions", {"model": "m", "prompt": "p", "max_tokens": max_tokens, "stream": True}))
    await writer.drain()
    assert await asyncio.wait_for(reader.readexactly(len(got)), 20) == got
    return reader, writer


def _events(n: int) -> list[bytes]:
    texts = [" w%d" % i if i % 7 else "x\\u00e9" for i in range(n)]       # an escaped piece now and then
    return [_completion_event(t, "length" if i == n - 1 else None, (5, i + 1)) for i, t in enumerate(texts)]


def _summary(rec) -> tuple:
    return (rec.error, rec.error_detail, rec.http_status, rec.output_tokens, rec.input_tokens, rec.finish_reason,
            rec.token_source, rec.itl_exact, len(rec.chunk_t_s), list(rec.chunk_tokens))


@pytest.mark.parametrize("drain_every", [server.PUMP_DRAIN_READS, 1, 3])
def test_a_stream_through_the_pump_is_forwarded_and_recorded_as_through_the_loop(pump_path, run, monkeypatch,
                                                                                 drain_every):
    """Chunks one a read, several a read and cut anywhere, with the pump and with the event loop: the bytes the
    upstream sent, unchanged, and the same record (counts, reason, one chunk time per chunk), whether the pump's
    reads are counted at its end alone or every read or every few (drain_every) as well."""
    monkeypatch.setattr(server, "PUMP_DRAIN_READS", drain_every)
    chunks = _chunks(_events(60)) + _chunks([b"data: [DONE]\n\n"]) + [b"0\r\n\r\n"]
    body = b"".join(chunks)
    script = [HEAD, *chunks[:20], b"".join(chunks[20:30]), *[body[i:i + 41] for i in range(
        sum(map(len, chunks[:30])), len(body), 41)]]
    calls = _pumped(monkeypatch)

    async def go():
        async with _Scripted(script) as up, Running(up.url, keep_itl=True) as proxy:
            raw = await _read_all(proxy.port, _post("/v1/completions", {"model": "m", "prompt": "p",
                                                                          "max_tokens": 60, "stream": True}))
            await _until(lambda: proxy.records)
            return raw, proxy.records, proxy.proxy.pumped

    raw, [rec], left = run(go())
    assert raw == HEAD + body                                  # byte for byte
    assert _summary(rec)[:8] == (None, None, 200, 60, 5, "length", "server", True), _summary(rec)
    assert list(rec.chunk_tokens) == [1] * 60 and list(rec.chunk_t_s) == sorted(rec.chunk_t_s)   # one a chunk
    assert (len(calls) > 0) == (pump_path == "pump") and left == {}


def test_a_pumped_stream_is_counted_before_its_end(pump, run, monkeypatch):
    """The pump's reads are counted while it moves the stream, every PUMP_DRAIN_READS reads (all streams
    together), not only at the stream's end: streams that end together would otherwise each have their whole
    body counted at that moment, with the clients' next requests waiting behind it. Mid-stream (the upstream
    held after 20 chunks, each read alone), the chunks counted are those the pump read, but for the last few;
    the record is whole."""
    monkeypatch.setattr(server, "PUMP_DRAIN_READS", 4)
    assert server.pump_path(True) == "pump"
    chunks = _chunks(_events(30))
    calls = _pumped(monkeypatch)

    async def go():
        gate = asyncio.Event()
        script = [HEAD, *chunks[:20], gate, *chunks[20:], b"0\r\n\r\n"]
        async with _Scripted(script) as up, Running(up.url, keep_itl=True) as proxy:
            reader, writer = await _streamed_until(proxy.port, HEAD + b"".join(chunks[:20]), 30)
            [ex] = proxy.proxy.inflight
            await _until(lambda: len(ex.state.chunk_t) >= 20 - 4)
            mid = (len(ex.state.chunk_t), ex.upstream.pump is not None, len(calls))
            gate.set()
            rest = await asyncio.wait_for(reader.readexactly(len(b"".join(chunks[20:])) + 5), 20)
            writer.close()
            await _until(lambda: proxy.records)
            return mid, rest, proxy.records

    try:
        (counted, pumping, taken), rest, [rec] = run(go())
    finally:
        server.pump_path()
    assert 16 <= counted <= 20 and pumping and taken == 0      # counted while the pump still moved the stream
    assert rest == b"".join(chunks[20:]) + b"0\r\n\r\n"
    assert rec.ok and rec.output_tokens == 30 and len(rec.chunk_t_s) == 30 and len(calls) >= 1


class _Handing:
    """A running pump whose next drain hands over `reads` (made up: data, ends, times) instead of its own: what a
    drain does with reads that end the exchange (a framing the parser refuses). Its take adds `more` reads to the
    pump's own, read and not sent (the client took none of them). Each other call goes to the pump."""

    def __init__(self, real, reads, more):
        self.real, self.reads, self.more, self.taken = real, reads, more, False

    ident = property(lambda self: self.real.ident)
    running = property(lambda self: self.real.running)

    def drain(self):
        reads, self.reads = self.reads, None
        return reads if reads is not None else self.real.drain()

    def take(self):
        self.taken = True
        data, ends, times, sent, reason, rest = self.real.take()
        extra, extra_ends, extra_times = self.more
        return (data + extra, ends + [len(data) + end for end in extra_ends], times + extra_times, sent, reason,
                rest)


def test_a_drain_whose_reads_end_the_exchange_counts_none_after_and_takes_the_stream_back(pump, run, monkeypatch):
    """Upstream.drain, called while a pumped stream is held mid-body: with nothing new read, the pump goes on (the
    stream stays pumped); reads that end the exchange (a chunk, then a size line the parser refuses, then a chunk)
    count what came before the refusal and nothing after it, and the stream is taken back from the pump; what the
    pump read after those (taken back with it, the client not having had it) is neither counted nor written to a
    client the exchange no longer has."""
    monkeypatch.setattr(server, "PUMP_DRAIN_READS", 4)
    assert server.pump_path(True) == "pump"
    chunks = _chunks(_events(30))

    async def go():
        gate = asyncio.Event()
        async with _Scripted([HEAD, *chunks[:20], gate, *chunks[20:], b"0\r\n\r\n"]) as up, \
                Running(up.url, keep_itl=True) as proxy:
            reader, writer = await _streamed_until(proxy.port, HEAD + b"".join(chunks[:20]), 30)
            [ex] = proxy.proxy.inflight
            upstream = ex.upstream
            await _until(lambda: len(ex.state.chunk_t) >= 20 - 4)
            upstream.drain()                                  # what the pump read so far: all 20 chunks
            upstream.drain()                                  # nothing new: the pump goes on
            steady = (len(ex.state.chunk_t), upstream.pump is not None and upstream.pump.running)
            bad = b"zz\r\n"
            data = chunks[20] + bad + chunks[21]
            now = time.time()
            handing = _Handing(upstream.pump, (data, [len(chunks[20]), len(chunks[20]) + len(bad), len(data)],
                                               [now, now, now]), (chunks[22], [len(chunks[22])], [now]))
            upstream.pump = handing
            upstream.drain()
            after = (upstream.pump, handing.taken, upstream.exchange)
            gate.set()
            writer.close()
            await _until(lambda: proxy.records)
            return steady, after, proxy.records

    try:
        steady, (pumped, taken, exchange), [rec] = run(go())
    finally:
        server.pump_path()
    assert steady == (20, True)
    assert pumped is None and taken and exchange is None        # taken back; the exchange ended
    assert rec.error == R.STREAM_CUT and len(rec.chunk_t_s) == 21, _summary(rec)   # the chunk before, none after


def test_a_stream_past_what_a_pump_holds_goes_to_a_new_pump(pump, run, monkeypatch):
    """A pump stops at what it moves at most (PUMP_HOLD, 1 MiB; here a few chunks); the stream, still between two
    chunks of the same exchange, goes to a pump again rather than staying in the event loop: several pumps for one
    stream, the bytes and the record whole."""
    monkeypatch.setattr(server, "PUMP_HOLD", 1000)
    assert server.pump_path(True) == "pump"
    calls = _pumped(monkeypatch)
    chunks = _chunks(_events(60)) + [b"0\r\n\r\n"]
    try:
        raw, [rec] = _through(run, [HEAD, *chunks], keep_itl=True)
    finally:
        server.pump_path()
    assert raw == HEAD + b"".join(chunks)
    assert rec.ok and rec.output_tokens == 60 and len(rec.chunk_t_s) == 60, _summary(rec)
    # each pump moves 1,000 bytes and the rest of the read that reached them (a chunk at most)
    assert len(set(calls)) >= sum(map(len, chunks)) // (1000 + max(map(len, chunks))), len(set(calls))


def _through(run, script: list, pause_s: float = 0.002, **config) -> tuple:
    """One streamed request through a proxy (`config`) to a _Scripted upstream, run by `run`: (what the client
    got, the records)."""
    async def go():
        async with _Scripted(script, pause_s) as up, Running(up.url, **config) as proxy:
            raw = await _read_all(proxy.port, _post("/v1/completions", {"model": "m", "prompt": "p",
                                                                          "max_tokens": 60, "stream": True}))
            await _until(lambda: proxy.records)
            return raw, proxy.records
    return run(go())


def _both_ways(script: list, summary, **config) -> dict:
    """One streamed request against a _Scripted upstream with the pump, then with the event loop: what
    `summary(raw response, record)` says of each."""
    out = {}
    for path in ("pump", "event loop"):
        server.pump_path(path == "pump")
        try:
            raw, [rec] = _through(asyncio.run, script, **config)
        finally:
            server.pump_path()
        out[path] = summary(raw, rec)
    return out


def test_the_pump_and_the_loop_record_alike(pump):
    """The same scripted stream through each path in turn: the same record but for the times."""
    chunks = _chunks(_events(40)) + _chunks([b"data: [DONE]\n\n"]) + [b"0\r\n\r\n"]
    out = _both_ways([HEAD, *chunks], lambda raw, rec: (raw, _summary(rec)), keep_itl=True)
    assert out["pump"] == out["event loop"]


def test_a_client_gone_mid_stream_ends_as_through_the_loop(pump_path, run, monkeypatch):
    """The client closes mid-stream: the next writes to it fail, client_abort, the upstream connection cut,
    every chunk read until then counted."""
    chunks = _chunks(_events(60))
    calls = _pumped(monkeypatch)

    async def go():
        async with _Scripted([HEAD, *chunks, "HOLD"], pause_s=0.02) as up, \
                Running(up.url, keep_itl=True) as proxy:
            reader, writer = await _streamed_until(proxy.port, HEAD + b"".join(chunks[:20]), 60)
            writer.close()
            await _until(lambda: proxy.records)
            return proxy.records, proxy.proxy.pumped

    [rec], left = run(go())
    assert rec.error == R.CLIENT_ABORT and rec.http_status == 200 and 20 <= rec.output_tokens < 60, _summary(rec)
    assert len(rec.chunk_t_s) == rec.output_tokens and left == {}
    assert (len(calls) > 0) == (pump_path == "pump")


def test_an_upstream_reset_mid_stream_ends_as_through_the_loop(pump_path, run, monkeypatch):
    """The upstream resets mid-stream: stream_cut, the client's connection cut (not ended as if whole), every
    chunk before the reset forwarded and counted."""
    chunks = _chunks(_events(25))
    calls = _pumped(monkeypatch)
    raw, [rec] = _through(run, [HEAD, *chunks, "RESET"], keep_itl=True)
    assert raw == HEAD + b"".join(chunks)
    assert rec.error == R.STREAM_CUT and rec.output_tokens == 25 and len(rec.chunk_t_s) == 25, _summary(rec)
    assert (len(calls) > 0) == (pump_path == "pump")


def test_an_upstream_reset_is_said_alike_on_both_paths(pump):
    """The reset is the loop's to read on both paths (the pump stops without reading it): the same words."""
    out = _both_ways([HEAD, *_chunks(_events(10)), "RESET"], lambda raw, rec: (rec.error, rec.error_detail))
    assert out["pump"] == out["event loop"]


def test_an_upstream_silent_mid_stream_times_out_as_through_the_loop(pump_path, run, monkeypatch):
    """The upstream goes silent mid-stream past read_idle_timeout_s: timeout, the client's connection cut, the
    chunks before counted, and the silence measured from the last read (the pump's time of it)."""
    chunks = _chunks(_events(12))
    calls = _pumped(monkeypatch)
    # (the chunks 0.05 s apart: the stream outlasts the bound, so its silence is what counts)
    raw, [rec] = _through(run, [HEAD, *chunks, "HOLD"], 0.05, read_idle_timeout_s=0.4, sweep_interval_s=0.05,
                          keep_itl=True)
    assert raw == HEAD + b"".join(chunks)
    assert rec.error == R.TIMEOUT and rec.output_tokens == 12 and len(rec.chunk_t_s) == 12
    assert 0.4 <= rec.e2e_s - rec.chunk_t_s[-1] < 0.4 + 0.5      # silent past the bound, by a sweep or so
    assert (len(calls) > 0) == (pump_path == "pump")


def test_a_slow_reader_of_a_stream_pauses_the_upstream(pump_path, run, monkeypatch):
    """Backpressure through the pump: a client that does not read an SSE stream holds the upstream, not the
    proxy's memory (the pump hands the stream back to the loop's transport, whose backpressure pauses the
    upstream); read at last, the bytes are whole and the record counts every chunk."""
    event = b"data: " + json.dumps({"choices": [{"index": 0, "text": "y" * 4000, "finish_reason": None}]},
                                   separators=(",", ":")).encode() + b"\n\n"
    n = 16 * 2**20 // len(event)
    chunk = _chunks([event])[0]
    script = [HEAD, 0.05, *[chunk * 64] * (n // 64), b"0\r\n\r\n"]       # (the head read alone: then pumped)
    calls = _pumped(monkeypatch)

    async def go():
        async with _Scripted(script, pause_s=0) as up, Running(up.url, keep_itl=True) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port, limit=2**16)
            writer.write(_post("/v1/completions", {"model": "m", "prompt": "p", "stream": True}))
            await _until(lambda: proxy.proxy.inflight and next(iter(proxy.proxy.inflight)).upstream is not None
                         and next(iter(proxy.proxy.inflight)).upstream.paused)
            [client] = proxy.proxy.clients
            buffered = client.transport.get_write_buffer_size()
            want = len(HEAD) + len(chunk) * 64 * (n // 64) + 5
            got = 0
            while got < want:
                part = await reader.read(2**20)
                assert part
                got += len(part)
            writer.close()
            await _until(lambda: proxy.records)
            return buffered, proxy.records

    buffered, [rec] = run(go())
    assert buffered < 4 * 2**20                      # a few buffers, not the 16 MiB
    assert rec.error == R.TRUNCATED or rec.error is None, _summary(rec)
    assert len(rec.chunk_t_s) == 64 * (n // 64)
    assert (len(calls) > 0) == (pump_path == "pump")


def test_without_the_pump_built_the_event_loop_moves_the_body():
    """The extension is optional: where it was not built a proxy streams through the event loop (and asking for
    the pump says it was not built)."""
    done = without_module("servewatch.proxy._pump", """
import asyncio
from servewatch.proxy import server
assert server._pump is None and server.PUMP_PATH == "event loop", server.PUMP_PATH
from tests.test_proxy_pump import HEAD, Running, _Scripted, _chunks, _events, _post, _read_all, _until

async def go():
    chunks = _chunks(_events(5)) + [b"0\\r\\n\\r\\n"]
    async with _Scripted([HEAD, *chunks]) as up, Running(up.url) as proxy:
        raw = await _read_all(proxy.port, _post("/v1/completions", {"model": "m", "prompt": "p", "stream": True}))
        await _until(lambda: proxy.records)
        assert proxy.proxy._hub is None and raw == HEAD + b"".join(chunks) and proxy.records[0].output_tokens == 5
asyncio.run(go())
try:
    server.pump_path(True)
except RuntimeError as exc:
    print(exc)
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "servewatch.proxy._pump was not built"


def test_a_kept_alive_client_s_next_request_takes_the_pooled_connection(pump_path, run, monkeypatch):
    """A client (a thread of its own, as a client is a process of its own) that sends its next request the moment
    it has a stream's end (the body's last chunk, which the pump leaves to Python): each request goes up the one
    pooled connection, not a new one, and each is recorded; with the pump, the later streams of that connection are
    pumped too, not only its first."""
    calls = _pumped(monkeypatch)
    chunks = _chunks(_events(8)) + [b"0\r\n\r\n"]
    body = json.dumps({"model": "m", "prompt": "p", "max_tokens": 8, "stream": True}).encode()
    request = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    def client(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            for _ in range(20):
                sock.sendall(request)
                got = b""
                while not got.endswith(b"\r\n0\r\n\r\n"):
                    part = sock.recv(65536)
                    assert part
                    got += part

    async def go():
        async with _Scripted([HEAD, *chunks]) as up, Running(up.url) as proxy:
            await asyncio.to_thread(client, proxy.port)
            await _until(lambda: len(proxy.records) == 20)
            return up.connections, proxy.records

    connections, records = run(go())
    assert connections == 1 and all(rec.ok and rec.output_tokens == 8 for rec in records)
    assert (len(set(calls)) >= 10) == (pump_path == "pump"), len(set(calls))


def test_the_pump_is_chosen_where_built_unless_the_event_loop_is_asked_for(pump, monkeypatch):
    """The pump moves bodies wherever it was built (docs/site/figures.md says how the two compare), with no
    setting; SERVEWATCH_PROXY_PUMP=0 asks for the event loop, any other value is the default."""
    monkeypatch.delenv("SERVEWATCH_PROXY_PUMP", raising=False)
    assert server.pump_path() == "pump" and server._pump is pump
    monkeypatch.setenv("SERVEWATCH_PROXY_PUMP", "0")
    assert server.pump_path() == "event loop" and server._pump is None
    monkeypatch.setenv("SERVEWATCH_PROXY_PUMP", "1")
    assert server.pump_path() == "pump" and server._pump is pump
