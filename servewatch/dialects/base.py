"""Helpers shared by the dialects: grouping families into per-engine values."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from servewatch.engine.state import Histogram
from servewatch.exposition.model import Family

Key = tuple[tuple[str, str], ...]


def identity(labels: Mapping[str, str], identity_labels: Iterable[str]) -> Key:
    return tuple((name, labels[name]) for name in identity_labels if name in labels)


def first_family(families: Mapping[str, Family], *names: str) -> Family | None:
    """The first of `names` present (a dialect lists a metric's names across versions, newest first)."""
    for name in names:
        family = families.get(name)
        if family is not None and family.samples:
            return family
    return None


def sum_by(family: Family | None, identity_labels: Iterable[str], *, sample_name: str | None = None,
           label: str | None = None) -> dict[Key, float] | dict[Key, dict[str, float]]:
    """Sum a family's samples per identity; with `label`, per identity and per value of that label."""
    wanted = tuple(identity_labels)
    if family is None:
        return {}
    out: dict = defaultdict(lambda: defaultdict(float)) if label else defaultdict(float)
    for sample in family.samples:
        if sample_name is not None and sample.name != sample_name:
            continue
        if math.isnan(sample.value):
            continue
        key = identity(sample.labels, wanted)
        if label:
            out[key][sample.labels.get(label, "")] += sample.value
        else:
            out[key] += sample.value
    if label:
        return {k: dict(v) for k, v in out.items()}
    return dict(out)


def histograms_by(family: Family | None, identity_labels: Iterable[str]) -> dict[Key, Histogram]:
    """Build one cumulative histogram per identity, summing label sets that differ only in other labels
    (e.g. SGLang's `is_streaming`)."""
    if family is None:
        return {}
    wanted = tuple(identity_labels)
    base = family.name
    buckets: dict[Key, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[Key, float] = defaultdict(float)
    counts: dict[Key, float] = defaultdict(float)
    for sample in family.samples:
        key = identity(sample.labels, wanted)
        suffix = sample.name[len(base):]
        if suffix == "_bucket":
            le = sample.labels.get("le")
            if le is None:
                continue
            buckets[key][float(le)] += sample.value
        elif suffix == "_sum":
            sums[key] += sample.value
        elif suffix == "_count":
            counts[key] += sample.value
    result: dict[Key, Histogram] = {}
    for key, by_edge in buckets.items():
        edges = sorted(e for e in by_edge if not math.isinf(e))
        count = counts.get(key, by_edge.get(math.inf, 0.0))
        result[key] = Histogram(
            edges=tuple(edges),
            cumulative=tuple(by_edge[e] for e in edges),
            count=count,
            sum=sums.get(key, 0.0),
        )
    return result


def counter_names(exposed: str) -> tuple[str, ...]:
    """The family names a counter may be filed under: `x_total` in text 0.0.4, `x` in OpenMetrics."""
    return (exposed, exposed[:-len("_total")]) if exposed.endswith("_total") else (exposed,)


def sum_counter(families: Mapping[str, Family], exposed: str, identity_labels: Iterable[str], *,
                label: str | None = None):
    """`sum_by` over a counter's `_total` samples, whichever format filed them (never its `_created`)."""
    family = first_family(families, *counter_names(exposed))
    return sum_by(family, identity_labels, sample_name=exposed, label=label)


def model_key(key: Key) -> str | None:
    return dict(key).get("model_name")
