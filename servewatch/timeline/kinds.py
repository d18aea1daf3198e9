"""The source-kind registry: each kind of sample, declared once with its name, its sample type and how a bundle
stores it.

The window (`Window.of(kind)`), the ring, the evidence pointers, the bundle's tags, counts, (de)serialisation and
JSON Schemas all read this registry. The built-in kinds (`servewatch.kinds.SOURCE_KINDS`) are here from the
start, their sample types attached by `timeline/samples.py`; `bundle/serialize.py` stores them with code of their
own (their samples nest engines, members and devices), and the schema files in `bundle/schema/` state them. A new
kind is its source (`sources/`), and its sample type with one `register(...)` call naming the fields a bundle
stores and how (a codec below), both at the end of `timeline/samples.py`: the window, the ring and the bundle then
hold, store, read back and check it field by field with nothing else to edit::

    register("queue", QueueSample, fields={"depth": COUNT, "oldest_s": NUMBER, "error": ERROR})

`t`, the time the answer arrived, is every sample's first field and always stored (as `TIME`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields as dataclass_fields

from servewatch.kinds import SOURCE_KINDS

# How a bundle stores one field of a registered kind's sample (bundle/serialize.py encodes, bundle/schemas.py
# states each as JSON Schema).
TIME = "time"        # a number, never null (non-finite as "NaN", "+Inf", "-Inf")
NUMBER = "number"    # a number or null
COUNT = "count"      # an integer >= 0
INT = "int"          # an integer or null
FLAG = "flag"        # true or false
ERROR = "error"      # a failure's class ("timeout", "http_503"): its leading word only, or null
TOKEN = "token"      # a short identifier-like string (anything else is stored as "other"), or null
CODECS = (TIME, NUMBER, COUNT, INT, FLAG, ERROR, TOKEN)


@dataclass(frozen=True, slots=True)
class SourceKind:
    name: str                                   # the bundle's "source" tag and the evidence pointers' source
    sample: type | None                         # its sample dataclass (one type per kind)
    field: str | None = None                    # a built-in kind's attribute of Window; None: Window.of(name)
    codecs: tuple[tuple[str, str], ...] = ()    # (field, codec) a bundle stores, `t` first; () for a built-in kind


_KINDS: dict[str, SourceKind] = {}
_BY_TYPE: dict[type, SourceKind] = {}


def register(name: str, sample: type, *, fields: Mapping[str, str]) -> SourceKind:
    """Add a source kind: `name` (a short lower-case word, also the bundle's tag), its sample dataclass (with a
    `t`), and `fields`, each stored field's codec. Every field of the sample not listed is left out of bundles."""
    if name in _KINDS:
        raise ValueError(f"source kind {name!r} is registered already")
    if not (name.isidentifier() and name.islower()) or sample in _BY_TYPE:
        raise ValueError(f"source kind {name!r}: a lower-case word and a sample type of its own are needed")
    names = {f.name for f in dataclass_fields(sample)}
    bad = {key: codec for key, codec in fields.items() if key not in names or codec not in CODECS or key == "t"}
    if "t" not in names or bad:
        raise ValueError(f"source kind {name!r}: fields {bad} are not the sample's (t aside) or have no codec "
                         f"of {', '.join(CODECS)}")
    kind = SourceKind(name, sample, None, (("t", TIME), *fields.items()))
    _add(kind)
    return kind


def unregister(name: str) -> None:
    """Take a registered kind away again (tests); the built-in kinds stay."""
    kind = _KINDS.get(name)
    if kind is None or kind.field is not None:
        raise ValueError(f"{name!r} is not a registered source kind")
    del _KINDS[name], _BY_TYPE[kind.sample]


def _add(kind: SourceKind) -> None:
    _KINDS[kind.name] = kind
    _BY_TYPE[kind.sample] = kind


def names() -> tuple[str, ...]:
    """Every source kind: the built-in ones in SOURCE_KINDS order, then the registered ones as registered."""
    return tuple(_KINDS)


def added() -> tuple[SourceKind, ...]:
    """The kinds registered beyond the built-in ones (what the shipped schema files do not list)."""
    return tuple(kind for kind in _KINDS.values() if kind.field is None)


def get(name: str) -> SourceKind | None:
    return _KINDS.get(name)


def kind_of(sample) -> str:
    kind = _BY_TYPE.get(type(sample))
    if kind is None:
        raise TypeError(f"not a timeline sample: {type(sample).__name__}")
    return kind.name


def attach_builtin(*samples: type) -> None:
    """The built-in kinds' sample types, in SOURCE_KINDS order (timeline/samples.py states them)."""
    for name, sample in zip(SOURCE_KINDS, samples, strict=True):
        _add(SourceKind(name, sample, _KINDS[name].field))


_KINDS.update((name, SourceKind(name, None, "logs" if name == "log" else name)) for name in SOURCE_KINDS)
