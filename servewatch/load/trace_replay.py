"""A trace replayed open-loop: each row sent at its recorded arrival (divided by --speed), its prompt
synthesised to the recorded input length from load's own prompt words, `max_tokens` with `ignore_eos` at
the recorded output length.

Shared prefixes: a row's prompt is the text of its hash ids' blocks in order (each block `block` tokens of
seeded words, the same words for the same id in every row and every run with the same seed), then a tail of
its own where the ids cover less than the input. Two rows that share their first k ids share their first k
blocks of text, so a prefix cache sees the reuse the trace recorded; a row without ids (the Azure trace,
servewatch's records, a Mooncake row whose ids were not recorded) gets a prompt of its own and shares
nothing.

Token counts: load's words are one token each on the approx counter and on servewatch's simulator. With a
real tokenizer (a local one or the server's /tokenize) the tokens per word are measured once on a sample of
the same words and every block is sized by that ratio; then, for a trace of up to EXACT_ROWS rows, every
prompt is counted and cut to its recorded length before the start (as load's prompts are). A longer trace
keeps the sized prompts (within a few per cent: a prompt built during the run must be ready within the
sender's lead, ~20 ms, at hundreds of requests a second); the note says so.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

from servewatch.load import prompts as P
from servewatch.load.client import RequestSpec, build_body
from servewatch.load.trace import Trace, TraceRow

BLOCK_CACHE = 4096            # block word lists kept (LRU); a miss costs one seeded draw
CALIBRATION_WORDS = 1024


class PromptMaker:
    def __init__(self, block: int, seed: int = 0, tokens_per_word: float = 1.0):
        self.block = block
        self.seed = seed
        self.tokens_per_word = tokens_per_word
        self._blocks: OrderedDict = OrderedDict()

    def words_for(self, tokens: int) -> int:
        if self.tokens_per_word == 1.0:
            return tokens
        return max(1, round(tokens / self.tokens_per_word))

    def _block_words(self, h: int) -> list[str]:
        words = self._blocks.get(h)
        if words is None:
            words = random.Random(f"trace-block:{self.seed}:{h}").choices(P.WORDS, k=self.words_for(self.block))
            self._blocks[h] = words
            if len(self._blocks) > BLOCK_CACHE:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(h)
        return words

    def text(self, index: int, row: TraceRow) -> str:
        left = max(1, row.input_tokens)
        parts: list[str] = []
        for h in row.hash_ids or ():
            size = min(self.block, left)
            words = self._block_words(h)
            parts.append(" ".join(words[:self.words_for(size)] if size < self.block else words))
            left -= size
            if left <= 0:
                break
        if left > 0:
            parts.append(" ".join(random.Random(f"trace-row:{self.seed}:{index}")
                                  .choices(P.WORDS, k=self.words_for(left))))
        return " ".join(parts)


async def tokens_per_word(counter, seed: int = 0) -> float:
    """1.0 for the approx counter; else measured on a sample of load's words."""
    if counter.source == "approx":
        return 1.0
    words = random.Random(f"trace-calibrate:{seed}").choices(P.WORDS, k=CALIBRATION_WORDS)
    n = await counter.count(" ".join(words))
    base = await counter.count(words[0])                # the special tokens a prompt carries (BOS) and one word
    ratio = max(1, n - max(0, base - 1)) / CALIBRATION_WORDS
    return 1.0 if abs(ratio - 1.0) < 0.005 else ratio


EXACT_ROWS = 1000            # up to this many rows, a real tokenizer's prompts are counted to the token before the start


async def exact_text(counter, maker: PromptMaker, index: int, row: TraceRow) -> tuple[str, int]:
    """The row's prompt cut or grown at its end until the counter says the recorded length (or the closest
    below it): the longest run of its words that does not exceed it. Its leading blocks stay those of its
    hash ids, so prefix sharing is kept up to the last block."""
    target = max(1, row.input_tokens)
    words = maker.text(index, row).split(" ")
    extra = random.Random(f"trace-exact:{maker.seed}:{index}")
    while await counter.count(" ".join(words)) < target and len(words) < 8 * target + 16:
        words += extra.choices(P.WORDS, k=max(1, len(words) // 8))
    lo, hi = 1, len(words)                 # count(words[:lo]) <= target (or lo = 1), the best found in [lo, hi]
    best = await counter.count(" ".join(words[:hi]))
    if best <= target:
        return " ".join(words), best
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if await counter.count(" ".join(words[:mid])) <= target:
            lo = mid
        else:
            hi = mid
    words = words[:lo]
    n = await counter.count(" ".join(words))
    for _ in range(P.MAX_FILL_TRIES):      # top up with letters and short words whose cost fits, as load does
        if n >= target:
            break
        candidate = extra.choice(P.FILLERS)
        n2 = await counter.count(" ".join(words + [candidate]))
        if n2 <= target:
            words.append(candidate)
            n = n2
    return " ".join(words), n


@dataclass(slots=True)
class Replay:
    trace: Trace
    speed: float
    offsets: list[float]
    maker: PromptMaker
    texts: list[str] | None = None          # counted prompts, built before the start (EXACT_ROWS or fewer)
    exact: bool = True                      # every prompt has the recorded length by the counter

    def specs_for(self, path: str, model: str, api: str, keep_text: bool):
        rows, maker = self.trace.rows, self.maker

        texts = self.texts

        def specs_for(i: int, scheduled: float) -> RequestSpec:
            row = rows[i]
            text = texts[i] if texts is not None else maker.text(i, row)
            out = max(1, row.output_tokens)
            return RequestSpec(i, scheduled, path, build_body(api, model, text, out), max(1, row.input_tokens),
                               out, True, text if keep_text else None)
        return specs_for

    def summary(self) -> dict:
        rows = self.trace.rows
        span = self.offsets[-1] if self.offsets else 0.0
        return {
            "format": self.trace.fmt,
            "rows": len(rows),
            "skipped_rows": self.trace.bad_count,
            "speed": self.speed,
            "span_s": span,
            "mean_rate": (len(rows) - 1) / span if span > 0 else None,
            "rows_with_hash_ids": sum(1 for r in rows if r.hash_ids),
            "block_tokens": self.trace.block,
            "tokens_per_word": self.maker.tokens_per_word,
            "prompts_counted": self.texts is not None,
            "prompts_exact": self.exact,
        }


async def plan(trace: Trace, speed: float, counter, seed: int = 0, exact_rows: int = EXACT_ROWS) -> Replay:
    """The replay: offsets, and the prompts' maker. With a real tokenizer (not one word a token) and no more
    than `exact_rows` rows, every prompt is counted to its recorded length now, before the start."""
    ratio = await tokens_per_word(counter, seed)
    offsets = [row.offset_s / speed for row in trace.rows]
    replay = Replay(trace, speed, offsets, PromptMaker(trace.block, seed, ratio))
    if ratio != 1.0:
        if len(trace.rows) <= exact_rows:
            replay.texts = []
            for i, row in enumerate(trace.rows):
                text, n = await exact_text(counter, replay.maker, i, row)
                replay.texts.append(text)
                replay.exact = replay.exact and n == max(1, row.input_tokens)
        else:
            replay.exact = False
    return replay
