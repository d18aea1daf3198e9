"""One streaming completion request → one RequestRecord. Never raises for a failed request.

Works on any client with `request(method, path, body, on_sent=...) -> response` where the response
has `status`, `stream_into(callback)`, `read_all(limit)` and `release()` (transport.http1.Http1Client, or
the aiohttp adapter in aiohttp_client.py). ConnectFailed / StreamCut from the transport are the failure
vocabulary; the stream is read by the transport's chunk counter (servewatch.transport.stream.StreamState).
"""

from __future__ import annotations

import asyncio
import json
from array import array
from dataclasses import dataclass

from servewatch.load import records as R
from servewatch.load.itl import compute_timings
from servewatch.transport.http1 import BodyTooLarge, ConnectFailed, StreamCut
from servewatch.transport.stream import StreamState

ERROR_BODY_LIMIT = 64 * 1024
ABORT_REASONS = frozenset({"abort", "error"})


@dataclass(frozen=True, slots=True)
class RequestSpec:
    id: int
    scheduled: float
    path: str                       # "/v1/completions" | "/v1/chat/completions"
    body: bytes                     # the JSON body, built before the run
    prompt_tokens: int              # what the prompt was built to be
    max_tokens: int
    ignore_eos: bool = True
    prompt_text: str | None = None  # kept only with --keep-text


class Deadline:
    """Set by the watchdog when it cancels a request for its time; `last` is the latest activity."""

    __slots__ = ("start", "last", "fired")

    def __init__(self, now: float):
        self.start = now
        self.last = now
        self.fired: str | None = None


def build_body(api: str, model: str, prompt: str, max_tokens: int, ignore_eos: bool = True) -> bytes:
    body: dict = {"model": model, "max_tokens": max_tokens, "ignore_eos": ignore_eos, "stream": True,
                  "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body, separators=(",", ":")).encode()


async def run_request(client, spec: RequestSpec, now, deadline: Deadline | None = None, *,
                      api: str = "completions", keep_text: bool = False,
                      presend=None) -> R.RequestRecord:
    """Run one request to its end. `now()` gives epoch seconds (injectable for virtual time).
    `presend` = the http1.Pending when the dispatcher already wrote the request (`client.send_now`)
    or handed it to a sender thread (`client.prepare`); its `sent` stamp is the send time."""
    rec = R.RequestRecord(id=spec.id, scheduled=spec.scheduled, prompt_tokens_target=spec.prompt_tokens,
                          max_tokens=spec.max_tokens)
    if keep_text:
        rec.prompt = spec.prompt_text
    state = StreamState(api == "chat", keep_text)
    response = None

    def on_sent() -> None:
        rec.sent = now()

    try:
        if presend is not None:
            presend.on_sent = on_sent          # a retry on a fresh connection re-stamps the send
            response = await client.complete(presend)
            if rec.sent is None:
                rec.sent = presend.sent          # before the body: on_body measures from it
        else:
            response = await client.request("POST", spec.path, spec.body, on_sent=on_sent)
        rec.http_status = response.status
        if response.status != 200:
            await response.read_all(ERROR_BODY_LIMIT)
            rec.error = R.error_for_status(response.status)
            rec.error_detail = f"HTTP {response.status}"
        else:
            sent = rec.sent
            feed = state.on_body

            def on_body(data: bytes) -> None:
                t = now()
                if deadline is not None:
                    deadline.last = t
                feed(data, t - sent)

            await response.stream_into(on_body)
    except ConnectFailed as exc:
        rec.error, rec.error_detail = R.CONNECT, str(exc)
    except BodyTooLarge:
        rec.error, rec.error_detail = R.STREAM_CUT, "response over size bound"
    except StreamCut as exc:
        rec.error, rec.error_detail = R.STREAM_CUT, str(exc)
    except ValueError:
        rec.error, rec.error_detail = R.STREAM_CUT, "malformed event stream"
    except (ConnectionError, OSError) as exc:
        rec.error, rec.error_detail = R.STREAM_CUT, type(exc).__name__
    except asyncio.CancelledError:
        if deadline is None or deadline.fired is None:
            raise
        rec.error, rec.error_detail = R.TIMEOUT, deadline.fired
    finally:
        if response is not None:
            response.release()
    end = now()
    if rec.sent is None and presend is not None:
        rec.sent = presend.sent                  # sent, then failed before the response head
    if rec.sent is not None:
        rec.e2e_s = end - rec.sent
    finish_record(rec, state, spec)
    return rec


def finish_record(rec: R.RequestRecord, state: StreamState, spec: RequestSpec, compact: bool = True) -> None:
    """The record's counts, timings and error class from what the stream said. `compact` stores the
    inter-token gaps as array('d') (records held by the thousand); without it they stay lists (a
    caller that reads them once and drops them)."""
    rec.chunk_t_s = state.chunk_t
    rec.chunk_tokens = state.chunk_k
    rec.finish_reason = state.finish_reason
    if state.completion_tokens > 0 or state.prompt_tokens is not None:
        rec.output_tokens = state.completion_tokens
        rec.token_source = "server"
    elif state.client_tokens:
        rec.output_tokens = state.client_tokens
        rec.token_source = "client"
    elif rec.http_status == 200:
        rec.output_tokens = 0
        rec.token_source = "client"
    if state.prompt_tokens is not None:
        rec.input_tokens = state.prompt_tokens
    elif rec.http_status == 200:
        rec.input_tokens = spec.prompt_tokens   # the prompt builder's count (flagged: token_source)
    if state.keep_text:
        rec.text = "".join(state.text)
    total = rec.output_tokens if rec.token_source == "server" else None
    timings = compute_timings(state.chunk_t, state.chunk_k, total, state.counts_exact)
    rec.ttft_s = timings.ttft_s
    rec.tpot_s = timings.tpot_s
    if compact:
        rec.itl_token_s = array("d", timings.itl_token_s)
        rec.itl_chunk_s = array("d", timings.itl_chunk_s)
    else:
        rec.itl_token_s, rec.itl_chunk_s = timings.itl_token_s, timings.itl_chunk_s
    rec.itl_exact = timings.exact if timings.ttft_s is not None else None
    if rec.error is None and rec.http_status == 200:
        if state.stream_error:
            rec.error, rec.error_detail = R.TRUNCATED, "error event in the stream"
        elif state.finish_reason in ABORT_REASONS:
            rec.error, rec.error_detail = R.TRUNCATED, f"finish reason {state.finish_reason}"
        elif spec.ignore_eos and (rec.output_tokens or 0) < spec.max_tokens:
            rec.error = R.TRUNCATED
            rec.error_detail = f"{rec.output_tokens or 0} of {spec.max_tokens} tokens"
