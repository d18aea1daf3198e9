"""Histogram bucket edges placed around derived latencies (each dialect states the flags that install them,
`Dialect.bucket_args`).

A classic histogram forgets where inside a bucket an observation fell, and histogram_quantile
interpolates from 0 in the first bucket. So the lowest edge must sit below the fastest healthy value
(the decode floor), the edges must be dense where healthy values live, and every SLO threshold must be
an edge (otherwise "fraction under the SLO" is itself an interpolation).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from decimal import Decimal

# Mantissas per decade, densest first; the densest one that keeps a range within its edge budget wins.
FINE_SERIES = ((1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8), (1, 1.5, 2, 3, 4, 6, 8), (1, 2, 3, 5), (1, 2, 5), (1, 3), (1,))
COARSE_SERIES = (1, 2, 5)
MAX_FINE_EDGES = 12


@dataclass(frozen=True, slots=True)
class EdgePlan:
    kind: str                      # "itl" | "ttft" | "e2e"
    edges: tuple[float, ...]
    dense_from: float              # the fine section's range
    dense_to: float
    ceiling: float
    slo: float | None
    reason: str                    # what the anchors were, in words

    def as_json(self) -> dict:
        return {"kind": self.kind, "edges": list(self.edges), "dense_from_s": self.dense_from,
                "dense_to_s": self.dense_to, "ceiling_s": self.ceiling, "slo_s": self.slo, "reason": self.reason}


def nice_values(low: float, high: float, mantissas: tuple[float, ...]) -> list[float]:
    """Every m x 10^k in [low, high], exactly representable as short decimals (0.003, not 0.0030000001)."""
    if not 0 < low <= high:
        return []
    values = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for mantissa in mantissas:
            value = float(Decimal(str(mantissa)).scaleb(exponent))
            if low <= value <= high:
                values.append(value)
    return sorted(set(values))


def first_nice_at_or_above(value: float, mantissas: tuple[float, ...] = COARSE_SERIES) -> float:
    candidates = nice_values(value, value * 10.0001, mantissas)
    return candidates[0]


def latency_edges(kind: str, lowest: float, dense_from: float, dense_to: float, ceiling: float,
                  slo: float | None, reason: str) -> EdgePlan:
    """1-2-5 edges from `lowest` up to the dense range, dense nice edges over [dense_from, dense_to],
    then 1-2-5 edges up to the first one covering `ceiling`, plus the SLO threshold as an edge."""
    dense_to = max(dense_to, dense_from)
    fine: list[float] = []
    for series in FINE_SERIES:
        fine = nice_values(dense_from, dense_to, series)
        if len(fine) <= MAX_FINE_EDGES:
            break
    if not fine:
        fine = [first_nice_at_or_above(dense_from)]
    below = nice_values(min(lowest, fine[0]), fine[0] / 1.0001, COARSE_SERIES) if lowest < fine[0] else []
    top = max(ceiling, slo or 0.0, fine[-1])
    above = nice_values(fine[-1] * 1.0001, first_nice_at_or_above(top), COARSE_SERIES)
    edges = sorted(set(below + fine + above + ([_short(slo)] if slo else [])))
    return EdgePlan(kind, tuple(edges), dense_from, dense_to, ceiling, slo, reason)


def _short(value: float) -> float:
    return float(f"{value:.6g}")


def command_line(args: list[str]) -> str:
    return " ".join(shlex.quote(arg) for arg in args)
