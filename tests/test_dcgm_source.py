"""dcgm-exporter's /metrics as GPU samples: a page written from dcgm-exporter's documented default counters and
label set (tests/fixtures/dcgm/dcgm_exporter_h100x2.prom, not a capture from hardware), read into the same GPU
picture as NVML's, fields the page lacks unavailable "not_exported", and the last-Xid gauge turned into events."""

from __future__ import annotations

import asyncio
from pathlib import Path

from servewatch.clock import VirtualClock
from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.sources.dcgm import DcgmSource, read_page
from servewatch.sources.http import in_process_transport
from servewatch.timeline.samples import GpuXid
from servewatch.timeline.window import Window

PAGE = (Path(__file__).parent / "fixtures" / "dcgm" / "dcgm_exporter_h100x2.prom").read_text()
T0 = 1_800_000_000.0
UUID1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def test_a_default_counters_page_reads_as_the_gpu_picture():
    (gpu0, gpu1), last_xid = read_page(PAGE)
    assert (gpu0.index, gpu0.uuid, gpu0.pci_bus_id, gpu0.name) == (0, "GPU-11111111-2222-3333-4444-555555555555",
                                                                    "00000000:17:00.0", "NVIDIA H100 80GB HBM3")
    assert (gpu1.uuid, gpu1.sm_clock_mhz, gpu1.memory_clock_mhz, gpu1.temperature_c) == (UUID1, 1100, 2619, 88.0)
    assert (gpu0.utilization_pct, gpu0.memory_utilization_pct, gpu0.power_w) == (97.0, 41.0, 610.5)
    assert gpu0.memory_used_bytes == 68233 * 2**20 and gpu0.memory_total_bytes == (68233 + 12847) * 2**20   # MiB
    assert (gpu1.pcie_replay, gpu0.remapped_rows_correctable, gpu0.remapped_rows_uncorrectable,
            gpu0.remap_failure) == (3, 1, 0, False)
    assert last_xid == {0: 0, 1: 0}
    # not in the default counters: unavailable with the reason, never 0
    for field in ("power_limit_w", "clock_event_reasons", "ecc_volatile_uncorrected", "sm_clock_max_mhz"):
        assert getattr(gpu0, field) is None
    assert gpu0.why_unavailable("clock_event_reasons") == "not_exported"
    assert gpu0.why_unavailable("power_limit_w") == "not_exported" and gpu0.processes == ()


def test_a_changed_last_xid_is_one_event_and_a_gpu_fault_on_that_gpu():
    pages = [PAGE.replace('err_msg="No Error"} 0', 'err_msg="No Error"} 13'),        # an old Xid: not reported
             PAGE.replace('err_msg="No Error"} 0', 'err_msg="No Error"} 13'),
             PAGE.replace('device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="vllm",'
                          'namespace="llm",pod="vllm-0",err_code="0",err_msg="No Error"} 0',
                          'device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="vllm",'
                          'namespace="llm",pod="vllm-0",err_code="79",err_msg="GPU has fallen off the bus"} 79')]
    clock = VirtualClock(T0)
    source = DcgmSource(in_process_transport(lambda: pages.pop(0)), clock, 5.0)
    samples = []
    for _ in range(3):
        samples += asyncio.run(source.poll())
        clock.advance(5.0)
    assert [s.xids for s in samples] == [(), (), (GpuXid(T0 + 10, 1, 79),)]
    (fault,) = run_detectors(Window(gpu=tuple(samples)), DetectorConfig())
    assert fault.name == "gpu_fault" and fault.details["gpu_uuid"] == UUID1 and fault.details["action"] == "reboot"
    assert fault.why.startswith(f"GPU 1 ({UUID1}, bus 00000000:2A:00.0, NVIDIA H100 80GB HBM3, pod vllm-0, "
                                "namespace llm, container vllm): Xid 79 (GPU has fallen off the bus; NVIDIA: reboot "
                                "the node)")


def test_an_unreachable_or_foreign_page_is_a_typed_unavailable_sample():
    clock = VirtualClock(T0)
    (down,) = asyncio.run(DcgmSource(in_process_transport(lambda: 1 / 0), clock, 5.0).poll())
    assert not down.available and down.error == "unavailable: dcgm-exporter connect"
    (empty,) = asyncio.run(DcgmSource(in_process_transport(lambda: "up 1\n"), clock, 5.0).poll())
    assert not empty.available and empty.error == "unavailable: no DCGM_FI_DEV_* series"
    (refused,) = asyncio.run(DcgmSource(in_process_transport(lambda: (503, b"")), clock, 5.0).poll())
    assert refused.error == "unavailable: dcgm-exporter http_503"


def test_gpu_metrics_puts_dcgm_exporter_in_place_of_nvml():
    from servewatch.cli import build_parser
    from servewatch.commands.watch import DEFAULTS
    from servewatch.commands.recording import options_from_args
    from servewatch.sources.gpu import GpuSource
    from servewatch.transport.contract import Http1Transport
    from servewatch.watch.session import build_recorder

    args = build_parser().parse_args(["watch", "http://127.0.0.1:1", "--gpu-metrics", "http://127.0.0.1:9400/metrics"])
    options = options_from_args(args, DEFAULTS)
    assert options.gpu_metrics == "http://127.0.0.1:9400/metrics"

    async def sources():
        async with Http1Transport() as transport:
            return build_recorder(options, transport, VirtualClock(T0), tool="watch").sources

    kinds = [type(s) for s in asyncio.run(sources()) if s.kind == "gpu"]
    assert kinds == [DcgmSource] and GpuSource not in kinds
