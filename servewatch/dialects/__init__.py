"""Dialects: one module per engine holds every engine-specific name; all map to `EngineState`.

`read_scrape(text)` is the one entry point: parse only the families the dialects need, detect the
engine and its name generation from the names, and return one canonical state per engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.dialects import sglang, vllm
from servewatch.engine.state import EngineState
from servewatch.exposition.model import Family

DIALECTS = (vllm, sglang)


@dataclass(slots=True)
class Scrape:
    dialect: str | None                 # "vllm" | "sglang" | None (no known engine families)
    generation: str | None
    engines: list[EngineState] = field(default_factory=list)


def wanted_families() -> frozenset[str]:
    names: set[str] = set()
    for dialect in DIALECTS:
        names.update(dialect.wanted_families())
    return frozenset(names)


_WANTED = wanted_families()


def read_families(families: dict[str, Family]) -> Scrape:
    for dialect in DIALECTS:
        generation = dialect.detect(families)
        if generation is not None:
            return Scrape(dialect.NAME, generation, dialect.read(families, generation))
    return Scrape(None, None, [])


def read_scrape(text: str | bytes, *, max_bytes: int = 16 * 2**20) -> Scrape:
    """Canonical engine states from one /metrics body. Raises ExpositionError on bad text."""
    from servewatch.exposition.parser import parse

    return read_families(parse(text, _WANTED, max_bytes=max_bytes))


def by_name(name: str):
    for dialect in DIALECTS:
        if dialect.NAME == name:
            return dialect
    raise KeyError(name)
