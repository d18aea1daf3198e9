"""More requests than the engine has slots: nothing is signalled; the step's own workload (more streams in
flight than the server runs at once) is the fault, and a queue builds behind the full slots."""

from __future__ import annotations

from servewatch.drill.faults.base import Fault, register


@register
class Overload(Fault):
    kind = "overload"
    summary = "a load over the server's capacity: the step's workload through the hold, nothing signalled"

    def inject(self, ctx) -> None:
        self.facts["nothing"] = "(the load is the fault)"
