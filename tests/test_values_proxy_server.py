"""Values of the proxy's recording path in servewatch/proxy/server.py (issue 50: the time base of every TTFT the proxy
records is computed here, not in exchange.py): the request's times (arrival, connected, sent upstream, each read),
the record made when it ends (at once, or a moment later on a kept-alive connection, with the end it had), the
counters and the recent TTFTs, and the live sample requests_no_token reads. Driven without sockets on a virtual
clock (the proxy's `now` and the reads' `_now`), each figure computed by hand beside the assertion."""

from __future__ import annotations

import asyncio
import json

import pytest

from servewatch.load import records as R
from servewatch.proxy import Proxy, ProxyConfig
from servewatch.proxy import server as S
from servewatch.proxy.exchange import Exchange, ProxyStream
from tests.test_proxy import _Wire, _completion_event

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENTS = [_completion_event(t, "length" if i == 2 else None, None) for i, t in enumerate(("a", " b", " c"))]
CHUNKS = [b"%x\r\n%s\r\n" % (len(e), e) for e in [*EVENTS, b"data: [DONE]\n\n"]] + [b"0\r\n\r\n"]


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _request(keep_alive: bool, max_tokens: int = 3) -> bytes:
    body = json.dumps({"model": "m", "prompt": "p", "max_tokens": max_tokens, "stream": True}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s"
            % (len(body), b"" if keep_alive else b"Connection: close\r\n", body))


def _stream(monkeypatch, reads, *, keep_alive=False, pooled=True):
    """One streamed request on a virtual clock: the client's request at 100.0 (connected through a new upstream
    connection at 100.25 unless `pooled`), then `reads` as (time, bytes) from the upstream. Returns the proxy,
    its records and the exchange."""
    clock = Clock(100.0)
    monkeypatch.setattr(S, "_now", clock)

    async def run():
        records = []
        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), on_record=lambda ex, rec: records.append((ex, rec)),
                      now=clock)
        client, wire = Client(proxy), _Wire()
        client.connection_made(wire)
        up = S.Upstream(proxy, 2**20)
        up.connection_made(_Wire())
        if pooled:
            up.idle_since = 99.5
            proxy.idle.append(up)
            client.data_received(_request(keep_alive))
        else:
            connected = asyncio.Event()

            async def create_connection(factory, host, port):
                clock.t = 100.25                      # the connection took a quarter of a second
                connected.set()
                return _Wire(), up

            loop = asyncio.get_running_loop()
            loop.create_connection = create_connection
            client.data_received(_request(keep_alive))
            await asyncio.wait_for(connected.wait(), 5)
            for _ in range(1000):                     # _connect attaches the connection right after it is made
                if client.connecting is None:
                    break
                await asyncio.sleep(0)
            assert client.connecting is None
        [ex] = proxy.inflight
        for t, data in reads:
            clock.t = t
            up.data_received(data)
        return proxy, records, ex

    Client = S.Client
    return asyncio.run(run())


@pytest.mark.parametrize("shape", ["whole-chunks", "cut"])
def test_a_stream_is_timed_from_the_request_sent_upstream(shape, monkeypatch):
    # the head at 100.5, the events at 101.0, 101.25, 101.75, the end at 102.0
    times = [100.5, 101.0, 101.25, 101.75, 102.0, 102.0]
    if shape == "whole-chunks":               # one read a chunk: the inline path for the events
        reads = list(zip(times, [HEAD, *CHUNKS]))
    else:                                     # the head with half the first event, then the rest of it: the parser's
        first = HEAD + CHUNKS[0]
        cut = len(HEAD) + 20
        reads = [(100.5, first[:cut]), (101.0, first[cut:])] + list(zip(times[2:], CHUNKS[1:]))
    proxy, [(ex, rec)], _ = _stream(monkeypatch, reads)
    assert (ex.arrival, ex.connected, ex.sent, ex.first_byte, ex.last) == (100.0, 100.0, 100.0, 100.5, 102.0)
    # TTFT 101.0 - 100.0 (from the request sent upstream; from the first byte it would read 0.5); e2e to the end
    assert (rec.ttft_s, rec.e2e_s, rec.sent, rec.scheduled) == (1.0, 2.0, 100.0, 100.0)
    # TPOT (101.75 - 101.0) / 2; the gaps 0.25, 0.5: p50 index int(0.5 x 2) = 1 -> 0.5
    assert (rec.output_tokens, rec.tpot_s, rec.error, rec.finish_reason) == (3, 0.375, None, "length")
    assert rec.proxy == {"stream": True, "tenant": None, "connect_s": 0.0, "first_byte_s": 0.5, "itl_p50_s": 0.5,
                         "itl_p99_s": 0.5, "itl_max_s": 0.5, "malformed_sse": None}
    assert list(proxy.recent) == [(1.0, len(json.dumps({"model": "m", "prompt": "p", "max_tokens": 3,
                                                        "stream": True})))]
    assert (proxy.counters.requests, proxy.counters.outcomes, proxy.last_end) == (1, {"ok": 1}, 102.0)


def test_a_new_upstream_connection_is_timed(monkeypatch):
    reads = list(zip([100.5, 101.0, 101.25, 101.75, 102.0, 102.0], [HEAD, *CHUNKS]))
    _, [(ex, rec)], _ = _stream(monkeypatch, reads, pooled=False)
    # connected at 100.25 and the request sent then: TTFT 101.0 - 100.25, e2e 102.0 - 100.25
    assert (ex.connected, ex.sent, rec.ttft_s, rec.e2e_s) == (100.25, 100.25, 0.75, 1.75)
    assert (rec.proxy["connect_s"], rec.proxy["first_byte_s"]) == (0.25, 0.25)


def test_a_kept_alive_stream_is_recorded_later_with_the_end_it_had(monkeypatch):
    reads = list(zip([100.5, 101.0, 101.25, 101.75, 102.0, 102.0], [HEAD, *CHUNKS]))
    proxy, records, ex = _stream(monkeypatch, reads, keep_alive=True)
    # asyncio.run's loop ended before the RECORD_AFTER_S timer: the record waits for a snapshot or close
    assert records == [] and proxy._later == [(ex, 102.0)] and proxy.last_end == 102.0
    sample = proxy.snapshot(105.0)
    [(_, rec)] = records
    assert (rec.e2e_s, rec.ttft_s, proxy._later, proxy._later_handle) == (2.0, 1.0, [], None)    # 102.0, not 105.0
    assert (sample.ttft_count, sample.ttft_p99_s, sample.outcomes, sample.in_flight) == (1, 1.0, {"ok": 1}, 0)


def test_the_record_is_made_a_moment_after_a_kept_alive_end(monkeypatch):
    assert S.RECORD_AFTER_S == 0.002
    made = []

    async def run():
        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), on_record=lambda ex, rec: made.append(rec),
                      now=Clock(50.0))
        exes = [Exchange(i, 49.0, "completions", b"POST", True, None, 0, 0) for i in (1, 2)]
        for ex in exes:
            ex.sent = 49.5
            proxy.inflight.add(ex)
            proxy.finished(ex, later=True)
        handle = proxy._later_handle
        assert [end for _, end in proxy._later] == [50.0, 50.0] and handle is not None
        assert made == [] and proxy.inflight == set()
        loop = asyncio.get_running_loop()
        assert handle.when() - loop.time() == pytest.approx(0.002, abs=0.002)
        other = Exchange(3, 49.0, None, b"GET", True, None, 0, 0)       # not an API request: no record
        proxy.inflight.add(other)
        proxy.finished(other, later=True)
        assert proxy.inflight == set() and len(proxy._later) == 2
        while len(made) < 2:
            await asyncio.sleep(0.001)
        assert proxy._later == [] and proxy._later_handle is None
        return proxy

    proxy = asyncio.run(run())
    assert [r.e2e_s for r in made] == [0.5, 0.5] and proxy.counters.requests == 2


def _ended(error=None, stream=True, chunk_t=(1.0,), malformed=False):
    ex = Exchange(1, 10.0, "completions", b"POST", False, None, 0, 0)
    ex.sent, ex.status, ex.stream, ex.body_size = 10.0, 200 if error is None else 504, stream, 250
    ex.state = ProxyStream(False)
    ex.state.chunk_t.extend(chunk_t)
    ex.state.chunk_k.extend([1] * len(chunk_t))
    ex.error, ex.malformed = error, malformed
    return ex


def test_what_a_record_adds_to_the_counters_and_the_recent_ttfts():
    seen = []
    proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), on_record=lambda ex, rec: seen.append((ex, rec)))
    ok, failed, whole, silent, bad = (_ended(), _ended(error=R.TIMEOUT), _ended(stream=False), _ended(chunk_t=()),
                                      _ended(malformed=True))
    for ex in (ok, failed, whole, silent, bad):
        proxy._record(ex, 12.0)
    # only a successful stream with a first token feeds the recent TTFTs (a whole answer's "TTFT" is its e2e)
    assert list(proxy.recent) == [(1.0, 250), (1.0, 250)]
    assert proxy.counters.requests == 5 and proxy.counters.outcomes == {"ok": 4, R.TIMEOUT: 1}
    assert proxy.counters.malformed_sse == 1 and [ex for ex, _ in seen] == [ok, failed, whole, silent, bad]
    assert [rec.e2e_s for _, rec in seen] == [2.0] * 5
    zero = _ended()
    zero.body_size = 0
    proxy._record(zero, 12.0)
    assert proxy.recent[-1] == (1.0, 1)                  # an empty body counts as one byte


def _inflight(proxy, i, arrival, *, api="completions", sent=None, stream=True, first_byte=None, last=None,
              chunks=None, done=False, body_size=0):
    ex = Exchange(i, arrival, api, b"POST", True, None, 0, 0)
    ex.sent, ex.stream, ex.first_byte, ex.done, ex.body_size = sent, stream, first_byte, done, body_size
    if last is not None:
        ex.last = last
    if chunks is not None:
        ex.state = ProxyStream(False)
        ex.state.chunk_t.extend(chunks)
    proxy.inflight.add(ex)
    return ex


def test_the_live_sample():
    proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"))
    _inflight(proxy, 1, 990.0)                                           # not sent yet: the oldest
    _inflight(proxy, 2, 995.0, api="chat", sent=995.5, body_size=300)     # waiting, no head: the longest wait
    _inflight(proxy, 3, 996.0, sent=996.25, first_byte=997.0, last=998.5, chunks=[0.75])   # streaming
    _inflight(proxy, 4, 997.0, sent=997.5, first_byte=997.75, last=997.75, chunks=[])       # a head, no token
    _inflight(proxy, 5, 998.0, sent=998.0, stream=False, last=999.9)     # not streamed: its silence says nothing
    _inflight(proxy, 6, 900.0, api=None, sent=900.0)                     # another path
    _inflight(proxy, 7, 901.0, sent=901.0, done=True)                    # ended
    proxy.last_end = 998.0
    proxy.counters.outcomes = {"ok": 3, "timeout": 1}
    proxy.recent.extend([(0.5, 100), (2.0, 100), (1.0, 400), (0.25, 50)])
    s = proxy.snapshot(1000.0)
    assert (s.t, s.in_flight, s.waiting_first_token, s.oldest_s, s.oldest_waiting_s) == (1000.0, 5, 2, 10.0, 4.5)
    # the newest byte of a stream: request 3's last read at 998.5 (after the last end, 998.0)
    assert s.quiet_s == 1.5
    # p99 of [0.25, 0.5, 1.0, 2.0]: index min(3, int(0.99 x 4) = 3); per byte [0.0025, 0.005, 0.005, 0.02] at
    # index 3, times the longest-waiting request's 300 bytes
    assert (s.ttft_p99_s, s.ttft_count, s.expected_ttft_s) == (2.0, 4, 6.0)
    assert s.outcomes == {"ok": 3, "timeout": 1} and s.outcomes is not proxy.counters.outcomes


def test_the_live_sample_at_its_edges():
    proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"))
    s = proxy.snapshot(50.0)
    assert (s.in_flight, s.waiting_first_token, s.oldest_s, s.oldest_waiting_s, s.quiet_s) == (0, 0, None, None, None)
    assert (s.ttft_p99_s, s.ttft_count, s.expected_ttft_s, s.outcomes) == (None, 0, None, {})
    # 200 recent TTFTs 0.00 ... 1.99: the p99 is at index int(0.99 x 200) = 198
    proxy.recent.extend((i / 100, 1) for i in range(200))
    proxy.last_end = 40.0
    _inflight(proxy, 1, 45.0, sent=46.0, chunks=[], body_size=0)         # waiting since 46.0, an empty body
    _inflight(proxy, 2, 44.0, sent=44.5, first_byte=45.0, last=49.5, chunks=[])   # waiting, bytes until 49.5
    s = proxy.snapshot(50.0)
    assert (s.ttft_p99_s, s.ttft_count) == (1.98, 200) and s.ttft_count == len(proxy.recent)
    # the longest wait is request 2's (5.5 s), 0 bytes counted as 1: 1.98 per byte x 1
    assert (s.waiting_first_token, s.oldest_waiting_s, s.oldest_s, s.expected_ttft_s) == (2, 5.5, 6.0, 1.98)
    assert s.quiet_s == 0.5                                              # 50.0 - 49.5
    proxy.last_end = 51.0                                                # a request ended after: no quiet below 0
    assert proxy.snapshot(50.0).quiet_s == 0.0
    proxy.inflight.clear()
    _inflight(proxy, 3, 45.0, sent=46.0, chunks=[0.5], first_byte=46.5, last=47.0)   # streaming, none waiting
    s = proxy.snapshot(50.0)
    assert (s.waiting_first_token, s.oldest_waiting_s, s.expected_ttft_s, s.quiet_s) == (0, None, None, 0.0)
    proxy.last_end = None
    assert proxy.snapshot(50.0).quiet_s == 3.0                           # 50.0 - 47.0


def test_a_pooled_connection_idle_too_long_is_not_reused(monkeypatch):
    """acquire: a pooled connection idle for more than POOL_IDLE_S is aborted, not used; one idle for exactly
    that long is used, and the exchange counts as connected on arrival."""
    assert S.POOL_IDLE_S == 2.0

    async def run(idle_since):
        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), now=Clock(100.0))
        client, wire = S.Client(proxy), _Wire()
        client.connection_made(wire)
        up = S.Upstream(proxy, 2**20)
        upstream_wire = _Wire()
        up.connection_made(upstream_wire)
        up.idle_since = idle_since
        proxy.idle.append(up)
        aborted = []
        monkeypatch.setattr(up, "_abort", lambda: aborted.append(up))
        client.data_received(_request(False))
        [ex] = proxy.inflight
        if client.connecting is not None:
            client.connecting.cancel()
        return ex, aborted, upstream_wire.out, proxy.idle

    ex, aborted, sent, idle = asyncio.run(run(98.0))                      # idle exactly 2.0 s: reused
    assert (ex.connected, ex.sent, ex.upstream is not None, aborted, idle) == (100.0, 100.0, True, [], [])
    assert sent and sent[0].startswith(b"POST /v1/completions HTTP/1.1\r\n")
    ex, aborted, sent, idle = asyncio.run(run(97.9))                      # 2.1 s: aborted, a new one is asked for
    assert (ex.connected, ex.sent, ex.upstream, len(aborted), sent, idle) == (None, None, None, 1, [], [])


def test_which_requests_the_live_sample_counts_in_order():
    """The requests in flight in a given order (a list where the proxy keeps a set): one ended or not an API
    request is passed over, not the end of the count; of two waits equally long, the first found gives the
    expected TTFT; a request sent without a byte back is as new as its send."""
    proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"))
    proxy.recent.extend([(1.0, 100)])                                      # 0.01 s a byte
    ended = _inflight(proxy, 1, 10.0, sent=10.0, done=True)
    other = _inflight(proxy, 2, 11.0, api=None, sent=11.0)
    first = _inflight(proxy, 3, 40.0, sent=45.0, chunks=[], body_size=100)
    second = _inflight(proxy, 4, 42.0, sent=45.0, chunks=[], body_size=300)
    proxy.inflight = [ended, other, first, second]
    s = proxy.snapshot(50.0)
    # both counted after the two passed over; both waiting 5.0 s: the first one's 100 bytes x 0.01
    assert (s.in_flight, s.waiting_first_token, s.oldest_s, s.oldest_waiting_s) == (2, 2, 10.0, 5.0)
    assert s.expected_ttft_s == 1.0
    # no byte back yet: the newest activity is the send at 45.0 (not the arrival at 40.0 or 42.0)
    assert s.quiet_s == 5.0


def test_no_quiet_without_a_stream_in_flight():
    proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"))
    proxy.last_end = 40.0                                                  # a request ended at 40.0
    _inflight(proxy, 1, 41.0, sent=41.0, stream=False, last=41.0)          # not streamed
    s = proxy.snapshot(50.0)
    assert (s.in_flight, s.quiet_s, s.waiting_first_token) == (1, None, 0)
    proxy.inflight.clear()
    assert proxy.snapshot(50.0).quiet_s is None                            # nothing in flight: no quiet either


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_inline_path_over_reads_of_varied_framing(seed):
    """The inline path's shortcuts (the last event's size line, prefix and rest) against the parser, over reads that
    hold one, two or three whole chunks, a chunk and a half, chunk sizes of 2, 3 and 4 hex digits (one over the
    size lines kept, 4096), upper-case hex and a chunk extension: the same bytes forwarded and the same counts."""
    import random

    from tests.test_proxy import _drive, _post

    rng = random.Random(seed)
    events = []
    for i in range(240):
        piece = rng.choice(["a", "bc", "x" * rng.choice([1, 60, 200, 4100]), ""])
        reason = "length" if i == 239 else rng.choice([None] * 9 + ["stop"])
        usage = (7, i + 1) if rng.random() < 0.5 else None
        events.append(_completion_event(piece, reason, usage))
    events.append(b"data: [DONE]\n\n")
    chunks = []
    for e in events:
        size = b"%x" % len(e)
        roll = rng.random()
        if roll < 0.05:
            size = size.upper()
        elif roll < 0.08:
            size += b";ext=1"
        chunks.append(size + b"\r\n" + e + b"\r\n")
    chunks.append(b"0\r\n\r\n")
    reads, i = [HEAD], 0
    while i < len(chunks):
        n = rng.choice([1, 1, 1, 2, 3])
        group = b"".join(chunks[i:i + n])
        i += n
        if rng.random() < 0.1 and i < len(chunks):      # and half of the next
            half = len(chunks[i]) // 2
            group, chunks[i] = group + chunks[i][:half], chunks[i][half:]
        reads.append(group)
    request = _post("/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 240, "stream": True})
    whole = b"".join(reads)
    grouped = _drive(request, reads)
    cut = _drive(request, [whole[j:j + 31] for j in range(0, len(whole), 31)])
    assert grouped[0] == cut[0] == whole
    assert grouped[3] > 50                                                  # the inline path was taken
    (_, a, ra, _), (_, b, rb, _) = grouped, cut
    assert list(a.chunk_k) == list(b.chunk_k) and len(a.chunk_t) == len(b.chunk_t)
    assert (a.completion_tokens, a.prompt_tokens, a.client_tokens, a.counts_exact, a.finish_reason, a.saw_done,
            a.stream_error, a.malformed) == (b.completion_tokens, b.prompt_tokens, b.client_tokens, b.counts_exact,
                                             b.finish_reason, b.saw_done, b.stream_error, b.malformed)
    assert (ra.output_tokens, ra.error, ra.finish_reason) == (rb.output_tokens, rb.error, rb.finish_reason)
    assert ra.error is None and ra.finish_reason == "length"


def test_each_malformed_stream_is_counted():
    proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"))
    for _ in range(3):
        proxy._record(_ended(malformed=True), 12.0)
    proxy._record(_ended(), 12.0)
    assert (proxy.counters.malformed_sse, proxy.counters.requests) == (3, 4)


@pytest.mark.parametrize("failure, detail", [
    (TimeoutError, "upstream connect timeout"),
    (ConnectionRefusedError(111, "refused"), "upstream refused"),
    (OSError(113, "no route"), "upstream OSError"),
    (ConnectionResetError(104, "reset"), "upstream ConnectionResetError"),
], ids=["timeout", "refused", "oserror", "reset"])
def test_an_upstream_that_cannot_be_reached_is_recorded_as_a_connect_error(failure, detail):
    """_connect: the record says connect (never sent: no e2e, no TTFT) with what went wrong in a word, the
    client gets the proxy's own 502 naming it, and the counters count an upstream unavailable."""
    clock = Clock(100.0)

    async def run():
        records = []
        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9", connect_timeout_s=0.05),
                      on_record=lambda ex, rec: records.append(rec), now=clock)
        client, wire = S.Client(proxy), _Wire()
        client.connection_made(wire)

        async def create_connection(factory, host, port):
            clock.t = 100.5
            if failure is TimeoutError:
                await asyncio.sleep(5)                # past connect_timeout_s
            raise failure

        asyncio.get_running_loop().create_connection = create_connection
        client.data_received(_request(False))
        task = client.connecting
        await asyncio.wait_for(task, 5)
        return proxy, records, b"".join(wire.out), client

    proxy, [rec], answer, client = asyncio.run(run())
    assert (rec.error, rec.error_detail, rec.http_status, rec.sent, rec.e2e_s, rec.ttft_s) == \
           (R.CONNECT, detail, 502, None, None, None)
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {"error": {"message": detail,
                                                                      "type": "upstream_unavailable", "code": 502}}
    assert proxy.counters.refused == {"upstream_unavailable": 1} and proxy.counters.outcomes == {R.CONNECT: 1}
    assert client.connecting is None and proxy.inflight == set()


def _drive_bounded(request: bytes, reads: list[bytes], max_body: int = 2**20):
    """tests/test_proxy.py's _drive with the upstream's body bound given: (bytes forwarded, stream state, record,
    reads that took the inline path); the record None while the response has not ended."""

    async def run():
        records = []
        proxy, wire, up = _pooled(lambda ex, rec: records.append((ex, rec)), request, max_body)
        inline_reads = 0
        for data in reads:
            before = up.inline
            up.data_received(data)
            inline_reads += before
        proxy.record_ended()
        if not records:                               # not ended (the response is incomplete): no record yet
            [ex] = proxy.inflight
            return b"".join(wire.out), ex.state, None, inline_reads
        [(ex, rec)] = records
        return b"".join(wire.out), ex.state, rec, inline_reads

    return asyncio.run(run())


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _sized(n: int, reason=None, usage=None) -> bytes:
    """A completions event of exactly n bytes."""
    base = len(_completion_event("", reason, usage))
    return _completion_event("x" * (n - base), reason, usage)


def test_the_inline_path_at_the_size_lines_it_keeps():
    """Chunks of 4,095, 4,096 and 4,097 bytes after one of the same size line's width: the size lines kept
    (4,096 of them, for sizes 0 to 4,095) end at 4,095; the next is read, not looked up."""
    events = [_sized(4200), _sized(4095), _sized(4096), _sized(4097), _sized(4096), _sized(300, "length")]
    assert [len(e) for e in events[1:4]] == [4095, 4096, 4097]
    request = _request(False, max_tokens=6)
    chunks = [_chunk(e) for e in events] + [_chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n"]
    whole = HEAD + b"".join(chunks)
    inline = _drive_bounded(request, [HEAD, *chunks])
    cut = _drive_bounded(request, [whole[i:i + 1000] for i in range(0, len(whole), 1000)])
    assert inline[0] == cut[0] == whole and inline[3] >= 5
    for _, state, rec, _ in (inline, cut):
        assert (list(state.chunk_k), rec.output_tokens, rec.error, rec.finish_reason) == ([1] * 6, 6, None, "length")


def test_the_inline_path_keeps_the_response_bound():
    """An upstream response over the bound is cut (stream_cut) on the inline path as on the parser's: a body of
    exactly the bound is whole, one byte more is not."""
    events = [_sized(200), _sized(200), _sized(200, "length")]
    chunks = [_chunk(e) for e in events]
    body = sum(len(e) for e in events)                 # the bound counts the body's bytes, not its framing
    request = _request(False, max_tokens=3)
    at = _drive_bounded(request, [HEAD, *chunks, b"0\r\n\r\n"], max_body=body)
    assert (at[2].error, at[2].output_tokens) == (None, 3) and at[3] >= 3
    over = _drive_bounded(request, [HEAD, *chunks, b"0\r\n\r\n"], max_body=body - 1)
    assert (over[2].error, over[2].error_detail) == (R.STREAM_CUT, "upstream response over the size bound")
    assert over[2].output_tokens == 2                                   # the third chunk went over


def test_the_prompt_count_from_events_on_the_inline_path_only():
    """The server's counts in events read on the inline path, none in the last read (the parser's): the record
    holds its prompt count, and its completion count (3, the last it said) over the client's 4 pieces."""
    events = [_completion_event(t, None, (17, i + 1)) for i, t in enumerate("abc")]
    last = _completion_event("d", "length", None) + b"data: [DONE]\n\n"
    chunks = [_chunk(e) for e in events] + [_chunk(last), b"0\r\n\r\n"]
    _, state, rec, inline_reads = _drive_bounded(_request(False, max_tokens=4), [HEAD, *chunks])
    assert inline_reads >= 3 and (state.prompt_tokens, rec.input_tokens, rec.output_tokens) == (17, 17, 3)
    assert (state.client_tokens, rec.token_source) == (4, "server")


def test_a_chunk_whose_size_line_is_wrong_is_no_event():
    """A chunk that says one byte less than its event holds is not taken as that event on the inline path: the
    parser reads the framing, the event is not whole, and the stream is cut there."""
    events = [_completion_event(t, None, None) for t in "ab"]
    bad = _completion_event("c", "length", None)
    chunks = [_chunk(e) for e in events] + [b"%x\r\n%s\r\n" % (len(bad) - 1, bad), b"0\r\n\r\n"]
    _, state, rec, _ = _drive_bounded(_request(False, max_tokens=3), [HEAD, *chunks])
    assert (list(state.chunk_k), state.finish_reason) == ([1, 1], None)
    assert (rec.error, rec.output_tokens) == (R.STREAM_CUT, 2)


def test_a_request_body_held_until_the_upstream_is_connected():
    """A body that arrives before the upstream connection is made is held (reading from the client paused past
    1 MiB), then sent with the head in one write; what arrives after goes straight on. The record reads the body."""
    clock = Clock(100.0)
    body = json.dumps({"model": "m", "prompt": "p" * (3 * 2**19), "max_tokens": 3, "stream": True}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    cut = 2**20 + 2**19                                  # 1.5 MiB before the connection, the rest after

    class Wire(_Wire):
        def __init__(self):
            super().__init__()
            self.paused = []

        def pause_reading(self):
            self.paused.append(True)

        def resume_reading(self):
            self.paused.append(False)

    async def run():
        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), now=clock)
        client, wire = S.Client(proxy), Wire()
        client.connection_made(wire)
        up, upstream_wire = S.Upstream(proxy, 2**20), _Wire()
        up.connection_made(upstream_wire)
        go = asyncio.Event()

        async def create_connection(factory, host, port):
            await go.wait()
            clock.t = 100.5
            return upstream_wire, up

        asyncio.get_running_loop().create_connection = create_connection
        client.data_received(head + body[:cut])
        held = (client.reading_paused_for_upstream, list(wire.paused), upstream_wire.out[:])
        go.set()
        for _ in range(1000):
            if client.connecting is None:
                break
            await asyncio.sleep(0)
        after = (client.reading_paused_for_upstream, list(wire.paused), len(upstream_wire.out))
        client.data_received(body[cut:])
        [ex] = proxy.inflight
        return held, after, upstream_wire.out, ex

    held, after, sent, ex = asyncio.run(run())
    assert held == (True, [True], [])                   # over 1 MiB held: the client's reading paused
    assert after == (False, [True, False], 1)            # connected: head and held body in one write, reading again
    assert b"".join(sent) == head.replace(b"Host: x\r\n", b"") .replace(
        b"Connection: close\r\n\r\n", b"Connection: close\r\nHost: 127.0.0.1:9\r\n\r\n") + body
    assert (ex.sent, ex.connected, ex.body_left, ex.model, ex.max_tokens, ex.stream) == (100.5, 100.5, 0, "m", 3, True)


def test_a_read_of_several_whole_events_is_counted_inline():
    """A proxy behind its upstream reads several whole chunks at once: each whole event is counted on the inline
    path (the parser gets only what is not one: here the [DONE] and the last chunk), with the same counts as the
    parser's over reads of one byte-run each."""
    events = [_completion_event(t, None, (5, i + 1)) for i, t in enumerate("abcdefgh")]
    events.append(_completion_event("i", "length", (5, 9)))
    chunks = [_chunk(e) for e in events] + [_chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n"]
    reads = [HEAD, b"".join(chunks[0:3]), b"".join(chunks[3:6]), b"".join(chunks[6:9]), b"".join(chunks[9:])]
    request = _request(False, max_tokens=9)

    async def run(reads):
        records, parsed = [], []
        proxy, wire, up = _pooled(lambda ex, rec: records.append(rec), request)
        sink = up.sink
        up.sink = lambda out: (parsed.append(out), sink(out))
        for data in reads:
            up.data_received(data)
        proxy.record_ended()
        return b"".join(wire.out), records, parsed

    whole = b"".join(reads)
    grouped, [rec], parsed = asyncio.run(run(reads))
    cut, [ref], _ = asyncio.run(run([whole[i:i + 7] for i in range(0, len(whole), 7)]))
    assert grouped == cut == whole
    assert parsed == [b"data: [DONE]\n\n"]                  # every event inline; the parser read the rest
    assert (rec.output_tokens, rec.input_tokens, rec.finish_reason, rec.error) == (9, 5, "length", None)
    assert (rec.output_tokens, rec.input_tokens, rec.finish_reason, rec.error, list(rec.chunk_tokens)) == \
           (ref.output_tokens, ref.input_tokens, ref.finish_reason, ref.error, list(ref.chunk_tokens))
    assert rec.proxy["itl_p99_s"] is not None and ref.proxy["itl_p99_s"] is not None


def test_a_read_of_several_chunks_is_not_tried_as_one_event():
    """A read of several whole chunks (or of a part of one) is no whole event: its size line says so, and no
    event pattern is tried over the read as a whole (a failed try of the whole-event pattern cost ~5 us a read
    of several chunks, a quarter of the proxy's reads in its benchmark on a loaded machine). Each chunk of it is
    still counted inline: the pattern is tried once, on the stream's first event, and the rest are read by its
    tail or as the last event's rest."""
    events = [_completion_event(t, None, None) for t in "abcdefgh"]
    events.append(_completion_event("i", "length", None))
    chunks = [_chunk(e) for e in events] + [_chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n"]
    cut_chunk = chunks[7]
    reads = [HEAD, b"".join(chunks[0:3]), b"".join(chunks[3:6]), chunks[6] + cut_chunk[:40], cut_chunk[40:],
             b"".join(chunks[8:])]

    async def run():
        records, tried = [], []
        proxy, wire, up = _pooled(lambda ex, rec: records.append((ex, rec)), _request(False, max_tokens=9))
        whole = up.whole_event
        up.whole_event = lambda data: (tried.append(data), whole(data))[1]
        for data in reads:
            up.data_received(data)
        proxy.record_ended()
        return b"".join(wire.out), records, tried

    out, [(ex, rec)], tried = asyncio.run(run())
    assert out == b"".join(reads)
    # the stream's first event and the [DONE] chunk, each a whole chunk (without the size line's check first,
    # the reads of several chunks were tried too: 5 tries)
    assert tried == [chunks[0], chunks[9]]
    assert (rec.output_tokens, rec.finish_reason, rec.error) == (9, "length", None)
    assert (list(ex.state.chunk_k), len(ex.state.chunk_t), ex.state.client_tokens) == ([1] * 9, 9, 9)


def _pooled(on_record, request: bytes, max_body: int = 2**20):
    """A proxy with one idle pooled upstream connection, a client that sent `request` (the upstream takes it):
    (proxy, the client's wire, the upstream)."""
    proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), on_record=on_record)
    client, wire = S.Client(proxy), _Wire()
    client.connection_made(wire)
    up = S.Upstream(proxy, max_body)
    up.connection_made(_Wire())
    up.idle_since = proxy.now()
    proxy.idle.append(up)
    client.data_received(request)
    return proxy, wire, up
