"""A full disk under the recorder's bundle directory (a 1 MiB tmpfs, filled), then a stop of one process
so that a verdict fires and its bundle cannot be written. The recorder must go on and say so."""

from __future__ import annotations

import signal

from servewatch.drill.faults.base import Fault, register


@register
class DiskFull(Fault):
    kind = "disk_full"
    summary = "bundle directory on a full 1 MiB tmpfs, and SIGSTOP of one process (role, rank) for the hold"
    default_role = "engine_core"
    full_bundle_dir = True

    def touches(self) -> str:
        return "mounts a 1 MiB tmpfs for the recorder's bundle directory (needs mount rights)"

    def inject(self, ctx) -> None:
        self.stopped = ctx.signal(self.step.role, self.step.rank, signal.SIGSTOP)

    def revert(self, ctx) -> None:
        ctx.signal_member(self.stopped, signal.SIGCONT)
