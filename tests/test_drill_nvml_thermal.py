"""The `nvml` fault's thermal scenario on a lab engine (no engine started here): at the injection the stand-in's
clocks go down and the engine is slowed by one stress-ng CPU worker per core its ranks may run on, in a session as
nice as the engine's own; at the revert both end. A stand-in "engine" (a sleeping process in a session at nice 10,
as servewatch.lab.server.yield_cpu leaves a lab engine) takes the place of vLLM's ranks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from servewatch.drill.faults.nvml import COMPETITOR_NICE_LEAD, Nvml
from servewatch.drill.plan import Expect, FaultStep
from servewatch.drill.target import Process
from servewatch.lab.nvml_stand_in import INJECT_AT, ScenarioClock
from servewatch.sched import set_session_nice
from tests.tools import needs_tool


class _Ctx:
    def __init__(self, engine: subprocess.Popen):
        self.spawned: list[subprocess.Popen] = []
        self.commands: list[list[str]] = []
        self.target = SimpleNamespace(spec=SimpleNamespace(engine="vllm"), pid=engine.pid,
                                      processes=lambda: [Process(engine.pid, 0.0, "VLLM::Worker_TP0", "worker", 0)])

    def spawn(self, command):
        self.commands.append(command)
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.spawned.append(proc)
        return proc

    def end_spawned(self, proc):
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)

    def cannot(self, why):
        return RuntimeError(why)


def _autogroup_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


@needs_tool("stress-ng")
def test_a_thermal_scenario_slows_a_lab_engine_with_stress_ng_at_its_nice_and_reverts(tmp_path):
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel has no autogroups (CONFIG_SCHED_AUTOGROUP): a session's nice cannot be set")
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    ctx = _Ctx(engine)
    try:
        why = set_session_nice(engine.pid, 10)
        if why is not None:
            pytest.skip(f"the stand-in engine's session nice could not be set ({why})")
        step = FaultStep(kind="nvml", name="thermal", role=None, rank=0, warmup_s=0, hold_s=2, observe_s=0,
                         params={"scenario": "thermal"}, expect=Expect())
        fault = Nvml(step)
        fault.clock = ScenarioClock(tmp_path / "clock")
        fault.inject(ctx)
        [stress] = ctx.spawned
        assert float((tmp_path / "clock").read_text()) == INJECT_AT
        assert stress.poll() is None and _autogroup_nice(stress.pid) == 10 - COMPETITOR_NICE_LEAD == 7
        cpus = sorted(psutil.Process(engine.pid).cpu_affinity())
        [command] = ctx.commands       # (stress-ng rewrites its own title: read what was started, not /proc)
        assert command[1:5] == ["--cpu", str(len(cpus)), "--taskset", ",".join(map(str, cpus))]
        assert fault.facts["slowed"] == (f"stress-ng, {len(cpus)} CPU worker(s) on the ranks' {len(cpus)} core(s), "
                                         "its session at nice 7 against the engine's 10")
        fault.revert(ctx)
        assert stress.poll() is not None and float((tmp_path / "clock").read_text()) == 0.0
    finally:
        for proc in (*ctx.spawned, engine):
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
