"""Small pure helpers the detectors share: per-engine series, progress vectors, formatting."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from statistics import median
from typing import TypeVar

from servewatch.engine.state import EngineState
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

R = TypeVar("R")

# Labels that name a model rather than an engine/rank; left out of engine keys (a model name can be a path).
_MODEL_LABELS = frozenset({"model_name"})

Point = tuple[MetricsSample, EngineState]


def engine_key(labels: dict[str, str]) -> str:
    """A stable, path-free name for one engine: its non-model identity labels, e.g. "engine=0"."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in _MODEL_LABELS)


_last_series: tuple[object, dict] | None = None   # (the samples tuple, its series): detectors share one split


def engine_series(samples: Iterable[MetricsSample]) -> dict[str, list[Point]]:
    """Good scrapes split per engine, in time order. Callers must not mutate the result."""
    global _last_series
    if isinstance(samples, tuple):
        cached = _last_series
        if cached is not None and cached[0] is samples:
            return cached[1]
        result = _split(samples)
        _last_series = (samples, result)  # holding the tuple keeps its identity from being reused
        return result
    return _split(samples)


def once_per_window(compute: Callable[[Window, object], R]) -> Callable[[Window, object], R]:
    """For a helper several detectors call with the same window and config in one run: computed once.
    Callers must not mutate the result."""
    last: list = [None]

    def cached(window: Window, config) -> R:
        seen = last[0]
        if seen is not None and seen[0] is window and seen[1] is config:
            return seen[2]
        result = compute(window, config)
        last[0] = (window, config, result)    # holding the window keeps its identity from being reused
        return result
    return cached


def _split(samples: Iterable[MetricsSample]) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for sample in samples:
        if sample.error is not None:
            continue
        seen: dict[str, int] = {}
        for state in sample.engines:
            key = engine_key(state.labels)
            n = seen[key] = seen.get(key, 0) + 1
            if n > 1:   # engines that differ only by model name: keep them apart, in scrape order
                key = f"{key}#{n}"
            out.setdefault(key, []).append((sample, state))
    return out


def progress(state: EngineState) -> tuple[float | None, float | None, float | None]:
    """The counters whose movement means the engine did work: steps, generation and prompt tokens."""
    c = state.counters
    return (c.steps, c.generation_tokens, c.prompt_tokens)


def has_progress_counters(state: EngineState) -> bool:
    return any(v is not None for v in progress(state))


def admitted(state: EngineState) -> bool:
    """Work is admitted: something running or waiting."""
    return (state.running or 0) > 0 or (state.waiting or 0) > 0


def cadence(points: list[Point], last: int = 16) -> float | None:
    """The typical gap between scrapes (median of the most recent gaps)."""
    times = [p[0].t for p in points[-(last + 1):]]
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return median(gaps) if gaps else None


def where(key: str) -> str:
    return f" on {key}" if key else ""


def num(value: float | None) -> str:
    """A counter or gauge value for a one-line why: integers without decimals."""
    if value is None:
        return "n/a"
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.3g}"
