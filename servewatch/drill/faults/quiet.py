"""Nothing injected: the server watched through the hold, idle or under the plan's workload (`traffic`),
for what must stay silent — an idle server whose workers spin, a steady load the engine keeps up with."""

from __future__ import annotations

from servewatch.drill.faults.base import Fault, register


@register
class Quiet(Fault):
    kind = "quiet"
    summary = "nothing injected: watched through the hold, idle or under the workload (params: traffic)"
    params_known = {"traffic": bool}

    def __init__(self, step):
        super().__init__(step)
        self.workload = bool(self.param("traffic", False))
        self.summary = ("nothing injected: watched under the workload through the hold" if self.workload
                        else "nothing injected: watched idle through the hold")

    def inject(self, ctx) -> None:
        self.facts["nothing"] = "(under the workload)" if self.workload else "(idle)"
