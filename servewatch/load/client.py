"""One streaming completion request → one RequestRecord. Never raises for a failed request.

Works on any client with `request(method, path, body, on_sent=...) -> response` where the response
has `status`, `stream_into(callback)`, `read_all(limit)` and `release()` (http1.Http1Client, or the
aiohttp adapter in aiohttp_client.py). ConnectFailed / StreamCut from http1 are the failure
vocabulary. Each body read is stamped once, on arrival, and every SSE event in it shares that time.
"""

from __future__ import annotations

import asyncio
import json
import re
from array import array
from dataclasses import dataclass

from servewatch.load import records as R
from servewatch.http1 import BodyTooLarge, ConnectFailed, StreamCut
from servewatch.load.itl import compute_timings
from servewatch.load.sse import SseSplitter

ERROR_BODY_LIMIT = 64 * 1024
_raw_decode = json.JSONDecoder().raw_decode
ABORT_REASONS = frozenset({"abort", "error"})


def completion_event_pattern() -> re.Pattern:
    """One whole SSE read `data: {...}\n\n` holding a compact completions chunk in the shape vLLM
    and the built-in simulator send, matched whole so that what it extracts is exactly what the
    JSON path would: printable-ASCII strings without escapes, scalar values, no duplicate, error or
    nested keys that the JSON path looks at. Anything else takes the JSON path."""
    chars = rb'[\x20\x21\x23-\x5b\x5d-\x7e]*'          # printable ASCII but " and \
    string = rb'"' + chars + rb'"'
    number = rb'-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?'
    scalar = rb'(?:' + string + rb'|' + number + rb'|null|true|false)'

    def member(excluded: bytes) -> bytes:
        return rb'"(?!(?:' + excluded + rb')")' + chars + rb'":' + scalar

    top = rb'(?!"object":"error")' + member(rb'choices|usage|error')
    in_choice = member(rb'text|finish_reason')
    in_usage = member(rb'prompt_tokens|completion_tokens')
    count = rb'(0|[1-9][0-9]*)'
    choice = (rb'\{"index":0,"text":"(' + chars + rb')"(?:,' + in_choice + rb')*?'
              rb'(?:,"finish_reason":(?:null|"([a-z_]*)"))?(?:,' + in_choice + rb')*\}')
    usage = (rb'\{"prompt_tokens":' + count + rb',(?:' + in_usage + rb',)*?'
             rb'"completion_tokens":' + count + rb'(?:,' + in_usage + rb')*\}')
    return re.compile(rb'data: \{(?:' + top + rb',)*"choices":\[' + choice + rb'\]'
                      rb'(?:,"usage":' + usage + rb')?(?:,' + top + rb')*\}\n\n')


_completion_event = completion_event_pattern().fullmatch


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


class StreamState:
    """Per-request parse state, kept out of the hot loop's locals for clarity."""

    __slots__ = ("chat", "keep_text", "text", "completion_tokens", "prompt_tokens", "finish_reason",
                 "saw_done", "stream_error", "counts_exact", "client_tokens", "chunk_t", "chunk_k",
                 "splitter", "_fast")

    def __init__(self, chat: bool, keep_text: bool):
        self.chat = chat
        self.keep_text = keep_text
        self.text: list[str] = []
        self.completion_tokens = 0
        self.prompt_tokens: int | None = None
        self.finish_reason: str | None = None
        self.saw_done = False
        self.stream_error = False
        self.counts_exact = True
        self.client_tokens = 0
        self.chunk_t = array("d")     # 8 bytes a chunk instead of a float object and a pointer
        self.chunk_k = array("I")
        self.splitter = SseSplitter()
        self._fast = None if chat else _completion_event

    def on_body(self, data: bytes, t: float) -> None:
        """Body bytes read at offset `t`: every SSE event they complete."""
        fast = self._fast
        if fast is not None and not self.splitter.pending:
            m = fast(data)
            if m is not None:                 # one whole completions event: no JSON objects built
                self._on_completion(m, t)
                return
        on_event = self.on_event
        for payload in self.splitter.feed(data):
            on_event(payload, t)

    def _on_completion(self, m: re.Match, t: float) -> None:
        """What `on_event` does for the same event, from the fields `_completion_event` matched."""
        piece, reason, pt, ct = m.groups()
        if pt is not None:
            self.prompt_tokens = int(pt)
        if reason:
            self.finish_reason = reason.decode()
        if piece:
            self.client_tokens += 1
            if self.keep_text:
                self.text.append(piece.decode())
        self._chunk(t, int(ct) if ct is not None else None, bool(piece))

    def on_event(self, payload: bytes, t: float) -> None:
        if payload == b"[DONE]":
            self.saw_done = True
            return
        try:
            obj = _raw_decode(payload.decode())[0]   # the C scanner without json.loads' wrappers
        except ValueError:
            self.stream_error = True
            return
        if not isinstance(obj, dict):
            self.stream_error = True
            return
        if "error" in obj or obj.get("object") == "error":
            self.stream_error = True
            return
        usage = obj.get("usage")
        ct = None
        if isinstance(usage, dict):
            ct = usage.get("completion_tokens")
            pt = usage.get("prompt_tokens")
            if isinstance(pt, int):
                self.prompt_tokens = pt
        choices = obj.get("choices")
        if not choices:
            if isinstance(ct, int):
                self.completion_tokens = max(self.completion_tokens, ct)
            return
        choice = choices[0]
        if self.chat:
            delta = choice.get("delta") or {}
            piece = delta.get("content") or ""
        else:
            piece = choice.get("text") or ""
        reason = choice.get("finish_reason")
        if reason:
            self.finish_reason = reason
        if piece:
            self.client_tokens += 1
            if self.keep_text:
                self.text.append(piece)
        self._chunk(t, ct if isinstance(ct, int) else None, bool(piece))

    def _chunk(self, t: float, completion_tokens: int | None, has_text: bool) -> None:
        """One content chunk at t: how many tokens it carried, from the usage count when the server sends
        one (continuous usage), else one per non-empty piece (and the counts are then not exact)."""
        if completion_tokens is not None:
            k = max(0, completion_tokens - self.completion_tokens)
            self.completion_tokens = completion_tokens
        else:
            self.counts_exact = False
            k = 1 if has_text else 0
        self.chunk_t.append(t)
        self.chunk_k.append(k)


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
