"""A documented, deterministic token counter standing in for a tokenizer, and the filler text.

Counting rule (``count_tokens``): text is split into runs of word characters and single
non-space, non-word characters; a word run of n characters counts ceil(n / 4) tokens, each other
character counts 1. Whitespace is free. So "hello, world" = 2 + 1 + 2 = 5 tokens. A chat request
counts its messages' contents plus 4 tokens per message (role and template markers) plus 3.

Completions are filler words of at most 4 letters, one token each, separated by spaces; the prompt
is never echoed. The filler sequence depends only on (seed, request number), so runs repeat.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_PIECE = re.compile(r"\w+|[^\w\s]")
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PER_REQUEST = 3

FILLER_WORDS = (
    "the", "step", "node", "data", "flow", "core", "path", "grid", "beam", "time", "rate", "unit",
    "load", "port", "lane", "tile", "warp", "page", "slot", "fold", "seed", "wave", "mesh", "byte",
)


def pieces(text: str) -> list[str]:
    """The text as token-sized pieces (a word run is cut every 4 characters)."""
    out: list[str] = []
    for match in _PIECE.finditer(text):
        piece = match.group(0)
        out.extend(piece[i:i + 4] for i in range(0, len(piece), 4))
    return out


def piece_id(piece: str, vocab_size: int) -> int:
    """A stable token id for a piece (for /tokenize answers): FNV-1a of its UTF-8 bytes, mod the vocab."""
    h = 0xCBF29CE484222325
    for byte in piece.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % vocab_size


def count_tokens(text: str) -> int:
    total = 0
    for match in _PIECE.finditer(text):
        n = len(match.group(0))
        total += (n + 3) // 4
    return total


def count_chat_tokens(contents: Iterable[str]) -> int:
    contents = list(contents)
    return sum(count_tokens(c) for c in contents) + CHAT_TOKENS_PER_MESSAGE * len(contents) + CHAT_TOKENS_PER_REQUEST


def filler_token(stream_seed: int, index: int) -> str:
    """The index-th token of a completion, with its leading space (except the first)."""
    word = FILLER_WORDS[(stream_seed * 7 + index * 5 + index // len(FILLER_WORDS)) % len(FILLER_WORDS)]
    return word if index == 0 else " " + word


def filler_text(stream_seed: int, start: int, count: int) -> str:
    return "".join(filler_token(stream_seed, i) for i in range(start, start + count))
