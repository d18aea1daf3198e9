"""What a server did over a stretch of scrapes: one definition for a live window and a recorded one.

`servewatch load` (its server view, written to summary.json) and `servewatch diagnose` (a live window, a
bundle) read the same quantities from the same engine states: per-request means from the deltas of the
cumulative histograms and counters between the first and the last scrape, summed over the engines present
in both (an engine whose counter went backwards restarted and is left out); running and waiting summed over
the engines of one scrape, KV as the fullest engine, each taken at its peak over the scrapes; the slot limit
as the sum of the newest scrape's limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from servewatch.engine.state import EngineState

MEAN_KINDS = ("queue", "prefill", "ttft", "itl", "decode", "e2e", "tpot")


def labels_key(engine: EngineState) -> tuple:
    """Every label of an engine, its model's too: one scrape's engine matched in the next (the engine key the
    detectors name an engine by is `timeline.tracks.engine_key`)."""
    return tuple(sorted(engine.labels.items()))


def _sum(values) -> float | None:
    values = [v for v in values if v is not None]
    return math.fsum(values) if values else None


def totals(engines: Sequence[EngineState]) -> tuple[float | None, float | None, float | None]:
    """(running, waiting, KV) of one scrape: running and waiting summed over engines, KV the fullest."""
    kvs = [e.kv_usage for e in engines if e.kv_usage is not None]
    return (_sum(e.running for e in engines), _sum(e.waiting for e in engines), max(kvs) if kvs else None)


def delta_mean(new: Sequence[EngineState], old: Sequence[EngineState], kind: str) -> float | None:
    """Mean of the observations made between two scrapes, summed over engines present in both."""
    before = {labels_key(e): e for e in old}
    total_sum = total_count = 0.0
    for engine in new:
        prev = before.get(labels_key(engine))
        h1 = engine.histograms.get(kind)
        h0 = prev.histograms.get(kind) if prev is not None else None
        if h1 is None or h0 is None or h1.count < h0.count:
            continue                       # missing, or reset between the scrapes
        total_sum += h1.sum - h0.sum
        total_count += h1.count - h0.count
    return total_sum / total_count if total_count > 0 else None


def counter_delta(new: Sequence[EngineState], old: Sequence[EngineState], get) -> float | None:
    before = {labels_key(e): e for e in old}
    total = None
    for engine in new:
        prev = before.get(labels_key(engine))
        if prev is None:
            continue
        a, b = get(prev), get(engine)
        if a is None or b is None or b < a:
            continue
        total = (total or 0.0) + (b - a)
    return total


def _finished(engine: EngineState) -> float | None:
    return sum(engine.counters.finished.values()) if engine.counters.finished else None


def run_means(first: Sequence[EngineState], last: Sequence[EngineState]) -> dict:
    """Per-request means between two scrapes: each latency histogram, tokens in and out per finished request."""
    means = {kind: delta_mean(last, first, kind) for kind in MEAN_KINDS}
    finished = counter_delta(last, first, _finished)
    prompt = counter_delta(last, first, lambda e: e.counters.prompt_tokens)
    generated = counter_delta(last, first, lambda e: e.counters.generation_tokens)
    means["tokens_in"] = prompt / finished if prompt is not None and finished else None
    means["tokens_out"] = generated / finished if generated is not None and finished else None
    means["finished"] = finished
    return means


@dataclass
class Served:
    """The quantities of a stretch of scrapes; None where the scrapes do not say."""

    scrapes: int = 0
    max_running: float | None = None
    max_waiting: float | None = None
    max_kv: float | None = None
    slot_limit: float | None = None
    preemptions: float | None = None        # delta over the stretch
    tokens_moved: bool | None = None        # the generation counter advanced (None with one scrape)
    length_finished: float | None = None    # requests that stopped at max_tokens over the stretch
    means: dict = field(default_factory=dict)


def served(first: Sequence[EngineState] | None, last: Sequence[EngineState] | None,
           scrape_totals: Iterable[tuple[float | None, float | None, float | None]], scrapes: int) -> Served:
    """The quantities from the first and the last good scrape's engines and every good scrape's totals."""
    rows = list(scrape_totals)
    out = Served(scrapes=scrapes)
    out.max_running = _max(r[0] for r in rows)
    out.max_waiting = _max(r[1] for r in rows)
    out.max_kv = _max(r[2] for r in rows)
    if last:
        limits = [e.slot_limit for e in last if e.slot_limit is not None]
        out.slot_limit = math.fsum(limits) if limits else None
    if first is not None and last is not None and scrapes >= 2:
        out.means = run_means(first, last)
        out.preemptions = counter_delta(last, first, lambda e: e.counters.preemptions)
        generated = counter_delta(last, first, lambda e: e.counters.generation_tokens)
        out.tokens_moved = None if generated is None else generated > 0
        out.length_finished = counter_delta(last, first, lambda e: e.counters.finished.get("length")
                                            if e.counters.finished else None)
    return out


def _max(values) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None
