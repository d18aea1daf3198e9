"""The stream-chunk counter every reader of a streamed completion shares (`servewatch load`'s client, the
proxy's inline read path, the virtual-time driver): the OpenAI-compatible SSE grammar of one compact
completions event, and `StreamState`, which turns body reads into content chunks (their times and the tokens
each carried), the finish reason, the prompt tokens and whether the counts are exact.

The grammar's pieces (`CHARS` ... `USAGE`, `member`) are public so that the proxy's framed patterns
(servewatch.proxy.fastpath) are built from the very members the load client matches, never a copy.
Each body read is stamped once, on arrival, and every SSE event in it shares that time.
"""

from __future__ import annotations

import json
import re
from array import array

from servewatch.transport.sse import SseSplitter

_raw_decode = json.JSONDecoder().raw_decode

CHARS = rb'[\x20\x21\x23-\x5b\x5d-\x7e]*'          # printable ASCII but " and \
STRING = rb'"' + CHARS + rb'"'
NUMBER = rb'-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?'
SCALAR = rb'(?:' + STRING + rb'|' + NUMBER + rb'|null|true|false)'
COUNT = rb'(0|[1-9][0-9]*)'

# The most tokens one chunk's count holds (the chunk array's unsigned int); a usage count that jumps further is a
# broken or hostile upstream's, recorded at this bound and the counts marked not exact, never an error.
CHUNK_K_MAX = 2**32 - 1


def member(excluded: bytes) -> bytes:
    """A `"name":scalar` member whose name is none of `excluded` (an alternation)."""
    return rb'"(?!(?:' + excluded + rb')")' + CHARS + rb'":' + SCALAR


TOP = rb'(?!"object":"error")' + member(rb'choices|usage|error')      # a top-level member the reader ignores
IN_USAGE = member(rb'prompt_tokens|completion_tokens')
USAGE = (rb'\{"prompt_tokens":' + COUNT + rb',(?:' + IN_USAGE + rb',)*?'
         rb'"completion_tokens":' + COUNT + rb'(?:,' + IN_USAGE + rb')*\}')


def completion_event_pattern() -> re.Pattern:
    """One whole SSE read `data: {...}\\n\\n` holding a compact completions chunk in the shape vLLM
    and the built-in simulator send, matched whole so that what it extracts is exactly what the
    JSON path would: printable-ASCII strings without escapes, scalar values, no duplicate, error or
    nested keys that the JSON path looks at. Anything else takes the JSON path. Groups: the text piece,
    the finish reason, the prompt and the completion tokens."""
    in_choice = member(rb'text|finish_reason')
    choice = (rb'\{"index":0,"text":"(' + CHARS + rb')"(?:,' + in_choice + rb')*?'
              rb'(?:,"finish_reason":(?:null|"([a-z_]*)"))?(?:,' + in_choice + rb')*\}')
    return re.compile(rb'data: \{(?:' + TOP + rb',)*"choices":\[' + choice + rb'\]'
                      rb'(?:,"usage":' + USAGE + rb')?(?:,' + TOP + rb')*\}\n\n')


completion_event = completion_event_pattern().fullmatch


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
        self._fast = None if chat else completion_event

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
        """What `on_event` does for the same event, from the fields `completion_event` matched."""
        piece, reason, pt, ct = m.groups()
        self.on_fields(piece, reason, pt, ct, t)

    def on_fields(self, piece, reason: bytes | None, pt: bytes | None, ct: bytes | None, t: float) -> None:
        """One compact completions event read at `t`, from its matched fields (bytes as matched; `piece` may
        be any truth value where the text is not kept): what the proxy's inline read path counts too."""
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
            if k > CHUNK_K_MAX:       # no chunk carries 2^32 tokens: a hostile or broken count, kept at the bound
                k = CHUNK_K_MAX
                self.counts_exact = False
        else:
            self.counts_exact = False
            k = 1 if has_text else 0
        self.chunk_t.append(t)
        self.chunk_k.append(k)
