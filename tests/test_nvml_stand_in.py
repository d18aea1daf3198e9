"""The GPU source through the real nvidia-ml-py calls, answered by the test-only NVML stand-in (a C library
built here with the system compiler) from scenario files: every field with its hand-computed value, every field
NVML cannot give typed with NVML's reason, a GPU that falls off the bus, and Xid events through the event-set
thread into the timeline."""

from __future__ import annotations

import asyncio
import time

import pytest

from servewatch.clock import VirtualClock
from servewatch.sources.gpu import GpuSource
from servewatch.timeline.ranks import gpus_of
from servewatch.timeline.samples import CLOCK_HW_THERMAL, GpuProcess, GpuXid
from tests.nvml_lab import BUS0, BUS1, H100, UUID0, UUID1, StandIn, exec_done, have_compiler, tp2

if not have_compiler():
    pytest.skip("no C compiler (cc or gcc) on PATH to build the NVML stand-in", allow_module_level=True)

T0 = 1_800_000_000.0


@pytest.fixture(scope="session")
def nvml_library(tmp_path_factory):
    from servewatch.lab.nvml_stand_in import build

    return build(tmp_path_factory.mktemp("nvml"))


@pytest.fixture
def stand_in(nvml_library, tmp_path, monkeypatch):
    import pynvml

    yield StandIn(nvml_library, tmp_path, monkeypatch)
    pynvml.nvmlLib = None                       # the next NvmlProbe of this worker loads what it is told to
    pynvml._nvmlGetFunctionPointer_cache.clear()


def test_a_reading_through_pynvml_has_every_field_as_the_scenario_states(stand_in):
    stand_in.write(tp2("at 0 gpu 1 temp=- pcie_replay=!4 reasons=0x44 sm=1200\n"))
    sample = stand_in.probe().snapshot(T0)
    gpu0, gpu1 = sample.devices
    assert sample.available and sample.error is None and sample.xids == ()
    assert (gpu0.index, gpu0.uuid, gpu0.pci_bus_id, gpu0.name) == (0, UUID0, BUS0, H100)
    assert (gpu1.uuid, gpu1.pci_bus_id) == (UUID1, BUS1)
    assert (gpu0.utilization_pct, gpu0.memory_utilization_pct) == (97.0, 41.0)
    assert (gpu0.memory_used_bytes, gpu0.memory_total_bytes) == (72_000_000_000, 80 * 2**30)
    assert (gpu0.power_w, gpu0.power_limit_w) == (610.0, 700.0)             # mW → W
    assert (gpu0.sm_clock_mhz, gpu0.sm_clock_max_mhz, gpu0.memory_clock_mhz) == (1980, 1980, 2619)
    assert (gpu0.temperature_c, gpu0.clock_event_reasons) == (64.0, 0)
    assert (gpu0.ecc_volatile_corrected, gpu0.ecc_volatile_uncorrected, gpu0.ecc_aggregate_corrected,
            gpu0.ecc_aggregate_uncorrected) == (0, 0, 2, 0)
    assert (gpu0.remapped_rows_correctable, gpu0.remapped_rows_uncorrectable, gpu0.remap_pending,
            gpu0.remap_failure, gpu0.pcie_replay) == (1, 0, False, False, 0)
    assert gpu0.processes == (GpuProcess(111, 71_000_000_000, 95.0),)
    assert gpu1.processes == (GpuProcess(112, 71_000_000_000, 94.0),)
    assert gpu0.unavailable == () and not gpu0.lost
    # unset and refused fields: None with NVML's reason, never 0
    assert gpu1.temperature_c is None and gpu1.why_unavailable("temperature_c") == "not_supported"
    assert gpu1.pcie_replay is None and gpu1.why_unavailable("pcie_replay") == "no_permission"
    assert (gpu1.clock_event_reasons, gpu1.sm_clock_mhz) == (0x44, 1200)
    assert gpu1.clock_event_reasons & CLOCK_HW_THERMAL
    assert [d.index for d in gpus_of(112, sample)] == [1] and gpus_of(999, sample) == ()


def test_a_device_without_the_counters_reads_them_unavailable_not_zero(stand_in):
    stand_in.write("device 0 GPU-00000000-0000-0000-0000-000000000001 00000000:01:00.0 NVIDIA L4\n"
                   "at 0 gpu 0 util=12 mem_used=1 mem_total=2\n")
    (device,) = stand_in.probe().snapshot(T0).devices
    assert device.utilization_pct == 12.0
    for name in ("power_w", "power_limit_w", "sm_clock_mhz", "temperature_c", "clock_event_reasons",
                 "ecc_volatile_uncorrected", "pcie_replay", "remap_failure"):
        assert getattr(device, name) is None, name
    reasons = dict(device.unavailable)
    assert reasons["power_w"] == reasons["ecc_volatile_uncorrected"] == reasons["remapped_rows"] == "not_supported"
    assert device.processes == () and "processes" not in reasons          # no process is an answer, not an error
    assert reasons["process_utilization"] == "not_found"                   # NVML: no samples


def test_a_gpu_that_falls_off_the_bus_is_lost_and_keeps_no_numbers(stand_in):
    stand_in.write(tp2("at 5 gpu 1 lost=1\n"))
    probe = stand_in.probe()
    assert not probe.snapshot(T0).devices[1].lost
    stand_in.at(5.0)
    gpu0, gpu1 = probe.snapshot(T0 + 5).devices
    assert gpu1.lost and gpu1.uuid is None and gpu1.utilization_pct is None and gpu1.processes == ()
    assert gpu1.why_unavailable("utilization_pct") == "gpu_is_lost"
    assert not gpu0.lost and gpu0.utilization_pct == 97.0


def test_xid_events_arrive_through_the_event_set_thread_with_their_device_and_code(stand_in):
    stand_in.write(tp2("at 7 xid 1 79\nat 9 xid 0 13\n"))
    probe = stand_in.probe()
    now = [T0]
    probe.start_events(lambda: now[0])
    try:
        assert probe.snapshot(T0).xids == ()
        now[0] = T0 + 7.2
        stand_in.at(7.0)
        assert probe.xid_arrived.wait(10), "no Xid event within 10 s"
        assert probe.snapshot(T0 + 7.5).xids == (GpuXid(T0 + 7.2, 1, 79),)
        assert not probe.xids_pending()
        now[0] = T0 + 9.1
        stand_in.at(9.0)
        assert probe.xid_arrived.wait(10)
        assert probe.snapshot(T0 + 10).xids == (GpuXid(T0 + 9.1, 0, 13),)
    finally:
        probe.close()


def test_the_event_thread_sleeps_in_the_wait_between_events(stand_in):
    """No polling from Python: while no event is due, the thread's CPU time stays near zero (it sits in
    nvmlEventSetWait with a timeout)."""
    stand_in.write(tp2())
    probe = stand_in.probe()
    probe.start_events(time.time)
    try:
        thread = probe._xid_thread
        assert thread is not None and thread.is_alive()
        import threading as _threading

        idle = _threading.Event()
        cpu_before = time.process_time()         # every thread of this process: this one only waits
        assert not idle.wait(0.5)                # an observation period, not a synchronisation
        assert time.process_time() - cpu_before < 0.05
    finally:
        probe.close()
    assert not probe._xid_thread.is_alive()


def test_an_xid_brings_the_reading_forward_in_the_gpu_source(stand_in):
    stand_in.write(tp2("at 2 xid 1 79\n"))
    clock = VirtualClock(T0)
    probe = stand_in.probe()
    source = GpuSource(probe, clock, 5.0, check_every=0.5)   # starts the event thread with the source's clock
    try:
        assert source.interval == 0.5 and source.reading_every == 5.0
        (first,) = asyncio.run(source.poll())
        clock.advance(0.5)
        assert asyncio.run(source.poll()) == []               # no reading due, no event: nothing, no NVML call
        stand_in.at(2.0)
        assert probe.xid_arrived.wait(10)
        clock.advance(0.5)
        (forward,) = asyncio.run(source.poll())               # at +1 s, not at the +5 s reading
        assert forward.t == T0 + 1.0
        assert [(x.index, x.xid) for x in forward.xids] == [(1, 79)]
    finally:
        probe.close()


def test_a_full_reading_and_its_xids_survive_a_bundle_round_trip_and_validate(stand_in):
    import jsonschema

    from servewatch.bundle.schemas import _shipped
    from servewatch.bundle.serialize import sample_from_dict, sample_to_dict
    from tests.test_gpu_ranks import samples_schema

    stand_in.write(tp2("at 0 gpu 1 temp=- pcie_replay=!4 reasons=0x44\nat 5 gpu 0 lost=1\n"))
    probe = stand_in.probe()
    stand_in.at(5.0)
    sample = probe.snapshot(T0)
    sample = type(sample)(sample.t, sample.available, sample.devices, None, (GpuXid(T0 - 0.5, 0, 79),))
    as_dict = sample_to_dict(sample)
    jsonschema.validate([as_dict], samples_schema(_shipped("samples")))
    assert sample_from_dict(as_dict) == sample
    assert as_dict["devices"][1]["unavailable"] == {"temperature_c": "not_supported", "pcie_replay": "no_permission"}
    assert as_dict["devices"][0]["lost"] is True and "uuid" not in as_dict["devices"][0]
    assert as_dict["xids"] == [{"t": T0 - 0.5, "index": 0, "xid": 79}]


def test_a_scenario_maps_its_gpus_to_processes_by_title_or_command_line(stand_in):
    """How the lab maps the stand-in's GPUs to real rank PIDs it cannot know in advance: by the process title a
    rank sets (vLLM's setproctitle leaves it as argv[0], e.g. VLLM::Worker_TP1), or by text in the command line."""
    import subprocess
    import sys
    import uuid

    tag = uuid.uuid4().hex[:8]
    title = f"SWTEST::Worker_TP1_{tag}"                    # unique: a real lab engine may run on this machine
    ranked = subprocess.Popen([title, "60"], executable="sleep")
    marked = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", f"--marker-{tag}"],
                              stdin=subprocess.PIPE)
    try:
        exec_done(ranked, title)
        exec_done(marked, f"--marker-{tag}")
        stand_in.write(tp2(pids=(f"cmdline:--marker-{tag}", f"title:{title}")))
        gpu0, gpu1 = stand_in.probe().snapshot(T0).devices
        assert [p.pid for p in gpu0.processes] == [marked.pid] and [p.pid for p in gpu1.processes] == [ranked.pid]
        assert gpu1.processes[0] == GpuProcess(ranked.pid, 71_000_000_000, 94.0)
    finally:
        for proc in (ranked, marked):
            proc.kill()
            proc.wait(10)


def test_the_lab_scenarios_map_rank_titles_and_fault_at_the_injection(nvml_library, tmp_path, monkeypatch):
    """What a lab run does: prepare("xid79", the TP=2 titles) → the watcher's environment and the clock; the
    injection makes the Xid due on rank 1's GPU."""
    import subprocess
    import uuid

    import pynvml

    from servewatch.lab import nvml_stand_in as lab

    titles = [f"SWLAB::Worker_TP{n}_{uuid.uuid4().hex[:6]}" for n in range(2)]
    ranks = [subprocess.Popen([title, "60"], executable="sleep") for title in titles]
    try:
        for proc, title in zip(ranks, titles):
            exec_done(proc, title)
        env, clock = lab.prepare(tmp_path, "xid79", titles)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        from servewatch.sources.gpu import NvmlProbe

        probe = NvmlProbe()
        probe.start_events(lambda: T0)
        try:
            before = probe.snapshot(T0)
            assert [[p.pid for p in d.processes] for d in before.devices] == [[ranks[0].pid], [ranks[1].pid]]
            assert [d.uuid for d in before.devices] == [lab.gpu_uuid(0), lab.gpu_uuid(1)]
            clock.inject()
            assert probe.xid_arrived.wait(10)
            after = probe.snapshot(T0 + 1)
            assert after.xids == (GpuXid(T0, 1, 79),) and after.devices[1].lost
        finally:
            probe.close()
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait(10)
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
