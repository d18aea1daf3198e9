"""Prompts of an exact token count, built by counting, never by repetition.

Token counters, best first:
- "tokenizer": a local tokenizer.json (or a model dir holding one) through `tokenizers`; counts
  include the special tokens the tokenizer's post-processor adds (e.g. BOS), as the server's do.
- "server": the target's `/tokenize` endpoint (vLLM: POST {"model", "prompt"} → {"count"}).
- "approx": no counter at hand. A prompt of N tokens is N short common words (≤ 4 letters), which
  is about one token per word in GPT/Llama-family BPE vocabularies and exactly one in servewatch's
  simulator. Flagged as "approx" in every output; the server's `usage.prompt_tokens` stays the truth.

A prompt is seeded random words (distinct per prompt, so prefix caches do not swallow the
prefill), grown or shrunk until the counter says exactly N; if a count cannot be hit exactly within
a bounded number of tries, the closest prompt is kept and marked inexact.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

WORDS = (
    "time", "year", "way", "day", "man", "work", "life", "hand", "part", "case", "week", "area",
    "home", "fact", "book", "word", "side", "kind", "head", "room", "game", "line", "end", "name",
    "team", "idea", "body", "face", "door", "city", "car", "list", "road", "form", "food", "land",
    "tree", "song", "fire", "rain", "wind", "snow", "star", "moon", "sun", "sea", "lake", "hill",
    "rock", "sand", "gold", "milk", "salt", "seed", "farm", "ship", "boat", "bird", "fish", "dog",
    "cat", "cow", "king", "town", "shop", "bank", "club", "card", "bill", "test", "plan",
    "rule", "step", "task", "goal", "cost", "rate", "size", "load", "view", "note", "data", "page",
    "file", "code", "path", "node", "port", "key", "map", "box", "bag", "cup", "pen", "hat", "bed",
    "new", "old", "good", "high", "long", "big", "low", "late", "hard", "real", "best", "free",
    "full", "sure", "open", "true", "dark", "cold", "warm", "fast", "slow", "soft", "wide", "deep",
    "go", "see", "make", "take", "come", "know", "give", "find", "tell", "ask", "feel", "try",
    "call", "keep", "let", "put", "mean", "turn", "move", "live", "show", "play", "run", "walk",
    "read", "sing", "grow", "pay", "meet", "send", "sit", "lead", "win", "hope", "talk", "rise",
)

MAX_ADJUST_STEPS = 12


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    tokens: int           # what the counter said (the target when source is "approx")
    target: int
    source: str           # "tokenizer" | "server" | "approx"

    @property
    def exact(self) -> bool:
        return self.tokens == self.target


class LocalCounter:
    source = "tokenizer"

    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer

        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {p}")
        self._tok = Tokenizer.from_file(str(file))

    async def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=True).ids)


class ServerCounter:
    """Counts through the target's /tokenize, on a client from http1 (bounded, with a timeout)."""

    source = "server"

    def __init__(self, client, model: str, timeout_s: float = 10.0):
        self._client = client
        self._model = model
        self._timeout = timeout_s

    async def count(self, text: str) -> int:
        import asyncio

        body = json.dumps({"model": self._model, "prompt": text}).encode()
        async with asyncio.timeout(self._timeout):
            response = await self._client.request("POST", "/tokenize", body)
            try:
                data = await response.read_all(1 << 20)
            finally:
                response.release()
        if response.status != 200:
            raise RuntimeError(f"/tokenize answered HTTP {response.status}")
        count = json.loads(data).get("count")
        if not isinstance(count, int):
            raise RuntimeError("/tokenize answer has no integer 'count'")
        return count


class ApproxCounter:
    source = "approx"

    async def count(self, text: str) -> int:
        return len(text.split())


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n)]


async def build_prompt(counter, target: int, rng: random.Random) -> Prompt:
    """A prompt the counter measures at exactly `target` tokens (or the closest found)."""
    if counter.source == "approx":
        return Prompt(" ".join(_words(rng, target)), target, target, "approx")
    words = _words(rng, target)
    best: tuple[int, list[str], int] | None = None   # (distance, words, count)
    for _ in range(MAX_ADJUST_STEPS):
        n = await counter.count(" ".join(words))
        dist = abs(n - target)
        if best is None or dist < best[0]:
            best = (dist, list(words), n)
        if n == target:
            break
        if n < target:
            words.extend(_words(rng, target - n))
        else:
            excess = n - target
            if excess >= len(words):
                words = words[:1]
            else:
                del words[len(words) - excess:]
            if excess == 1 and len(words) > 1 and best[2] == target - 1:
                # a 2-token word crossed the target: swap the tail for a different 1-token guess
                words[-1] = rng.choice(WORDS)
    dist, words, n = best
    return Prompt(" ".join(words), n, target, counter.source)


async def make_counter(spec: str, *, client=None, model: str | None = None):
    """`spec` is a path, "auto" (server /tokenize if it answers, else approx) or "approx"."""
    if spec == "approx":
        return ApproxCounter()
    if spec != "auto":
        return LocalCounter(spec)
    if client is not None and model is not None:
        counter = ServerCounter(client, model, timeout_s=5.0)
        try:
            await counter.count("hello")
            return counter
        except Exception:  # noqa: BLE001 - any failure means: no usable /tokenize
            pass
    return ApproxCounter()
