"""A restart on the same port: the server is stopped gracefully and started again, traffic running."""

from __future__ import annotations

from servewatch.drill.faults.base import Fault, register


@register
class Restart(Fault):
    kind = "restart"
    summary = "stop the server gracefully and start it again on the same port"
    default_role = "api"

    def touches(self) -> str:
        return "stops and starts the whole server (a target the drill started only)"

    def inject(self, ctx) -> None:
        self.facts["restart_s"] = ctx.restart_target()
