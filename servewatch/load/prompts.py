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

FILLERS = tuple("abcdefghijklmnopqrstuvwxyz") + WORDS
MAX_FILL_TRIES = 64


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
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for a file it cannot read
            where = "" if file == p else f"{file}: "
            raise ValueError(f"{where}not a readable tokenizer.json ({exc})") from None

    async def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=True).ids)


class ServerCounter:
    """Counts through the target's /tokenize, on a client from http1 (bounded, with a timeout)."""

    source = "server"

    def __init__(self, client, model: str, timeout_s: float = 10.0):
        self._client = client
        self._model = model
        self.timeout_s = timeout_s

    async def count(self, text: str) -> int:
        import asyncio

        body = json.dumps({"model": self._model, "prompt": text}).encode()
        async with asyncio.timeout(self.timeout_s):
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
    """A prompt the counter measures at exactly `target` tokens (or the closest found).

    Grow a word list until it reaches the target, binary-search the longest prefix that does not
    exceed it (token counts grow with words), then top up with single letters and short words
    whose added cost fits the remaining gap."""
    if counter.source == "approx":
        return Prompt(" ".join(_words(rng, target)), target, target, "approx")

    async def count(ws: list[str]) -> int:
        return await counter.count(" ".join(ws))

    words = _words(rng, max(1, target))
    n_all = await count(words)
    while n_all < target and len(words) < 8 * target + 16:
        words += _words(rng, len(words))
        n_all = await count(words)
    lo, hi = 0, len(words)                 # count(words[:lo]) <= target < count(words[:hi]) (or hi = all)
    if n_all <= target:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if await count(words[:mid]) <= target:
            lo = mid
        else:
            hi = mid
    words = words[:lo]
    n = await count(words) if words else await counter.count("")
    for _ in range(MAX_FILL_TRIES):
        if n >= target:
            break
        candidate = rng.choice(FILLERS)
        n2 = await count(words + [candidate])
        if n2 <= target:
            words.append(candidate)
            n = n2
    if not words:                           # the smallest non-empty prompt, even if over the target
        words = [rng.choice(FILLERS)]
        n = await count(words)
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
