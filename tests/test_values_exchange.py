"""Values of the proxy's record of one request (servewatch/proxy/exchange.py): chunk times counted from the
request written upstream (`sent`), not from the upstream's first byte (issue 40: every TTFT short by the
engine's first-byte time went unnoticed), e2e, connect and first-byte times, the ITL quantiles, the error words
and the bounded body copies. Times are sums of powers of two, so the arithmetic is exact."""

import json

import pytest

from servewatch.proxy import exchange as X
from servewatch.proxy.exchange import Exchange

EVENT = b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'


def exchange(body: bytes = b'{"model":"m-1","max_tokens":3,"stream":true}', api="completions") -> Exchange:
    ex = Exchange(7, 100.0, api, b"POST", True, "t1", len(body), 4096)
    ex.body_copy.append(body)
    ex.request_complete()
    return ex


def test_a_stream_is_timed_from_the_request_sent_upstream():
    ex = exchange()
    ex.connected, ex.sent, ex.first_byte = 100.25, 100.5, 101.0
    ex.on_head(200, {"content-type": "text/event-stream"})
    for t in (101.0, 101.25, 101.75, 102.75, 103.0):
        ex.last = t
        ex.on_body(EVENT)
    ex.last = 103.0
    ex.on_body(b"data: [DONE]\n\n")
    rec = ex.finish(103.5)
    # TTFT 101.0 - 100.5 = 0.5 (from the request; from the first byte it would read 0); e2e 103.5 - 100.5 = 3.0
    assert (rec.sent, rec.ttft_s, rec.e2e_s, rec.http_status, rec.error) == (100.5, 0.5, 3.0, 200, None)
    # 5 tokens (one a chunk, counted by the client): TPOT (103.0 - 101.0) / 4 = 0.5
    assert (rec.output_tokens, rec.token_source, rec.tpot_s) == (5, "client", 0.5)
    assert (rec.scheduled, rec.max_tokens, rec.model, rec.api, rec.id) == (100.0, 3, "m-1", "completions", 7)
    # gaps 0.25, 0.5, 1.0, 0.25 sorted [0.25, 0.25, 0.5, 1.0]: p50 the value at int(0.5 x 4) = 2 -> 0.5;
    # p99 at min(3, int(0.99 x 4) = 3) -> 1.0; connect 100.25 - 100.0; first byte 101.0 - 100.5
    assert rec.proxy == {"stream": True, "tenant": "t1", "connect_s": 0.25, "first_byte_s": 0.5,
                         "itl_p50_s": 0.5, "itl_p99_s": 1.0, "itl_max_s": 1.0, "malformed_sse": None}
    assert rec.chunk_t_s == () and rec.itl_token_s == ()          # dropped: the quantiles are kept
    assert X.outcome(rec) == "ok"


def test_keep_itl_keeps_the_series_in_arrival_order():
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "text/event-stream"})
    for t in (100.5, 101.5, 101.75):
        ex.last = t
        ex.on_body(EVENT)
    rec = ex.finish(102.0, keep_itl=True)
    assert list(rec.chunk_t_s) == [0.5, 1.5, 1.75] and list(rec.itl_token_s) == [1.0, 0.25]
    assert (rec.proxy["itl_p50_s"], rec.proxy["itl_max_s"]) == (1.0, 1.0)    # sorted [0.25, 1.0]: index 1


def test_unsent_and_unanswered():
    ex = exchange()
    ex.error, ex.error_detail = "connect", "refused"
    rec = ex.finish(101.0)
    assert (rec.sent, rec.e2e_s, rec.ttft_s, rec.error, rec.error_detail) == (None, None, None, "connect", "refused")
    assert rec.proxy["connect_s"] is None and rec.proxy["first_byte_s"] is None and rec.proxy["itl_p50_s"] is None
    assert X.outcome(rec) == "connect"
    gone = exchange()
    gone.sent, gone.client_gone = 100.0, True
    gone.first_byte = 100.5
    rec = gone.finish(100.75)
    assert (rec.error, rec.error_detail, rec.e2e_s) == ("client_abort", "the client closed the connection", 0.75)
    assert rec.proxy["first_byte_s"] == 0.5


def test_a_whole_json_answer():
    ex = exchange(b'{"model":"m","max_tokens":4,"ignore_eos":true}')
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "application/json"})
    body = json.dumps({"choices": [{"text": "abcd", "finish_reason": "length"}],
                       "usage": {"completion_tokens": 4, "prompt_tokens": 9}}).encode()
    ex.on_body(body[:10])
    ex.on_body(body[10:])
    rec = ex.finish(101.0)
    assert (rec.output_tokens, rec.input_tokens, rec.token_source, rec.finish_reason) == (4, 9, "server", "length")
    assert (rec.ttft_s, rec.e2e_s, rec.error, rec.proxy["stream"]) == (None, 1.0, None, False)
    short = exchange(b'{"model":"m","max_tokens":5,"ignore_eos":true}')
    short.sent = 100.0
    short.on_head(200, {"content-type": "application/json"})
    short.on_body(body)
    rec = short.finish(101.0)
    assert (rec.error, rec.error_detail) == ("truncated", "4 of 5 tokens")


@pytest.mark.parametrize("status, body, words, error", [
    (503, {"error": {"type": "overloaded", "code": 503}}, "HTTP 503 overloaded", "http_5xx"),
    (400, {"object": "error", "code": "bad_prompt"}, "HTTP 400 error bad_prompt", "http_4xx"),
    (500, {"type": "free text here"}, "HTTP 500", "http_5xx"),
    (429, "not json", "HTTP 429", "http_4xx"),
])
def test_an_error_answer_in_words(status, body, words, error):
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(status, {"content-type": "application/json"})
    ex.on_body(body.encode() if isinstance(body, str) else json.dumps(body).encode())
    rec = ex.finish(100.5)
    assert (rec.error, rec.error_detail, rec.http_status) == (error, words, status)


def test_the_body_copies_are_bounded():
    ex = exchange()
    ex.on_head(503, {})
    ex.on_body(b"x" * 5000)
    ex.on_body(b"y" * 5000)
    # ERROR_BODY_BYTES = 8 KiB: 5000 + 3192
    assert X.ERROR_BODY_BYTES == 8192 and sum(map(len, ex.collected)) == 8192 and ex.collect == 0
    ok = exchange()
    ok.on_head(200, {"content-type": "application/json"})
    assert ok.collect == X.JSON_BODY_BYTES == 4 * 2 ** 20
    other = Exchange(1, 0.0, None, b"GET", True, None, 0, 4096)
    assert other.body_copy is None                                    # not an API path: not parsed
    other.on_head(200, {})
    assert other.collect == 0 and other.collected is None
    big = Exchange(1, 0.0, "completions", b"POST", True, None, 4097, 4096)
    assert big.body_copy is None                                      # over the parse cap: not parsed
    assert Exchange(1, 0.0, "completions", b"POST", True, None, 4096, 4096).body_copy == []


def test_request_fields():
    ex = exchange(b'{"model":"m","max_completion_tokens":12,"stream":false,"ignore_eos":1}')
    assert (ex.model, ex.max_tokens, ex.stream, ex.ignore_eos) == ("m", 12, False, False)
    ex = exchange(b'{"model":"has space","max_tokens":true}')
    assert (ex.model, ex.max_tokens, ex.stream) == (None, None, False)
    ex = exchange(b'[1]')
    assert ex.model is None and ex.stream is None
    ex = exchange(b'{not json')
    assert ex.model is None and ex.body_copy is None


def test_safe_word_and_tenant_id():
    assert X.safe_word("a" * 64) == "a" * 64
    assert X.safe_word("b" * 65) is None
    assert X.safe_word("c" * 65, limit=65) == "c" * 65
    assert X.safe_word(503) == "503" and X.safe_word(True) is None and X.safe_word("") is None
    assert X.safe_word("two words") is None and X.safe_word(1.5) is None
    assert X.tenant_id(None) is None and X.tenant_id(b"") is None
    assert X.tenant_id(b"k", key=b"s") == __import__("hmac").new(b"s", b"k", "sha256").hexdigest()[:12]


def test_prompt_text():
    assert X.prompt_text({"prompt": "p"}) == "p"
    assert X.prompt_text({"prompt": ["a", "b"]}) == "a\nb"
    assert X.prompt_text({"messages": [{"role": "system", "content": "s"}, "x",
                                       {"content": [{"text": "u1"}, {"type": "image"}, {"text": "u2"}]}]}) == \
        "system: s\nuser: u1u2"
    assert X.prompt_text({"prompt": [1]}) is None


@pytest.mark.parametrize("values, q, want", [([], 0.5, None), ([1.0], 0.99, 1.0), ([1.0, 2.0, 3.0], 0.5, 2.0),
                                             ([1.0, 2.0, 3.0], 0.99, 3.0), ([1.0, 2.0, 3.0, 4.0], 0.5, 3.0),
                                             ([float(i) for i in range(100)], 0.99, 99.0),
                                             ([float(i) for i in range(101)], 0.99, 99.0)])
def test_q(values, q, want):
    # index min(n - 1, int(q x n)): 0.5 x 3 = 1; 0.99 x 3 = 2; 0.5 x 4 = 2; 0.99 x 100 = 99; 0.99 x 101 = 99.99 -> 99
    assert X._q(values, q) == want


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

CHAT = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


def test_a_chat_stream_and_its_text():
    ex = Exchange(3, 100.0, "chat", b"POST", True, None, 60, 4096, keep_text=True)
    ex.body_copy += [b'{"model":"m","messages":[{"role":"user",', b'"content":"q"}],"max_tokens":2}']
    ex.request_complete()                                  # a body in two pieces, joined
    assert (ex.model, ex.max_tokens, ex.prompt) == ("m", 2, "user: q")
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "text/event-stream; charset=utf-8"})
    for t in (100.5, 100.75):
        ex.last = t
        ex.on_body(CHAT)
    rec = ex.finish(101.0)
    # chat deltas counted: 2 tokens; TTFT 0.5; TPOT 0.25 / 1
    assert (rec.ttft_s, rec.output_tokens, rec.tpot_s, rec.text, rec.api) == (0.5, 2, 0.25, "hihi", "chat")
    assert rec.proxy["malformed_sse"] is None and ex.record is rec


def test_a_whole_chat_answer_keeps_its_text():
    ex = Exchange(3, 100.0, "chat", b"POST", True, None, 60, 4096, keep_text=True)
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "application/json"})
    ex.on_body(json.dumps({"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]}).encode())
    rec = ex.finish(100.5)
    assert (rec.text, rec.finish_reason) == ("hello", "stop")
    ex = Exchange(4, 100.0, "completions", b"POST", True, None, 60, 4096, keep_text=True)
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "application/json"})
    ex.on_body(json.dumps({"choices": [{"text": "plain"}]}).encode())
    assert ex.finish(100.5).text == "plain"
    ex = Exchange(5, 100.0, "completions", b"POST", True, None, 60, 4096)
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "application/json"})
    ex.on_body(b'{"choices": []}')
    rec = ex.finish(100.5)
    assert (rec.finish_reason, rec.error) == (None, None)


def test_a_malformed_event_is_counted_and_an_error_event_is_not():
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "text/event-stream"})
    ex.last = 100.5
    ex.on_body(EVENT)
    ex.on_body(b"data: {not json\n\n")
    rec = ex.finish(101.0)
    assert (rec.error, rec.proxy["malformed_sse"], ex.malformed) == ("truncated", True, True)
    sent_on_purpose = exchange()
    sent_on_purpose.sent = 100.0
    sent_on_purpose.on_head(200, {"content-type": "text/event-stream"})
    sent_on_purpose.last = 100.5
    sent_on_purpose.on_body(b'data: {"error": {"message": "x"}}\n\n')
    rec = sent_on_purpose.finish(101.0)
    assert (rec.error, rec.proxy["malformed_sse"]) == ("truncated", None)


def test_several_events_in_one_read_are_each_counted():
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "text/event-stream"})
    ex.last = 100.5
    ex.on_body(EVENT + EVENT + b"data: [DONE]\n\n")          # three events read at once, at 0.5 s
    ex.last = 101.0
    ex.on_body(EVENT)
    rec = ex.finish(101.0, keep_itl=True)
    assert (list(rec.chunk_t_s), rec.output_tokens) == ([0.5, 0.5, 1.0], 3)
    half = exchange()
    half.sent = 100.0
    half.on_head(200, {"content-type": "text/event-stream"})
    half.last = 100.25
    half.on_body(EVENT[:20])                                   # an event split across reads
    half.last = 100.5
    half.on_body(EVENT[20:] + EVENT)
    rec = half.finish(101.0, keep_itl=True)
    assert (list(rec.chunk_t_s), rec.output_tokens) == ([0.5, 0.5], 2)


def test_a_status_other_than_200_is_an_error_and_the_spec_asks_for_max_tokens():
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(201, {"content-type": "application/json"})
    ex.on_body(b"{}")
    assert ex.finish(100.5).error == "http_4xx"
    eos = exchange(b'{"model":"m","ignore_eos":true}')        # ignore_eos without max_tokens: nothing to miss
    eos.sent = 100.0
    eos.on_head(200, {"content-type": "application/json"})
    eos.on_body(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":1}}')
    assert eos.finish(100.5).error is None
    short = exchange(b'{"model":"m","max_tokens":3,"ignore_eos":false}')
    short.sent = 100.0
    short.on_head(200, {"content-type": "application/json"})
    short.on_body(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":1}}')
    assert short.finish(100.5).error is None


def test_loads_reads_what_json_reads():
    assert X._loads(b'{"a":1}') == {"a": 1}
    assert X._loads(b' {"a":1}') == {"a": 1}                  # leading space: json.loads' own path
    assert X._loads(b"[1]") == [1] and X._loads(b"7") == 7
    assert X._loads('{"s":"\u00e9"}'.encode()) == {"s": "\u00e9"}
    with pytest.raises(ValueError):
        X._loads(b"{")
    with pytest.raises(ValueError):
        X._loads(b'{\x00')
    assert X._loads('{"x":"\ud800"}'.encode("utf-8", "surrogatepass")) == {"x": "\ud800"}


def test_a_model_name_up_to_128_characters():
    assert exchange(b'{"model":"' + b"m" * 128 + b'"}').model == "m" * 128
    assert exchange(b'{"model":"' + b"m" * 129 + b'"}').model is None


def test_the_body_copy_stops_at_its_bound_and_not_before():
    ex = exchange()
    ex.on_head(500, {})
    ex.on_body(b"x" * (X.ERROR_BODY_BYTES - 1))
    ex.on_body(b"yz")
    assert sum(map(len, ex.collected)) == X.ERROR_BODY_BYTES and ex.collected[-1] == b"y"
    ex.on_body(b"more")
    assert len(ex.collected) == 2


# The proxy keeps one RequestSpec per (max_tokens, ignore_eos) and remembers the words safe_word passed: a test
# reads the values they give with numbers and words no earlier request has used, so the cache cannot answer for them.
def _fresh_max_tokens() -> int:
    import uuid
    return 10_000 + uuid.uuid4().int % 10 ** 9


def test_a_fresh_spec_reads_max_tokens_ignore_eos_and_the_prompt_count():
    n = _fresh_max_tokens()
    ex = exchange(b'{"model":"m","max_tokens":%d,"ignore_eos":true}' % n)
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "application/json"})
    ex.on_body(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":1}}')
    rec = ex.finish(100.5)
    # the spec's prompt count is None (the proxy does not build prompts): the input count stays unknown
    assert (rec.error, rec.error_detail, rec.input_tokens) == ("truncated", f"1 of {n} tokens", None)
    n = _fresh_max_tokens()
    ex = exchange(b'{"model":"m","max_tokens":%d,"ignore_eos":false}' % n)
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "application/json"})
    ex.on_body(b'{"choices":[{"text":"a"}],"usage":{"completion_tokens":1}}')
    assert ex.finish(100.5).error is None
    assert X._spec(n, False) is X._spec(n, False)                  # kept: one object per pair


def test_a_word_of_every_safe_character_is_safe():
    import random
    chars = sorted(X._SAFE)
    random.shuffle(chars)                                          # a word no earlier call has seen
    word = "".join(chars)
    assert len(word) == 67 and X.safe_word(word, 128) == word
    assert X.safe_word(word + " ", 128) is None


def test_an_exchange_that_never_got_an_answer():
    ex = Exchange(9, 100.0, "completions", b"POST", True, None, 10 ** 9, 4096)   # a body too big to parse
    ex.sent = 100.0
    rec = ex.finish(100.5)
    assert (rec.http_status, rec.max_tokens, rec.error, rec.model, rec.finish_reason) == (None, None, None, None, None)
    assert (ex.method, ex.keep_alive, ex.done, ex.client_gone, ex.ignore_eos, ex.upstream) == \
        (b"POST", True, False, False, False, None)
    assert (ex.body_size, ex.last, ex.status, ex.headers, ex.error_detail) == (0, 100.0, None, None, None)
    assert ex.malformed is False and ex.record is rec and ex.keep_text is False
    stream = X.ProxyStream(False)
    assert (stream.malformed, stream.spent, stream.keep_text, stream.chat) == (False, False, False, False)


def test_record_figures_to_seven_decimals_and_p99_below_the_max():
    ex = exchange()
    ex.connected, ex.sent = 100.12345678, 100.5
    ex.on_head(200, {"content-type": "text/event-stream"})
    t = 100.5
    for i in range(102):                                      # 101 gaps of 1, 2, ..., 101 ms
        t += 0.001 * i
        ex.last = t
        ex.on_body(EVENT)
    rec = ex.finish(t)
    # connect 0.12345678 s to seven decimals: 0.1234568
    assert rec.proxy["connect_s"] == 0.1234568
    # sorted gaps 0 (the first chunk's own: none), 1 .. 101 ms: p99 at int(0.99 x 101) = 99 -> 100 ms; max 101 ms
    assert (rec.proxy["itl_p99_s"], rec.proxy["itl_max_s"]) == (0.1, 0.101)


def test_an_error_answer_in_pieces_and_one_that_is_not_an_object():
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(503, {"content-type": "application/json"})
    ex.on_body(b'{"error": {"type": "over')
    ex.on_body(b'loaded"}}')
    assert ex.finish(100.5).error_detail == "HTTP 503 overloaded"
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(500, {"content-type": "application/json"})
    ex.on_body(b"[1, 2]")
    assert ex.finish(100.5).error_detail == "HTTP 500"
    counted = exchange()
    counted.sent = 100.0
    counted.on_head(500, {"content-type": "application/json"})
    counted.on_body(b'{"usage": {"completion_tokens": 3}}')          # an error body is not read as an answer
    rec = counted.finish(100.5)
    assert (rec.output_tokens, rec.token_source) == (None, None)


def test_an_answer_without_a_content_type_is_collected_as_json():
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(200, {})
    assert ex.headers == {} and ex.collect == X.JSON_BODY_BYTES and ex.state is None
    ex.on_body(b'{"choices":[{"text":"a","finish_reason":"stop"}],"usage":{"completion_tokens":1}}')
    assert ex.finish(100.5).output_tokens == 1


def test_an_event_over_the_splitters_bound_spends_the_stream():
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "text/event-stream"})
    ex.last = 100.5
    ex.on_body(b"data: " + b"x" * (1 << 20) + b"y")           # no event end within 1 MiB
    ex.on_body(EVENT)                                          # ignored: the stream is spent
    rec = ex.finish(101.0)
    assert (rec.error, rec.proxy["malformed_sse"], rec.output_tokens) == ("truncated", True, 0)


def test_a_malformed_event_after_an_error_event_is_not_counted_malformed():
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "text/event-stream"})
    ex.last = 100.5
    ex.on_body(b'data: {"error": {"message": "x"}}\n\n')
    ex.on_body(b"data: {not json\n\n")
    assert ex.finish(101.0).proxy["malformed_sse"] is None


def test_keep_itl_stores_arrays_and_parts_without_text_are_skipped():
    from array import array
    ex = exchange()
    ex.sent = 100.0
    ex.on_head(200, {"content-type": "text/event-stream"})
    for t in (100.5, 101.0):
        ex.last = t
        ex.on_body(EVENT)
    rec = ex.finish(101.0, keep_itl=True)
    assert isinstance(rec.itl_token_s, array) and list(rec.itl_token_s) == [0.5]
    assert X.prompt_text({"messages": [{"role": "user", "content": [{"text": 5}, "raw", {"text": "ok"}]}]}) == "user: ok"
    fresh = Exchange(1, 0.0, "completions", b"POST", True, None, 10, 4096)
    assert (fresh.record, fresh.malformed) == (None, False)
