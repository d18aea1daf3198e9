"""Values of servewatch/transport/stream.py (issue 50: the chunk counter every TTFT, ITL and token count of load and
the proxy rests on, found by the mutation rule): each content chunk's time and tokens — from the server's running
usage count where it sends one, else one a non-empty piece (then not exact) — the prompt count, the finish reason,
[DONE], and what marks a stream as broken. Each figure written beside the assertion."""

from __future__ import annotations

import json
import re

import pytest

from servewatch.transport.stream import StreamState


def ev(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def comp(text, reason=None, usage=None):
    body = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": reason}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def chat(content, reason=None, usage=None):
    body = {"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {} if content is None else {"content": content},
                         "finish_reason": reason}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def feed(state, reads):
    for t, data in reads:
        state.on_body(data, t)
    return state


def fields(s):
    return (list(s.chunk_t), list(s.chunk_k), s.completion_tokens, s.prompt_tokens, s.client_tokens,
            s.counts_exact, s.finish_reason, s.saw_done, s.stream_error)


@pytest.mark.parametrize("split", [False, True], ids=["one-read-an-event", "reads-cut-anywhere"])
def test_a_completion_with_running_usage(split):
    events = [ev(comp("a", usage=(7, 1))), ev(comp("", usage=(7, 1))), ev(comp(" bc", usage=(7, 3))),
              ev(comp(" d", "length", (7, 4))), ev({"choices": [], "usage": {"prompt_tokens": 7,
                                                                              "completion_tokens": 4}}),
              b"data: [DONE]\n\n"]
    times = [0.5, 0.6, 0.75, 1.0, 1.0, 1.0]
    if split:                               # the splitter's path: every event cut in two reads
        reads = [(t, part) for t, e in zip(times, events) for part in (e[:9], e[9:])]
    else:                                   # the fast pattern's path: one whole event a read
        reads = list(zip(times, events))
    s = feed(StreamState(False, True), reads)
    # tokens a chunk from the running count: 1, 0 (empty piece, count unchanged), 2, 1; the usage-only event is no chunk
    assert fields(s) == ([0.5, 0.6, 0.75, 1.0], [1, 0, 2, 1], 4, 7, 3, True, "length", True, False)
    assert s.text == ["a", " bc", " d"]


def test_without_usage_each_piece_is_one_token_and_not_exact():
    s = feed(StreamState(False, False), [(0.5, ev(comp("a"))), (0.75, ev(comp(""))), (1.0, ev(comp("bc", "stop")))])
    assert fields(s) == ([0.5, 0.75, 1.0], [1, 0, 1], 0, None, 2, False, "stop", False, False)
    assert s.text == []                                                       # not kept


def test_a_count_that_goes_down_gives_no_negative_chunk():
    s = feed(StreamState(False, False), [(0.5, ev(comp("a", usage=(3, 5)))), (0.75, ev(comp("b", usage=(3, 4))))])
    assert (list(s.chunk_k), s.completion_tokens) == ([5, 0], 4)
    # a final usage event counts the larger of what was counted and what it says
    s.on_body(ev({"choices": [], "usage": {"completion_tokens": 2}}), 1.0)
    assert s.completion_tokens == 4
    s.on_body(ev({"choices": [], "usage": {"completion_tokens": 9}}), 1.0)
    assert (s.completion_tokens, list(s.chunk_k)) == (9, [5, 0])
    s.on_body(ev({"choices": [], "usage": {"completion_tokens": "9"}}), 1.0)   # not a number: ignored
    assert s.completion_tokens == 9


def test_a_chat_stream():
    reads = [(0.25, ev(chat(None))), (0.5, ev(chat("hi", usage=(4, 1)))), (0.75, ev(chat(" there", "stop", (4, 3))))]
    s = feed(StreamState(True, True), reads)
    # the role-only delta is a chunk of 0 tokens (no usage, no text: not exact)
    assert fields(s) == ([0.25, 0.5, 0.75], [0, 1, 2], 3, 4, 2, False, "stop", False, False)
    assert s.text == ["hi", " there"]
    assert StreamState(True, False)._fast is None and StreamState(False, False)._fast is not None


@pytest.mark.parametrize("payload", [b"data: {not json\n\n", b"data: [1, 2]\n\n", b'data: {"error": {"message": "x"}}\n\n',
                                     b'data: {"object": "error", "message": "x"}\n\n'],
                         ids=["not-json", "not-an-object", "error-member", "error-object"])
def test_what_breaks_a_stream(payload):
    s = feed(StreamState(False, False), [(0.5, ev(comp("a"))), (0.75, payload)])
    assert (s.stream_error, list(s.chunk_t), s.client_tokens) == (True, [0.5], 1)


def test_fields_from_the_inline_read_path():
    s = StreamState(False, True)
    s.on_fields(b"ab", None, b"12", b"2", 0.5)
    s.on_fields(b"", b"length", None, None, 0.75)
    s.on_fields(b"c", None, None, None, 1.0)
    assert fields(s) == ([0.5, 0.75, 1.0], [2, 0, 1], 2, 12, 2, False, "length", False, False)
    assert s.text == ["ab", "c"]
    t = StreamState(False, False)
    t.on_fields(True, None, None, b"1", 0.5)              # where the text is not kept, a truth value stands for it
    assert (t.client_tokens, t.text, list(t.chunk_k)) == (1, [], [1])


def test_a_read_that_starts_mid_event_goes_through_the_splitter():
    e = ev(comp("a", usage=(2, 1)))
    s = StreamState(False, False)
    s.on_body(e[:5], 0.5)
    assert s.splitter.pending and list(s.chunk_t) == []
    s.on_body(e[5:] + ev(comp("b", usage=(2, 2))), 0.75)   # the rest of one event and a whole one: both at 0.75
    assert (list(s.chunk_t), list(s.chunk_k), s.completion_tokens) == ([0.75, 0.75], [1, 1], 2)


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

def test_the_grammar_built_is_the_one_read():
    """The grammar is built at import (the patterns are module constants): built again here, it reads events as
    the module's own does — the groups of a plain event, one with a reason and usage, other members ignored —
    and refuses what the JSON path must read."""
    from servewatch.transport import stream as T

    fresh = T.completion_event_pattern().fullmatch
    cases = [
        (b'data: {"id":"c","choices":[{"index":0,"text":"ab","logprobs":null}],"model":"m"}\n\n',
         (b"ab", None, None, None)),
        (b'data: {"choices":[{"index":0,"text":"","finish_reason":"length","stop_reason":null}],'
         b'"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}\n\n', (b"", b"length", b"7", b"3")),
        (b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}],"created":1}\n\n', (b"a", None, None, None)),
    ]
    for event, groups in cases:
        assert fresh(event).groups() == T.completion_event(event).groups() == groups
    refused = [b'data: {"choices":[{"index":0,"text":"a\\"b"}]}\n\n',           # an escape: the JSON path
               b'data: {"object":"error","choices":[{"index":0,"text":"a"}]}\n\n',
               b'data: {"choices":[{"index":0,"text":"a"}],"usage":{"completion_tokens":3}}\n\n',
               b'data: {"choices":[{"index":1,"text":"a"}]}\n\n',
               b'data: {"choices":[{"index":0,"text":"a"}]}\n',
               b'data: {"choices":[{"index":0,"text":"a","text":"b"}]}\n\n',
               b'data: {"error":1,"choices":[{"index":0,"text":"a"}]}\n\n']
    for event in refused:
        assert fresh(event) is None and T.completion_event(event) is None, event
    name = T.member(rb"a|b")
    assert name == rb'"(?!(?:a|b)")' + T.CHARS + rb'":' + T.SCALAR
    assert re.fullmatch(name, b'"c":1') and re.fullmatch(name, b'"ab":"x"') and not re.fullmatch(name, b'"a":1')


def test_a_stream_without_a_finish_reason_has_none():
    s = feed(StreamState(False, False), [(0.5, ev(comp("a")))])
    assert s.finish_reason is None and list(s.chunk_k) == [1]


def test_a_count_that_is_not_a_number_is_no_count():
    s = feed(StreamState(False, False), [(0.5, ev({"choices": [{"index": 0, "text": "a"}],
                                                   "usage": {"completion_tokens": "3"}}))])
    assert (list(s.chunk_k), s.completion_tokens, s.counts_exact) == ([1], 0, False)


def test_a_whole_event_after_a_half_one_is_read_with_it():
    """An event left half (no end) and a whole one after it: the splitter joins them into one event, which is
    not JSON — the stream is broken, not the second event counted alone."""
    s = feed(StreamState(False, False), [(0.5, b'data: {"choices":[{"index":0,"te'), (0.75, ev(comp("b")))])
    assert (s.stream_error, list(s.chunk_t)) == (True, [])


def test_a_usage_count_past_what_a_chunk_holds_is_kept_at_the_bound_not_raised():
    # A broken or hostile upstream's count: 2^40 tokens in one chunk raised OverflowError out of the proxy's read
    # callback (the chunk array holds 32 bits). Kept at CHUNK_K_MAX and the counts marked not exact; a jump of
    # exactly CHUNK_K_MAX is a count like any other.
    from servewatch.transport.stream import CHUNK_K_MAX

    state = feed(StreamState(False, False), [(0.1, ev(comp("a", usage=(3, CHUNK_K_MAX))))])
    assert (list(state.chunk_k), state.counts_exact) == ([CHUNK_K_MAX], True)
    state = feed(StreamState(False, False), [(0.1, ev(comp("a", usage=(3, 1)))), (0.2, ev(comp("b", usage=(3, 2**40))))])
    assert (list(state.chunk_k), state.counts_exact, state.completion_tokens) == ([1, CHUNK_K_MAX], False, 2**40)
