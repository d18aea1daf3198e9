"""The derived signals `serve` exports for a target, computed from its window (pure): how long since
the engine last made progress, throughput, KV, queue and preemption figures. Engines of one target are
summed (KV is averaged), so every signal is one number per target."""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.series import generated_total, progress_totals
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

RATE_SPAN_S = 10.0        # rates are taken over (about) the newest 10 s of good scrapes


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


def signals(window: Window, now: float) -> Signals:
    good = [s for s in window.metrics if s.error is None and s.engines]
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
    kv = [v for v in (_mean([e.kv_usage for e in s.engines]) for s in good) if v is not None]
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
