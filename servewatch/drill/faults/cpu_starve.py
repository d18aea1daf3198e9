"""CPU starvation of one process: stress-ng workers pinned to the CPUs that process may run on, for the hold.

Nothing of the server is changed (its affinity and priority stay); the competitors run at normal priority,
so the scheduler shares those cores between them and the engine."""

from __future__ import annotations

import shutil

from servewatch.drill.faults.base import Fault, register


@register
class CpuStarve(Fault):
    kind = "cpu_starve"
    summary = "stress-ng CPU workers pinned to the cores of one process (role, rank) for the hold"
    default_role = "engine_core"
    params_known = {"workers_per_cpu": int}

    def touches(self) -> str:
        return "starts stress-ng (Debian package stress-ng) pinned to that process's cores"

    def inject(self, ctx) -> None:
        import psutil

        stress = shutil.which("stress-ng")
        if stress is None:
            raise ctx.cannot("stress-ng is not installed (Debian package stress-ng)")
        member = ctx.member(self.step.role, self.step.rank)
        try:
            cpus = sorted(psutil.Process(member.pid).cpu_affinity())
        except psutil.Error:
            cpus = list(range(psutil.cpu_count() or 1))
        workers = len(cpus) * int(self.param("workers_per_cpu", 2))
        self.facts.update(cpus=len(cpus), workers=workers)
        # --timeout bounds the competitor even if the drill itself dies before revert()
        self.proc = ctx.spawn([stress, "--cpu", str(workers), "--taskset", ",".join(map(str, cpus)),
                               "--timeout", f"{int(self.step.hold_s) + 5}s", "--quiet"])

    def revert(self, ctx) -> None:
        ctx.end_spawned(self.proc)
