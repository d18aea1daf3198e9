"""The drill's `nvml` fault: the recorder reads NVML through the test-only stand-in library (lab.nvml_stand_in),
its GPUs held by the server's processes, and the scenario's Xid 79 happens at the injection — through the real
nvidia-ml-py calls, on a machine without a GPU."""

from __future__ import annotations

import json
import textwrap

from servewatch.cli import main

PLAN = """
    name: nvml
    target: {engine: sim}
    workload: {scenario: custom, rate: 4, output_tokens: 32}
    recorder: {interval_s: 0.5}
    faults:
      - name: Xid 79 on GPU 1
        kind: nvml
        params: {scenario: xid79}
        warmup_s: 3
        hold_s: 6
        observe_s: 2
        expect:
          fire: {gpu_fault: 3}
          not_fire: [alive_health_ok_no_progress, engine_dead]
          restart: false
          health: ok
      - name: healthy stand-in GPUs
        kind: nvml
        params: {scenario: healthy}
        warmup_s: 2
        hold_s: 6
        observe_s: 1
        expect:
          not_fire: [gpu_fault, gpu_throttled]
          no_incident: true
"""


def test_an_xid_79_on_a_stand_in_gpu_is_a_gpu_fault_within_a_reading_and_healthy_gpus_say_nothing(tmp_path):
    """gpu_fault within 3 s of the Xid (the event thread brings the next GPU reading forward: at most 1 s, then a
    0.5 s detection cadence, 1.5 s of allowance on a shared machine); nothing acted on by the restart class (a GPU
    fault is the drain class's); no verdict at all from healthy GPUs."""
    path = tmp_path / "nvml.yaml"
    path.write_text(textwrap.dedent(PLAN))
    out = tmp_path / "out"
    assert main(["drill", str(path), "--out", str(out)]) == 0
    xid, healthy = json.loads((out / "drill.json").read_text())["faults"]
    assert xid["met"] and healthy["met"], (xid["checks"], healthy["checks"])
    assert 0 < xid["detected"]["gpu_fault"] <= 3
    assert xid["touched"] == [] and xid["facts"]["NVML"].startswith("stand-in: 2 GPUs")
