"""`servewatch guard` on a hardware fault, end to end: guard starts `servewatch sim`, its GPU source reads the
test-only NVML stand-in (through the real pynvml) whose scenario lists the server's process on GPU 1; an Xid 79
on GPU 1 → gpu_fault → stacks → the tree killed → exit 6 with the hardware line."""

from __future__ import annotations

import os
import uuid

import pytest

from servewatch.lab.nvml_stand_in import build, compiler, environment
from tests.nvml_lab import BUS1, UUID1, tp2
from tests.test_guard_command import SIM, finish, guard, reaper, started_pid  # noqa: F401 - reaper is a fixture
from tests.test_watch_command import free_port, read_stderr_until, wait_healthy

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler (cc or gcc) to build the NVML stand-in")


def test_an_xid_79_under_the_server_is_killed_and_exits_6_with_the_hardware_line(tmp_path, reaper):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    marker = f"gpu-e2e-{uuid.uuid4().hex[:12]}"           # in the server's command line: how the scenario finds it
    scenario, clock = tmp_path / "scenario.txt", tmp_path / "clock"
    scenario.write_text(tp2("at 10 xid 1 79\nat 10 gpu 1 lost=1\n", pids=(1, f"cmdline:--model-name {marker}")))
    clock.write_text("0\n")
    env = {**os.environ, **environment(build(tmp_path / "nvml"), scenario, clock)}
    proc = guard(url, "--stacks-dir", str(tmp_path / "stacks"), "--out", str(tmp_path / "bundles"),
                 server=[*SIM, "--port", str(port), "--model-name", marker], env=env)
    pid = started_pid(proc)
    reaper(pid)
    wait_healthy(url)
    read_stderr_until(proc, r"^servewatch guard: identity: ", timeout_s=30)   # proven: a kill may follow
    clock.write_text("10\n")                                                  # the scenario reaches its Xid
    lines, stderr = finish(proc)
    assert proc.returncode == 6, stderr
    events = {line.get("guard") or line.get("verdict"): line for line in lines}
    assert events["gpu_fault"]["why"] == (f"GPU 1 ({UUID1}, bus {BUS1}, NVIDIA H100 80GB HBM3) under pid {pid}: "
                                          "Xid 79 (GPU has fallen off the bus; NVIDIA: reboot the node): do not "
                                          "restart on this GPU")
    assert events["stacks"]["verdict"] == "gpu_fault" and events["kill"]["killed"] >= 1
    line = (f"hardware: GPU 1 ({UUID1}, bus {BUS1}) Xid 79 (GPU has fallen off the bus), do not restart on this "
            "GPU")
    assert events["exit"]["code"] == 6
    assert f"servewatch guard: exit 6: {line}" in stderr
    # the incident bundle keeps the GPU readings and the Xid, and its verdict recomputes from them
    from servewatch.bundle.verify import verify_bundle

    fired = next(x for x in lines if x.get("event") == "fired" and x["verdict"] == "gpu_fault")
    verified = verify_bundle(fired["bundle"])
    assert verified.verdicts_checked >= 1
    gpu = [s for s in verified.samples if s.get("source") == "gpu" and s.get("xids")]
    assert gpu and gpu[0]["xids"][0]["xid"] == 79 and gpu[0]["xids"][0]["index"] == 1
