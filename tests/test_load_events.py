"""The stream parser's fast path for whole completions events must give exactly what the JSON path
gives, for any event; and a stream gives the same record however it is cut into reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servewatch.transport.stream import StreamState, completion_event as _completion_event

FIELDS = ("completion_tokens", "prompt_tokens", "finish_reason", "client_tokens", "counts_exact",
          "stream_error", "saw_done", "text")

VLLM_CHUNK = (b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
              b'"text":" tok","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":5,'
              b'"total_tokens":7,"completion_tokens":2}}\n\n')
SIM_CHUNK = (b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
             b'"text":" a b","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":5,'
             b'"total_tokens":9,"completion_tokens":4,"prompt_tokens_details":null}}\n\n')
PLAIN_CHUNK = (b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
               b'"text":" tok","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n')


def _snapshot(state: StreamState) -> dict:
    out = {name: getattr(state, name) for name in FIELDS}
    out["chunk_t"] = list(state.chunk_t)
    out["chunk_k"] = list(state.chunk_k)
    return out


def _json_path(events: list[bytes], keep_text: bool, chat: bool = False) -> dict:
    state = StreamState(chat, keep_text)
    try:
        for i, event in enumerate(events):
            for payload in state.splitter.feed(event):
                state.on_event(payload, float(i))
    except Exception as exc:  # noqa: BLE001 - odd events may fail; the fast path must fail alike
        return {"raised": type(exc).__name__, **_snapshot(state)}
    return _snapshot(state)


def _reads(reads: list[bytes], keep_text: bool, chat: bool = False) -> dict:
    state = StreamState(chat, keep_text)
    try:
        for i, data in enumerate(reads):
            state.on_body(data, float(i))
    except Exception as exc:  # noqa: BLE001
        return {"raised": type(exc).__name__, **_snapshot(state)}
    return _snapshot(state)


def test_the_fast_path_takes_the_shapes_vllm_and_the_simulator_send():
    for event in (VLLM_CHUNK, SIM_CHUNK, PLAIN_CHUNK):
        assert _completion_event(event) is not None
    assert _completion_event(VLLM_CHUNK).groups() == (b" tok", None, b"5", b"2")
    assert _completion_event(SIM_CHUNK).groups() == (b" a b", b"length", b"5", b"4")
    for other in (VLLM_CHUNK.replace(b'"object":"text_completion"', b'"object":"error"'),
                  VLLM_CHUNK.replace(b'" tok"', b'" t\\"ok"'),
                  VLLM_CHUNK.replace(b'"usage"', b'"choices":[],"usage"'),
                  VLLM_CHUNK.replace(b'"completion_tokens":2', b'"completion_tokens":2.0'),
                  VLLM_CHUNK[:-1], VLLM_CHUNK + b"data: [DONE]\n\n"):
        assert _completion_event(other) is None


_text = st.one_of(st.sampled_from(["", " tok", "a\"b", "back\\slash", "new\nline", "é", "\u2028", "x" * 40]),
                  st.text(max_size=8))
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=False,
                                                                                   allow_infinity=False), _text)
_count = st.one_of(st.integers(0, 300), st.integers(-5, -1), st.just(2.0), st.just(True), st.none(), st.just("3"))


@st.composite
def _event(draw) -> bytes:
    obj: dict = {}
    for key in draw(st.lists(st.sampled_from(["id", "object", "created", "model", "system_fingerprint", "error",
                                              "x"]), max_size=4, unique=True)):
        obj[key] = draw(st.sampled_from(["text_completion", "error"])) if key == "object" else draw(_scalar)
    choices = []
    for _ in range(draw(st.integers(0, 2))):
        choice: dict = {"index": draw(st.sampled_from([0, 0, 1]))}
        for key in draw(st.permutations(["text", "logprobs", "finish_reason", "stop_reason", "delta"])):
            if draw(st.booleans()):
                if key == "finish_reason":
                    choice[key] = draw(st.sampled_from([None, "length", "stop", "abort", "Stop", "", 1]))
                elif key == "delta":
                    choice[key] = {"content": draw(_text)}
                else:
                    choice[key] = draw(_scalar if key != "text" else _text)
        choices.append(choice)
    if draw(st.booleans()):
        obj["choices"] = choices
    if draw(st.booleans()):
        usage: dict = {}
        for key in draw(st.permutations(["prompt_tokens", "total_tokens", "completion_tokens",
                                         "prompt_tokens_details"])):
            if draw(st.integers(0, 4)):
                usage[key] = (draw(st.sampled_from([None, {"cached_tokens": 0}]))
                              if key == "prompt_tokens_details" else draw(_count))
        obj["usage"] = draw(st.sampled_from([usage, usage, None]))
    if draw(st.booleans()) and len(obj) > 1:                    # another key order
        keys = draw(st.permutations(list(obj)))
        obj = {k: obj[k] for k in keys}
    payload = json.dumps(obj, separators=(",", ":"), ensure_ascii=draw(st.booleans()))
    payload = draw(st.sampled_from([payload, payload, payload.replace(",", ", ", 1), "[DONE]", "{bad"]))
    return b"data: " + payload.encode() + b"\n\n"


_key = st.sampled_from(["id", "object", "model", "text", "finish_reason", "stop_reason", "usage", "choices",
                        "error", "prompt_tokens", "completion_tokens", "total_tokens", "index", "k\u00e9y"])


def _obj(pairs: list[tuple[str, str]]) -> str:
    """JSON object text from (key, value text) pairs: duplicate keys stay, as a server might send."""
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + v for k, v in pairs) + "}"


@st.composite
def _near_fast_event(draw) -> bytes:
    """Events in or next to the shape the fast path takes: extra, duplicate and odd members."""
    value = st.one_of(_scalar, _count).map(lambda v: json.dumps(v, ensure_ascii=False))
    extra = st.one_of(st.just([]), st.just([]), st.just([]), st.lists(st.tuples(_key, value), max_size=2))
    count = st.one_of(st.integers(0, 300), st.integers(0, 300), _count)
    choice = [("index", "0"), ("text", json.dumps(draw(_text), ensure_ascii=draw(st.booleans())))]
    choice += draw(extra)
    if draw(st.integers(0, 3)):
        choice.append(("finish_reason", json.dumps(draw(st.sampled_from([None, "length", "stop", "abort",
                                                                          "Stop", "", 1])))))
    choice += draw(extra)
    top = [("id", '"cmpl-1"'), ("object", json.dumps(draw(st.sampled_from(["text_completion", "error"]))))]
    top += draw(extra)
    top.append(("choices", "[" + _obj(choice) + "]"))
    if draw(st.integers(0, 3)):
        usage = [("prompt_tokens", json.dumps(draw(count)))] + draw(extra)
        usage.append(("completion_tokens", json.dumps(draw(count))))
        usage += draw(extra)
        top.append(("usage", _obj(usage)))
    top += draw(extra)
    return b"data: " + _obj(top).encode() + b"\n\n"


def test_the_near_shape_generator_reaches_the_fast_path():
    hits = 0

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(_near_fast_event())
    def count(event):
        nonlocal hits
        hits += _completion_event(event) is not None

    count()
    assert hits >= 5, hits          # about 1 in 10 (varies with hypothesis's run)


@settings(max_examples=600, deadline=None)
@given(events=st.lists(_near_fast_event(), min_size=1, max_size=5), keep_text=st.booleans(), chat=st.booleans())
def test_fast_path_matches_the_json_path_next_to_its_shape(events, keep_text, chat):
    assert _reads(events, keep_text, chat) == _json_path(events, keep_text, chat)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_event(), min_size=1, max_size=5), keep_text=st.booleans(), chat=st.booleans())
def test_fast_path_gives_exactly_what_the_json_path_gives(events, keep_text, chat):
    assert _reads(events, keep_text, chat) == _json_path(events, keep_text, chat)


def test_any_cut_into_reads_gives_the_same_record():
    final = (b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],'
             b'"usage":{"prompt_tokens":5,"total_tokens":9,"completion_tokens":4}}\n\n')
    events = [VLLM_CHUNK, SIM_CHUNK, final, b"data: [DONE]\n\n"]
    whole = _json_path(events, keep_text=True)
    assert whole["chunk_k"] == [2, 2] and whole["finish_reason"] == "length" and whole["saw_done"]
    stream = b"".join(events)

    def stamped(reads: list[bytes]) -> dict:
        # every read is stamped with the index of the event it completes, as arrival times would be
        state = StreamState(False, True)
        done = 0
        for data in reads:
            done += data.count(b"\n\n")
            state.on_body(data, float(max(0, done - 1)))
        return _snapshot(state)

    def comparable(snap: dict) -> dict:
        return {k: v for k, v in snap.items() if k != "chunk_t"}

    assert stamped(events) == whole
    assert comparable(stamped([stream])) == comparable(whole)           # several events in one read
    for cut in range(1, len(stream)):
        assert comparable(stamped([stream[:cut], stream[cut:]])) == comparable(whole), cut
    for cut in range(1, len(stream) - 1, 7):                             # three reads
        third = cut + (len(stream) - cut) // 2
        assert comparable(stamped([stream[:cut], stream[cut:third], stream[third:]])) == comparable(whole)


@pytest.mark.parametrize("event", [VLLM_CHUNK, SIM_CHUNK, PLAIN_CHUNK])
def test_fast_and_json_paths_agree_on_the_real_shapes(event):
    events = [event, event.replace(b"2}", b"3}").replace(b"4,", b"6,")]
    for keep_text in (False, True):
        assert _reads(events, keep_text) == _json_path(events, keep_text)
