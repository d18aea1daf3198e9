"""Asking an OpenAI-compatible server (vLLM, SGLang) for text, bounded: the served model's name from
GET /v1/models, and one POST /v1/completions with a time limit and a byte bound. Every outcome is a typed
answer, never an exception (except cancellation). What is asked and answered stays with the caller."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from servewatch.sources.deadline import within

MAX_MODELS_BYTES = 1 * 2**20
MAX_COMPLETION_BYTES = 256 * 2**10

# Error classes (short words, safe to store).
TIMEOUT = "timeout"
CONNECT = "connect"              # no connection could be made
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


async def exchange(session, method: str, url: str, *, timeout_s: float, max_bytes: int,
                   payload: dict | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One request; the JSON body of the answer (any status), or an error class. Never raises."""
    # aiohttp: the active probe's client, its failures worded from aiohttp's kinds; not yet on transport.http1.
    import aiohttp

    from servewatch.sources.http import connect_reason

    started = time.monotonic()

    def failed(error: str, detail: str, status: int | None = None) -> Answer:
        return Answer(status, time.monotonic() - started, None, error, detail)

    async def ask() -> Answer:
        # A fresh connection each time: an API server closes idle keep-alive connections (uvicorn after
        # 5 s), and a request sent down a closed one would fail for no fault of the server.
        sent = {**(headers or {}), "Connection": "close", "Accept": "application/json"}
        async with session.request(method, url, json=payload, headers=sent, allow_redirects=False) as response:
            declared = response.content_length
            if declared is not None and declared > max_bytes:
                return failed(TOO_LARGE, f"answer of {declared:,} bytes exceeds the {max_bytes:,}-byte bound",
                              response.status)
            body = await response.content.read(max_bytes + 1)
            if len(body) > max_bytes:
                return failed(TOO_LARGE, f"answer exceeds the {max_bytes:,}-byte bound", response.status)
            try:
                parsed = json.loads(body) if body else None
            except (ValueError, UnicodeError):
                parsed = None
            error = None if 200 <= response.status < 300 else f"http_{response.status}"
            if error is None and parsed is None:
                return failed(PROTOCOL, "the answer is not JSON", response.status)
            return Answer(response.status, time.monotonic() - started, parsed, error,
                          f"HTTP {response.status}" if error else "")

    try:
        return await within(ask(), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return failed(TIMEOUT, f"no answer within {timeout_s:g} s")
    except aiohttp.ClientConnectorError as exc:
        return failed(CONNECT, connect_reason(exc))
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError) as exc:
        return failed(DISCONNECTED, connect_reason(exc))
    except (aiohttp.ClientError, ValueError, UnicodeError) as exc:
        return failed(PROTOCOL, f"malformed answer ({type(exc).__name__})")
    except OSError as exc:
        return failed(CONNECT, connect_reason(exc))


async def served_model(session, base: str, *, timeout_s: float) -> ModelLookup:
    """The first model the server lists at /v1/models."""
    answer = await exchange(session, "GET", base + "/v1/models", timeout_s=timeout_s, max_bytes=MAX_MODELS_BYTES)
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


async def complete(session, base: str, request: dict, *, timeout_s: float,
                   headers: dict[str, str] | None = None) -> Completion:
    """POST /v1/completions with `request` (the caller's model, prompt and sampling), with `headers` besides
    the usual (a dialect's routing header)."""
    answer = await exchange(session, "POST", base + "/v1/completions", timeout_s=timeout_s,
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
