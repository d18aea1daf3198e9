"""Small pure helpers the detectors share: per-engine series, progress vectors, formatting."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import wraps
from statistics import median
from typing import TypeVar

from servewatch.timeline.tracks import Point, Track, engine_key, engine_series, tracks
from servewatch.engine.state import EngineState
from servewatch.timeline.window import Window

__all__ = ["Point", "Track", "admitted", "cadence", "engine_key", "engine_words", "engine_series", "has_progress_counters", "num",
           "once_per_window", "progress", "tracks", "where"]

R = TypeVar("R")


def once_per_window(compute: Callable[[Window, object], R]) -> Callable[[Window, object], R]:
    """For a helper several detectors call with the same window and config in one run: computed once.
    Callers must not mutate the result."""
    last: list = [None]

    @wraps(compute)
    def cached(window: Window, config) -> R:
        seen = last[0]
        if seen is not None and seen[0] is window and seen[1] is config:
            return seen[2]
        result = compute(window, config)
        last[0] = (window, config, result)    # holding the window keeps its identity from being reused
        return result
    return cached


def progress(state: EngineState) -> tuple[float | None, float | None, float | None]:
    """`Counters.progress`: steps, generation and prompt tokens, those that are this engine's own."""
    return state.counters.progress()


def progress_totals(engines: Iterable[EngineState]) -> tuple[float, float, float]:
    """Each progress counter summed over the engines (one that does not export it adds nothing)."""
    engines = tuple(engines)
    return tuple(sum(v for e in engines if (v := progress(e)[i]) is not None) for i in range(3))


def generated_total(engines: Iterable[EngineState]) -> float | None:
    """Generation tokens of the whole server: each engine's own, and a count shared by a model's engines
    once (None when no engine counts them)."""
    values: list[float] = []
    shared: set[tuple] = set()
    for e in engines:
        c = e.counters
        if c.generation_tokens is None:
            continue
        if c.tokens_shared:
            pair = (c.prompt_tokens, c.generation_tokens)
            if pair in shared:
                continue
            shared.add(pair)
        values.append(c.generation_tokens)
    return sum(values) if values else None


def has_progress_counters(state: EngineState) -> bool:
    return any(v is not None for v in progress(state))


def admitted(state: EngineState) -> bool:
    """Work is admitted: something running or waiting — not counting a decode instance's requests that wait for
    their KV from a prefill (vLLM counts them waiting, reason "deferred"): they wait on the other side, and their
    stall is kv_transfer_stall's, which never restarts decode (sglang#12779: a dead prefill got decode killed)."""
    waiting = state.waiting or 0
    side = state.kv_transfer
    if side is not None and side.waiting_for_kv:
        waiting = max(0.0, waiting - side.waiting_for_kv)
    return (state.running or 0) > 0 or waiting > 0


def cadence(points: list[Point], last: int = 16) -> float | None:
    """The typical gap between scrapes (median of the most recent gaps)."""
    times = [p[0].t for p in points[-(last + 1):]]
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return median(gaps) if gaps else None


_LABEL_WORDS = {"engine": "engine", "dp_rank": "DP rank", "tp_rank": "TP rank", "pp_rank": "PP rank",
                "moe_ep_rank": "EP rank", "engine_type": "engine type"}


def engine_words(key: str) -> str:
    """An engine's key as a reader says it: "engine=0" -> "engine 0"; SGLang's
    "dp_rank=0,engine_type=unified,moe_ep_rank=0,..." -> "the unified engine (DP rank 0, EP rank 0, ...)"."""
    if not key:
        return "the engine"
    pairs = [part.partition("=") for part in key.split(",")]
    kind = next((v for k, _, v in pairs if k == "engine_type"), None)
    rest = [f"{_LABEL_WORDS.get(k, k.replace('_', ' '))} {v}" for k, _, v in pairs if k != "engine_type"]
    if kind is None:
        return ", ".join(rest)
    return f"the {kind} engine" + (f" ({', '.join(rest)})" if rest else "")


def where(key: str) -> str:
    return f" on {engine_words(key)}" if key else ""


def num(value: float | None) -> str:
    """A counter or gauge value for a one-line why: integers without decimals."""
    if value is None:
        return "n/a"
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.3g}"
