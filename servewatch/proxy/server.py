"""The proxy's request path on asyncio protocols: an HTTP/1.1 server for clients, a keep-alive pool of
upstream connections, and bytes moved between the two transports as they arrive.

- The response (head and body, its chunked framing included) reaches the client exactly as the
  upstream sent it; it is parsed only after it has been written on, to know where it ends and what it
  says (the load client's parser: servewatch.transport.http1 and servewatch.load.client).
- The request body is forwarded as it arrives; only the request head is rewritten (Host).
- Backpressure both ways: a client that reads slowly pauses reading from its upstream connection, an
  upstream that reads slowly pauses reading from the client.
- A client that goes away aborts its upstream connection (the engine sees the request cancelled).
- Deadlines (slow request heads and bodies, idle keep-alive, upstream first byte and silence) are
  checked by one sweep every `sweep_interval_s`, not by a timer per read.
- A streamed body, once its head is forwarded, may move between the sockets out of the event loop: the
  compiled pump (servewatch/proxy/_pump.c; see Upstream._maybe_pump and Upstream.unpump), its reads counted
  afterwards with their times, as the loop's reads would have been.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import select
import time
from collections import deque
from collections.abc import Callable

from servewatch.load import records as R
from servewatch.transport.http1 import Endpoint, StreamCut, Conn, STATE_BODY, STATE_IDLE
from servewatch.errors import BodyTooLarge
from servewatch.proxy.config import ProxyConfig
from servewatch.proxy.exchange import API_PATHS, Exchange, tenant_id
from servewatch.proxy import fastpath
from servewatch.proxy.fastpath import impure_piece as _impure_piece
from servewatch.timeline.samples import RequestsSample

_now = time.time
READ_BUFFER = 64 * 1024  # one read at most (plain asyncio's reads; uvloop reads into a buffer of its own)
RECENT = 256           # finished streams the recent TTFT p99 rests on
POOL_IDLE_S = 2.0      # a pooled upstream connection idle longer is not reused (uvicorn closes at 5 s)
_SIZE_LINES_UP_TO = 4096
_SIZE_LINES = [b"%x\r\n" % size for size in range(_SIZE_LINES_UP_TO)]    # a chunk's size line, by its size
PUMP_HOLD = 2**20       # the most bytes one pump moves before Python starts another (its size bound aside)
PUMP_DRAIN_READS = 128  # the pumps' reads, all streams together, that Python counts at once (see Proxy.drain_all)
RECORD_AFTER_S = 0.002  # a kept-alive exchange's record is made this long after its end (see Proxy.finished)
_REASONS = {400: "Bad Request", 408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large",
            431: "Request Header Fields Too Large", 502: "Bad Gateway", 503: "Service Unavailable",
            504: "Gateway Timeout", 505: "HTTP Version Not Supported"}


def _read_size(proxy: "Proxy", transport) -> None:
    """Plain asyncio reads each time into a new bytes object of the transport's `max_size`, 256 kB:
    past glibc's mmap threshold, so mmap + mremap + munmap per read (three system calls more per token
    than the read and the write). Under the threshold (64 kB) it is a heap allocation, shrunk in place
    to what was read: cheaper than reading into a buffer of our own (a BufferedProtocol's two Python
    calls and a copy per read; measured). uvloop reads into a buffer of its own."""
    if proxy._plain and getattr(transport, "max_size", 0) > READ_BUFFER:
        transport.max_size = READ_BUFFER


def _dropped(up: "Upstream") -> bool:
    """A pooled connection the engine closed (or wrote on) while it sat idle, before the event loop has said
    so: a proxy starved of CPU reads the engine's FIN late, and a request sent on that connection would get a
    502 for nothing (seen on a TP=2 vLLM sharing two cores with a test run). An idle HTTP/1.1 connection has
    nothing to read, so anything readable means it cannot be reused. One select() per reused connection."""
    sock = up.transport.get_extra_info("socket") if up.transport is not None else None
    if sock is None:
        return False
    try:
        readable, _, _ = select.select((sock,), (), (), 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def error_response(status: int, message: str, kind: str, *, retry_after: int | None = None) -> bytes:
    """The proxy's own answer (never used for anything the upstream answered): an OpenAI-style JSON error."""
    body = json.dumps({"error": {"message": message, "type": kind, "code": status}},
                      separators=(",", ":")).encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n")
    if retry_after is not None:
        head += f"Retry-After: {retry_after}\r\n"
    return head.encode("ascii") + b"\r\n" + body


class ProxyCounters:
    """What the proxy itself refused or saw, by reason (short words, safe to export)."""

    __slots__ = ("refused", "outcomes", "malformed_sse", "requests", "other_requests")

    def __init__(self):
        self.refused: dict[str, int] = {}     # bad_request, too_large, over_connections, slow_client, ...
        self.outcomes: dict[str, int] = {}    # ok | an error class of RequestRecord
        self.malformed_sse = 0
        self.requests = 0                     # completions and chat completions
        self.other_requests = 0               # any other path, forwarded untouched

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


class Proxy:
    def __init__(self, config: ProxyConfig, *, on_record: Callable[[Exchange, R.RequestRecord], None] | None = None,
                 now: Callable[[], float] = time.time):
        self.config = config
        self.endpoint = Endpoint.parse(config.upstream)
        if self.endpoint.scheme != "http":
            raise ValueError("the upstream must be a plain http:// URL")
        self.now = now
        self.on_record = on_record
        self.counters = ProxyCounters()
        self.clients: set[Client] = set()
        self.inflight: set[Exchange] = set()
        self.idle: list[Upstream] = []
        self._ids = 0
        self.recent = deque(maxlen=RECENT)        # (ttft_s, request bytes) of recent successful streams
        self.last_end: float | None = None        # when an API request last ended
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task | None = None
        self._host_line = f"Host: {self.endpoint.host_header}".encode("ascii")
        self._base = self.endpoint.base_path.encode("ascii")
        self._tenant_header = config.tenant_header.encode("ascii")
        self._plain = False            # plain asyncio's loop (see _read_size)
        self._later: list[tuple[Exchange, float]] = []     # ended exchanges whose record is still to be made
        self._later_handle: asyncio.TimerHandle | None = None
        self._hub = None                # the compiled pump's hub while started (see pump_path)
        self.pumped: dict[int, Upstream] = {}     # upstreams whose stream the pump moves, by id

    # -- lifecycle
    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._plain = isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop)
        self._server = await loop.create_server(lambda: Client(self), host, port, backlog=1024,
                                                reuse_address=True)
        self._sweeper = asyncio.create_task(self._sweep_forever())
        if _pump is not None:
            self._hub = _pump.Hub(drain_every=PUMP_DRAIN_READS)
            loop.add_reader(self._hub.fd, self._pumps_stopped)
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.unpump_all()
        if self._hub is not None:
            asyncio.get_running_loop().remove_reader(self._hub.fd)
            self._hub.close()
            self._hub = None
        self.record_ended()
        if self._server is not None:
            self._server.close()
        for client in list(self.clients):
            client.transport.abort()
        for up in self.idle:
            up._abort()
        self.idle.clear()
        if self._server is not None:
            await self._server.wait_closed()

    def _pumps_stopped(self) -> None:
        """The pump thread stopped some streams by itself (their end, a slow client, ...): each counted and
        handed back to the loop. Or it read PUMP_DRAIN_READS since Python last counted: every stream's reads
        counted (drain_all)."""
        hub = self._hub
        for ident in hub.done():
            up = self.pumped.get(ident)
            if up is not None:
                up.unpump()
        if hub.drain_due():
            self.drain_all()

    def drain_all(self) -> None:
        """Every pumped stream's reads counted up to now, the pumps moving them on. Asked for by the pump thread
        every PUMP_DRAIN_READS reads (all streams together), so that no stream's reads wait for its end: streams
        that end together (an engine's batch) would each have their whole body replayed at that moment, and
        the clients' next requests waited behind it (TTFT p50 +3 to +6 ms beyond nginx's in benchmarks/proxy.py:
        docs/site/figures.md, "The stream's body out of the event loop")."""
        for up in list(self.pumped.values()):
            up.drain()

    def unpump_all(self) -> None:
        """Every pumped stream counted up to now and handed back to the loop."""
        for up in list(self.pumped.values()):
            up.unpump()

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    # -- upstream connections
    def acquire(self, client: "Client", ex: Exchange) -> None:
        now = self.now()
        while self.idle:
            up = self.idle.pop()
            if now - up.idle_since > POOL_IDLE_S or _dropped(up):   # the engine may have ended it
                up._abort()
            elif not up.closed:
                ex.connected = ex.arrival
                up.attach(client, ex)
                return
        task = asyncio.get_running_loop().create_task(self._connect(client, ex))
        client.connecting = task

    async def _connect(self, client: "Client", ex: Exchange) -> None:
        loop = asyncio.get_running_loop()
        config = self.config
        try:
            async with asyncio.timeout(config.connect_timeout_s):
                _, up = await loop.create_connection(lambda: Upstream(self, config.max_response_bytes),
                                                     self.endpoint.host, self.endpoint.port)
        except TimeoutError:
            client.connecting = None
            client.fail_before_head(ex, R.CONNECT, "upstream connect timeout", 502)
            return
        except OSError as exc:
            client.connecting = None
            word = "refused" if isinstance(exc, ConnectionRefusedError) else type(exc).__name__
            client.fail_before_head(ex, R.CONNECT, f"upstream {word}", 502)
            return
        client.connecting = None
        if ex.done or client.exchange is not ex:          # the client went away meanwhile
            up._abort()
            return
        ex.connected = self.now()
        up.attach(client, ex)

    def release(self, up: "Upstream") -> None:
        if up.keep_alive and up.state == STATE_IDLE and not up.closed and len(self.idle) < self.config.max_connections:
            up.exchange = up.client = up.client_write = None     # (no hold on the last client's transport)
            up.idle_since = self.now()
            if up.paused:
                up.paused = False
                up.transport.resume_reading()
            self.idle.append(up)
        else:
            up._abort()

    # -- the end of a request
    def finished(self, ex: Exchange, later: bool = False) -> None:
        """An exchange ended. Its record (and what rests on it: outcomes, recent TTFTs, on_record) is made
        now, or with `later` a moment after (RECORD_AFTER_S): a client on a kept-alive connection sends
        its next request the moment it has read the end of a response, and that request's head should not
        wait behind the ~0.1 ms of Python that makes the last one's record. snapshot() and close() make
        any record still to be made first."""
        self.inflight.discard(ex)
        if ex.api is None:
            return
        now = self.now()
        self.last_end = now
        if later:
            self._later.append((ex, now))
            if self._later_handle is None:
                self._later_handle = asyncio.get_running_loop().call_later(RECORD_AFTER_S, self.record_ended)
            return
        self._record(ex, now)

    def record_ended(self) -> None:
        """Make the records of exchanges that ended and wait for theirs (see finished)."""
        if self._later_handle is not None:
            self._later_handle.cancel()
            self._later_handle = None
        later, self._later = self._later, []
        for ex, end in later:
            self._record(ex, end)

    def _record(self, ex: Exchange, now: float) -> None:
        rec = ex.finish(now, self.config.keep_itl)
        if rec.error is None and rec.ttft_s is not None and ex.stream:     # a whole answer's "TTFT" is its e2e
            self.recent.append((rec.ttft_s, max(ex.body_size, 1)))
        self.counters.requests += 1
        outcome = "ok" if rec.error is None else rec.error
        self.counters.outcomes[outcome] = self.counters.outcomes.get(outcome, 0) + 1
        if ex.malformed:
            self.counters.malformed_sse += 1
        if self.on_record is not None:
            self.on_record(ex, rec)

    # -- live signals
    def snapshot(self, now: float) -> RequestsSample:
        """The request path now, as a timeline sample (see servewatch.timeline.samples.RequestsSample)."""
        if self.pumped:
            self.drain_all()                      # their reads counted: first tokens, last bytes
        if self._later:
            self.record_ended()
        in_flight = waiting = 0
        oldest = oldest_waiting = None
        newest_byte = self.last_end
        waiting_ex = None
        streaming = False
        for ex in self.inflight:
            if ex.api is None or ex.done:
                continue
            in_flight += 1
            age = now - ex.arrival
            if oldest is None or age > oldest:
                oldest = age
            # Only a stream shows progress byte by byte: a request that is not streamed gets its whole
            # answer at the end, so its silence until then says nothing (it still counts when it ends).
            if ex.sent is None or not ex.stream:
                continue
            streaming = True
            seen = ex.last if ex.first_byte is not None else ex.sent
            if newest_byte is None or seen > newest_byte:
                newest_byte = seen
            if ex.state is None or not ex.state.chunk_t:
                waiting += 1
                wait = now - ex.sent
                if oldest_waiting is None or wait > oldest_waiting:
                    oldest_waiting, waiting_ex = wait, ex
        quiet = None
        if streaming and newest_byte is not None:
            quiet = max(0.0, now - newest_byte)
        ttfts = sorted(t for t, _ in self.recent)
        p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else None
        expected = None
        if waiting_ex is not None and self.recent:
            per_byte = sorted(t / size for t, size in self.recent)
            expected = per_byte[min(len(per_byte) - 1, int(0.99 * len(per_byte)))] * max(waiting_ex.body_size, 1)
        return RequestsSample(t=now, in_flight=in_flight, waiting_first_token=waiting, oldest_s=oldest,
                              oldest_waiting_s=oldest_waiting, quiet_s=quiet, ttft_p99_s=p99, ttft_count=len(ttfts),
                              expected_ttft_s=expected, outcomes=dict(self.counters.outcomes))

    # -- deadlines
    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_s)
            self.sweep(self.now())

    def sweep(self, now: float) -> None:
        c = self.config
        for client in list(self.clients):
            ex = client.exchange
            if ex is None:
                if client.head_started is not None:
                    if now - client.head_started > c.head_timeout_s:
                        self.counters.refuse("slow_client")
                        client.refuse(408, "the request head did not arrive in time", "request_timeout")
                elif now - client.last > c.keepalive_timeout_s:
                    client.transport.close()
            elif ex.body_left > 0:
                if now - client.last > c.body_idle_timeout_s:
                    self.counters.refuse("slow_client")
                    client.fail_exchange(ex, R.TIMEOUT, "the client's request body stalled", 408)
            elif ex.sent is not None:
                if ex.first_byte is None:
                    if now - ex.sent > c.first_byte_timeout_s:
                        client.fail_exchange(ex, R.TIMEOUT, "no upstream answer in time", 504)
                elif now - ex.last > c.read_idle_timeout_s:
                    up = ex.upstream
                    if up is not None and up.pump is not None:
                        up.drain()                 # its reads counted: ex.last is its last read's
                        if client.exchange is not ex or now - ex.last <= c.read_idle_timeout_s:
                            continue
                    client.fail_exchange(ex, R.TIMEOUT, "the upstream went silent", 504)


class Upstream(Conn):
    """An upstream connection: every read goes to the client first, then to the HTTP/1.1 parser."""

    # Slots for what the read path reads and sets on every read (Conn's _received and max_body too): the compiled
    # reader reads them by offset, not from the instance dict (servewatch/proxy/_inline.c, setup_reader)
    __slots__ = ("proxy", "client", "exchange", "paused", "idle_since", "inline", "client_write", "event_prefix",
                 "event_eol", "event_rest", "event_groups", "whole_event", "event_tail", "_received", "max_body",
                 "pump", "replaying")

    def __init__(self, proxy: Proxy, max_body: int):
        super().__init__(max_body)
        self.proxy = proxy
        self.client: Client | None = None
        self.exchange: Exchange | None = None
        self.paused = False
        self.idle_since = 0.0
        self.inline = False
        self.client_write = None
        self.event_prefix: bytes | None = None     # the last whole event up to its piece (see data_received)
        self.event_eol = 2                         # the width of the last event's chunk size line
        self.event_rest = b""                      # the last matched event from its piece's closing quote on
        self.event_groups: tuple = (None, None, None)   # what that rest said: finish reason, usage's two counts
        self.whole_event = fastpath.completion_whole
        self.event_tail = fastpath.completion_tail
        self.pump = None                           # the compiled pump moving this stream (see _maybe_pump)
        self.replaying = False
        if _reader is not None:
            # the compiled data_received (see count_path): the event loop calls it with no Python frame between
            self.data_received = _reader(self)

    def connection_made(self, transport) -> None:
        self.transport = transport
        _read_size(self.proxy, transport)

    def attach(self, client: "Client", ex: Exchange) -> None:
        self.client, self.exchange = client, ex
        ex.upstream = self
        # expect a response (the parser's state, without a future: the callbacks below are the waiters)
        self.state = 1  # STATE_HEAD
        self._buf = b""
        self._pending = []
        self._received = 0
        self.body_done = False
        self._error = None
        self._head_waiter = self._body_waiter = None
        self.sink = ex.on_body
        self.inline = False
        self.client_write = client.transport.write
        self.event_prefix = None
        chat = ex.api == "chat"
        self.whole_event = fastpath.chat_whole if chat else fastpath.completion_whole
        self.event_tail = fastpath.chat_tail if chat else fastpath.completion_tail
        ex.sent = self.proxy.now()
        if ex.pending:          # head and the body read so far in one write (one send, not two)
            self.transport.write(b"".join((client.upstream_head, *ex.pending)))
        else:
            self.transport.write(client.upstream_head)
        client.upstream_head = b""
        ex.pending = None
        if client.reading_paused_for_upstream:
            client.reading_paused_for_upstream = False
            client.update_reading()

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is None:
            super().data_received(data)
            return
        t = _now()
        ex.last = t
        if ex.first_byte is None:
            ex.first_byte = t
        if not ex.client_gone:
            self.client_write(data)
        self._count(data, ex, t)

    def _count(self, data: bytes, ex: Exchange, t: float) -> None:
        """A read the client has, counted: inline, else by the parser.

        The hot path of a completions stream, one read = one whole chunk = one whole event: what
        Conn._body -> Exchange.on_body -> StreamState.on_body -> _on_completion do for it, inline up to
        the event's fields, which go to the transport's chunk counter (StreamState.on_fields). `inline`
        is set only while the parser is between chunks of an SSE completions body.
        One match reads the chunk's framing and its event (any other framing, e.g. a chunk extension,
        goes to the parser, which reads it the same way).
        _inline_event and _inline_chunks: the module's choice, compiled or the methods below (see count_path)."""
        if self.inline:
            if _inline_event(self, data, ex, t):
                return
            # a read of several whole chunks (what a proxy behind its upstream reads): each whole event
            # chunk inline while they are, from the first that is not on to the parser
            data = _inline_chunks(self, data, ex, t)
            if not data:
                return
        self._parse(data)

    def _parse(self, data: bytes) -> None:
        """A read, or what the inline path left of it, through the HTTP/1.1 parser; then whether the next read
        may take the inline path, and whether the rest of the stream may go to the pump."""
        super().data_received(data)
        self._set_inline()
        if self.inline and self.proxy._hub is not None and not self.replaying:
            self._maybe_pump()

    def _maybe_pump(self, ex: Exchange | None = None) -> None:
        """The stream's body from here on moved between the sockets by the compiled pump, when it can be: an SSE
        body between two chunks (`inline`), the client's transport holding nothing unsent (the pump writes the
        socket itself, so nothing queued may come after its bytes), neither side paused or closing, real
        sockets, and the loop's clock time.time (the pump reads that clock). Else the loop goes on reading.
        uvloop sends what a callback wrote after the callbacks of that poll: where the client's transport still
        holds the head, this is tried once more at the loop's next turn (`ex`: the exchange it was tried for)."""
        retry = ex is None
        if not retry and (ex is not self.exchange or not self.inline or self.replaying):
            return
        ex, client = self.exchange, self.client
        if (ex is None or client is None or ex.client_gone or self.paused or self.pump is not None
                or _now is not time.time or self.proxy.now is not time.time or self.proxy._hub is None):
            return
        out, transport = client.transport, self.transport
        if out is None or transport is None or out.is_closing() or transport.is_closing():
            return
        if out.get_write_buffer_size():
            if retry:
                asyncio.get_running_loop().call_soon(self._maybe_pump, ex)
            return
        up_sock, client_sock = transport.get_extra_info("socket"), out.get_extra_info("socket")
        if up_sock is None or client_sock is None:
            return
        limit = min(PUMP_HOLD, self.max_body - self._received)
        if limit <= 0:
            return
        transport.pause_reading()
        try:
            pump = self.proxy._hub.pump(next(_pump_ids), up_sock.fileno(), client_sock.fileno(), limit)
        except (OSError, ValueError):
            transport.resume_reading()
            return
        self.pump = pump
        self.proxy.pumped[pump.ident] = self

    def unpump(self) -> None:
        """Take the stream back from the pump (stopped, if it still ran): the loop reads the upstream again,
        what the client did not take is written through its transport (whose backpressure then holds), and
        every read the pump made is counted, in order, with its time, as data_received would have counted it
        (the client already has it). Where the pump stopped at what it moves at most, the stream goes back to a
        pump if it still may."""
        pump = self.pump
        if pump is None:
            return
        self.pump = None
        self.proxy.pumped.pop(pump.ident, None)
        data, ends, times, sent, reason, _ = pump.take()
        ex, client = self.exchange, self.client
        transport = self.transport
        if transport is not None and not transport.is_closing() and not self.paused:
            transport.resume_reading()
        if sent < len(data) and ex is not None and not ex.client_gone and client is not None \
                and not client.transport.is_closing():
            client.transport.write(data[sent:])
        self._replay(ex, data, ends, times)
        if reason == _pump_built.LIMIT and ex is not None and self.exchange is ex and self.inline:
            self._maybe_pump()

    def drain(self) -> None:
        """The reads the pump made so far counted, as unpump counts them, the pump moving the stream on; a pump
        that stopped meanwhile taken back (unpump), and so is one whose reads ended the exchange (an error of
        the parser's: the exchange failed)."""
        pump = self.pump
        if pump is None:
            return
        got = pump.drain()
        if got is None:
            if not pump.running:
                self.unpump()
            return
        ex = self.exchange
        self._replay(ex, *got)
        if self.pump is pump and (ex is None or self.exchange is not ex or ex.done):
            self.unpump()

    def _replay(self, ex: Exchange | None, data: bytes, ends: list[int], times: list[float]) -> None:
        """The pump's reads (data cut at ends), each counted with its time while `ex` is still this stream's."""
        start = 0
        self.replaying = True
        try:
            for end, t in zip(ends, times):
                if ex is None or self.exchange is not ex:
                    break
                ex.last = t
                self._count(data[start:end], ex, t)
                start = end
        finally:
            self.replaying = False

    def _inline_event(self, data: bytes, ex: Exchange, t: float) -> bool:
        """One read that is one whole chunk of one whole event, counted inline; False: the parser's."""
        # The chunk's size line first, before any pattern: of the last one's width, it is the one a whole
        # chunk of this read's length has (as servewatch.transport.http1.one_whole_chunk reads it), else it
        # is read. A read that is not one whole chunk (several, as a proxy behind its upstream reads them,
        # or a part of one) is no whole event: every pattern frames one chunk and its size is checked against
        # the read's length, so no pattern is tried (a failed try of the whole-event pattern over a read of
        # several chunks cost ~5 us, a quarter of the reads in the benchmark on a loaded machine: issue 54).
        eol = self.event_eol
        size = len(data) - eol - 4
        if not (0 <= size < _SIZE_LINES_UP_TO and data.startswith(_SIZE_LINES[size])):
            eol = data.find(b"\r\n", 0, 10)
            if eol <= 0:
                return False
            try:
                size = int(data[:eol], 16)
            except ValueError:
                return False
            if size != len(data) - eol - 4:
                return False
            self.event_eol = eol
        m = None
        prefix = self.event_prefix
        if prefix is not None and data.startswith(prefix, eol + 2):
            # The events of one stream mostly differ only in their piece: a read that starts as the
            # last whole event did up to its piece's opening quote needs only the rest matched, and
            # a rest of the very bytes of the last one's (from the piece's closing quote on) reads
            # as that one did, once the piece holds no quote, escape or control byte (see fastpath).
            start = eol + 2 + len(prefix)
            rest = self.event_rest
            end = len(data) - len(rest)
            if end >= start and data.endswith(rest) and _impure_piece(data, start, end) is None:
                reason, pt, ct = self.event_groups
                piece = end > start
                m = True
            elif data.endswith(b"\n\n\r\n"):        # (every pattern ends so: see below)
                m = self.event_tail(data, start)
                if m is not None:
                    piece, reason, pt, ct = m.groups()
                    self.event_rest, self.event_groups = data[m.end(1):], (reason, pt, ct)
        # every pattern ends with an event's end and the chunk's: a read that does not, such as a
        # stream's last event with its [DONE] and the last chunk, goes to the parser without a try
        if m is None and data.endswith(b"\n\n\r\n"):
            m = self.whole_event(data)
            if m is not None:
                size_hex, piece, reason, pt, ct = m.groups()
                if len(size_hex) != eol:        # (the size line read above is the pattern's: never so)
                    m = None
                elif piece is not None:
                    self.event_prefix = data[eol + 2:m.start(2)]
                    self.event_rest, self.event_groups = data[m.end(2):], (reason, pt, ct)
                else:           # (a chat event without a piece has no place to start a tail from)
                    self.event_prefix = None
        if m is not None:
            received = self._received + size
            if received <= self.max_body:
                self._received = received
                ex.state.on_fields(piece, reason, pt, ct, t - ex.sent)     # the transport's chunk counter
                return True
        return False

    def _inline_chunks(self, data: bytes, ex: Exchange, t: float) -> bytes:
        """The whole chunks at the read's start, each counted inline while it is one whole event; what
        is left (from the first chunk that is not, or is cut) is returned for the parser."""
        pos, n = 0, len(data)
        while pos < n:
            eol = data.find(b"\r\n", pos, pos + 10)
            if eol <= pos:
                break
            try:
                size = int(data[pos:eol], 16)
            except ValueError:
                break
            # a size line as the parser reads it (any other spelling goes to the parser)
            if not (0 < size < _SIZE_LINES_UP_TO and data.startswith(_SIZE_LINES[size], pos)):
                break
            end = eol + 4 + size
            if end > n or not self._inline_event(data[pos:end], ex, t):
                break
            pos = end
        return data[pos:] if pos else data

    def _set_inline(self) -> None:
        """Whether the next read may take the inline path: an SSE completions or chat body (nothing
        half-read in the chunk framing or the event splitter)."""
        ex = self.exchange
        state = ex.state if ex is not None else None
        self.inline = (state is not None and not state.spent
                       and not state.keep_text and self.state == STATE_BODY and self._chunked and not self._buf
                       and not self._left and not self._need_crlf and not self._trailer
                       and not state.splitter.pending)

    def _setup_body(self) -> None:
        super()._setup_body()
        ex = self.exchange
        if ex is None:
            return
        status = self.status
        if ex.method == b"HEAD" or status in (204, 304) or 100 <= status < 200:
            self._chunked = self._until_close = False
            self._left = 0
            self.body_done = True
        ex.on_head(status, self.headers)

    def _complete(self) -> None:
        super()._complete()
        ex, client = self.exchange, self.client
        if ex is not None and not ex.done:
            # the connection back in the pool first: a request its client sent before this exchange was done
            # waits behind it and is taken up in exchange_done, and takes this connection rather than a new one
            # (a connect: ~3 ms on this machine). (The pump leaves a body's last chunk to unpump, which writes
            # it before counting the reads in the same callback: the client's next request is read after this.)
            self.proxy.release(self)
            client.exchange_done(ex, close=not self.keep_alive)

    def _fail(self, exc: Exception) -> None:
        super()._fail(exc)
        ex, client = self.exchange, self.client
        self.exchange = self.client = None
        if ex is None or ex.done:
            return
        if isinstance(exc, BodyTooLarge):
            detail = "response over the size bound"
        elif isinstance(exc, StreamCut):
            detail = str(exc)
        else:
            detail = type(exc).__name__
        if ex.first_byte is None:
            client.fail_before_head(ex, R.CONNECT if ex.status is None else R.STREAM_CUT,
                                    "upstream closed without answering", 502)
        else:
            client.fail_exchange(ex, R.STREAM_CUT, f"upstream {detail}", None)

    def connection_lost(self, exc) -> None:
        self.unpump()
        super().connection_lost(exc)
        if self.paused:
            self.paused = False

    # backpressure: the upstream reads our request body slowly
    def pause_writing(self) -> None:
        client = self.client
        if client is not None:
            client.reading_paused_for_upstream = True
            client.update_reading()

    def resume_writing(self) -> None:
        client = self.client
        if client is not None:
            client.reading_paused_for_upstream = False
            client.update_reading()


def count_path(compiled: bool | None = None) -> str:
    """Choose how an Upstream made from now on takes a read: the compiled servewatch.proxy._inline (setup.py
    builds it where it can: data_received and the inline path) or the pure-Python methods, which are its
    reference (tests/test_proxy_inline.py runs both over the same reads). None: compiled where it was built.
    Returns the choice's name."""
    global _inline_event, _inline_chunks, _reader
    if compiled is None:
        compiled = _compiled is not None
    if compiled and _compiled is None:
        raise RuntimeError("servewatch.proxy._inline was not built")
    if compiled:
        _inline_event, _inline_chunks = _compiled.inline_event, _compiled.inline_chunks
        _reader = _compiled.Reader
    else:
        _inline_event, _inline_chunks = Upstream._inline_event, Upstream._inline_chunks
        _reader = None
    return "compiled" if compiled else "pure Python"


def _load_compiled():
    """servewatch.proxy._inline, ready to count ProxyStream's reads (None where it was not built). It updates
    the stream state's slots itself only for types whose on_fields and _chunk are StreamState's."""
    try:
        import servewatch.proxy._inline as _inline   # the C extension (not the package: no import cycle)
    except ImportError:
        return None
    from servewatch.proxy.exchange import ProxyStream
    from servewatch.transport.stream import StreamState

    own = [cls for cls in (StreamState, ProxyStream)
           if all(getattr(cls, name) is getattr(StreamState, name) for name in ("on_fields", "_chunk"))]
    _inline.setup(StreamState, tuple(own))
    # an Upstream subclass that keeps these slots may be added to the tuples (pair.py's is none)
    _inline.setup_reader(Upstream.data_received, Upstream._parse, globals(), Exchange, (Exchange,), Upstream,
                         (Upstream,))
    return _inline


_compiled = _load_compiled()
_inline_event = _inline_chunks = _reader = None
COUNT_PATH = count_path()


def pump_path(compiled: bool | None = None) -> str:
    """Choose whether a Proxy started from now on moves streamed bodies with the compiled pump
    (servewatch.proxy._pump, which setup.py builds where it can) or reads every chunk in the event loop (the
    reference; tests run both). None: the pump where it was built, unless SERVEWATCH_PROXY_PUMP=0 asks for the
    event loop (the two measured side by side in benchmarks/proxy.py: docs/site/figures.md, "The stream's body
    out of the event loop"). Returns the choice's name."""
    global _pump
    if compiled is None:
        compiled = _pump_built is not None and os.environ.get("SERVEWATCH_PROXY_PUMP") != "0"
    if compiled and _pump_built is None:
        raise RuntimeError("servewatch.proxy._pump was not built")
    _pump = _pump_built if compiled else None
    return "pump" if compiled else "event loop"


try:
    import servewatch.proxy._pump as _pump_built   # the C extension (Linux: epoll, eventfd)
except ImportError:
    _pump_built = None
_pump = None
_pump_ids = itertools.count(1)       # each pump's ident: what the hub says of it when it stops
PUMP_PATH = pump_path()


class Client(asyncio.Protocol):
    """One client connection; one request at a time (pipelined requests wait their turn)."""

    def __init__(self, proxy: Proxy):
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.head_started: float | None = None
        self.last = 0.0
        self.exchange: Exchange | None = None
        self.upstream_head = b""
        self.connecting: asyncio.Task | None = None
        self.reading_paused_for_upstream = False
        self.reading_paused_pipelined = False
        self._reading_paused = False
        self.closing = False

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        proxy = self.proxy
        _read_size(proxy, transport)
        self.last = proxy.now()
        if len(proxy.clients) >= proxy.config.max_connections:
            proxy.counters.refuse("over_connections")
            transport.write(error_response(503, "the proxy is at its connection limit", "overloaded",
                                           retry_after=proxy.config.retry_after_s))
            transport.close()
            self.closing = True
            return
        proxy.clients.add(self)

    def connection_lost(self, exc) -> None:
        ex = self.exchange
        if ex is not None and ex.upstream is not None:
            ex.upstream.unpump()                 # its reads counted first (the record is whole)
        self.proxy.clients.discard(self)
        self.closing = True
        ex = self.exchange
        if ex is not None and not ex.done:
            ex.client_gone = True
            self._end(ex)
            up = ex.upstream
            if up is not None:
                up.exchange = up.client = None
                up._abort()                      # the engine sees the request cancelled
            if self.connecting is not None:
                self.connecting.cancel()

    def eof_received(self) -> bool:
        return self.exchange is not None and self.exchange.body_left == 0   # half-close: still answer

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last = self.proxy.now()
        ex = self.exchange
        if ex is not None:
            if ex.body_left > 0:
                data = self._body(ex, data)
            if data:                              # the next request, pipelined: wait for this one's end
                self.buf += data
                if len(self.buf) > self.proxy.config.max_head_bytes:
                    self.refuse(431, "request head too large", "invalid_request")
                    return
                self.reading_paused_pipelined = True
                self.update_reading()
            return
        self._head(self.buf + data if self.buf else data)

    # backpressure: the client reads the response slowly
    def pause_writing(self) -> None:
        ex = self.exchange
        up = ex.upstream if ex is not None else None
        if up is not None and not up.paused and not up.closed:
            up.paused = True
            up.transport.pause_reading()

    def resume_writing(self) -> None:
        ex = self.exchange
        up = ex.upstream if ex is not None else None
        if up is not None and up.paused:
            up.paused = False
            if not up.closed:
                up.transport.resume_reading()

    def update_reading(self) -> None:
        want_paused = self.reading_paused_for_upstream or self.reading_paused_pipelined
        if want_paused != self._reading_paused and not self.transport.is_closing():
            self._reading_paused = want_paused
            if want_paused:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    # -- request parsing
    def _head(self, buf: bytes) -> None:
        proxy = self.proxy
        config = proxy.config
        if self.head_started is None:
            self.head_started = self.last
        end = buf.find(b"\r\n\r\n", 0, config.max_head_bytes + 4)
        if end < 0:
            if len(buf) > config.max_head_bytes:
                proxy.counters.refuse("bad_request")
                self.refuse(431, "request head too large", "invalid_request")
            else:
                self.buf = buf
            return
        self.buf = b""
        head, rest = buf[:end], buf[end + 4:]
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[0].isalpha() or not parts[0].isupper() or not parts[1].startswith(b"/"):
            proxy.counters.refuse("bad_request")
            self.refuse(400, "malformed request line", "invalid_request")
            return
        method, target, version = parts
        if version not in (b"HTTP/1.1", b"HTTP/1.0"):
            proxy.counters.refuse("bad_request")
            self.refuse(505, "only HTTP/1.x is served", "invalid_request")
            return
        keep_alive = version == b"HTTP/1.1"
        length = None
        tenant = auth = None
        expect_continue = False
        kept: list[bytes] = []
        tenant_header = proxy._tenant_header
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip() or b" " in name:
                proxy.counters.refuse("bad_request")
                self.refuse(400, "malformed header line", "invalid_request")
                return
            key = name.lower()
            value = value.strip()
            if key == b"host":
                continue
            if key == b"content-length":
                if not value.isdigit() or (length is not None and int(value) != length):
                    proxy.counters.refuse("bad_request")
                    self.refuse(400, "bad content-length", "invalid_request")
                    return
                length = int(value)
            elif key == b"transfer-encoding":
                proxy.counters.refuse("bad_request")
                self.refuse(411, "a request body needs a Content-Length", "invalid_request")
                return
            elif key == b"connection":
                token = value.lower()
                if b"close" in token:
                    keep_alive = False
                elif b"keep-alive" in token:
                    keep_alive = True
            elif key == b"expect":
                if value.lower() == b"100-continue":
                    expect_continue = True
                    continue
            elif key == tenant_header:
                tenant = value
            elif key == b"authorization":
                auth = value
            kept.append(line)
        length = length or 0
        if length > config.max_request_bytes:
            proxy.counters.refuse("too_large")
            self.refuse(413, f"request body over {config.max_request_bytes} bytes", "invalid_request")
            return
        self.head_started = None
        path = target.split(b"?", 1)[0]
        api = API_PATHS.get(path) if method == b"POST" else None
        if auth is not None and tenant is None and auth[:7].lower() == b"bearer ":
            tenant = auth[7:].strip()
        ex = Exchange(proxy.next_id(), self.last, api, method, keep_alive, None, length, config.parse_bytes,
                      config.keep_text)
        ex.body_size = length
        if api is None:
            proxy.counters.other_requests += 1
        self.exchange = ex
        proxy.inflight.add(ex)
        self.upstream_head = (method + b" " + proxy._base + target + b" " + version + b"\r\n"
                              + b"\r\n".join(kept) + (b"\r\n" if kept else b"") + proxy._host_line
                              + b"\r\n\r\n")
        if expect_continue and length:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if length:
            rest = self._body(ex, rest, complete=False)
        proxy.acquire(self, ex)
        # what only the record needs of the request (the tenant's hash, the body's model, stream and
        # max_tokens) is read once the request is on its way upstream, not before
        if api is not None and tenant:
            ex.tenant = tenant_id(tenant, config.tenant_key)
        if ex.body_left == 0:
            ex.request_complete()
        if rest and not self.closing:
            self.buf = rest
            self.reading_paused_pipelined = True
            self.update_reading()

    def _body(self, ex: Exchange, data: bytes, complete: bool = True) -> bytes:
        """Forward request body bytes; return what follows the body (a pipelined request). With
        `complete` False the caller reads a body that ends here (Exchange.request_complete)."""
        take = ex.body_left
        rest = b""
        if len(data) > take:
            data, rest = data[:take], data[take:]
        ex.body_left -= len(data)
        if ex.body_copy is not None:
            ex.body_copy.append(data)
        if ex.pending is not None:
            ex.pending.append(data)
            if sum(len(p) for p in ex.pending) > 2**20:       # not connected yet: hold at most 1 MiB
                self.reading_paused_for_upstream = True
                self.update_reading()
        elif ex.upstream is not None and not ex.upstream.closed:
            ex.upstream.transport.write(data)
        if complete and ex.body_left == 0:
            ex.request_complete()
        return rest

    # -- the end of an exchange
    def _end(self, ex: Exchange) -> None:
        ex.done = True
        self.proxy.finished(ex)

    def exchange_done(self, ex: Exchange, close: bool) -> None:
        """The upstream's response ended and is all written to the client."""
        self.exchange = None
        if close or not ex.keep_alive or ex.body_left > 0:
            self._end(ex)
            self.closing = True
            self.transport.close()
            return
        ex.done = True
        self.proxy.finished(ex, later=True)     # the next request on this connection first
        self.last = self.proxy.now()
        if self.reading_paused_pipelined:
            self.reading_paused_pipelined = False
            self.update_reading()
        if self.buf:
            buf, self.buf = self.buf, b""
            self._head(buf)

    def fail_before_head(self, ex: Exchange, error: str, detail: str, status: int) -> None:
        """No byte of a response reached the client: answer for the upstream with a JSON error."""
        if ex.done:
            return
        if ex.upstream is not None and ex.first_byte is not None:
            self.fail_exchange(ex, error, detail, None)
            return
        ex.error, ex.error_detail = error, detail
        ex.status = status
        self.exchange = None
        self._end(ex)
        self.proxy.counters.refuse("upstream_unavailable" if error == R.CONNECT else "upstream_timeout")
        if not self.closing:
            self.closing = True
            kind = "upstream_unavailable" if status == 502 else "upstream_timeout"
            self.transport.write(error_response(status, detail, kind))
            self.transport.close()

    def fail_exchange(self, ex: Exchange, error: str, detail: str, status: int | None) -> None:
        """End an exchange for a deadline or a broken upstream: an error answer if nothing was sent yet,
        else the client connection is cut (a client must not take a partial response for a whole one)."""
        if ex.done:
            return
        up, ex.upstream = ex.upstream, None
        if up is not None:
            up.exchange = up.client = None
            up._abort()
        if self.connecting is not None:
            self.connecting.cancel()
            self.connecting = None
        ex.error, ex.error_detail = error, detail
        self.exchange = None
        if ex.first_byte is None and status is not None:
            ex.status = status
            self._end(ex)
            if not self.closing:
                self.closing = True
                self.transport.write(error_response(status, detail, "timeout" if status in (408, 504) else "error"))
                self.transport.close()
            return
        self._end(ex)
        self.closing = True
        self.transport.abort()

    def refuse(self, status: int, message: str, kind: str) -> None:
        self.closing = True
        self.buf = b""
        self.transport.write(error_response(status, message, kind))
        self.transport.close()

