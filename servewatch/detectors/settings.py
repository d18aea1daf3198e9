"""Detector thresholds set by a user: `--set stall.floor_s=5` and a TOML file (`--detectors FILE`).

Keys are DetectorConfig's field names (each declared in its verdict module's settings class), written flat
(`stall_floor_s`), dotted (`stall.floor_s`) or as TOML sections (`[stall]` then `floor_s = 5`). A wrong key or
value, or values a settings class's validate() refuses together, is an error naming it.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Iterable, Mapping

from servewatch.detectors.config import DetectorConfig
from servewatch.errors import ServewatchError
from servewatch.textfile import TextFileError, read_text

ALIASES = {"stall_min_s": "stall_floor_s", "stall_max_s": "stall_ceiling_s"}


def _fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(DetectorConfig)}


def _key(name: str) -> str:
    flat = name.strip().replace(".", "_").replace("-", "_")
    return ALIASES.get(flat, flat)


def _value(key: str, raw, where: str):
    field = _fields()[key]
    default = field.default
    if isinstance(default, tuple):
        items = raw if isinstance(raw, list) else [part.strip() for part in str(raw).split(",") if part.strip()]
        if not items or not all(isinstance(item, str) for item in items):
            raise ServewatchError(f"{where}: {key} takes a comma-separated list of names")
        return tuple(items)
    try:
        number = float(raw) if not isinstance(raw, bool) else None
    except (TypeError, ValueError):
        number = None
    if number is None or number != number or number in (float("inf"), float("-inf")):
        raise ServewatchError(f"{where}: {key} takes a number, not {raw!r}")
    if number < 0:
        raise ServewatchError(f"{where}: {key} must not be negative")
    if isinstance(default, int) and not isinstance(default, bool):
        if not number.is_integer():
            raise ServewatchError(f"{where}: {key} takes a whole number, not {raw!r}")
        return int(number)
    return number


def apply(config: DetectorConfig, settings: Mapping[str, object], where: str) -> DetectorConfig:
    """`config` with `settings` ({key: value}) applied; ServewatchError names the first bad key."""
    known = _fields()
    changes = {}
    for name, raw in settings.items():
        key = _key(name)
        if key not in known:
            close = sorted(k for k in known if k.split("_")[0] == key.split("_")[0]) or sorted(known)
            raise ServewatchError(f"{where}: unknown detector setting {name!r} (known: {', '.join(close)})")
        changes[key] = _value(key, raw, f"{where} ({name})")
    config = dataclasses.replace(config, **changes)
    problems = config.problems()
    if problems:
        raise ServewatchError(f"{where}: {problems[0]}")
    return config


def from_assignments(assignments: Iterable[str]) -> dict[str, str]:
    out = {}
    for text in assignments:
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise ServewatchError(f"--set {text!r}: expected KEY=VALUE, e.g. stall.floor_s=5")
        out[name.strip()] = value.strip()
    return out


def from_toml(path: str) -> dict[str, object]:
    try:
        document = tomllib.loads(read_text(path))
    except TextFileError as exc:
        raise ServewatchError(f"--detectors {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ServewatchError(f"--detectors {path}: not valid TOML ({exc})") from None
    flat: dict[str, object] = {}
    for name, value in document.items():
        if isinstance(value, dict):
            for inner, inner_value in value.items():
                if isinstance(inner_value, dict):
                    raise ServewatchError(f"--detectors {path}: [{name}.{inner}] nests too deep")
                flat[f"{name}.{inner}"] = inner_value
        else:
            flat[name] = value
    return flat


def build(assignments: Iterable[str] = (), toml_path: str | None = None) -> DetectorConfig:
    """The defaults, then the file, then each --set (the command line wins)."""
    config = DetectorConfig()
    if toml_path:
        config = apply(config, from_toml(toml_path), f"--detectors {toml_path}")
    return apply(config, from_assignments(assignments), "--set")
