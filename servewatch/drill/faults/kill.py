"""SIGKILL one process of the server (by role and rank): no cleanup, no goodbye."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import Fault, register


@register
class Kill(Fault):
    kind = "kill"
    summary = "SIGKILL one process (role, rank)"
    default_role = "engine_core"
    takes_server_down = True

    def inject(self, ctx) -> None:
        ctx.signal(self.step.role, self.step.rank, signal.SIGKILL)
