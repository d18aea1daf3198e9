"""The GPU steps of the real TP=2 plan (tests/conformance/plans/multirank-vllm.yaml), proven first on the
simulator through the same drill, the same `nvml` fault and the real nvidia-ml-py calls answered by the test-only
NVML stand-in: a thermal throttle under steady streams is gpu_throttled and not overload; steady healthy GPUs
under light load give no GPU verdict; guard with its defaults on an Xid 79 kills the tree and exits 6 with the
one hardware line, and nothing of the restart class acts; the bundle it wrote shows the GPU panel with the Xid."""

from __future__ import annotations

import json
import textwrap

import pytest

from servewatch.bundle.incident import load_incident
from servewatch.bundle.report_html import render_incident_page
from servewatch.bundle.summarize import render_markdown
from servewatch.cli import main
from tests.nvml_lab import have_compiler

UUID1 = "GPU-5e4e0000-0000-4000-8000-000000000001"     # the lab scenarios' GPU 1 (lab.nvml_stand_in.gpu_uuid(1))

PLAN = """
    name: gpu-steps
    target: {engine: sim}
    workload: {scenario: custom, rate: 4, output_tokens: 32}
    recorder: {interval_s: 0.5}
    faults:
      # four closed-loop streams on the simulator's slots (never a queue), its step time x3 at the throttle:
      # gpu_throttled at the first GPU reading 10 s (gpu_throttle_sustain_s) after the first throttled one (GPU
      # readings every 5 s at this 0.5 s cadence, each scheduled from the last: 10-15 s and the readings' drift), a
      # cadence and 2.5 s for a machine shared with other tests: 18 s (measured 15.41, 15.41 and 16.41 s)
      - name: thermal throttle on GPU 1 under four streams
        kind: nvml
        params: {scenario: thermal}
        workload: {scenario: custom, concurrency: 4, prompt_tokens: 44, output_tokens: 64}
        warmup_s: 5
        hold_s: 20
        observe_s: 1
        expect:
          fire: {gpu_throttled: 18}
          names: ["GPU 1 (GPU-5e4e0000-0000-4000-8000-000000000001", "thermal", "the GPU is slowed, not the demand up"]
          not_fire: [overload, gpu_fault, alive_health_ok_no_progress]
          restart: false
          health: ok
          max_error_rate: 0
      - name: steady healthy GPUs under light load
        kind: nvml
        params: {scenario: healthy}
        workload: {scenario: normal, rate: 1.0}
        warmup_s: 2
        hold_s: 8
        observe_s: 0
        expect:
          no_incident: true
          not_fire: [gpu_fault, gpu_throttled]
          restart: false
          max_error_rate: 0
      - name: guard on an Xid 79 under four streams
        kind: nvml
        params: {scenario: xid79}
        workload: {scenario: custom, concurrency: 4, prompt_tokens: 44, output_tokens: 64}
        warmup_s: 3
        hold_s: 6
        observe_s: 2
        guard: true
        expect:
          fire: {gpu_fault: 3}
          names: ["GPU 1 (GPU-5e4e0000-0000-4000-8000-000000000001", "Xid 79 (GPU has fallen off the bus"]
          restart: false
          guard: {kills: true, within_s: 5, stacks_of: [api], exit: 6,
                  says: ["hardware: GPU 1 (GPU-5e4e0000-0000-4000-8000-000000000001", "Xid 79 (GPU has fallen off the bus)",
                         "do not restart on this GPU"]}
"""


@pytest.mark.skipif(not have_compiler(), reason="no C compiler (cc or gcc): the NVML stand-in cannot be built")
def test_the_real_plans_gpu_steps_hold_on_the_simulator(tmp_path):
    path = tmp_path / "gpu-steps.yaml"
    path.write_text(textwrap.dedent(PLAN))
    out = tmp_path / "out"
    code = main(["drill", str(path), "--out", str(out)])
    thermal, healthy, guard = json.loads((out / "drill.json").read_text())["faults"]
    for step in (thermal, healthy, guard):
        assert step["met"], (step["name"], [c for c in step["checks"] if not c["met"]])
    assert code == 0
    assert thermal["facts"]["slowed"] == "the simulator's step time x3"
    assert guard["guard"]["exit"] == 6 and guard["guard"]["acted_on"] == "gpu_fault"
    said = guard["guard"]["said"]
    assert said.startswith(f"hardware: GPU 1 ({UUID1}, bus ") and said.endswith(
        "Xid 79 (GPU has fallen off the bus), do not restart on this GPU"), said
    # the bundle guard wrote, recorded through the stand-in's xid79 scenario: its report's GPU panel names the GPU
    # and marks the Xid, in the HTML page and the Markdown summary
    bundle = next((out / "bundles" / "03-nvml").glob("**/incident-*gpu_fault*"))
    incident = load_incident(bundle)
    page, text = render_incident_page(incident), render_markdown(incident)
    gpu1 = f"GPU 1 ({UUID1}, bus 00000000:18:00.0, NVIDIA H100 80GB HBM3)"
    for shown in (page, text):
        assert "GPUs per rank" in shown and gpu1 in shown and "Xid 79 at +" in shown
        assert "(GPU has fallen off the bus; NVIDIA: reboot the node)" in shown
    assert ">Xid 79</text>" in page          # marked on the panel's chart
