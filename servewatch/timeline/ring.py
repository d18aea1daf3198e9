"""The bounded ring: one deque per sample kind, sized from --history and each source's cadence.

Memory is fixed by construction: a kind holds at most `capacity[kind]` samples; older ones are
overwritten and counted (the count goes into bundles so a reader knows history was dropped).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from itertools import islice
from operator import attrgetter
from collections.abc import Iterable, Mapping

from servewatch.engine.state import pack_histograms
from servewatch.timeline.samples import MetricsSample, Sample
from servewatch.timeline import kinds
from servewatch.timeline.window import Window, kind_of

DEFAULT_LOG_CAPACITY = 4096   # parsed log events (not raw lines) kept whatever the history
MARGIN = 2                    # extra slots so a full --history span always fits
_time = attrgetter("t")


def capacity_for(history_s: float, interval_s: float) -> int:
    if history_s <= 0 or interval_s <= 0:
        raise ValueError("history and interval must be positive")
    return math.ceil(history_s / interval_s) + MARGIN


class Ring:
    def __init__(self, capacity: Mapping[str, int]):
        unknown = set(capacity) - set(kinds.names())
        if unknown:
            raise ValueError(f"unknown sample kinds: {sorted(unknown)}")
        self._deques = {kind: deque(maxlen=max(1, int(capacity.get(kind, 1)))) for kind in kinds.names()}
        self.overwritten = {kind: 0 for kind in kinds.names()}
        self._unordered: set[str] = set()      # kinds holding a sample older than one added before it

    @classmethod
    def for_history(cls, history_s: float, intervals: Mapping[str, float],
                    log_capacity: int = DEFAULT_LOG_CAPACITY) -> Ring:
        """Capacity per kind = history / cadence (+ margin); kinds without a source get one slot."""
        capacity = {kind: capacity_for(history_s, interval) for kind, interval in intervals.items() if kind != "log"}
        capacity["log"] = log_capacity
        return cls(capacity)

    @property
    def capacity(self) -> dict[str, int]:
        return {kind: d.maxlen for kind, d in self._deques.items()}

    def add(self, sample: Sample) -> None:
        kind = kind_of(sample)
        if kind == "metrics":
            _pack(sample)
        d = self._deques[kind]
        if len(d) == d.maxlen:
            self.overwritten[kind] += 1
        if d and sample.t < d[-1].t:
            self._unordered.add(kind)
        d.append(sample)

    def extend(self, samples: Iterable[Sample]) -> None:
        for sample in samples:
            self.add(sample)

    def __len__(self) -> int:
        return sum(len(d) for d in self._deques.values())

    def holds(self, kind: str) -> bool:
        """It holds a sample of `kind` now."""
        return bool(self._deques[kind])

    def window(self, since: float | None = None) -> Window:
        """A frozen copy of what the ring holds (optionally only samples at or after `since`)."""
        def pick(kind: str) -> tuple:
            items = self._ordered(kind)
            if since is not None and items and items[0].t < since:
                return _since(items, since)
            return tuple(items)
        return Window.of_kinds({kind: pick(kind) for kind in self._deques})

    def of_kind(self, kind: str) -> tuple:
        """What `window().of(kind)` holds, without the other kinds' copies (serve's exported signals read only the
        scrapes, of every target at every export)."""
        return tuple(self._ordered(kind))

    def newest(self, kind: str, since: float | None = None) -> Sample | None:
        """The newest sample of `kind` (at or after `since`), as `window(since)` ends with it; None: none."""
        items = self._ordered(kind)
        if not items or (since is not None and items[-1].t < since):
            return None
        return items[-1]

    def _ordered(self, kind: str) -> deque:
        items = self._deques[kind]
        if kind in self._unordered:
            # Sorted like Window.from_samples, so a window rebuilt from stored samples is identical.
            items = deque(sorted(items, key=lambda s: s.t), maxlen=items.maxlen)
            self._deques[kind] = items
            self._unordered.discard(kind)
        return items


def _since(items: deque, since: float) -> tuple:
    """The samples at or after `since` (the oldest is before it), in order: counted from the newer end while they are
    few (a probe's check reads the last seconds of a 600 s history every second: a bisection touches samples across
    the whole ring, and islice walks every one it skips), else bisected."""
    kept = 0
    for sample in reversed(items):
        if sample.t < since:
            newest = list(islice(reversed(items), kept))
            newest.reverse()
            return tuple(newest)
        kept += 1
        if kept == _FROM_NEWEST:
            break
    return tuple(islice(items, bisect_left(items, since, key=_time), None))


_FROM_NEWEST = 32      # at most this many counted from the newer end


def _pack(sample: MetricsSample) -> None:
    """A scrape's histograms held packed while the ring keeps it (engine.state.PackedHistograms: the same
    Histograms when read, in half the memory): the ring holds its history's scrapes, most of a target's memory."""
    for state in sample.engines:
        histograms = state.histograms
        if type(histograms) is dict and histograms:
            state.histograms = pack_histograms(histograms)
