"""SIGSTOP one process of the server (by role and rank) for the hold, then SIGCONT."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import Fault, register


@register
class Stop(Fault):
    kind = "stop"
    summary = "SIGSTOP one process (role, rank) for the hold, then SIGCONT"
    default_role = "engine_core"

    def inject(self, ctx) -> None:
        self.stopped = ctx.signal(self.step.role, self.step.rank, signal.SIGSTOP)

    def revert(self, ctx) -> None:
        ctx.signal_member(self.stopped, signal.SIGCONT)
