"""Values of the GPU panel of a bundle's report, servewatch/bundle/gpu_panel.py (issue 50): which (rank, GPU) panels
there are and in which order (ranked, then a pid's, then a GPU no process list claims), each panel's series, its
throttle runs (a run continues only from the reading before, with the same reasons), its Xid events with NVIDIA's
action, the moment it was lost, and the words of its title, throttles and Xids. Hand-built GPU and process samples,
each figure written beside the assertion."""

from __future__ import annotations

from servewatch.bundle import gpu_panel as G
from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample, GpuXid, ProcessMember, ProcessSample
from tests.test_gpu_panel import UUIDS, _device, _members, _samples

T0 = 1_800_000_000.0


def _dev(index, *, pids=(), reasons=None, util=50.0, power=300.0, sm=1500, temp=60.0, uuid=None, listed=True):
    return GpuDevice(index, util, None, None, power, tuple(GpuProcess(p, None) for p in pids) if listed else (),
                     uuid=uuid, sm_clock_mhz=sm, temperature_c=temp, clock_event_reasons=reasons)


def test_constants():
    assert G.SERIES == ("utilization_pct", "power_w", "sm_clock_mhz", "temperature_c", "throttled")
    assert G.LABELS == {"utilization_pct": "utilisation (%)", "power_w": "power (W)", "sm_clock_mhz": "SM clock (MHz)",
                        "temperature_c": "temperature (°C)", "throttled": "clocks held (1 = yes)"}


def test_the_tp2_panels_in_full():
    zero, one = G.gpu_panels(_samples())
    assert zero.series == {"utilization_pct": [(T0 + 5 * k, 97.0) for k in range(4)],
                           "power_w": [(T0 + 5 * k, 610.0) for k in range(4)],
                           "sm_clock_mhz": [(T0 + 5 * k, 1980.0) for k in range(4)],
                           "temperature_c": [(T0 + 5 * k, 64.0) for k in range(4)],
                           "throttled": [(T0 + 5 * k, 0.0) for k in range(4)]}
    assert zero.markers == [] and zero.gpu == f"GPU 0 ({UUIDS[0]}, bus 00000000:17:00.0, NVIDIA H100 80GB HBM3)"
    assert one.series["utilization_pct"] == [(T0, 97.0), (T0 + 5, 97.0), (T0 + 10, 97.0), (T0 + 15, None)]
    assert one.series["power_w"][-1] == (T0 + 15, None) and one.series["temperature_c"][-1] == (T0 + 15, None)
    [xid] = one.xids
    assert xid == G.GpuXidSeen(T0 + 14.8, 79, "GPU has fallen off the bus", "reboot the node")
    assert [(m.t, m.onset, m.label) for m in one.markers] == [(T0 + 14.8, T0 + 14.8, "Xid 79"),
                                                              (T0 + 15, T0 + 15, "lost")]
    assert G.panel_title(one) == f"TP rank 1 of 2 (VLLM::Worker_TP1, pid 112): {one.gpu}"
    assert G.throttle_words(one, T0) == "HW thermal slowdown from +5.0 s to +10.0 s"
    assert G.xid_words(xid, T0) == "Xid 79 at +14.8 s (GPU has fallen off the bus; NVIDIA: reboot the node)"


def _readings(*per_t, process=None):
    out = [] if process is None else [process]
    for k, devices in enumerate(per_t):
        out.append(GpuSample(T0 + k, True, tuple(devices)))
    return out


def test_throttle_runs():
    hw, sw = 0x40, 0x20
    samples = _readings([_dev(0, reasons=hw)], [_dev(0, reasons=hw)], [_dev(0, reasons=sw | hw)],
                        [_dev(0, reasons=0x1)], [_dev(0, reasons=hw)], [_dev(0, reasons=None)], [],
                        [_dev(0, reasons=hw)], [_dev(1, reasons=hw)], [_dev(0, reasons=hw)])
    [panel] = [p for p in G.gpu_panels(samples) if p.index == 0]
    assert [v for _, v in panel.series["throttled"]] == [1.0, 1.0, 1.0, 0.0, 1.0, None, 1.0, 1.0]
    assert panel.throttles == [(T0, T0 + 1, "HW thermal slowdown"),
                               (T0 + 2, T0 + 2, "SW thermal slowdown + HW thermal slowdown"),
                               (T0 + 4, T0 + 4, "HW thermal slowdown"),
                               (T0 + 7, T0 + 9, "HW thermal slowdown")]     # t+8 has no reading of GPU 0: still a run
    assert G.throttle_words(panel, T0) == ("HW thermal slowdown from +0.0 s to +1.0 s; SW thermal slowdown + HW "
                                           "thermal slowdown at +2.0 s; HW thermal slowdown at +4.0 s; "
                                           "HW thermal slowdown from +7.0 s to +9.0 s")
    assert G.throttle_words(panel, T0 - 1).startswith("HW thermal slowdown from +1.0 s to +2.0 s; ")
    # a reason that is no throttle (idle) holds nothing
    assert [v for _, v in panel.series["throttled"]][3] == 0.0


def test_previous_reading():
    series = {"throttled": [(1.0, 0.0), (2.0, 1.0), (3.0, 1.0)]}
    assert G._previous(series, 3.0) == 2.0
    assert G._previous(series, 2.0) is None                    # not the newest reading
    assert G._previous({"throttled": [(3.0, 1.0)]}, 3.0) is None


def test_a_pid_that_is_no_rank_and_a_gpu_of_no_process():
    members = (ProcessMember(100, 1.0, "api", "vllm serve", "sleeping"),
               ProcessMember(105, 1.0, "other", "helper", "sleeping", ppid=100),
               ProcessMember(111, 1.0, "worker", "VLLM::Worker_TP0", "running", ppid=100))
    process = ProcessSample(T0, 100, 1.0, True, members)
    samples = _readings([_dev(2, pids=(105, 100)), _dev(1, pids=(111,)), _dev(0, pids=(999,)),
                         _dev(3, listed=False)], process=process)
    panels = G.gpu_panels(samples)
    assert [(p.holder, p.index) for p in panels] == [("TP rank 0 (VLLM::Worker_TP0, pid 111)", 1),
                                                     ("pid 100 (vllm serve)", 2)]
    assert G.panel_title(panels[1]) == "pid 100 (vllm serve): GPU 2"
    # no process sample: every GPU counts, every pid is the engine's, no title known
    panels = G.gpu_panels(_readings([_dev(2, pids=(105, 100)), _dev(0), _dev(1, pids=(7,))]))
    assert [(p.holder, p.index) for p in panels] == [("pid 7", 1), ("pid 100", 2), ("", 0)]
    assert G.panel_title(panels[2]) == "GPU 0"


def test_which_samples_count():
    members = _members()
    stale = ProcessSample(T0 + 1, 100, 1.0, True, ())
    broken = ProcessSample(T0 + 2, 100, 1.0, True, members[:1], error="gone")
    good = ProcessSample(T0, 100, 1.0, True, members)
    samples = [good, stale, broken, GpuSample(T0, False, (_dev(5, pids=(111,)),)),     # unavailable: no reading
               GpuSample(T0 + 1, True, ()), GpuSample(T0 + 2, True, (_device(0, pid=111),))]
    [panel] = G.gpu_panels(samples)
    assert panel.holder == "TP rank 0 of 2 (VLLM::Worker_TP0, pid 111)"       # the newest process sample with members
    assert panel.series["power_w"] == [(T0 + 2, 610.0)]
    assert G.gpu_panels([good, GpuSample(T0, False, error="no driver")]) == []


def test_xids_without_readings_and_unknown_codes():
    samples = [GpuSample(T0, False, xids=(GpuXid(T0 + 3, 4, 99999), GpuXid(T0 + 1, 4, 48))),
               GpuSample(T0 + 5, True, (_dev(4, uuid="GPU-4"),), xids=(GpuXid(T0 + 4, 2, 79),))]
    panels = G.gpu_panels(samples)
    assert [(p.holder, p.index, p.gpu) for p in panels] == [("", 2, "GPU 2"), ("", 4, "GPU 4 (GPU-4)")]
    assert [(x.t, x.xid, x.action) for x in panels[1].xids] == [
        (T0 + 1, 48, "follow NVIDIA's workflow for it"), (T0 + 3, 99999, "unknown (not in servewatch's Xid table)")]
    assert panels[1].xids[1].meaning == "unknown Xid (not in servewatch's table)"
    assert panels[0].series["power_w"] == [] and panels[1].series["power_w"] == [(T0 + 5, 300.0)]


def test_identity_is_the_newest_reading_that_knew_its_uuid():
    samples = _readings([_dev(0, uuid="GPU-a")], [_dev(0, uuid="GPU-b")], [_dev(0, uuid=None)])
    [panel] = G.gpu_panels(samples)
    assert panel.gpu == "GPU 0 (GPU-b)"
    [panel] = G.gpu_panels(_readings([_dev(0, uuid=None, power=1.0)], [_dev(0, uuid=None, power=2.0)]))
    assert panel.gpu == "GPU 0"


def test_ranks_in_order_of_their_axes_then_pid():
    members = (ProcessMember(100, 1.0, "engine_core", "VLLM::EngineCore", "sleeping"),
               ProcessMember(112, 1.0, "worker", "VLLM::Worker_TP1", "running", ppid=100),
               ProcessMember(111, 1.0, "worker", "VLLM::Worker_TP0", "running", ppid=100))
    process = ProcessSample(T0, 100, 1.0, True, members)
    panels = G.gpu_panels(_readings([_dev(0, pids=(112,)), _dev(1, pids=(111, 112))], process=process))
    assert [(p.holder.split(" (")[0], p.index) for p in panels] == [("TP rank 0 of 2", 1), ("TP rank 1 of 2", 0),
                                                                   ("TP rank 1 of 2", 1)]


def test_the_survivors_of_the_first_run():
    # a run of three readings keeps its start
    [panel] = G.gpu_panels(_readings([_dev(0, reasons=0x40)], [_dev(0, reasons=0x40)], [_dev(0, reasons=0x40)]))
    assert panel.throttles == [(T0, T0 + 2, "HW thermal slowdown")]
    # another GPU's Xid earlier in time does not hide this one's
    samples = [GpuSample(T0, True, (_dev(0), _dev(1)), xids=(GpuXid(T0 - 2, 0, 79), GpuXid(T0 - 1, 1, 48)))]
    by_index = {p.index: [x.xid for x in p.xids] for p in G.gpu_panels(samples)}
    assert by_index == {0: [79], 1: [48]}
    # Xids with no reading at all: a panel each, named by index
    panels = G.gpu_panels([GpuSample(T0, False, xids=(GpuXid(T0, 3, 79),))])
    assert [(p.index, p.gpu, p.holder, [x.xid for x in p.xids]) for p in panels] == [(3, "GPU 3", "", [79])]
