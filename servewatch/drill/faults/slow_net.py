"""A slow network path: the workload goes through a userspace TCP proxy the drill puts in front of the
port, and every chunk it forwards is delayed for the hold (this kernel has no netem)."""

from __future__ import annotations

from servewatch.drill.faults.base import Fault, register


@register
class SlowNet(Fault):
    kind = "slow_net"
    summary = "delay every forwarded chunk in a TCP proxy between the clients and the server for the hold"
    via_proxy = True
    params_known = {"delay_ms": (int, float)}

    def touches(self) -> str:
        return "starts a loopback TCP proxy in front of the port (the workload uses it; /health is probed direct)"

    def inject(self, ctx) -> None:
        delay = float(self.param("delay_ms", 250)) / 1000.0
        ctx.proxy.delay_s = delay
        self.facts["delay_ms"] = round(delay * 1000)

    def revert(self, ctx) -> None:
        ctx.proxy.delay_s = 0.0
