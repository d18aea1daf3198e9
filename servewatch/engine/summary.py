"""A histogram reduced to the numbers people look at, with the blindness caveat attached."""

from __future__ import annotations

import math
from dataclasses import dataclass

from servewatch.engine.histogram import BLIND_FRACTION, blindness, histogram_quantile, mean
from servewatch.engine.state import Histogram

LABELS = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2e": "E2E", "queue": "queue time",
          "prefill": "prefill time", "decode": "decode time"}


@dataclass(frozen=True, slots=True)
class HistogramSummary:
    kind: str
    count: float
    mean_s: float | None
    p50_s: float | None
    p99_s: float | None
    first_bucket_le: float | None
    first_bucket_fraction: float | None
    blind: bool

    def as_json(self) -> dict:
        return {"count": self.count, "mean_s": self.mean_s, "p50_s": self.p50_s, "p99_s": self.p99_s,
                "first_bucket_le": self.first_bucket_le, "first_bucket_fraction": self.first_bucket_fraction,
                "blind": self.blind}

    def finding(self) -> str | None:
        """One line saying why the quantile panel lies, or None when it does not."""
        if not self.blind:
            return None
        return (f"{LABELS.get(self.kind, self.kind)}: {self.first_bucket_fraction:.2%} of {self.count:,.0f} "
                f"observations fall in the first bucket (≤ {_ms(self.first_bucket_le)}); honest mean "
                f"{_ms(self.mean_s)}; histogram_quantile(0.5) prints {_ms(self.p50_s)} and (0.99) prints "
                f"{_ms(self.p99_s)} whatever the true latency — the bucket edges are too coarse to see it")


def summarize(kind: str, histogram: Histogram) -> HistogramSummary:
    finding = blindness(histogram, BLIND_FRACTION)      # computes both quantiles when there is an observation to rank
    return HistogramSummary(
        kind=kind,
        count=histogram.count,
        mean_s=_finite(mean(histogram)),
        p50_s=_finite(finding.p50 if finding else histogram_quantile(0.5, histogram)),
        p99_s=_finite(finding.p99 if finding else histogram_quantile(0.99, histogram)),
        first_bucket_le=histogram.edges[0] if histogram.edges else None,
        first_bucket_fraction=(histogram.cumulative[0] / histogram.count
                               if histogram.edges and histogram.count > 0 else None),
        blind=bool(finding and finding.blind),
    )


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"
