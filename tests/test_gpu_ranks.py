"""Which GPU each engine rank runs on: NVML's per-device process list (a stand-in `pynvml` module with the
API's shapes, as no GPU is on this machine), kept in bundles, and shown per rank in serve's /api/v1/targets."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

from servewatch.timeline.ranks import gpu_of
from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample, ProcessMember, ProcessSample

NOT_AVAILABLE = 2**64 - 1      # NVML's NVML_VALUE_NOT_AVAILABLE for usedGpuMemory


@dataclass
class Proc:
    pid: int
    usedGpuMemory: int


def fake_nvml(processes_by_device):
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(processes_by_device)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=90 + h)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=10 * 2**30, total=24 * 2**30)
    nvml.nvmlDeviceGetPowerUsage = lambda h: 250_000
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: processes_by_device[h]
    return nvml


def test_nvml_process_lists_say_which_device_each_pid_holds(monkeypatch):
    from servewatch.sources.gpu import NvmlProbe

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([[Proc(111, 9 * 2**30)], [Proc(112, NOT_AVAILABLE)]]))
    sample = NvmlProbe().snapshot(1.0)
    assert [d.processes for d in sample.devices] == [(GpuProcess(111, 9 * 2**30),), (GpuProcess(112, None),)]
    assert gpu_of(111, sample) == (0, 9 * 2**30) and gpu_of(112, sample) == (1, None)
    assert gpu_of(999, sample) is None and gpu_of(111, None) is None


def test_the_process_lists_survive_a_bundle_round_trip():
    import jsonschema

    from servewatch.bundle.schemas import _shipped
    from servewatch.bundle.serialize import sample_from_dict, sample_to_dict

    gpu = GpuSample(1.0, True, (GpuDevice(0, 90.0, 10, 24, 250.0, (GpuProcess(111, 9), GpuProcess(112, None))),))
    as_dict = sample_to_dict(gpu)
    assert sample_from_dict(as_dict) == gpu
    jsonschema.validate([as_dict], samples_schema(_shipped("samples")))
    old = {**as_dict, "devices": [{k: v for k, v in as_dict["devices"][0].items() if k != "processes"}]}
    jsonschema.validate([old], samples_schema(_shipped("samples")))                    # a bundle written before still verifies
    assert sample_from_dict(old).devices[0].processes == ()


def samples_schema(document):
    """The schema of a samples file's "samples" array (its $defs kept for the references)."""
    return {"$schema": document["$schema"], "$defs": document["$defs"], **document["properties"]["samples"]}


def test_serve_api_ranks_carry_their_gpu():
    from servewatch.serve.http_api import _ranks

    members = (ProcessMember(100, 1.0, "api", "python3", "sleeping", 2**30, 30, 20.0, 1),
               ProcessMember(110, 2.0, "engine_core", "VLLM::EngineCore", "sleeping", 2**30, 40, 5.0, 100),
               ProcessMember(111, 3.0, "worker", "VLLM::Worker_TP0", "running", 2**30, 40, 99.0, 110),
               ProcessMember(112, 4.0, "worker", "VLLM::Worker_TP1", "stopped", 2**30, 40, 0.0, 110))
    process = ProcessSample(t=10.0, root_pid=100, root_create_time=1.0, alive=True, members=members)
    gpu = GpuSample(10.0, True, (GpuDevice(0, 99.0, 10, 24, 250.0, (GpuProcess(111, 9 * 2**30),)),
                                 GpuDevice(1, 0.0, 10, 24, 90.0, (GpuProcess(112, 9 * 2**30),))))
    ranks = {r["title"]: (r["state"], r["gpu"], r["gpu_memory_bytes"]) for r in _ranks(process, 11.0, gpu)}
    assert ranks == {"VLLM::EngineCore": ("S", None, None), "VLLM::Worker_TP0": ("R", 0, 9 * 2**30),
                     "VLLM::Worker_TP1": ("T", 1, 9 * 2**30)}
