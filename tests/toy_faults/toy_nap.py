"""A made-up drill fault, the whole of it: one module with one @register class, as each built-in fault is a module
of servewatch/drill/faults/. tests/test_seam_counts.py puts this folder on that package's path and discovers it:
no list names it."""

from __future__ import annotations

from servewatch.drill.faults.base import Fault, register


@register
class ToyNap(Fault):
    kind = "toy_nap"
    summary = "do nothing for the hold (a toy)"
    workload = False

    def inject(self, ctx) -> None:
        self.facts["napped"] = True

    def revert(self, ctx) -> None:
        self.facts["woke"] = True
