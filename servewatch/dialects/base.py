"""Helpers shared by the dialects: grouping families into per-engine values."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from servewatch.engine.histogram import histograms_by_labels
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
    """One cumulative histogram per identity, adding up label sets that differ only in other labels
    (e.g. SGLang's `is_streaming`); label sets with other bucket edges than the first are left out."""
    if family is None:
        return {}
    wanted = tuple(identity_labels)
    merged: dict[Key, Histogram] = {}
    for labels, h in histograms_by_labels(family.samples, family.name).items():
        key = identity(dict(labels), wanted)
        seen = merged.get(key)
        if seen is None:
            merged[key] = h
        elif seen.edges == h.edges:
            merged[key] = Histogram(edges=h.edges, cumulative=tuple(a + b for a, b in zip(seen.cumulative, h.cumulative)),
                                    count=seen.count + h.count, sum=seen.sum + h.sum)
    return merged


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
