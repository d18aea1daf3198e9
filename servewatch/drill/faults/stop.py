"""SIGSTOP one process of the server (by role and rank) for the hold, then SIGCONT; with
`params: {on_running_work: true}` only once /metrics shows a request running on that process's engine."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import Fault, register


@register
class Stop(Fault):
    demands = "restart"
    kind = "stop"
    summary = "SIGSTOP one process (role, rank) for the hold, then SIGCONT"
    default_role = "engine_core"
    params_known = {"on_running_work": bool}

    def inject(self, ctx) -> None:
        if self.param("on_running_work", False):
            self.stopped = ctx.stop_on_running_work(self.step.role, self.step.rank)
        else:
            self.stopped = ctx.signal(self.step.role, self.step.rank, signal.SIGSTOP)

    def revert(self, ctx) -> None:
        ctx.signal_member(self.stopped, signal.SIGCONT)
