"""SIGSTOP one process of the server (by role and rank) for the hold, then SIGCONT; with
`params: {on_running_work: true}` only once /metrics shows a request running on that process's engine; with
`whole_tree: true` every process of the server (on a prefill/decode pair: of the side the fault names); with
`decode_waits: true` (a pair) a request is prefilled by hand just before the stop and its decode leg sent once
the stop holds, so that decode waits for KV from the stopped side."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import Fault, register


@register
class Stop(Fault):
    demands = "restart"
    kind = "stop"
    summary = "SIGSTOP one process (role, rank) for the hold, then SIGCONT"
    default_role = "engine_core"
    params_known = {"on_running_work": bool, "whole_tree": bool, "decode_waits": bool}

    def inject(self, ctx) -> None:
        self.handover = ctx.hand_over() if self.param("decode_waits", False) else None
        if self.param("whole_tree", False):
            self.stopped = ctx.signal_tree(signal.SIGSTOP)
        elif self.param("on_running_work", False):
            self.stopped = ctx.stop_on_running_work(self.step.role, self.step.rank)
        else:
            self.stopped = ctx.signal(self.step.role, self.step.rank, signal.SIGSTOP)
        if self.handover is not None:
            self.handover.decode(ctx.step.request_timeout_s)

    def revert(self, ctx) -> None:
        for proc in self.stopped if isinstance(self.stopped, list) else [self.stopped]:
            ctx.signal_member(proc, signal.SIGCONT)
        if self.handover is not None:     # decode's answer once the stopped side goes on (within the observation)
            self.facts["decode_after_stop"] = self.handover.join(ctx.step.watch_after_revert_s)
