"""Whole-event patterns for the proxy's inline read path (servewatch.proxy.server.Upstream.data_received).

Each matches one HTTP/1.1 chunk ("SIZE\\r\\n" payload "\\r\\n") whose payload is one whole SSE event in the
compact shape vLLM and the simulator send, and only when what it extracts is exactly what the JSON path
(servewatch.transport.stream.StreamState.on_event) would read from it: printable-ASCII strings without escapes,
scalar values, no duplicate, error or nested member that the JSON path looks at. Anything else takes
the JSON path. Groups: the chunk size's hex digits, then the text piece, the finish reason, the prompt and
the completion tokens (the last two from continuous usage).

A piece of printable ASCII without a quote or an escape (`impure_piece` finds no byte in its range of the read)
followed by the very bytes that followed the last matched event's piece reads as that event's rest did: the piece
cannot end before the quote that starts those bytes, so the rest matches the same way, with the same groups.

Each also has a tail: the same pattern from the piece's opening quote on, with the same four groups. In
an event it matches, no quoted string holds a quote, so the members before the piece read one way only:
an event that starts with the bytes of one that matched, up to that quote, matches whole exactly when
its rest matches the tail. The events of one stream mostly differ only after that quote.
"""

from __future__ import annotations

import re

from servewatch.transport.stream import CHARS as _CHARS, TOP as _TOP, USAGE as _USAGE, completion_event_pattern, member

_END = rb'(?:,"usage":' + _USAGE + rb')?(?:,' + _TOP + rb')*\}\n\n\r\n'       # to the chunk's end

# completions: {"index":0,"text":"PIECE", ...}; the pattern is the transport's own, framed
_COMPLETION = completion_event_pattern().pattern
_TEXT_AT = _COMPLETION.index(rb'"text":"(') + len(rb'"text":"')

# chat: {"index":0,"delta":{... "content":"PIECE" ...}, ...}: the piece is delta.content or "" (a delta
# without content, or with content null, carries none)
_IN_CHAT_CHOICE = member(rb'delta|finish_reason')
_IN_DELTA = member(rb'content')
_CHOICE_END = (rb'(?:,' + _IN_CHAT_CHOICE + rb')*?(?:,"finish_reason":(?:null|"([a-z_]*)"))?'
               rb'(?:,' + _IN_CHAT_CHOICE + rb')*\}\]')
_CHAT_PIECE_REST = rb'(' + _CHARS + rb')"(?:,' + _IN_DELTA + rb')*\}' + _CHOICE_END
_NO_PIECE = (rb'(?:(?:' + _IN_DELTA + rb',)*?"content":null(?:,' + _IN_DELTA + rb')*'   # content null
             rb'|(?:' + _IN_DELTA + rb'(?:,' + _IN_DELTA + rb')*)?)')                       # or absent
_CHAT = (rb'data: \{(?:' + _TOP + rb',)*"choices":\[\{"index":0,"delta":\{'
         rb'(?:(?:' + _IN_DELTA + rb',)*?"content":"' + _CHAT_PIECE_REST
         + rb'|' + _NO_PIECE + rb'\}' + _CHOICE_END + rb')' + _END)

_FRAME = rb'([0-9a-fA-F]{1,8})\r\n'

# (data, start, end): the first byte of the piece that needs decoding, None when none does. A search that
# finds nothing makes no match object: per token, ~0.2 us less than a fullmatch of the allowed bytes.
impure_piece = re.compile(b"[^" + _CHARS.removeprefix(b"[").removesuffix(b"*")).search

completion_whole = re.compile(_FRAME + _COMPLETION + rb'\r\n').fullmatch
completion_tail = re.compile(_COMPLETION[_TEXT_AT:] + rb'\r\n').fullmatch

_chat = re.compile(_FRAME + _CHAT).fullmatch
chat_tail = re.compile(_CHAT_PIECE_REST + _END).fullmatch


class _Folded:
    """A match of the chat pattern seen with the completions groups (size, piece, reason, pt, ct): the
    alternative without a piece has a reason group of its own."""

    __slots__ = ("_m",)

    def __init__(self, m: re.Match):
        self._m = m

    def groups(self):
        size, piece, reason, reason_without_piece, pt, ct = self._m.groups()
        return size, piece, reason if reason is not None else reason_without_piece, pt, ct

    def start(self, group: int) -> int:
        return self._m.start(group)

    def end(self, group: int) -> int:
        return self._m.end(group)


def chat_whole(data: bytes):
    m = _chat(data)
    return None if m is None else _Folded(m)
