"""The fault table: one small class per fault kind, one module per class. A new fault is a new module here with a
class decorated by @register, and nothing else: every module of this package but `base` is imported when the
package is (`MODULES`, found by `discover`)."""

from __future__ import annotations

import importlib
import pkgutil

from servewatch.drill.faults.base import FAULTS, Fault, register


def discover() -> tuple[str, ...]:
    """Import every fault module of the package (its @register classes fill FAULTS); their names, sorted."""
    names = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"))
    for name in names:
        importlib.import_module(f"{__name__}.{name}")
    return names


MODULES = discover()

__all__ = ["FAULTS", "Fault", "MODULES", "discover", "register"]
