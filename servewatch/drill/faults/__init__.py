"""The fault table: one small class per fault kind, one module per class. A new fault is a new module
here with a class decorated by @register and its name added to MODULES."""

from __future__ import annotations

import importlib

from servewatch.drill.faults.base import FAULTS, Fault, register

MODULES = ("stop", "kill", "term", "cpu_starve", "client_abort", "oversized", "idle_wedge", "restart",
           "disk_full", "slow_net", "quiet", "overload", "hang", "nvml")

for _name in MODULES:
    importlib.import_module(f"servewatch.drill.faults.{_name}")

__all__ = ["FAULTS", "Fault", "register"]
