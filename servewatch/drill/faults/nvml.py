"""A GPU fault on a machine without a GPU: the recorder reads NVML through the test-only stand-in library
(servewatch.lab.nvml_stand_in), its GPUs mapped to the server's real ranks by process title (GPU i held by the
worker of TP rank i), and the named scenario's fault happens at the injection (its clock stepped there): `xid79`,
GPU 1 falls off the bus with Xid 79 (and stays off); `thermal`, GPU 1's SM clock is held at 1,100 of 1,980 MHz by
a thermal reason for the hold; `healthy`, nothing. Only the recorder (watch, serve or guard) is given the stand-in,
never the server.

`thermal` also slows the engine for the hold, as a clock held down would (the stand-in's clocks drive nothing):
the simulator's own `slow` fault (step time x3), or, on a lab engine, a CPU cap on the process of the throttled GPU
(TP rank 1's worker): a cgroup's CFS bandwidth, THERMAL_CPU_SHARE of one CPU, so that rank 1 computes slower and
rank 0 waits for it at every collective, as a throttled GPU makes its peers wait. Where no cgroup cpu controller
can be written (no root, cgroup v2 without cpu at its root) one stress-ng CPU worker on each core its ranks may run
on, in a session 3 steps less nice than the engine's own (COMPETITOR_NICE_LEAD), is the fallback: it slows an
engine only while the machine is saturated, and the drill says which of the two it used. The slowdown is what
gpu_throttled must explain; nothing else of the server is changed."""

from __future__ import annotations

import json
import os
import shutil

from servewatch.drill.faults.base import Fault, register

SIM_SLOW_FACTOR = 3.0     # the simulator's step time in a thermal hold: its token rate is partly its client's (x2 gave -30%)


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
        self.scenario = self.param("scenario", "xid79")
        self.competitor = None      # thermal on a lab engine without a cgroup cap: the stress-ng that slows its ranks
        self.cap = None             # thermal on a lab engine: the CPU cap on the throttled GPU's rank
        self.slowed_sim = False

    @classmethod
    def check_params(cls, params: dict) -> None:
        super().check_params(params)
        from servewatch.lab.nvml_stand_in import SCENARIOS

        if params.get("scenario", "xid79") not in SCENARIOS:
            raise ValueError(f"parameter 'scenario' must be one of {', '.join(sorted(SCENARIOS))}")

    def touches(self) -> str:
        if self.scenario == "thermal":
            return ("the recorder reads a test-only NVML library; the engine is slowed for the hold (the simulator's "
                    "slow fault, or a CPU cap on the throttled GPU's rank of a lab engine)")
        return "nothing of the server: the recorder reads a test-only NVML library"

    def recorder_env(self, ctx, directory) -> dict[str, str]:
        """The recorder's environment: the stand-in built into `directory`, its scenario for this server's ranks."""
        from servewatch.lab.nvml_stand_in import prepare

        workers = sorted((p for p in ctx.target.processes() if p.role == "worker"), key=lambda p: p.rank)
        # GPU i held by the worker of rank i; a server without ranked workers (the simulator): two GPUs, both held
        # by its one process
        holders = [p.title for p in workers] if len(workers) >= 2 else [f"pid:{ctx.target.pid}"] * 2
        env, self.clock = prepare(directory, self.scenario, holders)
        held = "GPU i held by TP rank i's worker" if len(workers) >= 2 else "both held by the server's process"
        self.facts["NVML"] = f"stand-in: {len(holders)} GPUs, {held}; scenario {self.scenario}"
        return env

    def inject(self, ctx) -> None:
        if self.scenario == "thermal":
            self._slow(ctx)
        self.clock.inject()

    def revert(self, ctx) -> None:
        if self.scenario != "thermal":
            return          # a GPU that fell off the bus stays off
        self.clock.at(0.0)  # the clocks back up
        if self.cap is not None:
            left = self.cap.release()
            self.cap = None
            if left:
                self.facts["slowed"] += f"; the cap was not fully undone: {left}"
        if self.competitor is not None:
            ctx.end_spawned(self.competitor)
        if self.slowed_sim:
            _sim_fault(ctx.url, {"kind": "clear"})

    def _slow(self, ctx) -> None:
        if ctx.target.spec.engine == "sim":
            _sim_fault(ctx.url, {"kind": "slow", "factor": SIM_SLOW_FACTOR})
            self.slowed_sim = True
            self.facts["slowed"] = f"the simulator's step time x{SIM_SLOW_FACTOR:g}"
            return
        import psutil

        from servewatch.sched import cpu_cap, remove_stale_caps, set_session_nice

        workers = [p for p in ctx.target.processes() if p.role == "worker"]
        if len(workers) >= 2:
            capped = workers[THROTTLED_GPU]
            remove_stale_caps(CAP_PREFIX)
            cap = cpu_cap(f"{CAP_PREFIX}{os.getpid()}-{capped.pid}", THERMAL_CPU_SHARE)
            why = cap if isinstance(cap, str) else cap.add(capped.pid)
            if why is None:
                self.cap = cap
                self.facts["slowed"] = (f"a CPU cap on {capped.title} (pid {capped.pid}), the process of GPU "
                                        f"{THROTTLED_GPU}: {THERMAL_CPU_SHARE:.0%} of one CPU (cgroup CPU bandwidth)")
                return
            if not isinstance(cap, str):
                cap.release()
            self.facts["cap"] = f"no CPU cap ({why}): stress-ng instead"
        stress = shutil.which("stress-ng")
        if stress is None:
            raise ctx.cannot("stress-ng is not installed (Debian package stress-ng): a thermal scenario slows the "
                             "engine with it")
        workers = [p for p in ctx.target.processes() if p.role == "worker"] or ctx.target.processes()
        cpus: set[int] = set()
        for p in workers:
            try:
                cpus.update(psutil.Process(p.pid).cpu_affinity())
            except psutil.Error:
                pass
        cpus = cpus or set(range(psutil.cpu_count() or 1))
        self.competitor = ctx.spawn([stress, "--cpu", str(len(cpus)), "--taskset", ",".join(map(str, sorted(cpus))),
                                     "--timeout", f"{int(self.step.hold_s) + 5}s", "--quiet"])
        engine_nice = _autogroup_nice(ctx.target.pid)
        nice = None if engine_nice is None else max(engine_nice - COMPETITOR_NICE_LEAD, -20)
        why = set_session_nice(self.competitor.pid, nice) if nice is not None else "the engine's was not read"
        self.facts["slowed"] = (f"stress-ng, {len(cpus)} CPU worker(s) on the ranks' {len(cpus)} core(s)"
                                + (f", its session at nice {nice} against the engine's {engine_nice}" if why is None
                                   else f"; its session's nice left as it is ({why})"))


# The stand-in's thermal scenario throttles GPU 1, held by TP rank 1's worker.
THROTTLED_GPU = 1
# The throttled rank's CPU under the cap: the share of its clock the throttle leaves (1,100 of 1,980 MHz). On the
# lab TP=2 vLLM under four 64-token streams (2026-12-05, a quiet machine): tokens 1,293/s -> 278/s (-78 %), TTFT
# x2.5; at 30 %, -85 %. The rank's spinning OpenMP threads spend the quota too, so the engine slows by more than
# the share.
THERMAL_CPU_SHARE = 0.56
CAP_PREFIX = "servewatch-drill-"     # the cap's cgroup: this prefix, the drill's pid, the capped pid


# The competitor's session this much less nice than the engine's: each step of nice weighs about 1.25 x, so 3 steps
# give it about twice the engine's weight and the engine about a third of the cores they share. At the same nice
# (half each) the lab TP=2 vLLM's four 64-token streams slowed too little to read as a throttle (TTFT x1.5, the
# token rate down under gpu_throttle_drop; 2026-12-05).
COMPETITOR_NICE_LEAD = 3


def _sim_fault(url: str, body: dict) -> None:
    """Ask the simulator for a fault; OSError saying why when it is not taken."""
    from servewatch.transport.contract import Failed, HttpRequest, send_blocking

    got = send_blocking(HttpRequest("POST", f"{url}/_sim/fault", timeout_s=5.0, max_bytes=1 << 16,
                                    body=json.dumps(body).encode()))
    failed = got if isinstance(got, Failed) else got.failure()
    if failed is not None:
        raise OSError(f"the simulator's fault endpoint {url}/_sim/fault: {failed.detail}")


def _autogroup_nice(pid: int) -> int | None:
    """The nice of `pid`'s session (/proc/PID/autogroup: "/autogroup-123 nice 10"); None when unreadable."""
    try:
        with open(f"/proc/{pid}/autogroup", encoding="ascii") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None
