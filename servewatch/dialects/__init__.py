"""Dialects: one module per engine holds every engine-specific fact, behind the `Dialect` interface
(`dialects/base.py`); all map a scrape to `EngineState`.

`read_scrape(text)` is the one entry point for /metrics: parse only the families the dialects need,
detect the engine and its metric naming from the names, and return one canonical state per engine.
Everything else that needs an engine fact iterates `registered()` or asks `by_name(name)`.

A new engine: a module with a `Dialect` subclass, and one `register(...)` call (here, for a built-in).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from servewatch.dialects.base import Dialect
from servewatch.engine.state import EngineState
from servewatch.exposition.model import Family

_REGISTRY: dict[str, Dialect] = {}
_wanted: frozenset[str] | None = None


def register(dialect: Dialect) -> Dialect:
    """Add (or replace) an engine; scrapes, logs, process titles and bundles know it from now on."""
    global _wanted
    _REGISTRY[dialect.name] = dialect
    _wanted = None
    grammar_literals.cache_clear()
    identity_labels.cache_clear()
    identity_labels.cache_clear()
    return dialect


def unregister(name: str) -> None:
    global _wanted
    _REGISTRY.pop(name, None)
    _wanted = None
    grammar_literals.cache_clear()
    identity_labels.cache_clear()


def registered() -> tuple[Dialect, ...]:
    return tuple(_REGISTRY.values())


def dp_rank_of(labels) -> str | None:
    """The data-parallel rank a series' labels name, by the label of whichever registered dialect has one."""
    for dialect in registered():
        if dialect.dp_rank_label and labels.get(dialect.dp_rank_label) is not None:
            return labels.get(dialect.dp_rank_label)
    return None


def dp_rank_in_key_words(key: str) -> bool:
    """Whether an engine key ("dp_rank=1,tp_rank=0") is of a dialect whose own words of it say the DP rank."""
    return any(d.dp_rank_in_key_words and f"{d.dp_rank_label}=" in key for d in registered() if d.dp_rank_label)


def by_name(name: str | None) -> Dialect | None:
    return _REGISTRY.get(name) if name else None


@lru_cache(maxsize=1)
def grammar_literals() -> frozenset[str]:
    """The fixed strings of every registered dialect's grammar (cleared when the registry changes); the
    bundle keeps a log field's string only when it is one of these (`servewatch.bundle.serialize`)."""
    return frozenset(literal for dialect in registered() for literal in dialect.grammar_literals())


@lru_cache(maxsize=1)
def identity_labels() -> tuple[str, ...]:
    """Every registered dialect's identity labels, in registration order without repeats: the engine
    labels a bundle keeps and its schemas allow (cleared when the registry changes)."""
    return tuple(dict.fromkeys(label for dialect in registered() for label in dialect.identity_labels))


@dataclass(slots=True)
class Scrape:
    dialect: str | None                 # a registered dialect's name, or None (no known engine families)
    naming: str | None
    engines: list[EngineState] = field(default_factory=list)


def wanted_families() -> frozenset[str]:
    global _wanted
    if _wanted is None:
        _wanted = frozenset(name for dialect in registered() for name in dialect.wanted_families())
    return _wanted


def read_families(families: dict[str, Family]) -> Scrape:
    for dialect in registered():
        naming = dialect.detect(families)
        if naming is not None:
            return Scrape(dialect.name, naming, dialect.read(families, naming))
    return Scrape(None, None, [])


def read_scrape(text: str | bytes, *, max_bytes: int = 16 * 2**20) -> Scrape:
    """Canonical engine states from one /metrics body. Raises ExpositionError on bad text."""
    from servewatch.exposition.parser import parse

    return read_families(parse(text, wanted_families(), max_bytes=max_bytes))


BUILTINS = ("vllm", "sglang", "llamacpp")      # the engines servewatch ships: one module each, in this package


def _register_builtins() -> None:
    from importlib import import_module

    for name in BUILTINS:
        module = import_module(f"servewatch.dialects.{name}")
        _REGISTRY[module.DIALECT.name] = module.DIALECT


_register_builtins()
