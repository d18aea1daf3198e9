"""Detector thresholds: derived from the target where the samples allow it, otherwise these defaults.

DetectorConfig is the flat view composed of every verdict module's settings class (detectors/registry.py's
VERDICT_MODULES; each default written once, there) and of the shared evidence's: a field of each, by its name
(`config.stall_floor_s`). Every field is a plain number so a bundle can store the config it was judged with and
`verify` can recompute the verdicts with exactly the same thresholds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from servewatch.detectors import registry
from servewatch.detectors.evidence.stages import StartSettings
from servewatch.detectors.verdict import Settings

# Settings earlier releases stored in bundles and that now live elsewhere: `verify` reads and ignores them
# (bundle.recompute.config_from_dict).
RETIRED = frozenset({"engine_dead_status"})    # now the dialect's health_dead_status


@dataclass(frozen=True, slots=True)
class WindowSettings(Settings):
    """What every detector reads: the window's lookback."""

    # Detectors only read samples newer than (window end - lookback_s). A bundle that stores that
    # slice (see detectors.evidence_window) lets `verify` recompute identical verdicts.
    lookback_s: float = 180.0


# What DetectorConfig is composed of: the window's, the shared evidence's, then each verdict module's.
SETTINGS: tuple[type[Settings], ...] = (WindowSettings, StartSettings, *registry.settings_classes())


def _to_dict(self) -> dict:
    data = dataclasses.asdict(self)
    return {key: list(value) if isinstance(value, tuple) else value for key, value in data.items()}


def _problems(self) -> list[str]:
    """What is wrong with these values together (each settings class's validate()), one phrase each."""
    return [problem for cls in SETTINGS for problem in cls.of(self).validate()]


def _compose(classes: tuple[type[Settings], ...]) -> type:
    owner: dict[str, type] = {}
    columns = []
    for cls in classes:
        for column in dataclasses.fields(cls):
            if column.name in owner:
                raise TypeError(f"setting {column.name} is declared twice: {owner[column.name].__qualname__} and "
                                f"{cls.__qualname__}")
            owner[column.name] = cls
            columns.append((column.name, column.type, dataclasses.field(default=column.default)))
    composed = dataclasses.make_dataclass(
        "DetectorConfig", columns, frozen=True, slots=True,
        namespace={"to_dict": _to_dict, "problems": _problems,
                   "__doc__": "Every detector's thresholds, one field per setting of SETTINGS' classes."})
    composed.__module__ = __name__
    composed.owner = staticmethod(lambda name: owner.get(name))   # the settings class a field is declared in
    return composed


DetectorConfig = _compose(SETTINGS)
