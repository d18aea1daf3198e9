"""The bundle's JSON Schemas, with the parts that derive from the verdict registry filled in from it.

The files in `schema/` list the built-in verdicts (so they stand alone for anyone reading a bundle); a
verdict registered at run time is added to the enums here, and a test keeps the files equal to the
built-in registry.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources

from servewatch.sinks.layout import ON_DEMAND


@lru_cache(maxsize=None)
def _shipped(name: str) -> dict:
    return json.loads(resources.files("servewatch.sinks").joinpath("schema", f"{name}.schema.json").read_text())


def verdict_name_enums(document: dict) -> list[list]:
    """The enum lists in a schema that name verdicts (found by content: they hold the built-in names)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            enum = node.get("enum")
            if isinstance(enum, list) and "alive_health_ok_no_progress" in enum:
                found.append(enum)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    return found


def load(name: str, verdict_names: tuple[str, ...]) -> dict:
    """Schema `name` ("incident", "samples", "manifest") with its verdict enums set to `verdict_names`
    (plus `on_demand` where the file has it)."""
    document = copy.deepcopy(_shipped(name))
    for enum in verdict_name_enums(document):
        extra = [ON_DEMAND] if ON_DEMAND in enum else []
        enum[:] = [*verdict_names, *extra]
    return document
