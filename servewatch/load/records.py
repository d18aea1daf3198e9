"""One record per request: what a client can know of it (times, token counts, stop reason, error class).

Times are wall-clock epoch seconds (`scheduled`, `sent`) or seconds after `sent` (everything else),
so records line up with the server samples in server.jsonl.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Error classes, one per request at most. A request with an error is never counted as a success.
CONNECT = "connect"        # no connection could be made
TIMEOUT = "timeout"        # the request's deadline or idle timeout passed
HTTP_4XX = "http_4xx"      # a non-200 status below 500
HTTP_5XX = "http_5xx"      # a status of 500 or more
STREAM_CUT = "stream_cut"  # the connection broke or the response was malformed / oversized mid-way
TRUNCATED = "truncated"    # HTTP 200 but fewer tokens than asked with ignore_eos, finish reason
                           # abort/error, or an error event inside the stream
ERROR_CLASSES = (CONNECT, TIMEOUT, HTTP_4XX, HTTP_5XX, STREAM_CUT, TRUNCATED)
CLIENT_ABORT = "client_abort"  # the proxy's client went away before the end (the proxy's records only)


def error_for_status(status: int) -> str | None:
    if status == 200:
        return None
    return HTTP_5XX if status >= 500 else HTTP_4XX


@dataclass(slots=True)
class RequestRecord:
    id: int                                   # our own counter, never the server's id
    scheduled: float                          # when the timeline said to send it (epoch s)
    prompt_tokens_target: int                 # what the prompt was built to be
    max_tokens: int
    sent: float | None = None                 # right before the request bytes were written
    http_status: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None                # sent -> end of stream (or of the error)
    tpot_s: float | None = None               # (last token - first token) / (output tokens - 1)
    # sequences (the client stores compact array('d') / array('I'); lists are accepted too)
    chunk_t_s: Sequence[float] = field(default_factory=list)   # arrival of each chunk with choices
    chunk_tokens: Sequence[int] = field(default_factory=list)  # tokens each of those chunks carried
    itl_token_s: Sequence[float] = field(default_factory=list) # per token, see itl.py for the rule
    itl_chunk_s: Sequence[float] = field(default_factory=list) # per token-carrying chunk gap
    itl_exact: bool | None = None             # per-token counts known for every chunk
    input_tokens: int | None = None
    output_tokens: int | None = None
    token_source: str | None = None           # "server" (usage) | "client" (flagged fallback)
    finish_reason: str | None = None
    error: str | None = None                  # one of ERROR_CLASSES
    error_detail: str | None = None           # our own short words, never the server's body
    text: str | None = None                   # completion text, only with --keep-text
    prompt: str | None = None                 # prompt text, only with --keep-text
    model: str | None = None                  # the model the request asked for (its body's "model")
    api: str | None = None                    # "completions" | "chat"
    # Set by `servewatch proxy` only (absent from load's records): `scheduled` is then the arrival of
    # the request at the proxy and `sent` when it was written to the upstream.
    proxy: dict | None = None                 # see servewatch.proxy.exchange.Exchange.finish

    @property
    def ok(self) -> bool:
        return self.error is None and self.http_status == 200

    @property
    def schedule_delay_s(self) -> float | None:
        return None if self.sent is None else self.sent - self.scheduled

    def to_json(self, keep_text: bool = False) -> dict:
        out = {
            "id": self.id,
            "scheduled": round(self.scheduled, 6),
            "sent": None if self.sent is None else round(self.sent, 6),
            "schedule_delay_s": _r(self.schedule_delay_s),
            "http_status": self.http_status,
            "error": self.error,
            "error_detail": self.error_detail,
            "ttft_s": _r(self.ttft_s),
            "tpot_s": _r(self.tpot_s),
            "e2e_s": _r(self.e2e_s),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "token_source": self.token_source,
            "prompt_tokens_target": self.prompt_tokens_target,
            "max_tokens": self.max_tokens,
            "finish_reason": self.finish_reason,
            "itl_exact": self.itl_exact,
            "chunks": [[_r(t), k] for t, k in zip(self.chunk_t_s, self.chunk_tokens)],
            "itl_token_s": [_r(x) for x in self.itl_token_s],
            "itl_chunk_s": [_r(x) for x in self.itl_chunk_s],
            "model": self.model,
            "api": self.api,
        }
        if self.proxy is not None:
            out["proxy"] = self.proxy
        if keep_text:
            out["prompt"] = self.prompt
            out["text"] = self.text
        return out

    @classmethod
    def from_json(cls, obj) -> "RequestRecord":
        """A record as `to_json` wrote it (by `servewatch load` or `servewatch proxy`), read back; text is
        never read back. ValueError names the first field that is not what to_json writes."""
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        rec = cls(id=_field(obj, "id", int, required=True), scheduled=_epoch(obj, "scheduled", required=True),
                  prompt_tokens_target=_field(obj, "prompt_tokens_target", int),
                  max_tokens=_field(obj, "max_tokens", int))
        rec.sent = _epoch(obj, "sent")
        for name in ("ttft_s", "e2e_s", "tpot_s"):
            setattr(rec, name, _field(obj, name, float))
        for name in ("http_status", "input_tokens", "output_tokens"):
            setattr(rec, name, _field(obj, name, int))
        for name in ("token_source", "finish_reason", "error", "error_detail", "model", "api"):
            setattr(rec, name, _field(obj, name, str))
        rec.itl_exact = _field(obj, "itl_exact", bool)
        chunks = _field(obj, "chunks", list) or []
        try:
            rec.chunk_t_s = [float(_number(t)) for t, _ in chunks]
            rec.chunk_tokens = [int(_number(k, int)) for _, k in chunks]
        except (TypeError, ValueError):
            raise ValueError("field 'chunks': expected [[seconds, tokens], ...]") from None
        for name in ("itl_token_s", "itl_chunk_s"):
            values = _field(obj, name, list) or []
            try:
                setattr(rec, name, [float(_number(x)) for x in values])
            except (TypeError, ValueError):
                raise ValueError(f"field {name!r}: expected a list of seconds") from None
        proxy = _field(obj, "proxy", dict)
        if proxy is not None:
            # the proxy's records of before 2026-12-04 had the model and the API in their proxy part
            for name in ("model", "api"):
                if name in proxy:
                    value = proxy.pop(name)
                    if getattr(rec, name) is None and isinstance(value, str):
                        setattr(rec, name, value)
            rec.proxy = proxy
        return rec


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 7)


def _number(x, kind=float):
    """x when it is a JSON number (an int where `kind` is int), else TypeError; a bool is not a number."""
    if isinstance(x, bool) or not isinstance(x, (int, float) if kind is float else int):
        raise TypeError
    return x


def _field(obj: dict, name: str, kind: type, required: bool = False):
    value = obj.get(name)
    if value is None:
        if required:
            raise ValueError(f"field {name!r} is missing")
        return None
    if kind in (int, float):
        try:
            return kind(_number(value, kind))
        except TypeError:
            raise ValueError(f"field {name!r}: expected a number, got {_json_kind(value)}") from None
    if not isinstance(value, kind):
        raise ValueError(f"field {name!r}: expected {_JSON_KINDS[kind]}, got {_json_kind(value)}")
    return value


LAST_EPOCH_S = 253402300799.0        # 9999-12-31T23:59:59Z: the last second an ISO 8601 date can name


def _epoch(obj: dict, name: str, required: bool = False) -> float | None:
    t = _field(obj, name, float, required)
    if t is not None and not 0.0 <= t <= LAST_EPOCH_S:
        raise ValueError(f"field {name!r}: {t:g} is not a time in epoch seconds (1970 to 9999)")
    return t


_JSON_KINDS = {str: "a string", bool: "true or false", list: "an array", dict: "an object"}


def _json_kind(value) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return _JSON_KINDS.get(type(value), "another kind of value")
