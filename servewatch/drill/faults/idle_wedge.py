"""The idle wedge: the engine is stopped while nothing runs, then traffic arrives (the workload only
starts after the stop), and the engine is continued at the end of the hold."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import Fault, register


@register
class IdleWedge(Fault):
    demands = "restart"
    kind = "idle_wedge"
    summary = "SIGSTOP one process while the server is idle, then traffic; SIGCONT at the end of the hold"
    default_role = "engine_core"
    workload = False
    params_known = {"traffic_after_s": (int, float)}

    def inject(self, ctx) -> None:
        self.stopped = ctx.signal(self.step.role, self.step.rank, signal.SIGSTOP)
        delay = float(self.param("traffic_after_s", 2.0))
        ctx.start_workload(after_s=delay,
                           duration_s=max(1.0, self.step.hold_s + self.step.traffic_after_revert_s - delay))

    def revert(self, ctx) -> None:
        ctx.signal_member(self.stopped, signal.SIGCONT)
