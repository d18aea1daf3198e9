"""The GPU panel of a bundle's report (bundle.gpu_panel, report_html.gpu_html, summarize): per rank, the GPU it
holds over the window, its throttle and its Xid marked, in the HTML report and the Markdown summary."""

from __future__ import annotations

from types import SimpleNamespace

from servewatch.bundle.gpu_panel import gpu_panels
from servewatch.bundle.report_html import gpu_html
from servewatch.bundle.summarize import _gpus
from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample, GpuXid, ProcessMember, ProcessSample

T0 = 1_800_000_000.0
UUIDS = ("GPU-11111111-2222-3333-4444-555555555555", "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")


def _members():
    return (ProcessMember(100, 1.0, "api", "vllm", "sleeping"),
            ProcessMember(101, 1.0, "engine_core", "VLLM::EngineCore", "sleeping", ppid=100),
            ProcessMember(111, 1.0, "worker", "VLLM::Worker_TP0", "running", ppid=101),
            ProcessMember(112, 1.0, "worker", "VLLM::Worker_TP1", "running", ppid=101))


def _device(index, *, reasons=0, sm=1980, lost=False, pid=None):
    if lost:      # a lost GPU answers nothing, not even who it is
        return GpuDevice(index, None, None, None, None, lost=True, unavailable=(("utilization_pct", "gpu_is_lost"),))
    return GpuDevice(index, 97.0, 72_000_000_000, 85_899_345_920, 610.0, (GpuProcess(pid, 71_000_000_000, 95.0),),
                     uuid=UUIDS[index], pci_bus_id=f"00000000:{0x17 + index:02X}:00.0", name="NVIDIA H100 80GB HBM3",
                     sm_clock_mhz=sm, sm_clock_max_mhz=1980, power_limit_w=700.0, temperature_c=64.0,
                     clock_event_reasons=reasons)


def _samples():
    """TP=2 (workers 111 and 112 on GPUs 0 and 1): GPU 1 held by a thermal reason at +5 and +10 s, then Xid 79 and
    lost at +15 s."""
    out = [ProcessSample(T0 + 14, 100, 1.0, True, _members())]
    for k in range(4):
        t = T0 + 5 * k
        gpu1 = (_device(1, lost=True) if k == 3 else
                _device(1, reasons=0x40, sm=1100, pid=112) if k in (1, 2) else _device(1, pid=112))
        out.append(GpuSample(t, True, (_device(0, pid=111), gpu1),
                             xids=(GpuXid(t - 0.2, 1, 79),) if k == 3 else ()))
    return sorted(out, key=lambda s: s.t)


def test_each_rank_has_its_gpu_with_its_throttle_and_xid():
    zero, one = gpu_panels(_samples())
    assert zero.holder == "TP rank 0 of 2 (VLLM::Worker_TP0, pid 111)" and zero.index == 0
    assert zero.throttles == [] and zero.xids == [] and zero.lost_at is None
    assert one.holder == "TP rank 1 of 2 (VLLM::Worker_TP1, pid 112)"
    assert one.gpu == f"GPU 1 ({UUIDS[1]}, bus 00000000:18:00.0, NVIDIA H100 80GB HBM3)"   # known from before the loss
    assert one.throttles == [(T0 + 5, T0 + 10, "HW thermal slowdown")]
    assert [(x.t, x.xid, x.meaning) for x in one.xids] == [(T0 + 14.8, 79, "GPU has fallen off the bus")]
    assert one.lost_at == T0 + 15
    assert one.series["sm_clock_mhz"] == [(T0, 1980.0), (T0 + 5, 1100.0), (T0 + 10, 1100.0), (T0 + 15, None)]
    assert [v for _, v in one.series["throttled"]] == [0.0, 1.0, 1.0, None]


def test_the_html_report_and_the_summary_show_the_panel():
    page = gpu_html(_samples(), T0)
    assert "<h3>GPUs per rank</h3>" in page and page.count("<svg") == 2
    assert f"TP rank 1 of 2 (VLLM::Worker_TP1, pid 112): GPU 1 ({UUIDS[1]}" in page
    assert "HW thermal slowdown from +5.0 s to +10.0 s" in page
    assert "Xid 79 at +14.8 s (GPU has fallen off the bus; NVIDIA: " in page and ">Xid 79</text>" in page
    assert "lost (NVML: GPU is lost) from +15.0 s" in page
    text = "\n".join(_gpus(SimpleNamespace(samples=_samples()), T0))
    assert f"### TP rank 1 of 2 (VLLM::Worker_TP1, pid 112): GPU 1 ({UUIDS[1]}" in text
    assert "| SM clock (MHz) | 1,100 | 1,980 | 1,100 |" in text
    assert "- Xid 79 at +14.8 s (GPU has fallen off the bus" in text


def test_no_gpu_samples_no_panel():
    samples = [ProcessSample(T0, 100, 1.0, True, _members()), GpuSample(T0, False, error="unavailable: no NVIDIA driver")]
    assert gpu_panels(samples) == [] and gpu_html(samples, T0) == ""
    assert _gpus(SimpleNamespace(samples=samples), T0) == []
