"""The `nvml` fault's thermal scenario on a lab engine (no engine started here): at the injection the stand-in's
clocks go down and the engine is slowed: TP rank 1's worker (the process of the throttled GPU 1) under a CPU cap,
or, where no cap can be made or the server has one worker, one stress-ng CPU worker per core its ranks may run
on, in a session 3 steps less nice than the engine's own; at the revert both end. A stand-in "engine" (a sleeping process in a session at nice 10,
as servewatch.lab.server.yield_cpu leaves a lab engine) takes the place of vLLM's ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from servewatch.drill.faults.nvml import COMPETITOR_NICE_LEAD, THERMAL_CPU_SHARE, Nvml
from servewatch.drill.plan import Expect, FaultStep
from servewatch.drill.target import Process
from servewatch.lab.nvml_stand_in import INJECT_AT, ScenarioClock
from servewatch.sched import CAP_PERIOD_US, cpu_cap, set_session_nice
from tests.tools import needs_tool


class _Ctx:
    def __init__(self, engine: subprocess.Popen, *workers: subprocess.Popen):
        self.spawned: list[subprocess.Popen] = []
        self.commands: list[list[str]] = []
        ranks = [Process(p.pid, 0.0, f"VLLM::Worker_TP{i}", "worker", i) for i, p in enumerate(workers or [engine])]
        self.target = SimpleNamespace(spec=SimpleNamespace(engine="vllm"), pid=engine.pid, processes=lambda: ranks)

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


def _cpu_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or (number == "0" and controllers == ""):
            return path
    raise AssertionError(f"no cpu cgroup line for pid {pid}")


def test_a_thermal_scenario_caps_the_cpu_of_the_throttled_gpus_rank_and_reverts(tmp_path):
    probe = cpu_cap(f"servewatch-test-{id(tmp_path)}", 0.5)
    if isinstance(probe, str):
        pytest.skip(f"no CPU cap can be made here ({probe}): the drill falls back to stress-ng, tested above")
    probe.release()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    engine, rank0, rank1 = (subprocess.Popen(sleeper, start_new_session=True) for _ in range(3))
    ctx = _Ctx(engine, rank0, rank1)
    home = _cpu_cgroup(rank1.pid)
    fault = None
    try:
        step = FaultStep(kind="nvml", name="thermal", role=None, rank=0, warmup_s=0, hold_s=2, observe_s=0,
                         params={"scenario": "thermal"}, expect=Expect())
        fault = Nvml(step)
        fault.clock = ScenarioClock(tmp_path / "clock")
        fault.inject(ctx)
        assert ctx.spawned == []                        # no stress-ng where the cap is made
        capped = _cpu_cgroup(rank1.pid)
        assert capped != home and _cpu_cgroup(rank0.pid) == home and _cpu_cgroup(engine.pid) == home
        cap_dir = Path(fault.cap.path)
        quota = (cap_dir / "cpu.cfs_quota_us").read_text() if not fault.cap.v2 else \
            (cap_dir / "cpu.max").read_text().split()[0]
        assert int(quota) == int(THERMAL_CPU_SHARE * CAP_PERIOD_US)
        assert fault.facts["slowed"] == (f"a CPU cap on VLLM::Worker_TP1 (pid {rank1.pid}), the process of GPU 1: "
                                         f"{THERMAL_CPU_SHARE:.0%} of one CPU (cgroup CPU bandwidth)")
        fault.revert(ctx)
        assert _cpu_cgroup(rank1.pid) == home and not cap_dir.exists() and fault.cap is None
        assert float((tmp_path / "clock").read_text()) == 0.0
    finally:
        if fault is not None and fault.cap is not None:
            fault.cap.release()
        for proc in (engine, rank0, rank1):
            proc.kill()
            proc.wait(5)


def test_a_cap_left_by_a_drill_that_is_gone_is_removed_and_one_in_use_is_kept(tmp_path):
    from servewatch.sched import remove_stale_caps

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)                                   # a pid no process has now
    stale = cpu_cap(f"servewatch-test-stale-{gone.pid}-1", 0.5)
    if isinstance(stale, str):
        pytest.skip(f"no CPU cap can be made here ({stale})")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    held = cpu_cap(f"servewatch-test-stale-{gone.pid}-2", 0.5)     # its maker gone too, but a process in it
    mine = cpu_cap(f"servewatch-test-stale-{os.getpid()}-3", 0.5)   # its maker alive
    try:
        assert held.add(sleeper.pid) is None
        assert remove_stale_caps("servewatch-test-stale-") == [f"servewatch-test-stale-{gone.pid}-1"]
        assert not Path(stale.path).exists() and Path(held.path).exists() and Path(mine.path).exists()
    finally:
        for cap in (held, mine, stale):
            cap.release()
        sleeper.kill()
        sleeper.wait(5)
