"""A window's scrapes split per engine, and the per-scrape columns the detectors read, computed once.

The recorder judges a window that differs from the one it judged before by a scrape or two: the split
and the columns of the previous window are carried over where the two windows hold the very same
sample objects, and only the new scrapes are read. Everything here is a function of the samples alone
(the same window gives the same split and columns however it was reached); samples in a window are
never changed, which is what makes carrying them over exact.

A column is carried in place: the later window's track takes the earlier one's list, drops its first values and
appends the new scrapes' (the earlier track gives it up: asked again, it reads its own points afresh). Copying
it touched every object of the lookback twice a judgement (a reference taken by the copy, one let go by the
old list), which at a thousand targets misses the cache on each. So a list `Track.column` returns is its
track's until a later window's track carries it: read it within the judgement that asked for it. Only the
main thread (the event loop's, which judges) carries windows over; another thread (an on-demand bundle judged
in a worker) splits its window afresh and never shares a list with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import is_, lt
from threading import get_ident, main_thread

from servewatch.engine.state import EngineState
from servewatch.timeline.samples import MetricsSample

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


# --- columns ------------------------------------------------------------------------------------------

def _counter(name: str) -> Callable[[list[Point], object], list]:
    return lambda points, _: [getattr(state.counters, name) for _, state in points]


# name → (points, argument) → one value per point
COLUMNS: dict[str, Callable[[list[Point], object], list]] = {
    "times": lambda points, _: [sample.t for sample, _ in points],
    "states": lambda points, _: [state for _, state in points],
    "counters": lambda points, _: [state.counters for _, state in points],
    "waiting": lambda points, _: [state.waiting for _, state in points],
    "kv_usage": lambda points, _: [state.kv_usage for _, state in points],
    "steps": _counter("steps"),
    "generation_tokens": _counter("generation_tokens"),
    "prompt_tokens": _counter("prompt_tokens"),
    "preemptions": _counter("preemptions"),
    "request_bytes": _counter("request_bytes"),
    "request_bytes_count": _counter("request_bytes_count"),
    "answered": _counter("answered"),
    "progress": lambda points, _: [state.counters.progress() for _, state in points],
    "responses": lambda points, key: [state.counters.responses.get(key, 0.0) for _, state in points],
    "finished": lambda points, reason: [state.counters.finished.get(reason) for _, state in points],
}
COUNTERS = ("steps", "generation_tokens", "prompt_tokens", "preemptions")


class Track:
    """One engine's good scrapes over a window (read-only, like its points) and their columns."""

    def __init__(self, points: list[Point], prior: tuple[Track, int] | None = None):
        self.points = points
        self._columns: dict[tuple[str, object], list] = {}
        self._drops: list[tuple[int, int]] | None = None
        # (the previous window's track of this engine, how many of its first points this one lacks)
        self._prior = prior

    def column(self, name: str, argument: object = None) -> list:
        """COLUMNS[name] of every point, computed once (from the previous window's where it has it)."""
        key = (name, argument)
        found = self._columns.get(key)
        if found is None:
            prior = self._prior
            found = prior[0]._columns.pop(key, None) if prior is not None else None   # taken: it is this one's now
            if found is None:
                found = COLUMNS[name](self.points, argument)
            else:
                del found[:prior[1]]                      # in place (the module's docstring says why)
                found += COLUMNS[name](self.points[len(found):], argument)
            self._columns[key] = found
        return found

    @property
    def times(self) -> list[float]:
        return self.column("times")

    @property
    def states(self) -> list[EngineState]:
        return self.column("states")

    @property
    def progress(self) -> list[tuple[float | None, float | None, float | None]]:
        """`series.progress(state)` of every point."""
        return self.column("progress")

    @property
    def counter_columns(self) -> tuple[list, ...]:
        """The COUNTERS, one column each (None where not exported)."""
        return tuple(self.column(name) for name in COUNTERS)

    @property
    def counter_drops(self) -> list[tuple[int, int]]:
        """(i, c) for each pair of consecutive points (i - 1, i) where a counter went down (c: its index
        in COUNTERS), the first such counter of the pair only."""
        if self._drops is None:
            prior = self._prior
            earlier = prior[0]._drops if prior is not None else None
            if earlier is None:
                self._drops = _drops(self.counter_columns, 1)
            else:
                dropped, kept = prior[1], len(prior[0].points) - prior[1]
                self._drops = ([(i - dropped, c) for i, c in earlier if i - dropped >= 1]
                               + _drops(self.counter_columns, max(kept, 1)))
        return self._drops


def _drops(columns: tuple[list, ...], start: int) -> list[tuple[int, int]]:
    """counter_drops among the pairs (i - 1, i) for i from `start` on."""
    if not any(_may_drop(column[start - 1:]) for column in columns):
        return []
    drops = []
    for i in range(start, len(columns[0])):
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


# --- the split, carried from window to window ---------------------------------------------------------

class _Split:
    def __init__(self, samples: tuple[MetricsSample, ...], series: dict[str, list[Point]],
                 prior: tuple[_Split, dict[str, int]] | None = None):
        self.samples = samples     # holding the tuple keeps its identity from being reused
        self.series = series
        self.tracks: dict[str, Track] | None = None
        self.prior = prior         # (the previous window's split, points it had per engine that this lacks)

    def make_tracks(self) -> dict[str, Track]:
        if self.tracks is None:
            earlier = self.prior[0].tracks if self.prior is not None else None
            made = {}
            for key, points in self.series.items():
                before = earlier.get(key) if earlier is not None else None
                if before is not None:
                    before._prior = None        # a chain of two, never longer
                made[key] = Track(points, (before, self.prior[1].get(key, 0)) if before is not None else None)
            self.tracks, self.prior = made, None
        return self.tracks


_last: _Split | None = None                # the window being judged: its detectors share one split
_CHAINS: dict[int, _Split] = {}           # id(newest sample) → split, for the next window to carry over
_CHAINS_KEPT = 8192                        # targets whose windows are carried over (more are split afresh)
_NEW_AT_MOST = 4                           # a window that added more scrapes than this is split afresh
_CARRIER = main_thread().ident             # the thread that carries windows over (the module's docstring)


def engine_series(samples: Iterable[MetricsSample]) -> dict[str, list[Point]]:
    """Good scrapes split per engine, in time order. Callers must not mutate the result."""
    found = _last
    if found is not None and found.samples is samples:
        return found.series
    return _split(samples)


def tracks(samples: tuple[MetricsSample, ...]) -> dict[str, Track]:
    """`engine_series` as Tracks, shared by the detectors of one run."""
    return _cached(samples).make_tracks()


def _cached(samples: tuple[MetricsSample, ...]) -> _Split:
    global _last
    if get_ident() != _CARRIER:
        return _Split(samples, _split(samples))     # not the judging thread's: nothing shared, nothing kept
    found = _last
    if found is not None and found.samples is samples:
        return found
    found = _carried_over(samples) or _Split(samples, _split(samples))
    if samples:
        if len(_CHAINS) >= _CHAINS_KEPT:
            _CHAINS.pop(next(iter(_CHAINS)), None)
        _CHAINS[id(samples[-1])] = found
    _last = found
    return found


def _carried_over(samples: tuple[MetricsSample, ...]) -> _Split | None:
    """The split of `samples` from a remembered window that holds the same samples up to a newest one of
    `samples`, less some of its oldest; None when there is none."""
    n = len(samples)
    for end in range(n - 1, max(n - 2 - _NEW_AT_MOST, -1), -1):
        earlier = _CHAINS.get(id(samples[end]))
        if earlier is not None and earlier.samples and earlier.samples[-1] is samples[end]:
            break
    else:
        return None
    before = earlier.samples
    head = next((i for i in range(min(len(before), _NEW_AT_MOST + 1)) if before[i] is samples[0]), None)
    if head is None or len(before) - head != end + 1 or not all(map(is_, before[head:], samples[:end + 1])):
        return None
    _CHAINS.pop(id(before[-1]), None)
    earlier.prior = None                                  # a chain of two, never longer
    gone = _split(before[:head]) if head else {}       # the first points of each engine's series
    added = _split(samples[end + 1:])
    series: dict[str, list[Point]] = {}
    dropped: dict[str, int] = {}
    for key, points in earlier.series.items():
        lost = len(gone.get(key, ()))
        kept = points[lost:] + added.pop(key, []) if lost or key in added else points
        if kept:
            series[key] = kept
            dropped[key] = lost
    series.update(added)
    if len(series) > 1:
        series = {key: series[key] for key in _first_seen(samples, series)}
    return _Split(samples, series, (earlier, dropped))


def _first_seen(samples: tuple[MetricsSample, ...], keys) -> list[str]:
    """The keys in the order a split of `samples` meets them."""
    order: list[str] = []
    wanted = len(keys)
    for sample in samples:
        if sample.error is None:
            for key, _ in _keyed(sample):
                if key not in order:
                    order.append(key)
            if len(order) == wanted:
                break
    return order


def _keyed(sample: MetricsSample) -> list[Point]:
    """(engine key, state) for each engine of a good scrape; engines that differ only by model name are
    kept apart ("key#2"), in scrape order."""
    seen: dict[str, int] = {}
    out = []
    for state in sample.engines:
        key = engine_key(state.labels)
        n = seen[key] = seen.get(key, 0) + 1
        out.append((f"{key}#{n}" if n > 1 else key, state))
    return out


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
        for key, state in _keyed(sample):
            out.setdefault(key, []).append((sample, state))
    return out
