"""Small pure helpers the detectors share: per-engine series, progress vectors, formatting."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cached_property, wraps
from operator import lt
from statistics import median
from typing import TypeVar

from servewatch.engine.state import EngineState
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

R = TypeVar("R")

# Labels that name a model rather than an engine/rank; left out of engine keys (a model name can be a path).
_MODEL_LABELS = frozenset({"model_name"})

Point = tuple[MetricsSample, EngineState]


_KEYS: dict[tuple, str] = {}     # label items → engine key: every scrape of an engine repeats its labels
_KEYS_KEPT = 4096


def engine_key(labels: dict[str, str]) -> str:
    """A stable, path-free name for one engine: its non-model identity labels, e.g. "engine=0"."""
    items = tuple(labels.items())
    key = _KEYS.get(items)
    if key is None:
        if len(_KEYS) >= _KEYS_KEPT:
            _KEYS.clear()
        key = _KEYS[items] = ",".join(f"{k}={v}" for k, v in sorted(items) if k not in _MODEL_LABELS)
    return key


class Track:
    """One engine's good scrapes over a window, and the columns several detectors read (each computed
    once, on first use). Read-only, like the points."""

    def __init__(self, points: list[Point]):
        self.points = points

    @cached_property
    def times(self) -> list[float]:
        return [sample.t for sample, _ in self.points]

    @cached_property
    def states(self) -> list[EngineState]:
        return [state for _, state in self.points]

    @cached_property
    def counter_columns(self) -> tuple[list, list, list, list]:
        """steps, generation tokens, prompt tokens and preemptions, one list each (None where unknown)."""
        counters = [state.counters for state in self.states]
        return ([c.steps for c in counters], [c.generation_tokens for c in counters],
                [c.prompt_tokens for c in counters], [c.preemptions for c in counters])

    @cached_property
    def progress(self) -> list[tuple[float | None, float | None, float | None]]:
        """`progress(state)` of every point."""
        steps, generation, prompt, _ = self.counter_columns
        return list(zip(steps, generation, prompt))

    @cached_property
    def counter_drops(self) -> list[tuple[int, int]]:
        """(i, c) for each pair of consecutive points (i - 1, i) where a counter went down (steps,
        generation tokens, prompt tokens, preemptions: c is its index), the first such counter only."""
        columns = self.counter_columns
        if not any(_may_drop(column) for column in columns):
            return []
        drops = []
        for i in range(1, len(self.points)):
            for c, column in enumerate(columns):
                before, after = column[i - 1], column[i]
                if before is not None and after is not None and after < before:
                    drops.append((i, c))
                    break
        return drops


def _may_drop(column: list) -> bool:
    try:
        return any(map(lt, column[1:], column))
    except TypeError:   # None (not exported) among them
        return any(b < a for a, b in zip(column, column[1:]) if a is not None and b is not None)


_last_series: tuple[object, dict, dict | None] | None = None   # (samples tuple, its series, its tracks)


def engine_series(samples: Iterable[MetricsSample]) -> dict[str, list[Point]]:
    """Good scrapes split per engine, in time order. Callers must not mutate the result."""
    if isinstance(samples, tuple):
        return _cached_split(samples)[1]
    return _split(samples)


def tracks(samples: tuple[MetricsSample, ...]) -> dict[str, Track]:
    """`engine_series` as Tracks, shared by the detectors of one run."""
    global _last_series
    cached = _cached_split(samples)
    if cached[2] is None:
        cached = _last_series = (cached[0], cached[1], {key: Track(points) for key, points in cached[1].items()})
    return cached[2]


def _cached_split(samples: tuple[MetricsSample, ...]) -> tuple[object, dict, dict | None]:
    global _last_series
    cached = _last_series
    if cached is not None and cached[0] is samples:
        return cached
    cached = _last_series = (samples, _split(samples), None)  # holding the tuple keeps its identity unused
    return cached


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


def _split(samples: Iterable[MetricsSample]) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for sample in samples:
        if sample.error is not None:
            continue
        if len(sample.engines) == 1:    # most servers: one engine, no name to tell apart
            state = sample.engines[0]
            key = engine_key(state.labels)
            points = out.get(key)
            if points is None:
                out[key] = [(sample, state)]
            else:
                points.append((sample, state))
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
