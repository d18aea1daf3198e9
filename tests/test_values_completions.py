"""Values of servewatch/sources/completions.py (issue 50 item 8: the probe's answer, its status, time, text and token
count): each outcome of the contract as the probe's error class, the JSON read, the model listed, the completion's
text and tokens, the server's own message, word for word. Each figure by hand beside the assertion."""

from __future__ import annotations

import asyncio
import json

import pytest

from servewatch.sources import completions as c
from servewatch.transport import contract
from servewatch.transport.contract import Failed, MockTransport, Reply

BASE = "http://127.0.0.1:9"


def _run(coro):
    return asyncio.run(coro)


def test_the_bounds_and_words():
    assert (c.MAX_MODELS_BYTES, c.MAX_COMPLETION_BYTES) == (2**20, 256 * 2**10)
    assert (c.TIMEOUT, c.CONNECT, c.DNS, c.DISCONNECTED, c.PROTOCOL, c.TOO_LARGE, c.NO_MODELS) == (
        "timeout", "connect", "dns", "disconnected", "protocol", "too_large", "no_models")


@pytest.mark.parametrize("outcome, error", [
    (contract.REFUSED, "connect"), (contract.TLS, "connect"), (contract.CONNECT, "connect"), (contract.DNS, "dns"),
    (contract.TIMEOUT, "timeout"), (contract.NO_ANSWER, "disconnected"), (contract.CUT, "disconnected"),
    (contract.PROTOCOL, "protocol"),
])
def test_each_outcome_is_its_error_class(outcome, error):
    mock = MockTransport(lambda r: Failed(outcome, "the body broke", 1.5, 7))
    answer = _run(c.exchange(mock, "GET", BASE + "/x", timeout_s=2.0, max_bytes=10))
    assert answer == c.Answer(7, 1.5, None, error, "the body broke")


def test_a_too_large_answer_says_answer_not_body():
    mock = MockTransport(lambda r: b"x" * 11)
    answer = _run(c.exchange(mock, "GET", BASE + "/x", timeout_s=2.0, max_bytes=10))
    assert (answer.status, answer.error, answer.detail) == (200, "too_large", "answer exceeds the 10-byte bound")
    mock = MockTransport(lambda r: Failed(contract.TOO_LARGE, "body of body", 0.0))
    assert _run(c.exchange(mock, "GET", BASE, timeout_s=1.0, max_bytes=1)).detail == "answer of body"


def test_the_request_sent():
    mock = MockTransport(lambda r: b"{}")
    _run(c.exchange(mock, "POST", BASE + "/v1/completions", timeout_s=3.0, max_bytes=99, payload={"a": 1},
                    headers={"X-data-parallel-rank": "1"}))
    _run(c.exchange(mock, "GET", BASE + "/v1/models", timeout_s=3.0, max_bytes=99))
    post, get = mock.requests
    assert (post.method, post.url, post.timeout_s, post.max_bytes, post.body, post.headers, post.fresh) == (
        "POST", BASE + "/v1/completions", 3.0, 99, b'{"a": 1}', (("X-data-parallel-rank", "1"),), True)
    assert (get.body, get.headers, get.fresh) == (None, (), True)


def test_the_json_of_any_status():
    ok = _run(c.exchange(MockTransport(lambda r: Reply(200, b'{"a": 1}', 0.5)), "GET", BASE, timeout_s=1, max_bytes=99))
    assert ok == c.Answer(200, ok.elapsed_s, {"a": 1}, None, "")
    bad = _run(c.exchange(MockTransport(lambda r: (503, b'{"e": 2}')), "GET", BASE, timeout_s=1, max_bytes=99))
    assert (bad.status, bad.body, bad.error, bad.detail) == (503, {"e": 2}, "http_503", "HTTP 503")
    text = _run(c.exchange(MockTransport(lambda r: (404, b"not json")), "GET", BASE, timeout_s=1, max_bytes=99))
    assert (text.body, text.error, text.detail) == (None, "http_404", "HTTP 404")
    for body in (b"", b"\xff\xfe", b"{", b"null"):
        got = _run(c.exchange(MockTransport(lambda r, b=body: (200, b)), "GET", BASE, timeout_s=1, max_bytes=99))
        assert (got.status, got.body, got.error, got.detail) == (200, None, "protocol", "the answer is not JSON")
    zero = _run(c.exchange(MockTransport(lambda r: (299, b"0")), "GET", BASE, timeout_s=1, max_bytes=99))
    assert (zero.body, zero.error, zero.detail) == (0, None, "")


def _models(value, status=200):
    return MockTransport(lambda r: (status, json.dumps(value).encode()))


def test_the_served_model_is_the_first_listed():
    mock = _models({"data": [{"id": "m1"}, {"id": "m2"}]})
    assert _run(c.served_model(mock, BASE, timeout_s=4.0)) == c.ModelLookup("m1")
    assert (mock.requests[0].url, mock.requests[0].timeout_s, mock.requests[0].max_bytes) == (
        BASE + "/v1/models", 4.0, c.MAX_MODELS_BYTES)
    none = c.ModelLookup(None, "no_models", "GET /v1/models: the answer lists no model")
    for body in ({"data": []}, {"data": [{"id": ""}]}, {"data": [{"id": 5}]}, {"data": ["m"]}, {"data": {}}, [1],
                 {"x": 1}):
        assert _run(c.served_model(_models(body), BASE, timeout_s=1.0)) == none, body


def test_the_model_list_refused():
    assert _run(c.served_model(_models({}, 404), BASE, timeout_s=1.0)) == c.ModelLookup(
        None, "http_404", "GET /v1/models: HTTP 404 (the server has no OpenAI model list)")
    assert _run(c.served_model(_models({}, 500), BASE, timeout_s=1.0)) == c.ModelLookup(
        None, "http_500", "GET /v1/models: HTTP 500")
    down = MockTransport(lambda r: Failed(contract.REFUSED, "connection refused", 0.1))
    assert _run(c.served_model(down, BASE, timeout_s=1.0)) == c.ModelLookup(
        None, "connect", "GET /v1/models: connection refused")


def _completion(value, status=200):
    return MockTransport(lambda r: (status, json.dumps(value).encode() if not isinstance(value, bytes) else value))


def test_a_completion_and_its_tokens():
    mock = _completion({"choices": [{"text": "hi"}, {"text": "no"}], "usage": {"completion_tokens": 3}})
    got = _run(c.complete(mock, BASE, {"model": "m", "prompt": "p"}, timeout_s=6.0, headers={"h": "v"}))
    assert (got.status, got.text, got.tokens, got.error, got.detail) == (200, "hi", 3, None, "")
    (request,) = mock.requests
    assert (request.url, request.timeout_s, request.max_bytes, json.loads(request.body), request.headers) == (
        BASE + "/v1/completions", 6.0, c.MAX_COMPLETION_BYTES, {"model": "m", "prompt": "p"}, (("h", "v"),))
    for usage, tokens in (({"completion_tokens": 0}, 0), ({"completion_tokens": -1}, None),
                          ({"completion_tokens": True}, None), ({"completion_tokens": 2.0}, None), ({}, None),
                          ([3], None)):
        got = _run(c.complete(_completion({"choices": [{"text": ""}], "usage": usage}), BASE, {}, timeout_s=1.0))
        assert (got.text, got.tokens, got.error) == ("", tokens, None), usage


def test_a_completion_without_text_is_a_protocol_error_keeping_its_tokens():
    words = "POST /v1/completions: the answer holds no completion text"
    for body in ({"choices": []}, {"choices": [{"text": 5}]}, {"choices": ["x"]}, {"choices": {}}, {}, [1]):
        got = _run(c.complete(_completion({**body, "usage": {"completion_tokens": 4}} if isinstance(body, dict)
                                          else body), BASE, {}, timeout_s=1.0))
        assert (got.status, got.text, got.error, got.detail) == (200, None, "protocol", words), body
        assert got.tokens == (4 if isinstance(body, dict) else None)


def test_a_refused_completion_says_the_servers_message():
    got = _run(c.complete(_completion({"error": {"message": "  model not found\nsecond line"}}, 404), BASE, {},
                          timeout_s=1.0))
    assert (got.status, got.error, got.detail, got.text, got.tokens) == (
        404, "http_404", "POST /v1/completions: HTTP 404 (model not found)", None, None)
    got = _run(c.complete(_completion({"detail": "x" * 200}, 400), BASE, {}, timeout_s=1.0))
    assert got.detail == f"POST /v1/completions: HTTP 400 ({'x' * 160})"
    down = MockTransport(lambda r: Failed(contract.TIMEOUT, "no answer in 1 s", 1.0))
    assert _run(c.complete(down, BASE, {}, timeout_s=1.0)).detail == "POST /v1/completions: no answer in 1 s"


def test_the_servers_message():
    assert c._server_message({"error": {"message": "a"}}) == " (a)"
    assert c._server_message({"error": {"detail": "b"}}) == " (b)"
    assert c._server_message({"error": "text", "message": "c"}) == " (c)"
    assert c._server_message({"message": "", "detail": "d"}) == " (d)"
    assert c._server_message({"message": "   "}) == ""
    assert c._server_message({"message": 5}) == ""
    assert c._server_message({}) == ""
    assert c._server_message("text") == ""
    assert c._server_message(None) == ""


class _Fixed:
    """A transport whose answer and its time are given (MockTransport measures its own time)."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.requests = []

    async def send(self, request):
        self.requests.append(request)
        return self.outcome


def test_the_answers_time_is_the_transports_in_each_outcome():
    ok = _run(c.exchange(_Fixed(Reply(200, b'{"a": 1}', 0.25)), "GET", BASE, timeout_s=1, max_bytes=99))
    assert ok == c.Answer(200, 0.25, {"a": 1}, None, "")
    text = _run(c.exchange(_Fixed(Reply(200, b"hi", 0.5)), "GET", BASE, timeout_s=1, max_bytes=99))
    assert text == c.Answer(200, 0.5, None, "protocol", "the answer is not JSON")
    bad = _run(c.exchange(_Fixed(Reply(503, b"{}", 0.75)), "GET", BASE, timeout_s=1, max_bytes=99))
    assert bad == c.Answer(503, 0.75, {}, "http_503", "HTTP 503")


def test_a_completions_time_is_its_answers_and_the_methods_sent():
    done = _Fixed(Reply(200, b'{"choices": [{"text": "hi"}], "usage": {"completion_tokens": 2}}', 1.25))
    assert _run(c.complete(done, BASE, {}, timeout_s=2.0)) == c.Completion(200, 1.25, text="hi", tokens=2)
    assert done.requests[0].method == "POST"
    empty = _Fixed(Reply(200, b'{"usage": {"completion_tokens": 2}}', 1.5))
    assert _run(c.complete(empty, BASE, {}, timeout_s=2.0)) == c.Completion(
        200, 1.5, tokens=2, error="protocol", detail="POST /v1/completions: the answer holds no completion text")
    refused = _Fixed(Reply(500, b"{}", 1.75))
    assert _run(c.complete(refused, BASE, {}, timeout_s=2.0)) == c.Completion(
        500, 1.75, error="http_500", detail="POST /v1/completions: HTTP 500")
    listed = _Fixed(Reply(200, b'{"data": [{"id": "m"}]}', 0.1))
    assert _run(c.served_model(listed, BASE, timeout_s=2.0)) == c.ModelLookup("m")
    assert listed.requests[0].method == "GET"
