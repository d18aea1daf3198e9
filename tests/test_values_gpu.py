"""Value tests of detectors/gpu.py (issue 40): gpu_fault and gpu_throttled as whole verdicts on hand-built readings
(a TP=2 engine: VLLM::Worker_TP0 pid 111 on GPU 0, VLLM::Worker_TP1 pid 112 on GPU 1), the rule of the GPUs held,
the GPU of each rank, a node's problems, and a boundary test (just under, at, just over) for each threshold:
  gpu_clock_held_share     throttled while the SM clock is under that share of its maximum (`<`: at it is not);
  gpu_throttle_sustain_s   throttled that long fires (`>=`);
  gpu_throttle_drop        the token rate at (1 - drop) x the rate before fires (`>` that: silent);
  gpu_throttle_baseline_s  a scrape at exactly onset - baseline is in the rate before;
  IDLE_PCT (`<`: idle), BUSY_PCT (`>=`) and SPIN_POWER_SHARE (`<`: spinning) of a rank's GPU."""

from __future__ import annotations

from servewatch.detectors import gpu as G
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.evidence import gpus as GE
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import (CLOCK_HW_POWER_BRAKE, CLOCK_HW_SLOWDOWN, CLOCK_HW_THERMAL, CLOCK_SW_POWER_CAP,
                                         CLOCK_SW_THERMAL, GpuDevice, GpuProcess, GpuSample, GpuXid, MetricsSample,
                                         ProcessMember, ProcessSample)
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
SHARE, SUSTAIN = CONFIG.gpu_clock_held_share, CONFIG.gpu_throttle_sustain_s
DROP, BASELINE = CONFIG.gpu_throttle_drop, CONFIG.gpu_throttle_baseline_s
TP1 = "TP rank 1 of 2 (VLLM::Worker_TP1, pid 112)"


def tree(t=T0):
    members = (ProcessMember(100, 1.0, "api", "python3", "sleeping", ppid=1),
               ProcessMember(110, 2.0, "engine_core", "VLLM::EngineCore", "sleeping", ppid=100),
               ProcessMember(111, 3.0, "worker", "VLLM::Worker_TP0", "running", ppid=110),
               ProcessMember(112, 4.0, "worker", "VLLM::Worker_TP1", "running", ppid=110))
    return ProcessSample(t, 100, 1.0, True, members)


def dev(index, pids=None, **kw):
    pids = (111 + index,) if pids is None else pids
    base = dict(utilization_pct=90.0, memory_used_bytes=1, memory_total_bytes=2, power_w=300.0,
                processes=tuple(GpuProcess(p, 1) for p in pids), uuid=f"GPU-{index}",
                pci_bus_id=f"00000000:0{index}:00.0", name="NVIDIA H100", power_limit_w=700.0)
    return GpuDevice(index, **{**base, **kw})


def reading(t, *devices, xids=(), server_pod=None):
    return GpuSample(T0 + t, True, tuple(devices) or (dev(0), dev(1)), xids=tuple(xids), server_pod=server_pod)


def fault(*gpu, process=True):
    w = Window(gpu=tuple(gpu), process=(tree(gpu[-1].t),) if process else ())
    return G.detect_gpu_fault(w, CONFIG)


# --- gpu_fault ------------------------------------------------------------------------------------------------

def test_an_xid_that_needs_the_hardware_is_the_whole_verdict():
    gpu = (reading(1), reading(2, xids=[GpuXid(T0 + 1.5, 1, 79)]), reading(3))
    assert fault(*gpu) == [Verdict(
        "gpu_fault", T0 + 3, T0 + 1.5,
        f"GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100) under {TP1}: Xid 79 (GPU has fallen off the bus; NVIDIA: "
        "reboot the node): do not restart on this GPU",
        (Evidence("gpu", T0 + 2, "xids.1", 79),),
        {"fault": "xid", "gpu_index": 1, "gpu_uuid": "GPU-1", "gpu_bus_id": "00000000:01:00.0", "xid": 79,
         "xid_mnemonic": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "action": "reboot", "hardware": True,
         "rank": "TP1", "rank_pid": 112, "gpus": 1}, action="drain")]


def test_the_hardware_fault_first_then_the_oldest_and_the_others_counted():
    gpu = (reading(1), reading(2, xids=[GpuXid(T0 + 1.2, 0, 13), GpuXid(T0 + 1.8, 1, 79), GpuXid(T0 + 1.6, 1, 46)]))
    v, = fault(*gpu)
    assert (v.details["xid"], v.onset) == (46, T0 + 1.6)
    assert v.why.endswith(": reset the GPU): do not restart on this GPU (and 1 more GPU(s))")
    assert v.details["gpus"] == 2
    v, = fault(reading(1, xids=[GpuXid(T0 + 0.5, 0, 13)]), reading(2))
    assert v.why == ("GPU 0 (GPU-0, bus 00000000:00:00.0, NVIDIA H100) under TP rank 0 of 2 (VLLM::Worker_TP0, pid 111): "
                     "Xid 13 (graphics engine exception; NVIDIA: restart the process): a restart of the process helps")
    assert (v.details["action"], v.details["hardware"], v.details["gpus"], v.action) == ("restart_app", False, 1,
                                                                                          "restart")
    v, = fault(reading(1, xids=[GpuXid(T0 + 0.5, 0, 48)]), reading(2))
    assert v.why.endswith("NVIDIA: follow NVIDIA's workflow for it): a person decides")
    assert (v.details["action"], v.action) == ("workflow", "page")
    # informational, or on a GPU the engine does not hold: nothing
    assert fault(reading(1, xids=[GpuXid(T0 + 0.5, 0, 63)]), reading(2)) == []
    other = dev(2, pids=(999,))
    assert fault(reading(1, dev(0), other, xids=[GpuXid(T0 + 0.5, 2, 79)]), reading(2, dev(0), other)) == []
    # no reading at all, or none available
    assert fault(GpuSample(T0, False, error="unavailable")) == []
    # the onset is never after the window's end
    v, = fault(reading(1), reading(2, xids=[GpuXid(T0 + 9, 1, 79)]))
    assert (v.t, v.onset) == (T0 + 2, T0 + 2)


def test_xid_154_takes_the_recovery_action_the_driver_reported():
    gpu = (reading(1), reading(2, dev(0), dev(1, recovery_action=2), xids=[GpuXid(T0 + 1.5, 1, 154)]))
    v, = fault(*gpu)
    assert v.why == (f"GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100) under {TP1}: Xid 154 (the driver's recovery "
                     "action for the GPU changed: reboot the node; NVIDIA: reboot the node): do not restart on this GPU")
    assert (v.details["action"], v.details["hardware"], v.evidence) == ("reboot", True, (Evidence("gpu", T0 + 2, "xids.1", 154),))
    # the action of a device read before is not the newest reading's: the catalogue's "recovery" stands
    gpu = (reading(1, dev(0), dev(1, recovery_action=2)), reading(2, xids=[GpuXid(T0 + 1.5, 1, 154)]))
    v, = fault(*gpu)
    assert (v.details["action"], v.details["hardware"]) == ("recovery", False)


def test_a_lost_gpu_is_named_by_its_last_known_identity():
    lost = dev(1, uuid=None, pci_bus_id=None, name=None, lost=True)
    v, = fault(reading(1), reading(2, dev(0), lost), reading(3, dev(0), lost))
    assert v == Verdict(
        "gpu_fault", T0 + 3, T0 + 2,
        f"GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100) under {TP1}: the GPU is lost (NVML: GPU is lost; fallen off "
        "the bus); NVIDIA: reboot the node: do not restart on this GPU",
        (Evidence("gpu", T0 + 2, "devices.1.lost", True),),
        {"fault": "lost", "gpu_index": 1, "gpu_uuid": "GPU-1", "gpu_bus_id": "00000000:01:00.0", "xid": None,
         "xid_mnemonic": None, "action": "reboot", "hardware": True, "rank": "TP1", "rank_pid": 112, "gpus": 1},
        action="drain")
    # a GPU never known: its index alone
    v, = fault(reading(1, dev(0), lost))
    assert v.why.startswith(f"GPU 1 under {TP1}: the GPU is lost")
    assert (v.details["gpu_uuid"], v.details["gpu_bus_id"]) == (None, None)


def test_nvmls_recovery_action_without_an_xid():
    for action, words, hardware, ours, tail in ((1, "reset the GPU", True, "reset_gpu", ": do not restart on this GPU"),
                                               (3, "drain peer-to-peer traffic", False, "workflow", ": a person decides"),
                                               (9, "unknown", False, "unknown", ": a person decides")):
        v, = fault(reading(1), reading(2, dev(0), dev(1, recovery_action=action)),
                   reading(3, dev(0), dev(1, recovery_action=action)))
        assert v.why == f"GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100) under {TP1}: NVML's recovery action is " \
                        f"{action} ({words}){tail}", action
        assert (v.onset, v.evidence, v.details["action"], v.details["hardware"], v.details["fault"]) == (
            T0 + 2, (Evidence("gpu", T0 + 2, "devices.1.recovery_action", action),), ours, hardware, "recovery_action")
    assert fault(reading(1), reading(2, dev(0), dev(1, recovery_action=0))) == []
    assert G.identity_recovery(Window(gpu=(reading(1, dev(1, recovery_action=2)), reading(2, dev(1)))), 1) == 2
    assert G.identity_recovery(Window(gpu=(reading(1, dev(1)),)), 1) is None


def test_a_row_remap_failure_and_a_rising_uncorrectable_count():
    v, = fault(reading(1), reading(2, dev(0), dev(1, remap_failure=True)), reading(3, dev(0), dev(1, remap_failure=True)))
    assert v.why.endswith(": row remapping failed (no spare rows left); reset the GPU, then replace it: do not restart "
                          "on this GPU")
    assert (v.onset, v.evidence, v.details["action"], v.details["fault"]) == (
        T0 + 2, (Evidence("gpu", T0 + 2, "devices.1.remap_failure", True),), "reset_gpu", "remap_failure")
    ecc = [reading(1, dev(0), dev(1, ecc_volatile_uncorrected=2)), reading(2, dev(0), dev(1, ecc_volatile_uncorrected=2)),
           reading(3, dev(0), dev(1, ecc_volatile_uncorrected=5)), reading(4, dev(0), dev(1, ecc_volatile_uncorrected=6))]
    v, = fault(*ecc)
    assert v.why.endswith(": uncorrectable ECC errors 2 → 6 in the window; reset the GPU: do not restart on this GPU")
    assert (v.onset, v.evidence) == (T0 + 3, (Evidence("gpu", T0 + 3, "devices.1.ecc_volatile_uncorrected", 6),))
    assert v.details["fault"] == "ecc_uncorrectable"
    # the same count, or a count not read at the first reading: no rise
    assert fault(*ecc[:2]) == []
    assert fault(reading(1), *ecc[2:]) == []
    # a GPU the engine does not hold is not judged
    assert fault(reading(1, dev(0), dev(1, pids=(999,))), reading(2, dev(0), dev(1, pids=(999,), remap_failure=True))) == []


def test_first_is_the_start_of_the_newest_run():
    r = [reading(1, dev(1, lost=True)), reading(2, dev(1)), reading(3, dev(1, lost=True)), reading(4, dev(1, lost=True))]
    assert G._first(r, 1, lambda d: d.lost) == T0 + 3
    assert G._first(r[:1] + [reading(2, dev(0))] + r[2:], 1, lambda d: d.lost) == T0 + 3      # absent breaks it too
    assert G._first(r[:1], 1, lambda d: d.lost) == T0 + 1


# --- the GPUs held --------------------------------------------------------------------------------------------

def test_gpus_held_by_process_lists_by_exporter_and_by_pod():
    assert G.gpus_held([reading(1)], None) == G.Held(None)
    assert G.Held(None).holds(7) and G.Held({1: set()}).holds(1) and not G.Held({1: set()}).holds(0)
    assert G.gpus_held([reading(1), reading(2, dev(0), dev(1, pids=()))], {112}) == G.Held({1: {112}})
    dcgm = [("processes", "not_exported")]
    r = [reading(1, dev(0, pids=(), unavailable=dcgm), dev(1, pids=(), unavailable=dcgm))]
    held = G.gpus_held(r, {112})
    assert held == G.Held({0: set(), 1: set()}, frozenset({0, 1}),
                          "dcgm-exporter lists no processes: every GPU on its page counted as this server's", "every_gpu")
    assert (held.words(1), held.details(1)) == ("; dcgm-exporter lists no processes: every GPU on its page counted as "
                                                "this server's", {"attributed": "every_gpu"})
    refused = [reading(1, dev(0, pids=(), unavailable=[("processes", "no_permission")]), dev(1, pids=()))]
    assert G.gpus_held(refused, {111}) == G.Held(
        {0: set()}, frozenset({0}), "NVML could not list the GPUs' processes (no_permission): every GPU counted as "
                                    "this server's", "every_gpu")
    # a device whose list was read once is listed
    assert G.gpus_held(refused + [reading(2, dev(0, pids=(999,)), dev(1, pids=()))], {111}) == G.Held({})
    # the pod labels: only the server's pod's GPUs
    pods = [reading(1, dev(0, pids=(), unavailable=dcgm, pod="vllm-0"), dev(1, pids=(), unavailable=dcgm, pod="other"),
                    server_pod="vllm-0"), reading(2, dev(0, pids=(), unavailable=dcgm, pod="vllm-0"),
                                                  dev(1, pids=(), unavailable=dcgm, pod="other"))]
    held = G.gpus_held(pods, {112})
    assert held == G.Held({0: set()}, frozenset({0, 1}), "dcgm-exporter lists no processes: the GPUs whose pod label "
                          "is vllm-0 (the server's pod, its HOSTNAME) counted as this server's", "pod")
    assert (held.details(0), held.details(5), held.words(5)) == ({"attributed": "pod"}, {}, "")
    assert G.Held({0: set()}, frozenset({0})).words(0) == ""
    # the pod known but no GPU labelled: every GPU
    assert G.gpus_held(r[:1] + [reading(2, *r[0].devices, server_pod="vllm-0")], {1}).by == "every_gpu"


def test_gpu_words():
    assert G.gpu_words(None, 3) == "GPU 3"
    full = dev(1, pod="vllm-0", namespace="llm", container="vllm")
    assert G.gpu_words(full, 1) == "GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100, pod vllm-0, namespace llm, container vllm)"
    assert G.gpu_words(full, 1, pod=False) == "GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100)"
    assert G.gpu_words(dev(1, uuid=None, pci_bus_id=None, name=None), 1) == "GPU 1"


def test_rank_on_a_device():
    w = Window(process=(tree(),))
    assert G._rank_on(w, {112}) == (TP1, "TP1", 112)
    assert G._rank_on(w, {999, 998}) == ("pid 998", "none", 998)
    assert G._rank_on(w, set()) == ("", None, None)
    assert G._rank_on(Window(), {112}) == ("pid 112", "none", 112)


# --- gpu_throttled --------------------------------------------------------------------------------------------

def scrape(t, tokens, running=16.0):
    state = EngineState("vllm", "vllm-test", {"engine": "0"}, running=running,
                        counters=Counters(prompt_tokens=0.0, generation_tokens=tokens, steps=tokens))
    return MetricsSample(T0 + t, "vllm", "vllm-test", (state,))


def hot(index=0, clock=1000, reasons=CLOCK_HW_THERMAL, **kw):
    return dev(index, **{"sm_clock_mhz": clock, "sm_clock_max_mhz": 2000, "clock_event_reasons": reasons,
                         "temperature_c": 88.0, **kw})


def throttle(hot_from=20, end=40, rate_before=100.0, rate_after=50.0, running=16.0, device=None, scrapes=None):
    """GPU 0 throttled from T0 + hot_from to T0 + end (readings every second from T0), tokens at rate_before a second
    until hot_from and rate_after after, a scrape a second."""
    gpu = tuple(reading(t, device if t >= hot_from and device else hot() if t >= hot_from else dev(0), dev(1))
                for t in range(end + 1))
    if scrapes is None:
        scrapes = tuple(scrape(t, rate_before * min(t, hot_from) + rate_after * max(0, t - hot_from), running)
                        for t in range(end + 1))
    w = Window(gpu=gpu, metrics=tuple(scrapes), process=(tree(T0 + end),))
    return G.detect_gpu_throttled(w, CONFIG)


def test_gpu_throttled_is_the_whole_verdict():
    assert throttle() == [Verdict(
        "gpu_throttled", T0 + 40, T0 + 20,
        "GPU 0 (GPU-0, bus 00000000:00:00.0, NVIDIA H100) under TP rank 0 of 2 (VLLM::Worker_TP0, pid 111): SM clock "
        "1000 of 2000 MHz held by HW thermal slowdown for 20 s, 88 °C, 300 of 700 W; tokens 100/s → 50/s (-50%) with "
        "16 running: the GPU is slowed, not the demand up",
        (Evidence("gpu", T0 + 20, "devices.0.clock_event_reasons", CLOCK_HW_THERMAL),
         Evidence("gpu", T0 + 40, "devices.0.sm_clock_mhz", 1000),
         Evidence("metrics", T0 + 40, "counters.generation_tokens", 50.0)),
        {"cause": "thermal", "gpu_index": 0, "gpu_uuid": "GPU-0", "sm_clock_mhz": 1000, "sm_clock_max_mhz": 2000,
         "temperature_c": 88.0, "tokens_per_s_before": 100.0, "tokens_per_s_after": 50.0, "running": 16.0,
         "rank": "TP0", "rank_pid": 111})]


def test_gpu_throttled_causes_and_words():
    for reasons, cause, words in ((CLOCK_SW_THERMAL, "thermal", "SW thermal slowdown"),
                                  (CLOCK_HW_POWER_BRAKE | CLOCK_SW_POWER_CAP, "power_brake", "HW power brake"),
                                  (CLOCK_HW_SLOWDOWN, "hw_slowdown", "HW slowdown"),
                                  (CLOCK_HW_THERMAL | CLOCK_HW_POWER_BRAKE, "thermal",
                                   "HW thermal slowdown + HW power brake")):
        v, = throttle(device=hot(reasons=reasons))
        assert v.details["cause"] == cause and f"held by {words} for 20 s" in v.why, reasons
    v, = throttle(device=hot(clock=None, temperature_c=None, power_w=None))
    assert "SM clock clocks down held by HW thermal slowdown for 20 s; tokens" in v.why
    v, = throttle(device=hot(power_limit_w=None))
    assert "for 20 s, 88 °C; tokens" in v.why
    # a power cap alone, or no reasons read, is no throttle
    assert throttle(device=hot(reasons=CLOCK_SW_POWER_CAP)) == [] and throttle(device=hot(reasons=None)) == []


def test_clock_held_share_under_at_and_over():
    at = SHARE * 2000                       # 1800 MHz
    for clock, fires in ((at - 1, True), (at, False), (at + 1, False)):
        assert (throttle(device=hot(clock=clock)) != []) is fires, clock
    assert G._throttled(hot(clock=at, sm_clock_max_mhz=0), CONFIG) is True       # no maximum: the reason decides


def test_throttle_sustain_under_at_and_over():
    for held, fires in ((SUSTAIN - 1, False), (SUSTAIN, True), (SUSTAIN + 1, True)):
        found = throttle(hot_from=40 - int(held))
        assert [v.onset for v in found] == ([T0 + 40 - held] if fires else []), held
    assert G.throttle_state(Window(gpu=(reading(1, hot()),)), CONFIG) is None        # one reading: no time yet


def test_throttle_drop_under_at_and_over():
    at = (1 - DROP) * 100                   # 80 tokens a second
    for after, fires in ((at - 1, True), (at, True), (at + 1, False)):
        found = throttle(rate_after=after)
        assert [v.details["tokens_per_s_after"] for v in found] == ([after] if fires else []), after
    assert throttle(rate_before=0.0, rate_after=0.0) == []
    assert throttle(running=0.0) == []


def test_throttle_baseline_holds_a_scrape_at_exactly_its_start():
    # two scrapes before the onset (T0 + 20): at 20 - baseline + x and at 20; then one a second
    for x, fires in ((-0.25, False), (0.0, True), (0.25, True)):
        first = 20 - BASELINE + x
        scrapes = (scrape(first, 0.0), scrape(20, 100.0 * (20 - first)),
                   *(scrape(t, 100.0 * (20 - first) + 50.0 * (t - 20)) for t in range(21, 41)))
        found = throttle(scrapes=scrapes)
        assert [v.details["tokens_per_s_before"] for v in found] == ([100.0] if fires else []), x


def test_token_rate():
    w = Window(metrics=(scrape(0, 0.0), scrape(2, 50.0), scrape(4, 300.0), MetricsSample(T0 + 3, "vllm", "x", error="t")))
    assert G._token_rate(w, T0, T0 + 4) == ((300.0 - 0.0) / 4, T0, T0 + 4)
    assert G._token_rate(w, T0 + 1, T0 + 4) == ((300.0 - 50.0) / 2, T0 + 2, T0 + 4)
    assert G._token_rate(w, T0 + 1, T0 + 3) == (None, 0.0, 0.0)


# --- the GPU of each rank -------------------------------------------------------------------------------------

def test_rank_state_under_at_and_over():
    s = lambda **kw: GE._rank_state(dev(0, **kw))
    assert s(utilization_pct=None) == "unknown"
    assert [s(utilization_pct=u) for u in (GE.IDLE_PCT - 0.5, GE.IDLE_PCT, GE.IDLE_PCT + 0.5)] == ["idle", "busy", "busy"]
    spin_at = GE.SPIN_POWER_SHARE * 700
    assert [s(utilization_pct=u, power_w=spin_at - 1) for u in (GE.BUSY_PCT - 0.5, GE.BUSY_PCT, GE.BUSY_PCT + 0.5)] == [
        "busy", "spin", "spin"]
    assert [s(utilization_pct=98.0, power_w=p) for p in (spin_at - 1, spin_at, spin_at + 1)] == ["spin", "busy", "busy"]
    assert s(utilization_pct=98.0, power_w=None) == "busy" and s(utilization_pct=98.0, power_limit_w=0.0) == "busy"


def test_rank_gpu_evidence():
    w = lambda *devices: Window(gpu=(reading(1, *devices),))
    spin, idle = dev(0, utilization_pct=98.0, power_w=85.0), dev(1, utilization_pct=0.0)
    assert GE.rank_gpu_evidence(w(spin, idle), tree()) == (
        "; GPUs: TP rank 0 GPU 0 98 % at 85 of 700 W (spinning or waiting), TP rank 1 GPU 1 idle 0 % at 300 of 700 W: "
        "TP rank 1 is not launching work", "TP0=spin,TP1=idle")
    assert GE.rank_gpu_evidence(w(spin, dev(1, pids=())), tree()) == (
        "; GPUs: TP rank 0 GPU 0 98 % at 85 of 700 W (spinning or waiting), TP rank 1 on no GPU (absent from NVML's "
        "process lists): TP rank 1 is not launching work", "TP0=spin,TP1=absent")
    busy = dev(1, utilization_pct=97.0, power_w=None)
    assert GE.rank_gpu_evidence(w(spin, busy), tree()) == (
        "; GPUs: TP rank 0 GPU 0 98 % at 85 of 700 W (spinning or waiting), TP rank 1 GPU 1 97 %", "TP0=spin,TP1=busy")
    both_idle = GE.rank_gpu_evidence(w(dev(0, utilization_pct=1.0, power_limit_w=None), idle), tree())
    assert both_idle == ("; GPUs: TP rank 0 GPU 0 idle 1 % at 300 W, TP rank 1 GPU 1 idle 0 % at 300 of 700 W",
                         "TP0=idle,TP1=idle")
    assert GE.rank_gpu_evidence(w(dev(0, pids=()), dev(1, pids=())), tree()) == ("", None)
    assert GE.rank_gpu_evidence(Window(), tree()) == ("", None)
    assert GE.rank_gpu_evidence(w(spin, idle), None) == ("", None)


# --- a node's GPUs --------------------------------------------------------------------------------------------

def test_node_gpu_problems():
    devices = [dev(1, lost=True, remap_failure=True, ecc_volatile_uncorrected=3, recovery_action=2, pod="p"),
               dev(0, recovery_action=3, ecc_volatile_uncorrected=0), dev(2)]
    assert G.node_gpu_problems(devices, {2: 79, 0: 13}) == [
        "GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100): lost (NVML: GPU is lost; fallen off the bus); row remapping "
        "failed (no spare rows left); 3 uncorrectable ECC error(s) since the driver loaded; NVML's recovery action is 2 "
        "(reboot the node)",
        "GPU 2 (GPU-2, bus 00000000:02:00.0, NVIDIA H100): last Xid 79 (GPU has fallen off the bus; NVIDIA: reboot the "
        "node)"]
    assert G.node_gpu_problems([dev(0, recovery_action=1)]) == [
        "GPU 0 (GPU-0, bus 00000000:00:00.0, NVIDIA H100): NVML's recovery action is 1 (reset the GPU)"]
    assert G.node_gpu_problems([dev(0)], {0: 0}) == [] and G.node_gpu_problems([]) == []


# --- the survivors of the first mutation run, each a value --------------------------------------------------------

def test_an_empty_process_sample_or_gpu_reading_is_not_the_newest():
    gpu = (reading(1), reading(2, xids=[GpuXid(T0 + 1.5, 1, 79)]))
    w = Window(gpu=gpu, process=(tree(T0 + 1), ProcessSample(T0 + 2, 100, 1.0, True, ())))
    v, = G.detect_gpu_fault(w, CONFIG)
    assert (v.details["rank"], v.details["rank_pid"]) == ("TP1", 112)
    lost = dev(1, lost=True)
    w = Window(gpu=(reading(1), reading(2, dev(0), lost), GpuSample(T0 + 3, True, ())), process=(tree(T0 + 3),))
    assert [v.details["fault"] for v in G.detect_gpu_fault(w, CONFIG)] == ["lost"]


def test_the_newest_identity_that_knows_its_uuid():
    v, = fault(reading(1, dev(0), dev(1, name="old name")), reading(2, dev(0), dev(1), xids=[GpuXid(T0 + 1.5, 1, 79)]))
    assert v.why.startswith("GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100) under")


def test_a_fault_without_a_rank_or_an_identity():
    v, = fault(reading(1), reading(2, xids=[GpuXid(T0 + 1.5, 7, 79)]), process=False)
    assert v.why == ("GPU 7: Xid 79 (GPU has fallen off the bus; NVIDIA: reboot the node): do not restart on this GPU")
    assert (v.details["gpu_uuid"], v.details["gpu_bus_id"], v.details["rank"], v.details["rank_pid"]) == (
        None, None, None, None)


def test_a_fault_on_a_gpu_counted_without_a_process_list():
    dcgm = [("processes", "not_exported")]
    gpu = (reading(1, dev(0, pids=(), unavailable=dcgm), dev(1, pids=(), unavailable=dcgm)),
           reading(2, dev(0, pids=(), unavailable=dcgm), dev(1, pids=(), unavailable=dcgm, remap_failure=True)))
    v, = fault(*gpu)
    assert v.why == ("GPU 1 (GPU-1, bus 00000000:01:00.0, NVIDIA H100): row remapping failed (no spare rows left); "
                     "reset the GPU, then replace it: do not restart on this GPU; dcgm-exporter lists no processes: "
                     "every GPU on its page counted as this server's")
    assert v.details["attributed"] == "every_gpu"
    # pod labels but the server's pod not known: every GPU still
    pods = [GpuSample(r.t, True, tuple(GpuDevice(**{**{f: getattr(d, f) for f in d.__slots__}, "pod": "p"})
                                       for d in r.devices)) for r in gpu]
    assert G.gpus_held(pods, {112}).by == "every_gpu"


def test_every_xid_and_every_device_is_looked_at():
    v, = fault(reading(1), reading(2, xids=[GpuXid(T0 + 1.2, 1, 63), GpuXid(T0 + 1.5, 1, 79)]))
    assert v.details["xid"] == 79
    v, = fault(reading(1, dev(0, pids=(999,)), dev(1)), reading(2, dev(0, pids=(999,)), dev(1, remap_failure=True)))
    assert (v.details["gpu_index"], v.details["fault"]) == (1, "remap_failure")
    v, = fault(reading(1), reading(2, dev(0, lost=True), dev(1, remap_failure=True)))
    assert (v.details["fault"], v.details["gpus"]) == ("lost", 2)
    # a device that was not in the first reading has no count to rise from
    assert fault(reading(1, dev(0)), reading(2, dev(0), dev(1, ecc_volatile_uncorrected=4))) == []


def test_the_ecc_rise_starts_where_the_count_first_passed_the_first_reading():
    ecc = [reading(t, dev(0), dev(1, ecc_volatile_uncorrected=n)) for t, n in ((1, 0), (2, 0), (3, 2))]
    v, = fault(*ecc)
    assert (v.onset, v.why.split(": ")[1]) == (T0 + 3, "uncorrectable ECC errors 0 → 2 in the window; reset the GPU")


def test_recovery_action_beside_other_faults():
    # a hardware Xid on GPU 0 does not hide GPU 1's recovery action
    v, = fault(reading(1), reading(2, dev(0), dev(1, recovery_action=1), xids=[GpuXid(T0 + 1.5, 0, 79)]))
    assert (v.details["gpu_index"], v.details["gpus"]) == (0, 2)
    # a restartable Xid on the same GPU does not hide it either: the hardware action comes first
    v, = fault(reading(1), reading(2, dev(0), dev(1, recovery_action=1), xids=[GpuXid(T0 + 1.5, 1, 13)]))
    assert (v.details["fault"], v.details["action"], v.details["hardware"]) == ("recovery_action", "reset_gpu", True)
    # a hardware Xid on the same GPU says it: the recovery action (read since 1) is not a second fault
    gpu = [reading(t, dev(0), dev(1, recovery_action=1)) for t in (1, 2, 3)]
    gpu[2] = reading(3, dev(0), dev(1, recovery_action=1), xids=[GpuXid(T0 + 2.5, 1, 79)])
    v, = fault(*gpu)
    assert (v.details["fault"], v.onset) == ("xid", T0 + 2.5)


def test_rank_on_several_pids_and_axes():
    reverse = ProcessSample(T0, 100, 1.0, True, tuple(reversed(tree().members)))
    assert G._rank_on(Window(process=(reverse,)), {112, 111}) == (
        "TP rank 0 of 2 (VLLM::Worker_TP0, pid 111)", "TP0", 111)
    assert G._rank_on(Window(process=(tree(),)), {110}) == ("the engine core (VLLM::EngineCore, pid 110)", "none", 110)
    assert G._rank_on(Window(process=(sglang(),)), {201})[1:] == ("DP0,TP1", 201)


def sglang():
    return ProcessSample(T0, 300, 1.0, True, (ProcessMember(300, 1.0, "api", "python3", "sleeping"),
                                              ProcessMember(200, 2.0, "scheduler", "sglang::scheduler_DP0_TP0", "running",
                                                            ppid=300),
                                              ProcessMember(201, 2.0, "scheduler", "sglang::scheduler_DP0_TP1", "running",
                                                            ppid=300)))


def test_token_rate_at_its_edges():
    same = Window(metrics=(scrape(0, 0.0), scrape(0, 10.0)))
    assert G._token_rate(same, T0, T0 + 1) == (None, 0.0, 0.0)
    assert G._token_rate(same, T0 + 5, T0 + 6) == (None, 0.0, 0.0)
    w = Window(metrics=(scrape(0, 0.0), scrape(0, 10.0), scrape(4, 40.0)))
    assert G._token_rate(w, T0, T0 + 4) == ((40.0 - 0.0) / 4, T0, T0 + 4)


def test_rank_gpu_evidence_of_every_kind():
    w = lambda *devices: Window(gpu=(reading(1, *devices),))
    # one rank of unknown state and one idle: nobody is seen working, so no rank is blamed
    assert GE.rank_gpu_evidence(w(dev(0, utilization_pct=None), dev(1, utilization_pct=0.0)), tree()) == (
        "; GPUs: TP rank 0 GPU 0 n/a % at 300 of 700 W, TP rank 1 GPU 1 idle 0 % at 300 of 700 W", "TP0=unknown,TP1=idle")
    # busy (not spinning) is working
    clause, _ = GE.rank_gpu_evidence(w(dev(0, utilization_pct=97.0, power_w=500.0), dev(1, utilization_pct=0.0)), tree())
    assert clause.endswith(": TP rank 1 is not launching work")
    # an absent rank first, then the one that holds a GPU
    assert GE.rank_gpu_evidence(w(dev(1, utilization_pct=97.0, power_w=500.0)), tree()) == (
        "; GPUs: TP rank 0 on no GPU (absent from NVML's process lists), TP rank 1 GPU 1 97 % at 500 of 700 W: TP rank "
        "0 is not launching work", "TP0=absent,TP1=busy")
    # the engine core holding the GPU itself (TP 1), and SGLang's schedulers with two axes
    assert GE.rank_gpu_evidence(w(dev(0, pids=(110,))), tree()) == (
        "; GPUs: VLLM::EngineCore (pid 110) GPU 0 90 % at 300 of 700 W", "110=busy")
    assert GE.rank_gpu_evidence(w(dev(0, pids=(200,)), dev(1, pids=(201,), utilization_pct=0.0)), sglang()) == (
        "; GPUs: DP rank 0 TP rank 0 GPU 0 90 % at 300 of 700 W, DP rank 0 TP rank 1 GPU 1 idle 0 % at 300 of 700 W: "
        "DP rank 0 TP rank 1 is not launching work", "DP0,TP0=busy,DP0,TP1=idle")
    # the token is cut at 128 characters
    many = ProcessSample(T0, 100, 1.0, True, tuple(ProcessMember(500 + i, 1.0, "worker", f"VLLM::Worker_TP{i}", "running")
                                                    for i in range(16)))
    devices = tuple(dev(i, pids=(500 + i,)) for i in range(16))
    _, token = GE.rank_gpu_evidence(Window(gpu=(GpuSample(T0, True, devices),)), many)
    full = ",".join(f"TP{i}=busy" for i in range(16))
    assert len(full) > 128 and token == full[:128]


# --- what the first run of _throttle_state's own mutants left (its body was behind a decorator until issue 51) ---

def _throttle_window(gpu, scrapes=None, process=True, end=40):
    if scrapes is None:
        scrapes = tuple(scrape(t, 100.0 * min(t, 20) + 50.0 * max(0, t - 20)) for t in range(end + 1))
    return Window(gpu=tuple(gpu), metrics=tuple(scrapes), process=(tree(T0 + end),) if process else ())


def test_two_readings_are_enough_for_a_throttle():
    v = G.throttle_state(_throttle_window([reading(20, hot(), dev(1)), reading(40, hot(), dev(1))]), CONFIG)
    assert (v.name, v.onset, v.t) == ("gpu_throttled", T0 + 20, T0 + 40)


def test_a_throttled_gpu_the_server_does_not_hold_is_not_its_throttle():
    gpu = [reading(t, hot(pids=(999,)) if t >= 20 else dev(0, pids=(999,)), dev(1)) for t in range(41)]
    assert G.throttle_state(_throttle_window(gpu), CONFIG) is None
    held = [reading(t, hot() if t >= 20 else dev(0), dev(1)) for t in range(41)]
    assert G.throttle_state(_throttle_window(held), CONFIG) is not None


def test_the_rate_before_at_one_token_a_second_and_one_running_request_still_count():
    v, = throttle(rate_before=1.0, rate_after=0.5)
    assert (v.details["tokens_per_s_before"], v.details["tokens_per_s_after"]) == (1.0, 0.5)
    v, = throttle(running=1.0)
    assert v.details["running"] == 1.0 and "with 1 running" in v.why


def test_the_running_count_is_the_newest_scrapes():
    scrapes = tuple(scrape(t, 100.0 * min(t, 20) + 50.0 * max(0, t - 20), running=3.0 if t == 40 else 16.0)
                    for t in range(41))
    v, = throttle(scrapes=scrapes)
    assert v.details["running"] == 3.0 and "with 3 running" in v.why


def test_rates_to_three_decimals_in_the_details_and_the_evidence():
    v, = throttle(rate_before=100.123456, rate_after=50.987654)
    assert (v.details["tokens_per_s_before"], v.details["tokens_per_s_after"]) == (100.123, 50.988)
    assert v.evidence[-1] == Evidence("metrics", T0 + 40, "counters.generation_tokens", 50.988)


def test_a_gpu_that_forgot_its_uuid_is_named_by_the_newest_reading_that_knew_it():
    gpu = [reading(t, hot(uuid="GPU-0") if t < 40 else hot(uuid=None), dev(1)) if t >= 20 else reading(t)
           for t in range(41)]
    v = G.throttle_state(_throttle_window(gpu), CONFIG)
    assert v.details["gpu_uuid"] == "GPU-0" and v.why.startswith("GPU 0 (GPU-0, bus 00000000:00:00.0")


def test_a_throttle_with_no_process_list_names_no_rank():
    gpu = [reading(t, hot() if t >= 20 else dev(0), dev(1)) for t in range(41)]
    v = G.throttle_state(_throttle_window(gpu, process=False), CONFIG)
    assert v.why.startswith("GPU 0 (GPU-0, bus 00000000:00:00.0, NVIDIA H100): SM clock 1000 of 2000 MHz")
    assert (v.details["rank"], v.details["rank_pid"]) == (None, None) and "attributed" not in v.details


def test_a_throttle_on_a_gpu_counted_without_a_process_list_says_how():
    dcgm = [("processes", "not_exported")]
    gpu = [reading(t, hot(pids=(), unavailable=dcgm) if t >= 20 else dev(0, pids=(), unavailable=dcgm),
                   dev(1, pids=(), unavailable=dcgm)) for t in range(41)]
    v = G.throttle_state(_throttle_window(gpu), CONFIG)
    assert v.why.endswith("the GPU is slowed, not the demand up; dcgm-exporter lists no processes: every GPU on its "
                          "page counted as this server's")
    assert v.details["attributed"] == "every_gpu"


def test_a_hardware_fault_comes_before_an_older_xid_that_a_restart_helps():
    for field, first, then, name in (("remap_failure", False, True, "remap_failure"),
                                     ("ecc_volatile_uncorrected", 2, 4, "ecc_uncorrectable")):
        gpu = (reading(1, dev(0), dev(1, **{field: first})),
               reading(2, dev(0), dev(1, **{field: then}), xids=[GpuXid(T0 + 1.5, 0, 13)]),
               reading(3, dev(0), dev(1, **{field: then})))
        v, = fault(*gpu)
        assert (v.details["gpu_index"], v.details["fault"], v.onset) == (1, name, T0 + 2), field


def test_the_throttle_settings_are_shares():
    from dataclasses import replace
    assert replace(G.GpuThrottleSettings(), gpu_throttle_drop=1.5, gpu_clock_held_share=-0.1).validate() == [
        "gpu_throttle_drop is a share from 0 to 1, not 1.5", "gpu_clock_held_share is a share from 0 to 1, not -0.1"]
    assert G.GpuThrottleSettings().validate() == []
