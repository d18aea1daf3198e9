"""SIGKILL one process of the server (by role and rank): no cleanup, no goodbye. With `whole_tree: true` every
process of the server (on a prefill/decode pair: of the side the fault names), as a node's loss takes it; with
`decode_waits: true` (a pair) a request is prefilled by hand just before the kill and its decode leg sent right
after it: the prefill killed after its step, decode waiting for KV it holds."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import SignalFault, register


@register
class Kill(SignalFault):
    demands = "restart"
    kind = "kill"
    summary = "SIGKILL one process (role, rank)"
    default_role = "engine_core"
    signum = signal.SIGKILL
    params_known = {"whole_tree": bool, "decode_waits": bool}

    def inject(self, ctx) -> None:
        self.handover = ctx.hand_over() if self.param("decode_waits", False) else None
        if self.param("whole_tree", False):
            ctx.signal_tree(self.signum)
        else:
            super().inject(ctx)
        if self.handover is not None:
            self.handover.decode(ctx.step.request_timeout_s)

    def revert(self, ctx) -> None:
        if self.handover is not None:     # what decode answered the request whose KV died with the prefill
            self.facts["decode_after_kill"] = self.handover.join(ctx.step.hold_s)
