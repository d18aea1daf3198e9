"""gpu_fault and gpu_throttled on windows whose GPU readings come from the real pynvml calls answered by the NVML
stand-in (a TP=2 engine: VLLM::Worker_TP0 pid 111 on GPU 0, VLLM::Worker_TP1 pid 112 on GPU 1), and on
hand-built readings for the Xid table's edges. Every expected line and number is worked out from the scenario."""

from __future__ import annotations

import pytest

from servewatch.detectors import DetectorConfig, registry, run_detectors
from servewatch.detectors import xid as xids
from servewatch.detectors.verdict import DRAIN
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import (GpuDevice, GpuProcess, GpuSample, GpuXid, HealthSample, MetricsSample,
                                         ProcessMember, ProcessSample)
from servewatch.timeline.window import Window
from tests.nvml_lab import BUS0, BUS1, H100, UUID0, UUID1, StandIn, have_compiler, tp2

T0 = 1_800_000_000.0
CONFIG = DetectorConfig()


def tree(t):
    members = (ProcessMember(100, 1.0, "api", "python3", "sleeping", 2**30, 30, 20.0, 1),
               ProcessMember(110, 2.0, "engine_core", "VLLM::EngineCore", "sleeping", 2**30, 40, 2.0, 100),
               ProcessMember(111, 3.0, "worker", "VLLM::Worker_TP0", "running", 2**30, 40, 99.0, 110),
               ProcessMember(112, 4.0, "worker", "VLLM::Worker_TP1", "running", 2**30, 40, 99.0, 110))
    return ProcessSample(t=t, root_pid=100, root_create_time=1.0, alive=True, members=members)


def scrape(t, tokens, running=16, waiting=0, prompt=None):
    state = EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=running, waiting=waiting,
                        counters=Counters(prompt_tokens=prompt if prompt is not None else tokens,
                                          generation_tokens=tokens, steps=tokens / 16))
    return MetricsSample(t, "vllm", "vllm-0.32", (state,))


def engine(span, tokens_at, *, running=16, waiting=0, prompt_at=None):
    """Health, process and metrics samples every second for `span` s: tokens_at(s) generated tokens at T0+s."""
    seconds = range(int(span) + 1)
    return dict(health=tuple(HealthSample(T0 + s, 200, 0.01) for s in seconds),
                process=tuple(tree(T0 + s) for s in seconds),
                metrics=tuple(scrape(T0 + s, tokens_at(s), running, waiting,
                                     prompt_at(s) if prompt_at else None) for s in seconds))


@pytest.fixture
def stand_in(tmp_path, tmp_path_factory, monkeypatch):
    if not have_compiler():
        pytest.skip("no C compiler (cc or gcc) on PATH to build the NVML stand-in")
    import pynvml

    from servewatch.lab.nvml_stand_in import build

    yield StandIn(build(tmp_path_factory.getbasetemp() / "nvml"), tmp_path, monkeypatch)
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()


def readings(stand_in, scenario, times, probe=None):
    """A GPU reading at each scenario time (s after T0), through pynvml and the stand-in."""
    stand_in.write(scenario)
    probe = probe or stand_in.probe()
    out = []
    for s in times:
        stand_in.at(s)
        out.append(probe.snapshot(T0 + s))
    return out


# --- gpu_fault ------------------------------------------------------------------------------------------

def test_xid_79_on_rank_1s_gpu_is_a_gpu_fault_naming_gpu_rank_and_xid(stand_in):
    stand_in.write(tp2("at 7 xid 1 79\nat 7 gpu 1 lost=1\n"))
    probe = stand_in.probe()
    now = [T0]
    probe.start_events(lambda: now[0])
    try:
        gpu = readings(stand_in, stand_in.scenario.read_text(), (0, 5), probe)
        now[0] = T0 + 7.3
        stand_in.at(7.0)
        assert probe.xid_arrived.wait(10)
        stand_in.at(7.5)
        gpu.append(probe.snapshot(T0 + 7.5))            # the reading the Xid brought forward
    finally:
        probe.close()
    assert gpu[-1].xids == (GpuXid(T0 + 7.3, 1, 79),) and gpu[-1].devices[1].lost
    window = Window(gpu=tuple(gpu), **engine(8, lambda s: 1000 * s))
    verdicts = {v.name: v for v in run_detectors(window, CONFIG)}
    fault = verdicts["gpu_fault"]
    assert fault.why == (f"GPU 1 ({UUID1}, bus {BUS1}, {H100}) under TP rank 1 of 2 (VLLM::Worker_TP1, pid 112): "
                         "Xid 79 (GPU has fallen off the bus; NVIDIA: reboot the node): do not restart on this GPU")
    assert (fault.onset, fault.t) == (T0 + 7.3, T0 + 8)
    assert fault.details == {"fault": "xid", "gpu_index": 1, "gpu_uuid": UUID1, "gpu_bus_id": BUS1, "xid": 79,
                             "xid_mnemonic": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "action": "reboot",
                             "hardware": True, "rank": "TP1", "rank_pid": 112, "gpus": 1}
    assert registry.acts(fault, DRAIN) and registry.action_of("gpu_fault") == DRAIN
    assert "gpu_throttled" not in verdicts
    from servewatch.bundle.serialize import verdict_to_dict

    stored = verdict_to_dict(fault)                          # what a bundle keeps: every detail, nothing redacted
    assert stored["details"] == fault.details and stored["why"] == fault.why


def test_an_xid_on_a_gpu_the_engine_does_not_hold_is_not_its_fault():
    other = GpuSample(T0 + 1, True, (GpuDevice(0, 97.0, 1, 2, 600.0, (GpuProcess(111, 1),)),
                                     GpuDevice(2, 97.0, 1, 2, 600.0, (GpuProcess(999, 1),))),
                      xids=(GpuXid(T0 + 1, 2, 79),))
    window = Window(gpu=(other,), **engine(2, lambda s: 1000 * s))
    assert [v.name for v in run_detectors(window, CONFIG)] == []


@pytest.mark.parametrize("code, action, hardware", [(13, "restart_app", False), (95, "reset_gpu", True),
                                                    (48, "workflow", False), (999, "unknown", False)])
def test_the_xid_table_decides_whether_the_fault_needs_the_hardware(code, action, hardware):
    gpu = GpuSample(T0 + 1, True, (GpuDevice(0, 97.0, 1, 2, 600.0, (GpuProcess(111, 1),), uuid=UUID0),),
                    xids=(GpuXid(T0 + 1, 0, code),))
    (fault,) = [v for v in run_detectors(Window(gpu=(gpu,), **engine(2, lambda s: 1000 * s)), CONFIG)
                if v.name == "gpu_fault"]
    row = xids.lookup(code)
    assert (fault.details["action"], fault.details["hardware"], fault.details["xid"]) == (action, hardware, code)
    assert f"Xid {code} ({row.meaning}; NVIDIA: {xids.ACTION_WORDS[action]})" in fault.why
    assert registry.acts(fault, DRAIN) is hardware          # only a hardware fault drains; the rest is reported
    assert (xids.lookup(999).mnemonic, xids.lookup(999).action) == ("UNKNOWN", "unknown")   # never guessed


def test_informational_xids_and_slowly_growing_correctable_ecc_are_silent():
    def reading(s):
        return GpuSample(T0 + s, True, (GpuDevice(0, 97.0, 1, 2, 600.0, (GpuProcess(111, 1),),
                                                  ecc_volatile_corrected=s // 10, ecc_volatile_uncorrected=0),),
                         xids=(GpuXid(T0 + s, 0, 63), GpuXid(T0 + s, 0, 92)) if s == 30 else ())
    window = Window(gpu=tuple(reading(s) for s in range(0, 61, 5)), **engine(60, lambda s: 1000 * s))
    assert run_detectors(window, CONFIG) == []


def test_an_uncorrectable_ecc_count_that_rises_is_a_hardware_fault():
    def reading(s):
        return GpuSample(T0 + s, True, (GpuDevice(0, 97.0, 1, 2, 600.0, (GpuProcess(111, 1),), uuid=UUID0,
                                                  pci_bus_id=BUS0, ecc_volatile_uncorrected=0 if s < 10 else 2),))
    window = Window(gpu=tuple(reading(s) for s in (0, 5, 10, 15)), **engine(15, lambda s: 1000 * s))
    (fault,) = run_detectors(window, CONFIG)
    assert fault.why == (f"GPU 0 ({UUID0}, bus {BUS0}) under TP rank 0 of 2 (VLLM::Worker_TP0, pid 111): "
                         "uncorrectable ECC errors 0 → 2 in the window; reset the GPU: do not restart on this GPU")
    assert fault.onset == T0 + 10 and registry.acts(fault, DRAIN)


# --- gpu_throttled --------------------------------------------------------------------------------------

def thermal(s):
    """1000 tokens/s until the GPU throttles at 30 s, 500/s after."""
    return 1000 * s if s <= 30 else 30_000 + 500 * (s - 30)


def test_a_thermal_throttle_under_load_is_gpu_throttled_not_overload(stand_in):
    gpu = readings(stand_in, tp2("at 30 gpu 0 reasons=0x40 sm=1100 temp=88\n"), range(0, 61, 5))
    # a queue of 4 for the whole minute: overload's own rule (waiting > 0 for ≥ 10 s, mean ≥ 2, tokens moving)
    window = Window(gpu=tuple(gpu), **engine(60, thermal, waiting=4))
    verdicts = run_detectors(window, CONFIG)
    assert [v.name for v in verdicts] == ["gpu_throttled"]
    (throttled,) = verdicts
    assert throttled.why == (f"GPU 0 ({UUID0}, bus {BUS0}, {H100}) under TP rank 0 of 2 (VLLM::Worker_TP0, pid 111): "
                             "SM clock 1100 of 1980 MHz held by HW thermal slowdown for 30 s, 88 °C, 610 of 700 W; "
                             "tokens 1000/s → 500/s (-50%) with 16 running: the GPU is slowed, not the demand up")
    assert throttled.onset == T0 + 30
    assert (throttled.details["cause"], throttled.details["tokens_per_s_before"],
            throttled.details["tokens_per_s_after"]) == ("thermal", 1000.0, 500.0)
    assert not registry.acts(throttled, DRAIN) and registry.action_of("gpu_throttled") == "page"
    # the same queue without the throttle reads as overload, as before
    healthy = Window(gpu=tuple(readings(stand_in, tp2(), range(0, 61, 5))), **engine(60, thermal, waiting=4))
    assert [v.name for v in run_detectors(healthy, CONFIG)] == ["overload"]


def test_a_throttle_shorter_than_the_sustain_or_without_a_rate_drop_is_silent(stand_in):
    brief = readings(stand_in, tp2("at 55 gpu 0 reasons=0x80 sm=900\n"), range(0, 61, 5))    # 5 s < 10 s
    assert run_detectors(Window(gpu=tuple(brief), **engine(60, thermal)), CONFIG) == []
    held = readings(stand_in, tp2("at 30 gpu 0 reasons=0x8 sm=900\n"), range(0, 61, 5))
    steady = Window(gpu=tuple(held), **engine(60, lambda s: 1000 * s))         # rate not down: not the cause
    assert run_detectors(steady, CONFIG) == []


def test_a_steady_healthy_busy_engine_has_no_gpu_verdict(stand_in):
    # at full load under its power cap (a SW power cap is normal), correctable ECC creeping up 0 → 3
    scenario = tp2("at 20 gpu 0 reasons=0x4 sm=1755 ecc_vol_corr=1\nat 40 gpu 0 ecc_vol_corr=3\n")
    gpu = readings(stand_in, scenario, range(0, 121, 5))
    assert gpu[-1].devices[0].ecc_volatile_corrected == 3 and gpu[-1].devices[0].clock_event_reasons == 0x4
    assert run_detectors(Window(gpu=tuple(gpu), **engine(120, lambda s: 1000 * s)), CONFIG) == []


def test_an_idle_engine_and_a_long_prefill_have_no_gpu_verdict(stand_in):
    idle = tp2("at 0 gpu 0 util=0 reasons=0x1 sm=345 power_mw=70000\nat 0 gpu 1 util=0 reasons=0x1 sm=345\n")
    gpu = readings(stand_in, idle, range(0, 61, 5))
    assert run_detectors(Window(gpu=tuple(gpu), **engine(60, lambda s: 5000, running=0)), CONFIG) == []
    # one long prompt: no generated token for 40 s while the prompt tokens move, clocks at their maximum
    busy = readings(stand_in, tp2(), range(0, 61, 5))
    prefill = engine(60, lambda s: 1000 * min(s, 20), running=1, prompt_at=lambda s: 2000 * s)
    names = [v.name for v in run_detectors(Window(gpu=tuple(busy), **prefill), CONFIG)]
    assert not [n for n in names if n.startswith("gpu_")], names


# --- the GPU of each rank in the stall and rank verdicts --------------------------------------------------

def test_rank_stalled_says_which_rank_launches_no_work_on_its_gpu(stand_in):
    """vllm#41725's shape: the stopped rank's GPU idle at 0 % while its peer's GPU spins at 98 % and 85 W (of 700)
    waiting in the collective."""
    import dataclasses

    from tests import test_detectors_ranks as r

    scenario = tp2("at 9 gpu 0 util=98 power_mw=85000 sm=1980\nat 9 gpu 1 util=0 power_mw=70000 sm=345\n")
    gpu = readings(stand_in, scenario, (0, 5, 10))
    gpu = [dataclasses.replace(g, t=r.T0 + s) for g, s in zip(gpu, (0, 5, 10))]
    w = dataclasses.replace(r.window(r.stopped_at(10.0), probes=[r.missed(10.5)], span=14.0), gpu=tuple(gpu))
    (verdict,) = [v for v in run_detectors(w, CONFIG) if v.name == "rank_stalled"]
    assert verdict.why.endswith("; /health 200; GPUs: TP rank 0 GPU 0 98 % at 85 of 700 W (spinning or waiting), "
                                "TP rank 1 GPU 1 idle 0 % at 70 of 700 W: TP rank 1 is not launching work")
    assert verdict.details["gpus"] == "TP0=spin,TP1=idle"


def test_a_stall_carries_each_ranks_gpu_and_no_gpu_reading_changes_nothing(stand_in):
    import dataclasses

    base = Window(**engine(40, lambda s: min(s, 10) * 1000, running=8))   # tokens stop at 10 s, 8 running
    (stall,) = [v for v in run_detectors(base, CONFIG) if v.name == "alive_health_ok_no_progress"]
    assert "GPUs:" not in stall.why and "gpus" not in stall.details
    gpu = readings(stand_in, tp2("at 10 gpu 0 util=100 power_mw=90000\nat 10 gpu 1 util=100 power_mw=88000\n"),
                   range(0, 41, 5))
    (with_gpu,) = [v for v in run_detectors(dataclasses.replace(base, gpu=tuple(gpu)), CONFIG)
                   if v.name == "alive_health_ok_no_progress"]
    assert with_gpu.why == stall.why + ("; GPUs: TP rank 0 GPU 0 100 % at 90 of 700 W (spinning or waiting), "
                                        "TP rank 1 GPU 1 100 % at 88 of 700 W (spinning or waiting)")
    assert with_gpu.details == {**stall.details, "gpus": "TP0=spin,TP1=spin"}


# --- Xid 154: the driver's recovery action wins ------------------------------------------------------------

def xid154_window(stand_in, extra):
    stand_in.write(tp2(extra + "at 5 xid 1 154\n"))
    stand_in.at(0.0)
    probe = stand_in.probe()
    probe.start_events(lambda: T0 + 5.1)
    try:
        gpu = readings(stand_in, stand_in.scenario.read_text(), (0,), probe)
        stand_in.at(5.0)
        assert probe.xid_arrived.wait(10)
        gpu.append(probe.snapshot(T0 + 5.5))
    finally:
        probe.close()
    return Window(gpu=tuple(gpu), **engine(6, lambda s: 1000 * s))


def test_xid_154_takes_the_recovery_action_nvml_reports(stand_in):
    window = xid154_window(stand_in, "at 5 gpu 1 recovery_action=1\n")
    assert window.gpu[-1].devices[1].recovery_action == 1 and window.gpu[0].devices[1].recovery_action == 0
    (fault,) = run_detectors(window, CONFIG)
    assert fault.why == (f"GPU 1 ({UUID1}, bus {BUS1}, {H100}) under TP rank 1 of 2 (VLLM::Worker_TP1, pid 112): Xid 154 "
                         "(the driver's recovery action for the GPU changed: reset the GPU; NVIDIA: reset the GPU): "
                         "do not restart on this GPU")
    assert (fault.details["action"], fault.details["hardware"]) == ("reset_gpu", True) and registry.acts(fault, DRAIN)


def test_xid_154_without_a_readable_recovery_action_is_reported_not_acted_on(stand_in):
    window = xid154_window(stand_in, "at 0 gpu 1 recovery_action=-\n")      # a driver before the field
    assert window.gpu[-1].devices[1].why_unavailable("recovery_action") == "not_supported"
    (fault,) = run_detectors(window, CONFIG)
    assert (fault.details["action"], fault.details["hardware"]) == ("recovery", False)
    assert not registry.acts(fault, DRAIN)
    none = xid154_window(stand_in, "at 5 gpu 1 recovery_action=0\n")      # the driver says: nothing to do
    assert run_detectors(none, CONFIG) == []


def test_nvlink_error_totals_are_read_with_the_recovery_action(stand_in):
    (reading,) = readings(stand_in, tp2("at 0 gpu 0 nvlink_crc=7 nvlink_replay=2 nvlink_recovery=0\n"
                                        "at 0 gpu 1 nvlink_crc=- nvlink_replay=- nvlink_recovery=-\n"), (0,))
    gpu0, gpu1 = reading.devices
    assert (gpu0.nvlink_crc_errors, gpu0.nvlink_replay_errors, gpu0.nvlink_recovery_errors) == (7, 2, 0)
    assert gpu1.nvlink_crc_errors is None and gpu1.why_unavailable("nvlink_crc_errors") == "not_supported"


def test_the_rate_before_a_throttle_is_the_baseline_just_before_not_an_idle_start(stand_in):
    """Idle for the first 30 s, then 1000 tokens/s, then the throttle at 60 s halving it: the baseline is the
    30 s before the throttle (1000/s), not the minute since the window began (500/s, which 500/s would not be
    under)."""
    def rate(s):
        return 0 if s <= 30 else 1000 * (s - 30) if s <= 60 else 30_000 + 500 * (s - 60)

    gpu = readings(stand_in, tp2("at 60 gpu 0 reasons=0x40 sm=1100 temp=88\n"), range(0, 91, 5))
    (throttled,) = run_detectors(Window(gpu=tuple(gpu), **engine(90, rate)), CONFIG)
    assert throttled.name == "gpu_throttled"
    assert (throttled.details["tokens_per_s_before"], throttled.details["tokens_per_s_after"]) == (1000.0, 500.0)


def test_a_rank_on_no_gpus_process_list_is_said_absent(stand_in):
    """TP rank 1 (pid 112) on no GPU's process list (another PID namespace, a rank that never opened its CUDA
    context): absent, not guessed from its GPU index; its peer's GPU spinning at low power."""
    import dataclasses

    from tests import test_detectors_ranks as r

    scenario = tp2("at 9 gpu 0 util=98 power_mw=85000 sm=1980\n", pids=(111, 999))
    gpu = readings(stand_in, scenario, (0, 5, 10))
    gpu = [dataclasses.replace(g, t=r.T0 + s) for g, s in zip(gpu, (0, 5, 10))]
    w = dataclasses.replace(r.window(r.stopped_at(10.0), probes=[r.missed(10.5)], span=14.0), gpu=tuple(gpu))
    (verdict,) = [v for v in run_detectors(w, CONFIG) if v.name == "rank_stalled"]
    assert verdict.why.endswith("; GPUs: TP rank 0 GPU 0 98 % at 85 of 700 W (spinning or waiting), TP rank 1 on no "
                                "GPU (absent from NVML's process lists): TP rank 1 is not launching work"), verdict.why
    assert verdict.details["gpus"] == "TP0=spin,TP1=absent"
