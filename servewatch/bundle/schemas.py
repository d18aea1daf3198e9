"""The bundle's JSON Schemas, with the parts that derive from the registries filled in from them: the
verdict enums from the verdict registry, the engine labels from every dialect's identity labels.

The files in `schema/` list the built-in verdicts and the built-in dialects' labels (so they stand alone
for anyone reading a bundle); a verdict or dialect registered at run time is added here, and a test keeps
the files equal to the built-in registries. So with the source kinds: the files state the built-in kinds' samples;
a kind registered beyond them (`servewatch.timeline.kinds.register`) is added here from its codecs, to the source
enums, the per-kind sample branches and the window's counts.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources

from servewatch.bundle.layout import ON_DEMAND
from servewatch.timeline import kinds as source_kinds


@lru_cache(maxsize=None)
def _shipped(name: str) -> dict:
    return json.loads(resources.files("servewatch.bundle").joinpath("schema", f"{name}.schema.json").read_text())


def _objects(node):
    """Every JSON object in a schema document, parents before their children, in document order."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value)


def verdict_name_enums(document: dict) -> list[list]:
    """The enum lists in a schema that name verdicts (found by content: they hold the built-in names)."""
    return [node["enum"] for node in _objects(document)
            if isinstance(node.get("enum"), list) and "alive_health_ok_no_progress" in node["enum"]]


def engine_label_objects(document: dict) -> list[dict]:
    """The closed objects in a schema that list an engine's labels (found by content: the `labels`
    property of an engine)."""
    engine = document.get("$defs", {}).get("engine")
    return [engine["properties"]["labels"]] if engine else []


def load(name: str, verdict_names: tuple[str, ...], label_keys: tuple[str, ...],
         added_kinds: tuple[source_kinds.SourceKind, ...] | None = None) -> dict:
    """Schema `name` ("incident", "samples", "manifest") with its verdict enums set to `verdict_names`
    (plus `on_demand` where the file has it), its engine labels to `label_keys` (each a short token), and the
    source kinds `added_kinds` (by default the ones registered now beyond the built-in ones) added to it."""
    document = copy.deepcopy(_shipped(name))
    for enum in verdict_name_enums(document):
        extra = [ON_DEMAND] if ON_DEMAND in enum else []
        enum[:] = [*verdict_names, *extra]
    for labels in engine_label_objects(document):
        labels["properties"] = {key: dict(LABEL_VALUE) for key in label_keys}
    for kind in source_kinds.added() if added_kinds is None else added_kinds:
        _add_kind(document, kind)
    return document


def source_places(document: dict) -> tuple[list[list], list[list[dict]], list[dict]]:
    """Where a schema names the source kinds (found by content: each lists the built-in "health"): the source
    enums, the per-kind sample branches (lists of if/then), and the objects counting samples by kind."""
    enums, branches, counts = [], [], []
    for node in _objects(document):
        enum = node.get("enum")
        if isinstance(enum, list) and "health" in enum:
            enums.append(enum)
        branch = node.get("allOf")
        if isinstance(branch, list) and branch and branch[0].get("if", {}).get("properties", {}).get(
                "source") == {"const": "health"}:
            branches.append(branch)
        if "health" in node.get("properties", {}) and node.get("type") == "object":
            counts.append(node["properties"])
    return enums, branches, counts


def _add_kind(document: dict, kind: source_kinds.SourceKind) -> None:
    enums, branches, counts = source_places(document)
    for enum in enums:
        enum.append(kind.name)
    for properties in counts:
        properties[kind.name] = dict(properties["health"])
    for branch in branches:
        template = branch[0]["then"]["properties"]      # the keys the bundle adds to any kind's sample (instance, role)
        placed = {key: template[key] for key in PLACEMENT if key in template}
        fields = {name: copy.deepcopy(CODEC_SCHEMA[codec]) for name, codec in kind.codecs}
        branch.append({"if": {"properties": {"source": {"const": kind.name}}},
                       "then": {"type": "object", "additionalProperties": False,
                                "properties": {"source": {"const": kind.name}, **fields, **copy.deepcopy(placed)},
                                "required": ["source", *fields]}})


LABEL_VALUE = {"type": "string", "pattern": "^[A-Za-z0-9_.:+-]{1,64}$"}    # serialize.label_value's shape


PLACEMENT = ("instance", "role")      # what bundle.layout adds to a deployment instance's samples
_NUMBER = {"type": ["number", "string", "null"], "pattern": "^(NaN|\\+Inf|-Inf)$"}   # serialize.number's shape
# Each codec of a registered kind's field (timeline.kinds) as JSON Schema: the shapes serialize writes.
CODEC_SCHEMA = {
    source_kinds.TIME: {"type": ["number", "string"], "pattern": _NUMBER["pattern"]},
    source_kinds.NUMBER: _NUMBER,
    source_kinds.COUNT: {"type": "integer", "minimum": 0},
    source_kinds.INT: {"type": ["integer", "null"]},
    source_kinds.FLAG: {"type": "boolean"},
    source_kinds.ERROR: {"anyOf": [{"type": "string", "pattern": "^[A-Za-z0-9_]{1,40}$"}, {"type": "null"}]},
    source_kinds.TOKEN: {"anyOf": [LABEL_VALUE, {"type": "null"}]},
}
