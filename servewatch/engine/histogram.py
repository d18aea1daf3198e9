"""Histogram truth: Prometheus's histogram_quantile, the honest mean, scrape deltas and blindness.

`histogram_quantile` follows Prometheus's bucketQuantile (promql/quantile.go) step by step, including its
precision and monotonicity fixes, so the numbers equal what a Grafana panel over the same buckets shows.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from servewatch.interning import Interner
from servewatch.engine.state import Histogram
from servewatch.exposition.model import Sample

LabelKey = tuple[tuple[str, str], ...]

_PRECISION_TOLERANCE = 1e-12   # Prometheus's correctPrecisionErrors tolerance


def label_key(labels: Mapping[str, str], drop: str = "le") -> LabelKey:
    """A hashable, order-free identity for a label set, without `drop`."""
    items = [item for item in labels.items() if item[0] != drop] if drop in labels else list(labels.items())
    items.sort()
    return tuple(items)


def histograms_by_labels(samples: Iterable[Sample], base_name: str) -> dict[LabelKey, Histogram]:
    """One Histogram per label set (minus `le`) from `<base>_bucket/_sum/_count` samples.

    Buckets are sorted by `le`; buckets with an equal bound are added together (as Prometheus coalesces
    them); the count is the +Inf bucket, or `_count` when the +Inf bucket is missing. A missing `_sum`
    gives a NaN sum. Label sets with no bucket are left out.
    """
    samples = list(samples)
    return apply_plan(histogram_plan(samples, base_name), [sample.value for sample in samples])


# Which samples make each histogram, by index: (identity, edges, for each edge / for the count / for the
# sum: one tuple of sample indexes per label set added into it). A family read through one scrape layout
# has the same plan at every scrape; only the values change.
Indexes = tuple[tuple[int, ...], ...]
Plan = tuple[tuple[Hashable, tuple[float, ...], tuple[Indexes, ...], Indexes, Indexes | None], ...]


def histogram_plan(samples: Sequence[Sample], base_name: str,
                   identity: Callable[[LabelKey], Hashable] | None = None) -> Plan:
    """The plan of histograms_by_labels; with `identity`, label sets of one identity are added together
    (those with other bucket edges than the identity's first are left out)."""
    bucket_name, sum_name, count_name = base_name + "_bucket", base_name + "_sum", base_name + "_count"
    buckets: dict[LabelKey, dict[float, list[int]]] = {}
    sums: dict[LabelKey, int] = {}
    counts: dict[LabelKey, int] = {}
    last_rest, last_by_bound = None, None   # consecutive buckets of one label set share their labels
    for index, sample in enumerate(samples):
        if sample.name == bucket_name:
            labels = sample.labels
            bound = labels.get("le")
            if bound is None:
                continue
            try:
                upper = float(bound)
            except ValueError:
                continue
            rest = dict(labels)
            del rest["le"]
            if rest != last_rest:
                last_rest = rest
                last_by_bound = buckets.setdefault(label_key(labels), {})
            last_by_bound.setdefault(upper, []).append(index)
        elif sample.name == sum_name:
            sums[label_key(sample.labels)] = index
        elif sample.name == count_name:
            counts[label_key(sample.labels)] = index
    merged: dict[Hashable, tuple] = {}
    for key, by_bound in buckets.items():
        edges = shared_edges(tuple(sorted(bound for bound in by_bound if bound != math.inf)))
        if math.inf in by_bound:
            count = tuple(by_bound[math.inf])
        elif key in counts:
            count = (counts[key],)
        else:
            count = tuple(by_bound[edges[-1]]) if edges else ()
        total = (sums[key],) if key in sums else None
        into = key if identity is None else identity(key)
        seen = merged.get(into)
        if seen is None:
            merged[into] = (edges, [[tuple(by_bound[e])] for e in edges], [count], [total])
        elif seen[0] == edges:
            for per_edge, edge in zip(seen[1], edges):
                per_edge.append(tuple(by_bound[edge]))
            seen[2].append(count)
            seen[3].append(total)
    return tuple((into, edges, tuple(map(tuple, per_edge)), tuple(count),
                  None if any(t is None for t in total) else tuple(total))
                 for into, (edges, per_edge, count, total) in merged.items())


def apply_plan(plan: Plan, values: Sequence[float]) -> dict:
    """The histograms a plan makes of one scrape's sample values."""
    return {into: Histogram(edges=edges, cumulative=array("d", [_added(groups, values) for groups in per_edge]),
                            count=_added(count, values),
                            sum=_added(total, values) if total is not None else math.nan)
            for into, edges, per_edge, count, total in plan}


def compile_plan(plan: Plan) -> tuple:
    """`plan` for applying at every scrape of one layout (`apply_compiled`): a histogram each of whose buckets is
    one sample (one label set per identity: the usual case) reads its buckets with one C-level getter, not a
    Python call per bucket."""
    out = []
    for into, edges, per_edge, count, total in plan:
        getter = None
        if len(per_edge) > 1 and all(len(groups) == 1 and len(groups[0]) == 1 for groups in per_edge):
            getter = itemgetter(*(groups[0][0] for groups in per_edge))
        out.append((into, edges, per_edge, count, total, getter))
    return tuple(out)


def apply_compiled(compiled: tuple, values: Sequence[float]) -> dict:
    """`apply_plan` of a compiled plan: the same histograms."""
    out = {}
    for into, edges, per_edge, count, total, getter in compiled:
        cumulative = (array("d", getter(values)) if getter is not None
                      else array("d", [_added(groups, values) for groups in per_edge]))
        out[into] = Histogram(edges=edges, cumulative=cumulative, count=_added(count, values),
                              sum=_added(total, values) if total is not None else math.nan)
    return out


def _added(groups: Indexes, values: Sequence[float]) -> float:
    """Each label set's samples added in order, then the label sets in order."""
    total = None
    for group in groups:
        part = 0.0
        for index in group:
            part += values[index]
        total = part if total is None else total + part
    return total


_EDGES: Interner[tuple[float, ...]] = Interner(kept=1024)


def shared_edges(edges: tuple[float, ...]) -> tuple[float, ...]:
    """One tuple object for equal bucket edges: a recorder holds hundreds of scrapes of the same
    histograms, whose edges never change."""
    return _EDGES.get(edges, edges)


def histogram_from_samples(samples: Iterable[Sample], base_name: str,
                           labels: Mapping[str, str] | None = None) -> Histogram | None:
    """The histogram of one label set (`labels`, without `le`), or of the only label set when None.

    None when that label set has no bucket. Raises ValueError when `labels` is None and the samples hold
    several label sets (pick one with `labels`, or use histograms_by_labels).
    """
    found = histograms_by_labels(samples, base_name)
    if labels is not None:
        return found.get(label_key(labels))
    if len(found) > 1:
        raise ValueError(f"{base_name} has {len(found)} label sets; say which one")
    return next(iter(found.values()), None)


def histogram_quantile(q: float, h: Histogram) -> float:
    """The φ-quantile exactly as PromQL's histogram_quantile computes it over classic buckets."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    pairs = sorted(zip((*h.edges, math.inf), (*h.cumulative, h.count)), key=lambda pair: pair[0])
    if pairs[-1][0] != math.inf:   # unreachable with a Histogram (count is the +Inf bucket); kept for parity
        return math.nan
    bounds, counts = _coalesce(pairs)
    _correct_precision_errors(counts)
    _ensure_monotonic(counts)
    if len(bounds) < 2:
        return math.nan
    observations = counts[-1]
    if observations == 0:
        return math.nan
    rank = q * observations
    last = len(bounds) - 1
    index = next((i for i in range(last) if counts[i] >= rank), last)
    if index == last:
        return bounds[last - 1]
    if index == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, in_bucket = 0.0, bounds[index], counts[index]
    if index > 0:
        start = bounds[index - 1]
        in_bucket -= counts[index - 1]
        rank -= counts[index - 1]
    return start + (end - start) * _ieee_divide(rank, in_bucket)


def _coalesce(pairs: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    bounds: list[float] = []
    counts: list[float] = []
    for bound, count in pairs:
        if bounds and bounds[-1] == bound:
            counts[-1] += count
        else:
            bounds.append(bound)
            counts.append(count)
    return bounds, counts


def _correct_precision_errors(counts: list[float]) -> None:
    """Counts within a relative 1e-12 of the previous one are float noise: flatten them to it."""
    previous = counts[0]
    for i in range(1, len(counts)):
        current = counts[i]
        difference = abs(current - previous)
        if difference == 0:
            continue
        if _ieee_divide(difference, current) <= _PRECISION_TOLERANCE:
            counts[i] = previous
        else:
            previous = current


def _ensure_monotonic(counts: list[float]) -> None:
    """Cumulative counts never decrease: raise any dip to the running maximum (Prometheus's envelope)."""
    highest = counts[0]
    for i in range(1, len(counts)):
        if counts[i] > highest:
            highest = counts[i]
        elif counts[i] < highest:
            counts[i] = highest


def _ieee_divide(numerator: float, denominator: float) -> float:
    """Division with IEEE 754 results for a zero denominator (as Go computes it) instead of an exception."""
    if denominator != 0:
        return numerator / denominator
    if numerator == 0 or math.isnan(numerator):
        return math.nan
    return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)


def mean(h: Histogram) -> float | None:
    """The honest mean, sum / count; None when there is no observation."""
    if not h.count > 0:
        return None
    return h.sum / h.count


def delta(new: Histogram, old: Histogram) -> Histogram | None:
    """The observations made between two scrapes; None on a reset (a count or bucket went down) or
    when the bucket edges changed. Never subtracts across a reset."""
    if new.edges != old.edges or new.count < old.count:
        return None
    if any(after < before for after, before in zip(new.cumulative, old.cumulative)):
        return None
    return Histogram(
        edges=new.edges,
        cumulative=array("d", [after - before for after, before in zip(new.cumulative, old.cumulative)]),
        count=new.count - old.count,
        sum=new.sum - old.sum,
    )


def counter_delta(new: float | None, old: float | None) -> float | None:
    """The increase of a counter between two scrapes; None on a reset (it went down) or when unknown."""
    if new is None or old is None or math.isnan(new) or math.isnan(old) or new < old:
        return None
    return new - old


# The share of a histogram's observations in its first bucket from which its quantiles are blind (at or over
# it: histogram_quantile prints the first edge's neighbourhood whatever the truth). The one place it is written:
# the summaries, the histogram_blind detector and advise's ITL check read it from here.
BLIND_FRACTION = 0.99


@dataclass(frozen=True, slots=True)
class BlindnessFinding:
    """How much of a histogram sits in its first bucket, and what the quantile panels print because of it."""

    first_bucket_upper: float
    first_bucket_fraction: float
    count: float
    mean: float | None          # honest, from _sum/_count
    p50: float                  # what histogram_quantile(0.5, ...) prints
    p99: float                  # what histogram_quantile(0.99, ...) prints
    blind: bool                 # first_bucket_fraction >= threshold (with at least one observation)


def blindness(h: Histogram, threshold: float = BLIND_FRACTION) -> BlindnessFinding | None:
    """The first-bucket share of a histogram (or of a scrape delta); None without finite buckets or
    without observations."""
    if not h.edges or not h.count > 0:
        return None
    fraction = h.cumulative[0] / h.count
    return BlindnessFinding(
        first_bucket_upper=h.edges[0],
        first_bucket_fraction=fraction,
        count=h.count,
        mean=mean(h),
        p50=histogram_quantile(0.5, h),
        p99=histogram_quantile(0.99, h),
        blind=fraction >= threshold,
    )
