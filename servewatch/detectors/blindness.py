"""histogram_blind: the window's latency observations all land in the first bucket.

A decode step can be far faster than a histogram's first edge (Llama-3-8B on an H100 streams its
weights in ~4.5 ms, under vLLM's 10 ms first ITL edge): every healthy token lands in bucket one and
histogram_quantile prints ~9.9 ms whatever the truth. Judged on the window's delta (what happened
while we watched), not on the cumulative histogram since process start.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.series import num, tracks, where
from servewatch.detectors.verdict import (FINDING, INFO, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.engine.state import Histogram
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class BlindnessSettings(Settings):
    """histogram_blind's thresholds."""

    # histogram_blind: at least this many observations in the window's histogram delta.
    blind_min_count: float = 100.0
    blind_kinds: tuple[str, ...] = ("itl", "ttft", "tpot")


def detect(window: Window, config: Thresholds) -> list[Verdict]:
    from servewatch.engine.histogram import delta
    from servewatch.engine.summary import summarize

    verdicts = []
    for key, track in sorted(tracks(window.metrics).items()):
        states = track.states
        for kind in config.blind_kinds:
            first = next((i for i, state in enumerate(states) if kind in state.histograms), None)
            if first is None:
                continue
            last = next(i for i in range(len(states) - 1, first - 1, -1) if kind in states[i].histograms)
            if last == first:
                continue
            (old_sample, old), (new_sample, new) = track.points[first], track.points[last]
            if _surely_not_blind(new.histograms[kind], old.histograms[kind], config.blind_min_count):
                continue
            diff = delta(new.histograms[kind], old.histograms[kind])
            if diff is None or diff.count < config.blind_min_count or not diff.sum > 0:
                continue     # too few, or every observation exactly 0: no latency to resolve (below)
            summary = summarize(kind, diff)
            if not summary.blind:
                continue
            why = (f"{summary.finding()}{where(key)} — over {new_sample.t - old_sample.t:.0f} s, "
                   f"{num(diff.count)} observations")
            evidence = (Evidence("metrics", old_sample.t, f"histograms.{kind}.count", old.histograms[kind].count),
                        Evidence("metrics", new_sample.t, f"histograms.{kind}.count", new.histograms[kind].count),
                        Evidence("metrics", new_sample.t, f"histograms.{kind}.cumulative[0]",
                                 new.histograms[kind].cumulative[0] if new.histograms[kind].cumulative else None))
            verdicts.append(Verdict("histogram_blind", new_sample.t, old_sample.t, why, evidence,
                                    {"engine": key, "histogram": kind, "count": diff.count,
                                     "first_bucket_fraction": summary.first_bucket_fraction,
                                     "first_bucket_le": summary.first_bucket_le, "mean_s": summary.mean_s,
                                     "p50_s": summary.p50_s, "p99_s": summary.p99_s}))
    return verdicts


# vLLM 0.32 observes a request's time per output token as exactly 0 when it made one token (v1/metrics/stats.py:608,
# loggers.py:1324): every request of a disaggregated pair's prefill, sent with max_tokens 1. Such a histogram's
# observations all sit in its first bucket, and it is not blind: there is no latency in it to resolve, so a
# window whose observations sum to 0 is not judged.


def _surely_not_blind(new: Histogram, old: Histogram, min_count: float) -> bool:
    """What the delta and its summary would conclude, from the first bucket alone, when that is "not
    blind": too few observations, other bucket edges, or a first-bucket share under BLIND_FRACTION
    (computed with the very operations the delta and the summary use)."""
    from servewatch.engine.histogram import BLIND_FRACTION

    count = new.count - old.count
    if count < min_count or new.edges != old.edges:
        return True
    if not new.edges or not count > 0:
        return False     # let the delta and the summary say
    return (new.cumulative[0] - old.cumulative[0]) / count < BLIND_FRACTION


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

HISTOGRAM_BLIND = RunbookBranch(
    meaning="A latency histogram's buckets cannot resolve the latencies observed: almost every observation "
            "sits in one bucket, so a quantile reads a bucket edge, not a measurement.",
    check_next=(
        "Which histogram, and the share of observations in its first (or last finite) bucket.",
        "Measure the same latency another way: client-side per-request timings from the load "
        "generator or the application's own logs.",
    ),
    expected_range="Observations spread over several buckets. Real vLLM CPU: 23,955 of 23,984 ITL "
                   "observations in the first bucket (le=0.01), so histogram_quantile(0.99) reads ~9.9 ms "
                   "whatever the true latency.",
    safe_action="No action on the server. Do not alert on that quantile; use client-side measurements.",
    rollback="Nothing to roll back: this branch is read-only.",
    restart_destroys="A restart changes nothing about bucket layout; it only resets the counters.",
)

SETTINGS = (BlindnessSettings,)
SPECS = (
    VerdictSpec("histogram_blind", detect, FINDING, "info",
                "a latency histogram's first bucket swallows the observations", HISTOGRAM_BLIND,
                ("metrics",), labels=("engine", "histogram"), action=INFO),
)
