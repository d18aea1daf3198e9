"""The main thread of one process blocked in a system call for the hold (the test-only hook, drill.hang_hook): the
process reads state S and 0 % CPU, as a deadlocked engine and an idle one both read; no stop is visible to any process
view. With `params: {idle: true}` the hang lands while the server is idle and the workload starts only after it (the
idle wedge that only a probe can tell), else under the step's workload. Only in servers the drill starts itself."""

from __future__ import annotations

from servewatch.drill import hang_hook
from servewatch.drill.faults.base import Fault, register

HANG_MARGIN_S = 30.0     # the hook's own limit beyond the hold: a drill that dies mid-step never leaves a hang behind for long


@register
class Hang(Fault):
    demands = "restart"
    kind = "hang"
    summary = ("block the main thread of one process (role, rank) in a system call for the hold: state S, no stop "
               "visible (test-only hook, servers the drill starts)")
    default_role = "engine_core"
    params_known = {"idle": bool, "traffic_after_s": (int, float)}

    def __init__(self, step):
        super().__init__(step)
        self.workload = not self.param("idle", False)     # idle: the traffic starts after the hang (inject)

    def touches(self) -> str:
        return "the main thread of one process, through the drill's test-only hook"

    def inject(self, ctx) -> None:
        self.hung, self.request = ctx.hang(self.step.role, self.step.rank, self.step.hold_s + HANG_MARGIN_S)
        if not self.workload:
            delay = float(self.param("traffic_after_s", 2.0))
            ctx.start_workload(after_s=delay,
                               duration_s=max(1.0, self.step.hold_s + self.step.traffic_after_revert_s - delay))

    def revert(self, ctx) -> None:
        hang_hook.release(self.request)
