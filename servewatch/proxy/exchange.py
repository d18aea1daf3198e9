"""One request through the proxy: what is observed of it on the way, and the RequestRecord it ends as
(the same record `servewatch load` writes, with a `proxy` part of its own).

Observation never alters what is forwarded: the bytes reach the client before they are looked at.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from servewatch.load import records as R
from servewatch.load.client import RequestSpec, finish_record
from servewatch.transport.stream import StreamState
from servewatch.proxy.config import DEFAULT_TENANT_KEY

API_PATHS = {b"/v1/completions": "completions", b"/v1/chat/completions": "chat"}
ERROR_BODY_BYTES = 8 * 1024
JSON_BODY_BYTES = 4 * 2**20
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/")
_SAFE_SEEN: set[str] = set()                  # words safe_word has passed (bounded)
_decode_json = json.JSONDecoder().decode      # what json.loads calls, without its per-call checks


def _loads(raw: bytes):
    """json.loads(raw), the same answer or the same ValueError. A body that starts with "{" and a
    non-NUL byte is UTF-8 to json.loads (its detect_encoding), so it is decoded here directly."""
    if len(raw) > 1 and raw[0] == 0x7B and raw[1]:
        return _decode_json(raw.decode("utf-8", "surrogatepass"))
    return json.loads(raw)


def tenant_id(value: bytes | None, key: bytes = DEFAULT_TENANT_KEY) -> str | None:
    """A tenant header or API key, stored only as a keyed hash (12 hex digits)."""
    if not value:
        return None
    return hmac.new(key, value, hashlib.sha256).hexdigest()[:12]


def safe_word(value, limit: int = 64) -> str | None:
    """A short identifier from an upstream answer or request (a model name, an error type), or None
    when it is not one: free text never reaches a record."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value or len(value) > limit:
        return None
    if value in _SAFE_SEEN:            # (a set of its characters per call otherwise: per request, twice)
        return value
    if not set(value) <= _SAFE:
        return None
    if len(_SAFE_SEEN) < 1024:
        _SAFE_SEEN.add(value)
    return value


def prompt_text(body: dict) -> str | None:
    """What a request asked, as text (--keep-text only): a completion's prompt (a list of prompts one per
    line), or a chat's messages as "role: content" lines (the text parts of a multi-part content)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    lines = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content
                              if isinstance(part, dict) and isinstance(part.get("text"), str))
        if isinstance(content, str):
            lines.append(f"{m.get('role') if isinstance(m.get('role'), str) else 'user'}: {content}")
    return "\n".join(lines)


class Exchange:
    """Per-request state. Times are epoch seconds from `time.time()`."""

    __slots__ = ("id", "arrival", "api", "method", "keep_alive", "tenant", "body_left", "body_copy",
                 "body_size", "pending", "sent", "connected", "first_byte", "last", "status", "headers",
                 "state", "collect", "collected", "done", "error", "error_detail", "client_gone",
                 "model", "stream", "max_tokens", "ignore_eos", "upstream", "record", "malformed",
                 "keep_text", "prompt")

    def __init__(self, ident: int, arrival: float, api: str | None, method: bytes, keep_alive: bool,
                 tenant: str | None, body_left: int, parse_cap: int, keep_text: bool = False):
        self.id = ident
        self.arrival = arrival
        self.api = api
        self.method = method
        self.keep_alive = keep_alive
        self.tenant = tenant
        self.body_left = body_left
        self.body_copy: list[bytes] | None = [] if api is not None and body_left <= parse_cap else None
        self.body_size = 0
        self.pending: list[bytes] | None = []      # request bytes held until the upstream is connected
        self.sent: float | None = None
        self.connected: float | None = None
        self.first_byte: float | None = None
        self.last = arrival
        self.status: int | None = None
        self.headers: dict | None = None
        self.state: ProxyStream | None = None
        self.collect = 0                           # bytes of the response body to keep (JSON / error)
        self.collected: list[bytes] | None = None
        self.done = False
        self.error: str | None = None
        self.error_detail: str | None = None
        self.client_gone = False
        self.model: str | None = None
        self.stream: bool | None = None
        self.max_tokens: int | None = None
        self.ignore_eos = False
        self.upstream = None
        self.record: R.RequestRecord | None = None
        self.malformed = False
        self.keep_text = keep_text                 # --keep-text: the prompt and completion go in the record
        self.prompt: str | None = None

    # -- request side
    def request_complete(self) -> None:
        if self.body_copy is None:
            return
        copy = self.body_copy
        raw = copy[0] if len(copy) == 1 else b"".join(copy)
        self.body_copy = None
        try:
            body = _loads(raw)
        except (ValueError, UnicodeDecodeError):
            return
        if not isinstance(body, dict):
            return
        self.model = safe_word(body.get("model"), 128)
        self.stream = body.get("stream") is True
        mt = body.get("max_tokens", body.get("max_completion_tokens"))
        self.max_tokens = mt if isinstance(mt, int) and not isinstance(mt, bool) else None
        self.ignore_eos = body.get("ignore_eos") is True
        if self.keep_text:
            self.prompt = prompt_text(body)

    # -- response side
    def on_head(self, status: int, headers: dict) -> None:
        self.status = status
        self.headers = headers
        if self.api is None:
            return
        ctype = headers.get("content-type", "")
        if status == 200 and ctype.startswith("text/event-stream"):
            self.state = ProxyStream(self.api == "chat", self.keep_text)
        elif status == 200:
            self.collect, self.collected = JSON_BODY_BYTES, []
        else:
            self.collect, self.collected = ERROR_BODY_BYTES, []

    def on_body(self, data: bytes) -> None:
        """Decoded body bytes (after the client has them)."""
        state = self.state
        if state is not None:
            if state.spent:
                return
            try:
                state.on_body(data, self.last - self.sent)
            except ValueError:                     # an SSE event over the splitter's bound
                state.stream_error = state.malformed = state.spent = True
            return
        if self.collect > 0:
            piece = data[:self.collect]
            self.collect -= len(piece)
            self.collected.append(piece)

    # -- the end
    def finish(self, now: float, keep_itl: bool = False) -> R.RequestRecord:
        rec = R.RequestRecord(id=self.id, scheduled=self.arrival, prompt_tokens_target=None,
                              max_tokens=self.max_tokens)
        rec.sent = self.sent
        rec.http_status = self.status
        rec.prompt = self.prompt
        if self.sent is not None:
            rec.e2e_s = now - self.sent
        if self.state is not None:
            state = self.state
        elif self.collected is not None and self.status == 200:
            state = self._state_from_json()
        else:
            state = ProxyStream(self.api == "chat")
        spec = _spec(self.max_tokens or 0, self.ignore_eos and self.max_tokens is not None)
        error, detail = self.error, self.error_detail
        if error is None and self.client_gone:
            error, detail = R.CLIENT_ABORT, "the client closed the connection"
        if error is None and self.status is not None and self.status != 200:
            error = R.error_for_status(self.status)
            detail = self._error_summary()
        rec.error, rec.error_detail = error, detail
        finish_record(rec, state, spec, compact=keep_itl)
        rec.finish_reason = safe_word(rec.finish_reason)
        self.malformed = self.malformed or state.malformed
        itl = rec.itl_token_s
        if keep_itl:
            itl = sorted(itl)
        else:
            itl.sort()            # (a list of this record's own, dropped below)
        rec.model, rec.api = self.model, self.api
        rec.proxy = {
            "stream": self.stream,
            "tenant": self.tenant,
            "connect_s": _r(None if self.connected is None else self.connected - self.arrival),
            "first_byte_s": _r(None if self.first_byte is None or self.sent is None else self.first_byte - self.sent),
            "itl_p50_s": _r(_q(itl, 0.5)),
            "itl_p99_s": _r(_q(itl, 0.99)),
            "itl_max_s": _r(itl[-1] if itl else None),
            "malformed_sse": self.malformed or None,
        }
        if not keep_itl:
            rec.chunk_t_s = rec.chunk_tokens = rec.itl_token_s = rec.itl_chunk_s = ()
        self.record = rec
        return rec

    def _error_summary(self) -> str:
        words = f"HTTP {self.status}"
        try:
            body = json.loads(b"".join(self.collected or ()))
        except (ValueError, UnicodeDecodeError):
            return words
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            body = err
        if isinstance(body, dict):
            kind = safe_word(body.get("type")) or safe_word(body.get("object"))
            code = safe_word(body.get("code"))
            for part in (kind, code):
                if part and part != str(self.status):
                    words += f" {part}"
        return words

    def _state_from_json(self) -> StreamState:
        """A whole JSON answer read into the stream state's fields, so one rule finishes both."""
        state = ProxyStream(self.api == "chat", self.keep_text)
        try:
            body = json.loads(b"".join(self.collected or ()))
        except (ValueError, UnicodeDecodeError):
            return state
        if not isinstance(body, dict):
            return state
        usage = body.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                state.completion_tokens = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                state.prompt_tokens = usage["prompt_tokens"]
        choices = body.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            state.finish_reason = safe_word(choices[0].get("finish_reason"))
            if self.keep_text:
                message = choices[0].get("message")
                text = message.get("content") if isinstance(message, dict) else choices[0].get("text")
                if isinstance(text, str):
                    state.text.append(text)
        return state


class ProxyStream(StreamState):
    """The load client's stream parser, telling a malformed event (not JSON) from an error event the
    server sent on purpose: both end as `truncated`, only the first counts as malformed SSE."""

    __slots__ = ("malformed", "spent")

    def __init__(self, chat: bool, keep_text: bool = False):
        super().__init__(chat, keep_text)
        self.malformed = False
        self.spent = False

    def on_body(self, data: bytes, t: float) -> None:
        # A read of several whole events (a stream's last event and its [DONE] read at once): the first
        # through the completions pattern where it matches, as StreamState.on_body takes a read of one,
        # not through JSON. Only when the read ends an event, so the splitter is left as it would be.
        fast = self._fast
        if fast is not None and not self.splitter.pending and data.endswith(b"\n\n"):
            end = data.find(b"\n\n") + 2
            if end < len(data):
                m = fast(data[:end])
                if m is not None:
                    self._on_completion(m, t)
                    data = data[end:]
        StreamState.on_body(self, data, t)

    def on_event(self, payload: bytes, t: float) -> None:
        before = self.stream_error
        super().on_event(payload, t)
        if self.stream_error and not before:
            try:
                json.loads(payload)
            except (ValueError, UnicodeDecodeError):
                self.malformed = True


_SPECS: dict[tuple[int, bool], RequestSpec] = {}


def _spec(max_tokens: int, ignore_eos: bool) -> RequestSpec:
    """What finish_record reads of a request (its max_tokens, ignore_eos and prompt_tokens, None here),
    one frozen spec per pair kept (a frozen dataclass costs ~2 us to build)."""
    spec = _SPECS.get((max_tokens, ignore_eos))
    if spec is None:
        spec = RequestSpec(0, 0.0, "", b"", None, max_tokens, ignore_eos=ignore_eos)
        if len(_SPECS) < 4096:
            _SPECS[max_tokens, ignore_eos] = spec
    return spec


def outcome(rec: R.RequestRecord) -> str:
    return "ok" if rec.error is None else rec.error


def _q(values, q: float):
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]


def _r(x):
    return None if x is None else round(x, 7)


