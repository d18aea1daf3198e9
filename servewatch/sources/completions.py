"""Asking an OpenAI-compatible server (vLLM, SGLang) for text, bounded: the served model's name from
GET /v1/models, and one POST /v1/completions with a time limit and a byte bound. Every outcome is a typed
answer, never an exception (except cancellation). What is asked and answered stays with the caller."""

from __future__ import annotations

import json
from dataclasses import dataclass

from servewatch.transport import contract
from servewatch.transport.contract import Failed, HttpRequest

MAX_MODELS_BYTES = 1 * 2**20
MAX_COMPLETION_BYTES = 256 * 2**10

# Error classes (short words, safe to store).
TIMEOUT = "timeout"
CONNECT = "connect"              # no connection could be made
DNS = "dns"                      # the server's host name could not be resolved
DISCONNECTED = "disconnected"    # the connection broke before a whole answer
PROTOCOL = "protocol"            # an answer that is not the JSON the API promises
TOO_LARGE = "too_large"
NO_MODELS = "no_models"          # /v1/models answered without any model


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP exchange: the status and parsed JSON body, or an error class with a line for a terminal."""

    status: int | None
    elapsed_s: float
    body: object = None
    error: str | None = None      # a short class (see above) or "http_<status>"; None for a 2xx JSON answer
    detail: str = ""              # one line for a terminal; never stored


@dataclass(frozen=True, slots=True)
class ModelLookup:
    model: str | None
    error: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Completion:
    status: int | None
    elapsed_s: float
    text: str | None = None            # choices[0].text
    tokens: int | None = None          # usage.completion_tokens
    error: str | None = None
    detail: str = ""


async def exchange(transport, method: str, url: str, *, timeout_s: float, max_bytes: int,
                   payload: dict | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One request through `transport` (a `transport.contract.Transport`, which maps every socket, DNS, TLS and
    timer error to one outcome); the JSON body of the answer (any status), or an error class. Never raises."""
    body = json.dumps(payload).encode() if payload is not None else None
    # A connection of its own each time (`fresh`): an API server closes idle keep-alive connections (uvicorn
    # after 5 s), and a request sent down a closed one would fail for no fault of the server.
    got = await transport.send(HttpRequest(method, url, timeout_s=timeout_s, max_bytes=max_bytes, body=body,
                                       headers=tuple((headers or {}).items()), fresh=True))
    if isinstance(got, Failed):
        detail = got.detail.replace("body", "answer", 1) if got.outcome == contract.TOO_LARGE else got.detail
        return Answer(got.status, got.elapsed_s, None, _ERROR[got.outcome], detail)
    try:
        parsed = json.loads(got.body) if got.body else None
    except (ValueError, UnicodeError):
        parsed = None
    error = None if got.ok else f"http_{got.status}"
    if error is None and parsed is None:
        return Answer(got.status, got.elapsed_s, None, PROTOCOL, "the answer is not JSON")
    return Answer(got.status, got.elapsed_s, parsed, error, f"HTTP {got.status}" if error else "")


# The contract's outcomes as the probe's error classes: only a connection that broke mid-answer says the server
# failed (DISCONNECTED); one never made says it is unavailable; a name that does not resolve is said as such.
_ERROR = {contract.REFUSED: CONNECT, contract.TLS: CONNECT, contract.CONNECT: CONNECT, contract.DNS: DNS,
          contract.TIMEOUT: TIMEOUT, contract.NO_ANSWER: DISCONNECTED, contract.CUT: DISCONNECTED,
          contract.TOO_LARGE: TOO_LARGE, contract.PROTOCOL: PROTOCOL}


async def served_model(transport, base: str, *, timeout_s: float) -> ModelLookup:
    """The first model the server lists at /v1/models."""
    answer = await exchange(transport, "GET", base + "/v1/models", timeout_s=timeout_s, max_bytes=MAX_MODELS_BYTES)
    if answer.error is not None:
        if answer.status == 404:
            return ModelLookup(None, answer.error, "GET /v1/models: HTTP 404 (the server has no OpenAI model list)")
        return ModelLookup(None, answer.error, f"GET /v1/models: {answer.detail}")
    data = answer.body.get("data") if isinstance(answer.body, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    model = first.get("id")
    if not isinstance(model, str) or not model:
        return ModelLookup(None, NO_MODELS, "GET /v1/models: the answer lists no model")
    return ModelLookup(model)


async def complete(transport, base: str, request: dict, *, timeout_s: float,
                   headers: dict[str, str] | None = None) -> Completion:
    """POST /v1/completions with `request` (the caller's model, prompt and sampling), with `headers` besides
    the usual (a dialect's routing header)."""
    answer = await exchange(transport, "POST", base + "/v1/completions", timeout_s=timeout_s,
                            max_bytes=MAX_COMPLETION_BYTES, payload=request, headers=headers)
    if answer.error is not None:
        return Completion(answer.status, answer.elapsed_s, error=answer.error,
                          detail=f"POST /v1/completions: {answer.detail}{_server_message(answer.body)}")
    body = answer.body if isinstance(answer.body, dict) else {}
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    text = choice.get("text") if choice is not None else None
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    tokens = usage.get("completion_tokens")
    tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None
    if not isinstance(text, str):
        return Completion(answer.status, answer.elapsed_s, tokens=tokens, error=PROTOCOL,
                          detail="POST /v1/completions: the answer holds no completion text")
    return Completion(answer.status, answer.elapsed_s, text=text, tokens=tokens)


def _server_message(body: object) -> str:
    """The server's own error message, first line, shortened (vLLM and SGLang put it in message/detail)."""
    if not isinstance(body, dict):
        return ""
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    message = inner.get("message") or inner.get("detail")
    if not isinstance(message, str) or not message.strip():
        return ""
    return f" ({message.strip().splitlines()[0][:160]})"
