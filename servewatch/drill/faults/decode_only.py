"""The router sent decode-only (a prefill/decode pair): for the hold the workload goes to decode alone, no
prefill leg and no KV parameters, as a router whose prefill list is empty or wrong sends it (llm-d-router #2427):
decode computes every prompt itself while the prefill idles."""

from __future__ import annotations

from servewatch.drill.faults.base import Fault, register


@register
class DecodeOnly(Fault):
    kind = "decode_only"
    summary = "the router sends decode alone: every request straight to decode for the hold (a pair)"
    workload = False          # no traffic through the router in this step: the fault's own goes around it
    demands = "page"

    def inject(self, ctx) -> None:
        if ctx.pair is None:
            raise ctx.cannot("decode_only: only on a prefill/decode pair")
        ctx._injected_now()
        ctx.start_workload(after_s=0.0, duration_s=self.step.hold_s, url=ctx.pair.side("decode").url)
        self.facts["routed"] = "decode alone"
