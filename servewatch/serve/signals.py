"""The derived signals `serve` exports for a target, computed from its window (pure): how long since
the engine last made progress, throughput, KV, queue and preemption figures. Engines of one target are
summed (KV is averaged), so every signal is one number per target."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, is_

from servewatch.detectors.series import generated_total, progress_totals
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

RATE_SPAN_S = 10.0        # rates are taken over (about) the newest 10 s of good scrapes
_time = attrgetter("t")


@dataclass(frozen=True)
class Signals:
    seconds_since_progress: float | None = None   # since any progress counter (steps, tokens) last moved
    tokens_per_s: float | None = None             # generation tokens
    steps_per_s: float | None = None
    preemptions_per_s: float | None = None
    kv_usage_mean: float | None = None            # over the window, 0..1
    waiting: float | None = None
    running_over_slot_limit: float | None = None  # running / slot limit (1.0 = every slot taken)
    queue_wait_mean_s: float | None = None        # mean time in queue of the requests the window saw


def _total(sample: MetricsSample, read) -> float | None:
    values = [read(state) for state in sample.engines]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _progress(sample: MetricsSample) -> tuple:
    return progress_totals(sample.engines)


def _rate(good: list[MetricsSample], total) -> float | None:
    """The per-second rate of `total(sample)` over the newest RATE_SPAN_S of good scrapes."""
    newest = good[-1]
    if len(good) < 2:
        return None
    at = len(good) - 2          # the oldest good scrape within RATE_SPAN_S of the newest, else the one before it
    while at > 0 and newest.t - good[at - 1].t <= RATE_SPAN_S:
        at -= 1
    first = good[at]
    a, b = total(first), total(newest)
    span = newest.t - first.t
    if a is None or b is None or span <= 0 or b < a:     # b < a: a counter reset (restart)
        return None
    return (b - a) / span


class Columns:
    """Which scrapes of a target's window are good, and each one's KV mean, carried from one export's window to
    the next: the ring's window differs from the last by a few scrapes at either end (a full 600 s history holds
    300 scrapes, and reading each again cost 180 us a target an export), so only the scrapes new since are read.
    The same lists, in the same order, as reading the whole window: the signals are the same floats."""

    def __init__(self) -> None:
        self.metrics: tuple[MetricsSample, ...] = ()
        self.good: list[bool] = []           # per scrape of `metrics`: answered and understood
        self.kv: list[float | None] = []     # per scrape: its engines' mean KV use (None where none says it)
        self.has_kv: list[bool] = []         # per scrape: kv is not None

    def update(self, metrics: tuple[MetricsSample, ...]) -> None:
        start = _carried(self.metrics, metrics)
        if start is None:
            self.good, self.kv, self.has_kv, kept = [], [], [], 0
        else:
            kept = len(self.metrics) - start
            del self.good[:start], self.kv[:start], self.has_kv[:start]
        for sample in metrics[kept:]:
            good = sample.error is None and bool(sample.engines)
            kv = _mean([e.kv_usage for e in sample.engines]) if good else None
            self.good.append(good)
            self.kv.append(kv)
            self.has_kv.append(kv is not None)
        self.metrics = metrics

    def good_scrapes(self) -> list[MetricsSample]:
        return list(compress(self.metrics, self.good))

    def kv_means(self) -> list[float]:
        return list(compress(self.kv, self.has_kv))


def _carried(before: tuple, now: tuple) -> int | None:
    """How many of `before`'s oldest samples `now` lacks, where `now` holds the rest of `before` (the very same
    objects) followed by newer ones; None when it does not."""
    if not before or not now:
        return None
    start = bisect_left(before, now[0].t, key=_time)
    while start < len(before) and before[start] is not now[0] and before[start].t == now[0].t:
        start += 1
    kept = len(before) - start
    if kept == 0 or kept > len(now) or not all(map(is_, before[start:], now)):
        return None
    return start


def signals(window: Window, now: float, columns: Columns | None = None) -> Signals:
    """`columns`: the target's, carried from its last export (None: read the whole window)."""
    columns = columns if columns is not None else Columns()
    columns.update(window.metrics)
    good = columns.good_scrapes()
    if not good:
        return Signals()
    last_move = good[0].t
    after = _progress(good[-1])
    for i in range(len(good) - 1, 0, -1):        # from the newest back to the last movement
        before = _progress(good[i - 1])
        if before != after:
            last_move = good[i].t
            break
        after = before
    newest = good[-1]
    kv = columns.kv_means()
    running, slots = _total(newest, lambda s: s.running), _total(newest, lambda s: s.slot_limit)
    return Signals(
        seconds_since_progress=max(0.0, now - last_move),
        tokens_per_s=_rate(good, lambda m: generated_total(m.engines)),
        steps_per_s=_rate(good, lambda m: _total(m, lambda s: s.counters.steps)),
        preemptions_per_s=_rate(good, lambda m: _total(m, lambda s: s.counters.preemptions)),
        kv_usage_mean=sum(kv) / len(kv) if kv else None,
        waiting=_total(newest, lambda s: s.waiting),
        running_over_slot_limit=running / slots if running is not None and slots else None,
        queue_wait_mean_s=_queue_wait(good[0], newest),
    )


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _queue_wait(first: MetricsSample, newest: MetricsSample) -> float | None:
    def totals(sample):
        hists = [s.histograms.get("queue") for s in sample.engines]
        hists = [h for h in hists if h is not None]
        return (sum(h.sum for h in hists), sum(h.count for h in hists)) if hists else None
    a, b = totals(first), totals(newest)
    if a is None or b is None or b[1] <= a[1] or b[0] < a[0]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1])
