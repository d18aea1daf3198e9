"""Metric and label names: validity, family types, and which sample suffixes each family type owns."""

from __future__ import annotations

import re
from functools import lru_cache

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

# The suffixes a sample name may carry on top of its family's name, per family type.
# "" means the sample may carry the family name itself.
SUFFIXES_BY_TYPE: dict[str, frozenset[str]] = {
    "counter": frozenset(("", "_total", "_created")),
    "gauge": frozenset(("",)),
    "histogram": frozenset(("_bucket", "_count", "_sum", "_created")),
    "gaugehistogram": frozenset(("_bucket", "_gcount", "_gsum")),
    "summary": frozenset(("", "_count", "_sum", "_created")),
    "info": frozenset(("_info",)),
    "stateset": frozenset(("",)),
    "unknown": frozenset(("",)),
    "untyped": frozenset(("",)),
}
KNOWN_TYPES = frozenset(SUFFIXES_BY_TYPE)
SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")
_SUFFIX_SET = frozenset(SUFFIXES)


def is_metric_name(name: str) -> bool:
    return METRIC_NAME.fullmatch(name) is not None


def is_label_name(name: str) -> bool:
    return LABEL_NAME.fullmatch(name) is not None


def owning_family(sample_name: str, types: dict[str, str]) -> str | None:
    """The family a sample belongs to among the families declared so far (`types`: name -> type).

    The sample's own name wins; otherwise its name minus a suffix that the base family's type owns.
    None when no declared family owns it (it then starts an untyped family of its own).
    Raises ValueError when a declared family of the same name cannot own a bare sample.
    """
    kind = types.get(sample_name)
    if kind is not None:
        if "" in SUFFIXES_BY_TYPE[kind]:
            return sample_name
        raise ValueError(f"sample {sample_name} has no suffix its {kind} family allows")
    suffix = "_" + sample_name.rpartition("_")[2]   # every known suffix is "_" + one word
    if suffix in _SUFFIX_SET:
        base = sample_name[: -len(suffix)]
        kind = types.get(base)
        if kind is not None and suffix in SUFFIXES_BY_TYPE[kind]:
            return base
    return None


@lru_cache(maxsize=32)
def sample_names_of(families: frozenset[str]) -> frozenset[str]:
    """Every sample name that could belong to one of `families` (the family names plus suffixed names).
    Cached: callers ask for the same families on every scrape."""
    names: set[str] = set()
    for family in families:
        names.add(family)
        names.update(family + suffix for suffix in SUFFIXES)
    return frozenset(names)


@lru_cache(maxsize=32)
def line_prefixes(families: frozenset[str]) -> tuple[int, frozenset[str]]:
    """(width, prefixes): a line can concern `families` only if its first `width` characters are in
    `prefixes` (or it starts with a blank).

    Such lines are the samples that may belong to them, their HELP lines, and the TYPE lines that can
    change which family such a sample belongs to: those of every possible sample name and of each
    family name minus a suffix (an OpenMetrics counter `foo` owns `foo_total`).
    """
    candidates = sample_names_of(families)
    stripped = {family[: -len(suffix)] for family in families for suffix in SUFFIXES if family.endswith(suffix)}
    keys = set(candidates)
    keys.update("# TYPE " + name for name in candidates | stripped)
    keys.update("# HELP " + family for family in families)
    if not keys:
        return 1, frozenset()
    width = min(map(len, keys))
    return width, frozenset(key[:width] for key in keys)
