"""Timeline series for charts and summaries, derived from samples: pure functions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from servewatch.timeline.samples import HealthSample, MetricsSample, Sample

Point = tuple[float, float | None]

SERIES = ("health", "running", "waiting", "kv_pct", "progress_rate")
LABELS = {
    "health": "health (1 = 2xx)",
    "running": "running",
    "waiting": "waiting",
    "kv_pct": "KV cache %",
    "progress_rate": "generated tokens/s",
}


@dataclass(frozen=True)
class Marker:
    """A verdict drawn on a timeline: a band from onset to t, labelled."""

    t: float
    onset: float
    label: str


def _total(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def timeline_series(samples: Sequence[Sample]) -> dict[str, list[Point]]:
    """health (1/0), running and waiting (summed over engines), KV % (max over engines), and the generation
    token rate between consecutive scrapes (None across a counter reset or a failed scrape)."""
    out: dict[str, list[Point]] = {name: [] for name in SERIES}
    previous: tuple[float, float] | None = None
    for s in samples:
        if isinstance(s, HealthSample):
            out["health"].append((s.t, 1.0 if s.ok else 0.0))
        elif isinstance(s, MetricsSample):
            if s.error is not None or not s.engines:
                for name in ("running", "waiting", "kv_pct", "progress_rate"):
                    out[name].append((s.t, None))
                previous = None
                continue
            out["running"].append((s.t, _total(e.running for e in s.engines)))
            out["waiting"].append((s.t, _total(e.waiting for e in s.engines)))
            kv = [e.kv_usage for e in s.engines if e.kv_usage is not None]
            out["kv_pct"].append((s.t, 100.0 * max(kv) if kv else None))
            tokens = _total(e.counters.generation_tokens for e in s.engines)
            rate = None
            if tokens is not None and previous is not None and s.t > previous[0] and tokens >= previous[1]:
                rate = (tokens - previous[1]) / (s.t - previous[0])
            out["progress_rate"].append((s.t, rate))
            previous = (s.t, tokens) if tokens is not None else None
    return out
