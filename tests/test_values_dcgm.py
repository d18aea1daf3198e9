"""Values of servewatch/sources/dcgm.py (issue 50 item 8: the GPU picture from dcgm-exporter): every field a page
gives with its scale, the fields it does not give said "not_exported", the pod labels and HOSTNAME kept only in a
Kubernetes name's shape, the Xid events, and each unavailable sample's words. Each figure by hand beside it."""

from __future__ import annotations

import asyncio

import pytest

from servewatch.clock import VirtualClock
from servewatch.errors import BodyTooLarge, TooManySeries
from servewatch.sources import dcgm
from servewatch.sources.dcgm import DcgmSource, read_page, server_pod
from servewatch.sources.http import FetchResponse, in_process_transport
from servewatch.sources.scrape import ScrapeFailure
from servewatch.timeline.samples import GpuXid

T0 = 1_800_000_000.0
IDS = 'UUID="GPU-1",pci_bus_id="00000000:17:00.0",modelName="H100",pod="vllm-0",namespace="llm",container="c"'


def _page(gpu="0", ids=IDS, **values):
    return "".join(f'{name}{{gpu="{gpu}",{ids}}} {value}\n' for name, value in values.items())


def test_the_bounds_and_names():
    assert (dcgm.MIB, dcgm.READ_TIMEOUT_S, dcgm.MAX_PAGE_BYTES, dcgm.MAX_SERIES, dcgm.MAX_ENVIRON_BYTES) == (
        2**20, 5.0, 4 * 2**20, 8192, 2**20)
    assert dcgm.NOT_EXPORTED == "not_exported" and dcgm.POD_LABELS == ("pod", "namespace", "container")
    assert (dcgm.FB_USED, dcgm.FB_FREE, dcgm.XID) == ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                                                      "DCGM_FI_DEV_XID_ERRORS")
    assert len(dcgm.FAMILIES) == 21 and dcgm.READ_FIELDS[-2:] == ("memory_used_bytes", "memory_total_bytes")
    assert len(dcgm.READ_FIELDS) == 19                 # the two clock-reason names give one field


def test_every_field_with_its_scale():
    page = _page(DCGM_FI_DEV_GPU_UTIL="97.5", DCGM_FI_DEV_MEM_COPY_UTIL="41", DCGM_FI_DEV_SM_CLOCK="1980.7",
                 DCGM_FI_DEV_MEM_CLOCK="2619", DCGM_FI_DEV_POWER_USAGE="610.5", DCGM_FI_DEV_POWER_MGMT_LIMIT="700",
                 DCGM_FI_DEV_GPU_TEMP="64", DCGM_FI_DEV_PCIE_REPLAY_COUNTER="3", DCGM_FI_DEV_ECC_SBE_VOL_TOTAL="5",
                 DCGM_FI_DEV_ECC_DBE_VOL_TOTAL="6", DCGM_FI_DEV_ECC_SBE_AGG_TOTAL="7",
                 DCGM_FI_DEV_ECC_DBE_AGG_TOTAL="8", DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS="9",
                 DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS="10", DCGM_FI_DEV_ROW_REMAP_FAILURE="1",
                 DCGM_FI_DEV_ROW_REMAP_PENDING="0", DCGM_FI_DEV_CLOCKS_EVENT_REASONS="4",
                 DCGM_FI_DEV_FB_USED="100", DCGM_FI_DEV_FB_FREE="28", DCGM_FI_DEV_XID_ERRORS="79")
    (gpu,), last_xid = read_page(page)
    assert last_xid == {0: 79}
    got = {f: getattr(gpu, f) for f in ("utilization_pct", "memory_utilization_pct", "sm_clock_mhz",
                                        "memory_clock_mhz", "power_w", "power_limit_w", "temperature_c",
                                        "pcie_replay", "ecc_volatile_corrected", "ecc_volatile_uncorrected",
                                        "ecc_aggregate_corrected", "ecc_aggregate_uncorrected",
                                        "remapped_rows_correctable", "remapped_rows_uncorrectable", "remap_failure",
                                        "remap_pending", "clock_event_reasons", "memory_used_bytes",
                                        "memory_total_bytes")}
    assert got == {"utilization_pct": 97.5, "memory_utilization_pct": 41.0, "sm_clock_mhz": 1980,
                   "memory_clock_mhz": 2619, "power_w": 610.5, "power_limit_w": 700.0, "temperature_c": 64.0,
                   "pcie_replay": 3, "ecc_volatile_corrected": 5, "ecc_volatile_uncorrected": 6,
                   "ecc_aggregate_corrected": 7, "ecc_aggregate_uncorrected": 8, "remapped_rows_correctable": 9,
                   "remapped_rows_uncorrectable": 10, "remap_failure": True, "remap_pending": False,
                   "clock_event_reasons": 4, "memory_used_bytes": 100 * 2**20, "memory_total_bytes": 128 * 2**20}
    assert [type(got[f]) for f in ("sm_clock_mhz", "utilization_pct", "remap_failure")] == [int, float, bool]
    assert (gpu.index, gpu.uuid, gpu.pci_bus_id, gpu.name, gpu.pod, gpu.namespace, gpu.container) == (
        0, "GPU-1", "00000000:17:00.0", "H100", "vllm-0", "llm", "c")
    assert gpu.unavailable == (("processes", "not_exported"),)
    assert read_page(_page(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS="2"))[0][0].clock_event_reasons == 2


def test_fields_the_page_lacks_are_not_exported_and_memory_needs_both():
    (gpu,), last_xid = read_page(_page(DCGM_FI_DEV_FB_USED="100", DCGM_FI_DEV_GPU_TEMP="50"))
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes, gpu.temperature_c) == (100 * 2**20, None, 50.0)
    reasons = dict(gpu.unavailable)
    assert set(reasons.values()) == {"not_exported"}
    assert sorted(reasons) == sorted([f for f in dcgm.READ_FIELDS if f not in ("memory_used_bytes", "temperature_c")]
                                     + ["processes"])
    assert list(reasons) == sorted(reasons) and last_xid == {}
    (gpu,), _ = read_page(_page(DCGM_FI_DEV_FB_FREE="28"))
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes) == (None, None)


def test_labels_without_a_device_index_nan_values_and_odd_pod_names_are_left_out():
    odd = 'UUID="",pod="Vllm_0",namespace="-x",container="ok"'
    page = (_page(DCGM_FI_DEV_GPU_TEMP="50") + _page(gpu="", DCGM_FI_DEV_GPU_TEMP="51")
            + _page(gpu="x", DCGM_FI_DEV_GPU_TEMP="52") + _page(gpu="2", DCGM_FI_DEV_GPU_TEMP="NaN")
            + _page(gpu="3", ids=odd, DCGM_FI_DEV_XID_ERRORS="0") + "DCGM_FI_DEV_GPU_TEMP 9\n")
    devices, last_xid = read_page(page)
    assert [d.index for d in devices] == [0, 3] and last_xid == {3: 0}
    three = devices[1]
    assert (three.uuid, three.pod, three.namespace, three.container, three.temperature_c) == (
        None, None, None, "ok", None)
    assert read_page("") == ((), {})


def test_the_identity_is_the_first_series_of_a_device():
    page = _page(DCGM_FI_DEV_GPU_TEMP="50") + _page(ids='UUID="GPU-2"', DCGM_FI_DEV_SM_CLOCK="1")
    (gpu,), _ = read_page(page)
    assert gpu.uuid == "GPU-1"


def test_a_page_over_the_series_bound_is_refused():
    page = "".join(_page(gpu=str(i), DCGM_FI_DEV_GPU_TEMP="1") for i in range(3))
    with pytest.raises(TooManySeries):
        read_page(page, max_series=2)
    assert len(read_page(page, max_series=3)[0]) == 3


def test_the_kubernetes_name_shape():
    ok = ["a", "vllm-0", "a.b", "0", "a" * 253]
    bad = ["", "A", "-a", "a-", "a_b", "a" * 254, "a b"]
    assert [bool(dcgm.K8S_NAME.match(n)) for n in ok] == [True] * 5
    assert [bool(dcgm.K8S_NAME.match(n)) for n in bad] == [False] * 7


def test_server_pod_reads_only_hostname(tmp_path):
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "environ").write_bytes(b"A=1\0XHOSTNAME=no\0HOSTNAME=vllm-0\0HOSTNAME=other\0")
    assert server_pod(5, str(tmp_path)) == "vllm-0"
    (tmp_path / "5" / "environ").write_bytes(b"HOSTNAME=Not_A_Pod\0")
    assert server_pod(5, str(tmp_path)) is None
    (tmp_path / "5" / "environ").write_bytes(b"PATH=/bin\0")
    assert server_pod(5, str(tmp_path)) is None
    assert server_pod(6, str(tmp_path)) is None


def test_the_failure_words(monkeypatch):
    assert dcgm._too_large() == "too_large (a page over 4 MiB)"
    assert dcgm._failure(TooManySeries("x")) == "too_many_series (over 8,192)"
    assert dcgm._failure(BodyTooLarge("x")) == "too_large (a page over 4 MiB)"
    assert dcgm._failure(ValueError("x")) == "not_prometheus_text"
    monkeypatch.setattr(dcgm, "MAX_PAGE_BYTES", 1000)
    assert dcgm._too_large() == "too_large (a page over 1,000 bytes)"
    monkeypatch.setattr(dcgm, "MAX_PAGE_BYTES", 2**20)
    assert dcgm._too_large() == "too_large (a page over 1 MiB)"


def _poll(source):
    (sample,) = asyncio.run(source.poll())
    return sample


def test_each_unavailable_sample_says_why(monkeypatch):
    clock = VirtualClock(T0)
    s = _poll(DcgmSource(in_process_transport(lambda: (404, "")), clock, 5.0))
    assert (s.t, s.available, s.error, s.devices) == (T0, False, "unavailable: dcgm-exporter http_404", ())
    s = _poll(DcgmSource(in_process_transport(lambda: (199, _page(DCGM_FI_DEV_GPU_TEMP="1"))), clock, 5.0))
    assert s.error == "unavailable: dcgm-exporter http_199"
    s = _poll(DcgmSource(in_process_transport(lambda: (299, _page(DCGM_FI_DEV_GPU_TEMP="1"))), clock, 5.0))
    assert s.available and s.error is None and s.devices[0].temperature_c == 1.0
    s = _poll(DcgmSource(in_process_transport(lambda: (200, "not { prometheus")), clock, 5.0))
    assert s.error == "unavailable: dcgm-exporter not_prometheus_text"
    big = _page(DCGM_FI_DEV_GPU_TEMP="1")
    monkeypatch.setattr(dcgm, "MAX_PAGE_BYTES", len(big))
    assert _poll(DcgmSource(in_process_transport(lambda: big), clock, 5.0)).available
    monkeypatch.setattr(dcgm, "MAX_PAGE_BYTES", len(big) - 1)
    s = _poll(DcgmSource(in_process_transport(lambda: big), clock, 5.0))
    assert s.error == f"unavailable: dcgm-exporter too_large (a page over {len(big) - 1:,} bytes)"
    monkeypatch.setattr(dcgm, "MAX_PAGE_BYTES", 4 * 2**20)
    monkeypatch.setattr(dcgm, "MAX_SERIES", 1)
    s = _poll(DcgmSource(in_process_transport(lambda: big + _page(gpu="1", DCGM_FI_DEV_GPU_TEMP="1")), clock, 5.0))
    assert s.error == "unavailable: dcgm-exporter too_many_series (over 1)"


def test_a_page_not_answered_in_time(monkeypatch):
    monkeypatch.setattr(dcgm, "READ_TIMEOUT_S", 0.01)

    async def never():
        await asyncio.Event().wait()
    clock = VirtualClock(T0)
    s = _poll(DcgmSource(never, clock, 5.0))
    assert (s.available, s.error) == (False, "unavailable: dcgm-exporter timeout (no page within 0.01 s)")

    async def failed():
        return ScrapeFailure("timeout")
    assert _poll(DcgmSource(failed, clock, 5.0)).error == "unavailable: dcgm-exporter timeout"


def test_xid_events_are_changes_to_a_code_other_than_zero(tmp_path):
    pages = [_page(DCGM_FI_DEV_XID_ERRORS="13") + _page(gpu="1", DCGM_FI_DEV_XID_ERRORS="0"),
             _page(DCGM_FI_DEV_XID_ERRORS="13") + _page(gpu="1", DCGM_FI_DEV_XID_ERRORS="48"),
             _page(DCGM_FI_DEV_XID_ERRORS="0") + _page(gpu="1", DCGM_FI_DEV_XID_ERRORS="79"),
             _page(DCGM_FI_DEV_XID_ERRORS="31") + _page(gpu="2", DCGM_FI_DEV_XID_ERRORS="94")]
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "environ").write_bytes(b"HOSTNAME=vllm-0\0")
    clock = VirtualClock(T0)
    source = DcgmSource(in_process_transport(lambda: pages.pop(0)), clock, 5.0, pid=7, proc_root=str(tmp_path))
    assert source.interval == 5.0 and source.kind == "gpu"
    got = []
    for _ in range(4):
        got.append(_poll(source))
        clock.advance(5.0)
    assert [s.xids for s in got] == [(), (GpuXid(T0 + 5, 1, 48),), (GpuXid(T0 + 10, 1, 79),),
                                     (GpuXid(T0 + 15, 0, 31), GpuXid(T0 + 15, 2, 94))]
    assert [s.server_pod for s in got] == ["vllm-0"] * 4
    assert all(s.available for s in got)
    (tmp_path / "7" / "environ").write_bytes(b"HOSTNAME=other\0")       # read once
    pages.append(_page(DCGM_FI_DEV_XID_ERRORS="0"))
    assert _poll(source).server_pod == "vllm-0"
    no_pid = DcgmSource(in_process_transport(lambda: _page(DCGM_FI_DEV_GPU_TEMP="1")), clock, 5.0)
    assert _poll(no_pid).server_pod is None


def test_close_connections_closes_the_transport_when_it_can():
    closed = []

    class T:
        async def __call__(self):
            return FetchResponse(200, b"", 0.0)

        async def close(self):
            closed.append(True)
    asyncio.run(DcgmSource(T(), VirtualClock(T0), 5.0).close_connections())
    assert closed == [True]
    asyncio.run(DcgmSource(in_process_transport(lambda: ""), VirtualClock(T0), 5.0).close_connections())


def test_a_sample_without_a_device_index_is_passed_over_not_the_end_of_the_page():
    # the first sample has no gpu label (a host-level series); the devices after it are still read
    page = 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-9"} 5\n' + _page("0", DCGM_FI_DEV_GPU_UTIL="97") + _page(
        "1", DCGM_FI_DEV_GPU_UTIL="12")
    devices, _ = read_page(page)
    assert [(d.index, d.utilization_pct) for d in devices] == [(0, 97.0), (1, 12.0)]


def test_only_the_families_read_make_a_device_and_the_byte_bound_is_the_one_given():
    # a family dcgm does not read (a profiling field) on GPU 3: no device 3 is made of it
    page = _page("3", DCGM_FI_PROF_PIPE_TENSOR_ACTIVE="0.5") + _page("0", DCGM_FI_DEV_GPU_UTIL="50")
    devices, _ = read_page(page)
    assert [(d.index, d.utilization_pct) for d in devices] == [(0, 50.0)]
    page = _page("0", DCGM_FI_DEV_GPU_UTIL="50")
    with pytest.raises(BodyTooLarge):
        read_page(page, max_bytes=len(page.encode()) - 1)
    assert read_page(page, max_bytes=len(page.encode()))[0][0].utilization_pct == 50.0


def test_a_hostname_past_the_environment_bound_or_not_ascii_is_no_pod(tmp_path):
    def environ(pid: int, data: bytes) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(data)

    environ(1, b"A=" + b"x" * (dcgm.MAX_ENVIRON_BYTES - 2) + b"\0HOSTNAME=vllm-0\0")   # past the bound
    environ(2, b"A=1\0HOSTNAME=vllm-\xe9\0")                                             # not ASCII
    environ(3, b"A=" + b"x" * (dcgm.MAX_ENVIRON_BYTES - 20) + b"\0HOSTNAME=vllm-0\0")   # within it
    assert server_pod(1, str(tmp_path)) is None
    assert server_pod(2, str(tmp_path)) is None
    assert server_pod(3, str(tmp_path)) == "vllm-0"


def test_each_unavailable_sample_is_stamped_now_and_unavailable(monkeypatch):
    clock = VirtualClock(T0 + 7.5)
    for status, body, error in ((404, "", "http_404"), (300, _page(DCGM_FI_DEV_GPU_TEMP="1"), "http_300"),
                                (200, "not { prometheus", "not_prometheus_text")):
        s = _poll(DcgmSource(in_process_transport(lambda: (status, body)), clock, 5.0))
        assert (s.t, s.available, s.error) == (T0 + 7.5, False, f"unavailable: dcgm-exporter {error}")
    big = _page(DCGM_FI_DEV_GPU_TEMP="1")
    monkeypatch.setattr(dcgm, "MAX_PAGE_BYTES", len(big) - 1)
    s = _poll(DcgmSource(in_process_transport(lambda: big), clock, 5.0))
    assert (s.t, s.available) == (T0 + 7.5, False)

    async def cut():
        return ScrapeFailure("connect", "refused")
    s = _poll(DcgmSource(cut, clock, 5.0))
    assert (s.t, s.available, s.error) == (T0 + 7.5, False, f"unavailable: dcgm-exporter {ScrapeFailure('connect', 'refused').label}")
    monkeypatch.setattr(dcgm, "READ_TIMEOUT_S", 0.01)

    async def never():
        await asyncio.Event().wait()
    assert _poll(DcgmSource(never, clock, 5.0)).t == T0 + 7.5


def test_the_pod_of_a_live_process_is_read_from_the_real_proc():
    import os
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, "HOSTNAME": "vllm-7"})
    try:
        # its environment is readable once it runs (read in the middle of its exec, /proc gives an empty one)
        assert child.stdout.readline() == b"up\n"
        assert server_pod(child.pid) == "vllm-7"                          # the default root: /proc
        page = _page(DCGM_FI_DEV_GPU_TEMP="1")
        s = _poll(DcgmSource(in_process_transport(lambda: page), VirtualClock(T0), 5.0, pid=child.pid))
        assert s.server_pod == "vllm-7"
    finally:
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()
