"""Values of servewatch/load/client.py (issue 50: on the path to load's records, found by the mutation rule): one request
to one RequestRecord on a virtual clock through a stand-in client — the chunk times counted from the request's send
(the load client's TTFT time base, as the proxy's), e2e to the end, the error class of each failure, and the record's
counts from what the stream said. Each figure computed by hand beside the assertion."""

from __future__ import annotations

import asyncio
import json

import pytest

from servewatch.load import client as C
from servewatch.load import records as R
from servewatch.transport.http1 import BodyTooLarge, ConnectFailed, StreamCut
from servewatch.transport.stream import StreamState


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def event(text: str, reason: str | None = None, usage: tuple[int, int] | None = None) -> bytes:
    body: dict = {"choices": [{"index": 0, "text": text, "finish_reason": reason}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Response:
    def __init__(self, clock, status=200, reads=(), raises=None, end=None):
        self.clock, self.status, self.reads, self.raises, self.end = clock, status, list(reads), raises, end
        self.read_limit = None
        self.released = False

    async def stream_into(self, callback):
        for t, data in self.reads:
            self.clock.t = t
            callback(data)
        if self.raises is not None:
            raise self.raises
        if self.end is not None:
            self.clock.t = self.end

    async def read_all(self, limit):
        self.read_limit = limit
        if self.end is not None:
            self.clock.t = self.end
        return b'{"error": "busy"}'

    def release(self):
        self.released = True


class Client:
    """request(): sends at `sent_at` (on_sent stamps it), the head comes back at `head_at`."""

    def __init__(self, clock, response, sent_at=100.0, head_at=100.25, raises=None):
        self.clock, self.response, self.sent_at, self.head_at, self.raises = clock, response, sent_at, head_at, raises
        self.asked = None

    async def request(self, method, path, body, on_sent=None):
        self.asked = (method, path, body)
        self.clock.t = self.sent_at
        on_sent()
        self.clock.t = self.head_at
        if self.raises is not None:
            raise self.raises
        return self.response


def spec(max_tokens=3, ignore_eos=True, prompt_text=None):
    return C.RequestSpec(7, 99.0, "/v1/completions", b"{}", 12, max_tokens, ignore_eos=ignore_eos,
                         prompt_text=prompt_text)


def run(client, s=None, **kw):
    return asyncio.run(C.run_request(client, s or spec(), client.clock, **kw))


def test_a_stream_is_timed_from_the_request_sent():
    clock = Clock(98.0)
    reads = [(100.5, event("a")), (100.75, event(" b")), (101.25, event(" c", "length", (12, 3)) + b"data: [DONE]\n\n")]
    response = Response(clock, reads=reads, end=101.5)
    deadline = C.Deadline(99.5)
    rec = run(Client(clock, response), deadline=deadline)
    # TTFT 100.5 - 100.0 (from the send, not from the head at 100.25); e2e 101.5 - 100.0; TPOT (101.25 - 100.5) / 2
    assert (rec.sent, rec.ttft_s, rec.e2e_s, rec.tpot_s) == (100.0, 0.5, 1.5, 0.375)
    assert list(rec.chunk_t_s) == [0.5, 0.75, 1.25] and list(rec.itl_token_s) == [0.25, 0.5]
    assert (rec.http_status, rec.error, rec.error_detail, rec.finish_reason) == (200, None, None, "length")
    # (per-token gaps not exact: the server's count came at the end only, not with each chunk)
    assert (rec.output_tokens, rec.input_tokens, rec.token_source, rec.itl_exact) == (3, 12, "server", False)
    assert (rec.id, rec.scheduled, rec.prompt_tokens_target, rec.max_tokens, rec.prompt) == (7, 99.0, 12, 3, None)
    assert (deadline.start, deadline.last, deadline.fired) == (99.5, 101.25, None)     # the last read's time
    assert response.released and response.read_limit is None


def test_the_send_handed_over_before_the_run():
    """presend: the request was written by the dispatcher; its `sent` stamp is the send time (a retry on a
    fresh connection stamps it again through on_sent)."""
    clock = Clock(100.0)

    class Pending:
        sent = 99.75
        on_sent = None

    class Handed:
        clock = None

        async def complete(self, pending):
            self.got = pending
            clock.t = 100.25
            return Response(clock, reads=[(100.5, event("a", "length", (5, 1)))], end=100.75)

    handed, pending = Handed(), Pending()
    handed.clock = clock
    rec = asyncio.run(C.run_request(handed, spec(max_tokens=1), clock, presend=pending))
    # measured from the handed-over stamp: TTFT 100.5 - 99.75, e2e 100.75 - 99.75
    assert (rec.sent, rec.ttft_s, rec.e2e_s, rec.error) == (99.75, 0.75, 1.0, None)
    assert handed.got is pending and pending.on_sent is not None
    pending.on_sent()                                  # a re-send stamps the record with now()
    assert rec.sent == 100.75

    class Resent(Handed):
        async def complete(self, pending):
            clock.t = 100.125
            pending.on_sent()                            # sent again on a fresh connection at 100.125
            clock.t = 100.25
            return Response(clock, reads=[(100.5, event("a", "length", (5, 1)))], end=100.75)

    again = Resent()
    rec = asyncio.run(C.run_request(again, spec(max_tokens=1), clock, presend=Pending()))
    assert (rec.sent, rec.ttft_s) == (100.125, 0.375)

    class Refused(Handed):
        async def complete(self, pending):
            clock.t = 101.0
            raise ConnectFailed("connection refused")

    rec = asyncio.run(C.run_request(Refused(), spec(), clock, presend=Pending()))
    # sent (by the dispatcher), then failed before the head: sent and e2e from its stamp
    assert (rec.sent, rec.e2e_s, rec.error, rec.error_detail) == (99.75, 1.25, R.CONNECT, "connection refused")


def test_an_error_status_reads_a_bounded_body():
    clock = Clock(100.0)
    response = Response(clock, status=503, end=100.5)
    rec = run(Client(clock, response))
    assert response.read_limit == C.ERROR_BODY_LIMIT == 64 * 1024 and response.released
    assert (rec.http_status, rec.error, rec.error_detail, rec.e2e_s) == (503, R.HTTP_5XX, "HTTP 503", 0.5)
    assert (rec.output_tokens, rec.input_tokens, rec.token_source, rec.ttft_s) == (None, None, None, None)
    rec = run(Client(clock, Response(clock, status=429, end=100.5)))
    assert (rec.error, rec.error_detail) == (R.HTTP_4XX, "HTTP 429")


@pytest.mark.parametrize("exc, error, detail", [
    (ConnectFailed("refused by 127.0.0.1:9"), R.CONNECT, "refused by 127.0.0.1:9"),
    (BodyTooLarge("x"), R.STREAM_CUT, "response over size bound"),
    (StreamCut("the connection ended mid-chunk"), R.STREAM_CUT, "the connection ended mid-chunk"),
    (ValueError("bad"), R.STREAM_CUT, "malformed event stream"),
    (ConnectionResetError(104, "reset"), R.STREAM_CUT, "ConnectionResetError"),
    (OSError(5, "io"), R.STREAM_CUT, "OSError"),
])
def test_each_failure_has_its_class(exc, error, detail):
    clock = Clock(100.0)
    response = Response(clock, reads=[(100.5, event("a"))], raises=exc)
    rec = run(Client(clock, response))
    assert (rec.error, rec.error_detail, rec.e2e_s, rec.ttft_s, rec.output_tokens) == (error, detail, 0.5, 0.5, 1)
    assert response.released
    rec = run(Client(clock, None, raises=exc))           # before the head: nothing to release
    assert (rec.error, rec.error_detail, rec.http_status, rec.e2e_s) == (error, detail, None, 0.25)


def test_a_deadline_that_fired_is_a_timeout_and_a_cancel_without_one_goes_on():
    clock = Clock(100.0)
    deadline = C.Deadline(100.0)
    deadline.fired = "no token for 30 s"
    response = Response(clock, reads=[(100.5, event("a"))], raises=asyncio.CancelledError())
    rec = run(Client(clock, response), deadline=deadline)
    assert (rec.error, rec.error_detail, rec.e2e_s, deadline.last) == (R.TIMEOUT, "no token for 30 s", 0.5, 100.5)
    for d in (None, C.Deadline(100.0)):                  # cancelled from outside: not ours to record
        with pytest.raises(asyncio.CancelledError):
            run(Client(clock, Response(clock, raises=asyncio.CancelledError())), deadline=d)


def test_the_request_body():
    assert json.loads(C.build_body("completions", "m", "hi", 16)) == {
        "model": "m", "max_tokens": 16, "ignore_eos": True, "stream": True, "prompt": "hi",
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chat = json.loads(C.build_body("chat", "m", "hi", 4, ignore_eos=False))
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and "prompt" not in chat
    assert chat["ignore_eos"] is False
    assert b" " not in C.build_body("completions", "m", "x", 1)          # compact separators


def _finished(chunks=(), *, status=200, error=None, usage=None, reason=None, stream_error=False, s=None,
              keep_text=False, text=()):
    state = StreamState(False, keep_text)
    for t, k in chunks:
        state.chunk_t.append(t)
        state.chunk_k.append(k)
    state.client_tokens = sum(k for _, k in chunks)
    if usage is not None:
        state.prompt_tokens, state.completion_tokens = usage
    state.finish_reason, state.stream_error = reason, stream_error
    state.text.extend(text)
    rec = R.RequestRecord(id=1, scheduled=0.0, prompt_tokens_target=12, max_tokens=3, http_status=status,
                          error=error)
    C.finish_record(rec, state, s or spec())
    return rec


def test_the_counts_and_their_source():
    # the server's usage counts
    rec = _finished([(0.5, 1), (1.0, 2)], usage=(20, 3))
    assert (rec.output_tokens, rec.input_tokens, rec.token_source, rec.error) == (3, 20, "server", None)
    # the server said the prompt only (0 completion tokens): its counts still
    rec = _finished([], usage=(20, 0))
    assert (rec.output_tokens, rec.input_tokens, rec.token_source) == (0, 20, "server")
    # no usage: the client's count of chunks, and the prompt builder's count
    rec = _finished([(0.5, 1), (1.0, 1), (1.5, 1)])
    assert (rec.output_tokens, rec.input_tokens, rec.token_source, rec.error) == (3, 12, "client", None)
    # nothing streamed on a 200: 0 tokens counted by the client, truncated against the 3 asked with ignore_eos
    rec = _finished([])
    assert (rec.output_tokens, rec.input_tokens, rec.token_source) == (0, 12, "client")
    assert (rec.error, rec.error_detail, rec.ttft_s, rec.itl_exact) == (R.TRUNCATED, "0 of 3 tokens", None, None)
    # not a 200: no counts made up
    rec = _finished([], status=503, error=R.HTTP_5XX)
    assert (rec.output_tokens, rec.input_tokens, rec.token_source, rec.error) == (None, None, None, R.HTTP_5XX)


def test_what_truncates_a_200():
    assert _finished([(0.5, 1), (1.0, 1)]).error_detail == "2 of 3 tokens"
    assert _finished([(0.5, 1), (1.0, 1)], s=spec(ignore_eos=False)).error is None       # may stop early
    assert _finished([(0.5, 1), (1.0, 1), (1.5, 1)], s=spec(max_tokens=3)).error is None  # exactly as asked
    rec = _finished([(0.5, 3)], stream_error=True)
    assert (rec.error, rec.error_detail) == (R.TRUNCATED, "error event in the stream")
    for reason in ("abort", "error"):
        rec = _finished([(0.5, 3)], reason=reason)
        assert (rec.error, rec.error_detail) == (R.TRUNCATED, f"finish reason {reason}")
    assert _finished([(0.5, 3)], reason="length").error is None
    rec = _finished([(0.5, 3)], error=R.STREAM_CUT, stream_error=True)                  # the first error stays
    assert rec.error == R.STREAM_CUT


def test_the_timings_and_the_text():
    rec = _finished([(0.5, 1), (0.75, 2), (1.25, 1)], usage=(12, 4))
    # per token gaps: the 2-token chunk's 0.25 s shared: 0.125, 0.125; then 0.5
    assert (rec.ttft_s, rec.tpot_s) == (0.5, 0.25)
    assert list(rec.itl_chunk_s) == [0.25, 0.5] and rec.itl_token_s.typecode == "d"
    assert rec.text is None
    rec = _finished([(0.5, 1)], keep_text=True, text=("he", "llo"))
    assert rec.text == "hello"
    state = StreamState(False, False)
    state.chunk_t.extend([0.5, 1.0])
    state.chunk_k.extend([1, 1])
    state.client_tokens = 2
    rec = R.RequestRecord(id=1, scheduled=0.0, prompt_tokens_target=1, max_tokens=2, http_status=200)
    C.finish_record(rec, state, spec(max_tokens=2), compact=False)
    assert rec.itl_token_s == [0.5] and isinstance(rec.itl_token_s, list) and rec.itl_chunk_s == [0.5]


def test_keep_text_keeps_the_prompt():
    clock = Clock(100.0)
    rec = run(Client(clock, Response(clock, reads=[(100.5, event("a", "length"))], end=100.6)),
              spec(max_tokens=1, prompt_text="the prompt"), keep_text=True)
    assert (rec.prompt, rec.text) == ("the prompt", "a")
    rec = run(Client(clock, Response(clock, reads=[(100.5, event("a", "length"))], end=100.6)),
              spec(max_tokens=1, prompt_text="the prompt"))
    assert (rec.prompt, rec.text) == (None, None)


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

def test_the_request_asked_and_a_chat_stream():
    clock = Clock(100.0)
    chat = [b'data: {"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n',
            b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n']
    client = Client(clock, Response(clock, reads=[(100.5, chat[0]), (100.75, chat[1])], end=101.0))
    s = C.RequestSpec(3, 99.0, "/v1/chat/completions", b'{"x":1}', 5, 1)
    rec = asyncio.run(C.run_request(client, s, clock, api="chat"))
    assert client.asked == ("POST", "/v1/chat/completions", b'{"x":1}')
    # read as chat deltas: the role-only delta is a chunk of 0 tokens, "hi" one token at 100.75
    assert (rec.output_tokens, list(rec.chunk_tokens), list(rec.chunk_t_s), rec.ttft_s) == (1, [0, 1], [0.5, 0.75], 0.75)
    assert (rec.error, rec.finish_reason) == (None, "length")
    # the same bytes read as completions: no text in them, so no token (the API given decides)
    rec = asyncio.run(C.run_request(Client(clock, Response(clock, reads=[(100.5, chat[0]), (100.75, chat[1])],
                                                           end=101.0)), s, clock))
    assert rec.output_tokens == 0 and rec.error == R.TRUNCATED


def test_a_deadline_starts_at_its_time():
    d = C.Deadline(5.0)
    assert (d.start, d.last, d.fired) == (5.0, 5.0, None)


def test_one_token_asked_and_none_given_is_truncated():
    rec = _finished([], s=spec(max_tokens=1))
    assert (rec.error, rec.error_detail) == (R.TRUNCATED, "0 of 1 tokens")


def test_the_chunks_and_their_exactness_reach_the_record():
    state = StreamState(False, False)
    state.chunk_t.extend([0.5, 1.0, 1.5])
    state.chunk_k.extend([1, 2, 1])
    state.completion_tokens = 5                          # the server's total over the 4 its chunks counted
    rec = R.RequestRecord(id=1, scheduled=0.0, prompt_tokens_target=1, max_tokens=5, http_status=200)
    C.finish_record(rec, state, spec(max_tokens=5))
    # per-chunk counts the server gave (exact) stand, whatever the total
    assert (list(rec.chunk_tokens), rec.itl_exact, rec.output_tokens, rec.token_source) == ([1, 2, 1], True, 5, "server")
    state.counts_exact = False                           # counted one a piece: the 5 over 4 makes them not exact
    C.finish_record(rec, state, spec(max_tokens=5))
    assert rec.itl_exact is False
    # the client's count where the server's per-chunk counts say 0 (usage with no completion count): the total
    # given to the timings is the client's 2, over chunks that carry 0 each
    state = StreamState(False, False)
    state.chunk_t.extend([0.5, 1.0])
    state.chunk_k.extend([0, 0])
    state.client_tokens = 2
    rec = R.RequestRecord(id=1, scheduled=0.0, prompt_tokens_target=1, max_tokens=2, http_status=200)
    C.finish_record(rec, state, spec(max_tokens=2))
    assert (rec.output_tokens, rec.token_source, rec.ttft_s) == (2, "client", None)


def test_the_client_count_is_no_total_for_the_timings():
    """Counted by the client, the tokens are the chunks' own: no total beside them. A usage member with no
    completion count (0) on the first piece, none on the second: one token a chunk is known for the second only;
    the TTFT is its time, and no TPOT is made of one token (a total of 2 would give 0.0 and call it inexact)."""
    state = StreamState(False, False)
    state.on_body(b'data: {"choices":[{"index":0,"text":"a"}],"usage":{"completion_tokens":0}}\n\n', 0.5)
    state.on_body(b'data: {"choices":[{"index":0,"text":"b","finish_reason":"length"}]}\n\n', 1.0)
    assert (list(state.chunk_k), state.client_tokens, state.completion_tokens) == ([0, 1], 2, 0)
    rec = R.RequestRecord(id=1, scheduled=0.0, prompt_tokens_target=1, max_tokens=2, http_status=200)
    C.finish_record(rec, state, spec(max_tokens=2))
    assert (rec.output_tokens, rec.token_source, rec.ttft_s, rec.tpot_s, rec.itl_exact) == (2, "client", 1.0, None, True)
