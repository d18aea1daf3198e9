"""The proxy's inline read path, compiled (servewatch/proxy/_inline.c) and in pure Python (Upstream's
_inline_event and _inline_chunks, its reference), run side by side over the same reads from the same state:
every return value, every exception and every attribute either sets must be the same. The reads are cut from
streams of both APIs' events as tests/test_proxy.py makes them, whole and split anywhere, several at once,
with broken and odd chunk framing, non-SSE bodies and noise; the states include text kept, a stream state of
another type, a body bound that a read passes, and counts that do not fit the chunk array."""

from __future__ import annotations

import asyncio
import json
import random
from array import array
from types import SimpleNamespace

import pytest

from servewatch.proxy import fastpath, server
from servewatch.proxy.exchange import Exchange, ProxyStream
from servewatch.proxy.server import Upstream
from tests.processes import without_module
from tests.tools import in_ci

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def compiled():
    if server._compiled is None:
        if in_ci():
            pytest.fail("servewatch.proxy._inline was not built; under CI=true `pip install -e .` builds it",
                        pytrace=False)
        pytest.skip("servewatch.proxy._inline was not built (pip install -e . builds it where a C compiler is)")
    return server._compiled


class Fake:
    """What the inline path reads and sets of an Upstream (an Upstream itself needs a running loop)."""

    _inline_event = Upstream._inline_event       # the pure-Python _inline_chunks calls it as a method

    def __init__(self, chat: bool, max_body: int):
        self.event_eol = 2
        self.event_prefix = None
        self.event_rest = b""
        self.event_groups = (None, None, None)
        self.whole_event = fastpath.chat_whole if chat else fastpath.completion_whole
        self.event_tail = fastpath.chat_tail if chat else fastpath.completion_tail
        self._received = 0
        self.max_body = max_body


class Guarded(Fake):
    """An upstream whose byte count is a property: the compiled path reads and sets such an object's
    attributes through getattr and setattr, not its instance dict (a data descriptor comes before the dict)."""

    @property
    def _received(self):
        return self.count

    @_received.setter
    def _received(self, value):
        self.count = value


def slotted(chat: bool, max_body: int) -> Upstream:
    """A real Upstream, set as Fake is: the compiled path reads and sets its __slots__ by offset (setup_reader)."""
    up = Upstream.__new__(Upstream)
    Fake.__init__(up, chat, max_body)
    return up


def exchange(rng: random.Random, state):
    """The exchange the inline path reads (its state and send time): a real Exchange (its slots read by
    offset) or another object (read through getattr)."""
    if rng.random() < 0.5:
        ex = Exchange.__new__(Exchange)
        ex.state, ex.sent = state, 1000.0
        return ex
    return SimpleNamespace(state=state, sent=1000.0)


class Counting(ProxyStream):
    """A stream state whose on_fields is its own: the compiled path must call it, not count in its place."""

    __slots__ = ("calls",)

    def __init__(self, chat: bool):
        super().__init__(chat)
        self.calls = 0

    def on_fields(self, piece, reason, pt, ct, t):
        self.calls += 1
        if piece in ("zz", b"zz"):   # an error out of the state: both paths must let it through, the same
            raise ValueError(f"refused piece at {t}")
        super().on_fields(piece, reason, pt, ct, t)


FIELDS = ("completion_tokens", "prompt_tokens", "finish_reason", "client_tokens", "counts_exact", "saw_done",
          "stream_error", "malformed", "spent", "keep_text")


def snapshot(up: Fake, ex) -> tuple:
    st = ex.state
    return ((up.event_eol, up.event_prefix, up.event_rest, up.event_groups, up._received),
            tuple(getattr(st, f) for f in FIELDS), list(st.chunk_t), list(st.chunk_k), list(st.text),
            getattr(st, "calls", None))


def outcome(call):
    try:
        return "ok", call()
    except Exception as exc:        # both paths must raise the same exception, with the same words
        return type(exc).__name__, str(exc)


def event(rng: random.Random, chat: bool, i: int) -> bytes:
    """One SSE event, mostly of vLLM's shape and alike but for its piece, sometimes not."""
    texts = ["a", " b", "", "c\u00e9", "x y", '"q"', "ok", "back\\slash", "ab", "zz", "\x01"]
    reason = rng.choice([None] * 12 + ["length", "stop", "", "Stop"])
    piece = rng.choice(texts)
    if chat:
        delta = rng.choice([{"content": piece}] * 8 + [{"role": "assistant", "content": ""}, {"content": None}, {},
                            {"role": "assistant"}, {"content": "a", "content2": 1}])
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
    else:
        choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": reason, "stop_reason": None}
    body: dict = {"id": "cmpl-1", "object": "text_completion", "created": 1,
                  "model": rng.choice(["m"] * 6 + ["m2"]), "choices": [choice]}
    r = rng.random()
    if r < 0.3:
        body["usage"] = {"prompt_tokens": rng.choice([7, 7, 12]), "total_tokens": 7 + i,
                         "completion_tokens": rng.choice([i, i + 1, i - 3, 0])}
    elif r < 0.32:          # a count the chunk array (unsigned int) cannot hold: both keep it at CHUNK_K_MAX
        body["usage"] = {"prompt_tokens": 7, "total_tokens": 1, "completion_tokens": 2**40 + i}
    elif r < 0.34:
        body = {"object": "error", "message": "boom"}
    elif r < 0.36:
        body["choices"] = []
    raw = json.dumps(body, separators=(",", ":")).encode()
    if rng.random() < 0.02:          # a raw control byte or an unescaped quote in the piece: not JSON
        raw = raw.replace(b'"x y"', b'"x\x01y"').replace(b'"ab"', b'"a"b"')
    return b"data: " + raw + b"\n\n"


def chunk(rng: random.Random, payload: bytes) -> bytes:
    size = b"%x" % len(payload)
    r = rng.random()
    if r < 0.03:
        size = size.upper()
    elif r < 0.05:
        size += b";ext=1"
    elif r < 0.07:
        size = b"0" + size
    elif r < 0.08:
        size = rng.choice([b" " + size, b"+" + size, b"0x" + size, size[:1] + b"_" + size[1:], b"-" + size])
    elif r < 0.09:
        size = b"%x" % (len(payload) + rng.choice([-1, 1]))       # the size line wrong by one
    elif r < 0.10:
        payload = payload[:-2]                                    # an event cut short in its chunk
        size = b"%x" % len(payload)
    return size + b"\r\n" + payload + b"\r\n"


def reads(rng: random.Random, chat: bool, n: int, clean: bool = False) -> list[bytes]:
    """The wire of one stream, read as a proxy may read it: a chunk a read, several at once, cut anywhere
    (`clean`: every chunk framed as it should be, every event JSON, no noise)."""
    wire = []
    for i in range(n):
        r = rng.random()
        if clean:
            e = event(rng, chat, i)
            while b"\x01" in e or b'"a"b"' in e or b"10995116" in e:
                e = event(rng, chat, i)
            wire.append(b"%x\r\n%s\r\n" % (len(e), e))
        elif r < 0.03:
            wire.append(chunk(rng, b'{"choices":[{"text":"not SSE"}]}'))          # a JSON body, not events
        elif r < 0.05:
            wire.append(chunk(rng, event(rng, chat, i) + b"data: [DONE]\n\n"))    # two events in one chunk
        elif r < 0.06:
            wire.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))   # noise
        else:
            wire.append(chunk(rng, event(rng, chat, i)))
    wire.append(chunk(rng, b"data: [DONE]\n\n") + b"0\r\n\r\n")
    out, i = [], 0
    while i < len(wire):
        r = rng.random()
        if r < 0.7:
            out.append(wire[i])
            i += 1
        elif r < 0.85:
            k = rng.randrange(2, 5)
            out.append(b"".join(wire[i:i + k]))
            i += k
        else:
            whole = b"".join(wire[i:i + 2])
            cut = rng.randrange(0, len(whole) + 1)
            out += [whole[:cut], whole[cut:]]
            i += 2
    return out


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_path_does_what_the_python_path_does(compiled, chat, seed):
    rng = random.Random(seed * 2 + chat)
    kinds = {"event": 0, "chunks": 0, "counted": 0, "raised": 0}
    for stream in range(12):
        keep_text = stream % 6 == 5
        state_type = Counting if stream % 6 == 4 else ProxyStream
        max_body = rng.choice([2**20, 2**20, 3000])             # 3,000 bytes: a bound a stream passes
        up_type, ex_seed = rng.choice([Fake, Guarded, slotted, slotted]), rng.random()
        pair = []
        for _ in range(2):
            st = Counting(chat) if state_type is Counting else ProxyStream(chat, keep_text)
            pair.append((up_type(chat, max_body), exchange(random.Random(ex_seed), st)))
        (py_up, py_ex), (c_up, c_ex) = pair
        for j, data in enumerate(reads(rng, chat, 60)):
            t = 1000.0 + j * 0.005
            if rng.random() < 0.5:
                kinds["event"] += 1
                py = outcome(lambda: Upstream._inline_event(py_up, data, py_ex, t))
                c = outcome(lambda: compiled.inline_event(c_up, data, c_ex, t))
                kinds["counted"] += py == ("ok", True)
            else:
                kinds["chunks"] += 1
                py = outcome(lambda: Upstream._inline_chunks(py_up, data, py_ex, t))
                c = outcome(lambda: compiled.inline_chunks(c_up, data, c_ex, t))
                kinds["counted"] += py[0] == "ok" and py[1] != data
            kinds["raised"] += py[0] != "ok"
            assert c == py, (seed, stream, j, data)
            assert snapshot(c_up, c_ex) == snapshot(py_up, py_ex), (seed, stream, j, data)
    # the reads reached every way: counted inline, left to the parser, and raising
    assert kinds["counted"] > 100 and kinds["event"] > 200 and kinds["chunks"] > 200 and kinds["raised"] > 0, kinds


def test_an_upstream_slot_never_set_raises_as_the_python_path_does(compiled):
    """An Upstream read by offset whose slot holds nothing: the AttributeError getattr raises, not a crash."""
    ev = b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
    data = b"%x\r\n%s\r\n" % (len(ev), ev)
    for name in ("event_eol", "event_prefix", "_received", "max_body"):
        results = []
        for path in (Upstream._inline_event, compiled.inline_event):
            up = slotted(False, 2**20)
            up.event_prefix = data[4:40]      # (a prefix this read starts with: the rest and groups are read)
            delattr(up, name)
            results.append(outcome(lambda: path(up, data, SimpleNamespace(state=ProxyStream(False), sent=1.0), 2.0)))
        assert results[0] == results[1] and results[0][0] == "AttributeError", (name, results)


def test_every_size_line_reads_as_the_python_path_reads_it(compiled):
    """The size line of a whole chunk, canonical or not, and a read whose stored line width is stale."""
    ev = b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
    lines = [b"%x" % len(ev), b"%X" % len(ev), b"0%x" % len(ev), b"00%x" % len(ev), b" %x" % len(ev),
             b"%x " % len(ev), b"+%x" % len(ev), b"0x%x" % len(ev), b"4_2", b"", b"-0", b"\x00", b"%x" % (len(ev) + 1),
             b"ffffffff", b"fffffffff", b"1" * 9, b"%x;e" % len(ev)]
    for eol in (1, 2, 3, 9, 12):
        for line in lines:
            data = line + b"\r\n" + ev + b"\r\n"
            for fn in ("_inline_event", "_inline_chunks"):
                results = []
                for path in (getattr(Upstream, fn), getattr(compiled, fn.lstrip("_"))):
                    up, ex = Fake(False, 2**20), SimpleNamespace(state=ProxyStream(False), sent=1.0)
                    up.event_eol = eol
                    results.append((outcome(lambda: path(up, data, ex, 2.0)), snapshot(up, ex)))
                assert results[0] == results[1], (eol, line, fn)


def test_the_compiled_path_counts_into_a_stream_state_as_on_fields_does(compiled):
    """One read counted through each path, into states that hold what a long stream holds."""
    ev = b'data: {"choices":[{"index":0,"text":"tok","finish_reason":"length"}],"usage":{"prompt_tokens":5,' \
         b'"completion_tokens":130}}\n\n'
    data = b"%x\r\n%s\r\n" % (len(ev), ev)
    states = []
    for path in (Upstream._inline_event, compiled.inline_event):
        up, st = Fake(False, 2**20), ProxyStream(False)
        st.completion_tokens, st.client_tokens = 128, 127
        st.chunk_t, st.chunk_k = array("d", [0.5]), array("I", [1])
        assert path(up, data, SimpleNamespace(state=st, sent=1.0), 1.25) is True
        states.append((snapshot(up, SimpleNamespace(state=st)), type(st.finish_reason)))
    assert states[0] == states[1]
    assert states[1][0][1][:5] == (130, 5, "length", 128, True) and states[1][0][2:4] == ([0.5, 0.25], [1, 2])


def test_without_the_compiled_module_the_proxy_counts_in_python():
    """The extension is optional: where it was not built the proxy chooses the pure-Python path, and asking
    for the compiled one says it was not built."""
    done = without_module("servewatch.proxy._inline", """
from servewatch.proxy import server
assert server._compiled is None and server.COUNT_PATH == "pure Python", server.COUNT_PATH
assert server._inline_event is server.Upstream._inline_event
try:
    server.count_path(True)
except RuntimeError as exc:
    print(exc)
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "servewatch.proxy._inline was not built"


def test_the_proxy_chooses_the_compiled_path_where_it_was_built(compiled):
    assert server.count_path() == "compiled" and server._inline_event is compiled.inline_event
    assert server.count_path(False) == "pure Python" and server._inline_chunks is Upstream._inline_chunks
    assert server.count_path() == "compiled"


class Ticks:
    """The proxy's clock and the reads' (server._now): a new time at each call, the same on both paths."""

    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


def drive_stream(compiled_path: bool, chat: bool, reads: list[bytes], monkeypatch) -> tuple:
    """One streamed request through a real Client and Upstream (no sockets) made under the chosen path: what
    the client got, the stream state and the records."""
    from servewatch.proxy import Proxy, ProxyConfig
    from tests.test_proxy import _Wire, _post

    clock = Ticks()
    monkeypatch.setattr(server, "_now", clock)
    server.count_path(compiled_path)

    async def run():
        records = []
        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"), on_record=lambda ex, rec: records.append(rec),
                      now=clock)
        client, wire = server.Client(proxy), _Wire()
        client.connection_made(wire)
        up = Upstream(proxy, 20_000)
        assert ("data_received" in vars(up)) == compiled_path       # the compiled reader on the instance
        up.connection_made(_Wire())
        up.idle_since = proxy.now()
        proxy.idle.append(up)
        client.data_received(_post("/v1/chat/completions" if chat else "/v1/completions",
                                   {"model": "m", "prompt": "p", "max_tokens": 60, "stream": True}))
        ex = up.exchange
        raised = [outcome(lambda: up.data_received(data)) for data in reads]
        await asyncio.sleep(0.01)          # a kept-alive exchange's record is made RECORD_AFTER_S after its end
        st = ex.state
        return (b"".join(wire.out), None if st is None else tuple(getattr(st, f) for f in FIELDS),
                None if st is None else (list(st.chunk_t), list(st.chunk_k)),
                [(r.error, r.error_detail, r.output_tokens, r.input_tokens, r.token_source, r.itl_exact,
                  r.finish_reason, r.ttft_s, r.e2e_s) for r in records], raised)

    try:
        return asyncio.run(run())
    finally:
        server.count_path()


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_reader_ends_a_stream_as_the_python_one_does(compiled, chat, seed, monkeypatch):
    """Upstream.data_received compiled (the Reader the event loop calls) and in Python, through the whole
    proxy: the same bytes to the client, the same stream state, chunk times and records, for streams read a
    chunk at a time, several at once and cut anywhere, broken ones and ones over the body bound included."""
    rng = random.Random(100 + seed)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    clean = seed % 2 == 1
    wire = reads(rng, chat, 50, clean)
    stream = [head, *wire]
    if seed == 3:
        stream = [head[:20], head[20:] + wire[0], *wire[1:]]
    py = drive_stream(False, chat, stream, monkeypatch)
    c = drive_stream(True, chat, stream, monkeypatch)
    assert c == py
    if clean:
        assert py[0] == b"".join(stream)              # forwarded unchanged
        assert len(py[3]) == 1 and py[3][0][0] in (None, "truncated"), py[3]     # and recorded
