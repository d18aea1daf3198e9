"""A GPU fault on a machine without a GPU: the recorder reads NVML through the test-only stand-in library
(servewatch.lab.nvml_stand_in), its GPUs mapped to the server's real ranks by process title (GPU i held by the
worker of TP rank i), and the named scenario's fault happens at the injection (its clock stepped there): `xid79`,
GPU 1 falls off the bus with Xid 79; `healthy`, nothing. The engine itself is not touched; only the recorder (watch,
serve or guard) is given the stand-in, never the server."""

from __future__ import annotations

from servewatch.drill.faults.base import Fault, register


@register
class Nvml(Fault):
    demands = "none"       # a GPU that fell off the bus needs the node drained, which no drill here can score yet
    kind = "nvml"
    summary = "a scenario on stand-in GPUs mapped to the server's ranks (test-only NVML library; params: scenario)"
    params_known = {"scenario": str}

    def __init__(self, step):
        super().__init__(step)
        self.clock = None
        self.workload = True

    @classmethod
    def check_params(cls, params: dict) -> None:
        super().check_params(params)
        from servewatch.lab.nvml_stand_in import SCENARIOS

        if params.get("scenario", "xid79") not in SCENARIOS:
            raise ValueError(f"parameter 'scenario' must be one of {', '.join(sorted(SCENARIOS))}")

    def touches(self) -> str:
        return "nothing of the server: the recorder reads a test-only NVML library"

    def recorder_env(self, ctx, directory) -> dict[str, str]:
        """The recorder's environment: the stand-in built into `directory`, its scenario for this server's ranks."""
        from servewatch.lab.nvml_stand_in import prepare

        workers = sorted((p for p in ctx.target.processes() if p.role == "worker"), key=lambda p: p.rank)
        # GPU i held by the worker of rank i; a server without ranked workers (the simulator): two GPUs, both held
        # by its one process
        holders = [p.title for p in workers] if len(workers) >= 2 else [f"pid:{ctx.target.pid}"] * 2
        env, self.clock = prepare(directory, self.param("scenario", "xid79"), holders)
        held = "GPU i held by TP rank i's worker" if len(workers) >= 2 else "both held by the server's process"
        self.facts["NVML"] = f"stand-in: {len(holders)} GPUs, {held}; scenario {self.param('scenario', 'xid79')}"
        return env

    def inject(self, ctx) -> None:
        self.clock.inject()

    def revert(self, ctx) -> None:
        pass        # a GPU that fell off the bus stays off
