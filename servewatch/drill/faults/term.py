"""SIGTERM to the API server: a graceful stop, as a service manager or a kubelet asks for one."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import Fault, register


@register
class Term(Fault):
    kind = "term"
    summary = "SIGTERM to the API server (a graceful stop)"
    default_role = "api"
    takes_server_down = True

    def inject(self, ctx) -> None:
        ctx.signal(self.step.role, self.step.rank, signal.SIGTERM)
