"""The bundle's JSON Schemas, with the parts that derive from the registries filled in from them: the
verdict enums from the verdict registry, the engine labels from every dialect's identity labels.

The files in `schema/` list the built-in verdicts and the built-in dialects' labels (so they stand alone
for anyone reading a bundle); a verdict or dialect registered at run time is added here, and a test keeps
the files equal to the built-in registries.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources

from servewatch.bundle.layout import ON_DEMAND


@lru_cache(maxsize=None)
def _shipped(name: str) -> dict:
    return json.loads(resources.files("servewatch.bundle").joinpath("schema", f"{name}.schema.json").read_text())


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


def engine_label_objects(document: dict) -> list[dict]:
    """The closed objects in a schema that list an engine's labels (found by content: the `labels`
    property of an engine)."""
    engine = document.get("$defs", {}).get("engine")
    return [engine["properties"]["labels"]] if engine else []


def load(name: str, verdict_names: tuple[str, ...], label_keys: tuple[str, ...]) -> dict:
    """Schema `name` ("incident", "samples", "manifest") with its verdict enums set to `verdict_names`
    (plus `on_demand` where the file has it) and its engine labels to `label_keys` (each a short token)."""
    document = copy.deepcopy(_shipped(name))
    for enum in verdict_name_enums(document):
        extra = [ON_DEMAND] if ON_DEMAND in enum else []
        enum[:] = [*verdict_names, *extra]
    for labels in engine_label_objects(document):
        labels["properties"] = {key: dict(LABEL_VALUE) for key in label_keys}
    return document


LABEL_VALUE = {"type": "string", "pattern": "^[A-Za-z0-9_.:+-]{1,64}$"}    # serialize.label_value's shape
