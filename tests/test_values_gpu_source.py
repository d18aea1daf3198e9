"""Values of servewatch/sources/gpu.py (issue 50 item 8: every GPU figure gpu_fault and gpu_throttled read): a
stand-in pynvml object in this process (no library, no driver) answers each call with a known value or a known
NVML error; each field of the reading, each reason, the process shares, the field values, the Xid thread's queue
and the source's cadence are checked against the values it gave. Each figure by hand beside the assertion."""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from types import SimpleNamespace as NS

import pytest

from servewatch.clock import VirtualClock
from servewatch.sources import gpu as g
from servewatch.timeline.samples import GpuProcess, GpuSample, GpuXid


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def _fv(ret=0, vtype=3, **value):
    return NS(nvmlReturn=ret, valueType=vtype, value=NS(**value))


_NOT_A_DEVICE_CALL = object()


class FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 2, 0

    def __init__(self, devices=1, fail=None, fields=None, shares=None):
        self.handles = [ctypes.c_void_p(0x1000 + 16 * i) for i in range(devices)]
        self.fail = fail or {}              # method name -> NVML error value
        self.fields = fields
        self.shares = shares or {}
        self.since = []
        self.events = []
        self.freed = []
        self.registered = []
        self.libLoadLock = threading.Lock()
        self.nvmlLib = None

    def __getattr__(self, name):
        raise AttributeError(name)

    def _call(self, name, value, h=_NOT_A_DEVICE_CALL, which=0):
        if h is not _NOT_A_DEVICE_CALL and not any(h is d for d in self.handles) or which != 0:
            raise NVMLError(2)              # invalid_argument: not one of the devices' handles, or no such clock
        if name in self.fail:
            raise NVMLError(self.fail[name])
        return value

    def nvmlInit(self):
        return self._call("nvmlInit", None)

    def nvmlDeviceGetCount(self):
        return len(self.handles)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.handles[i]

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._call("util", NS(gpu=97, memory=41.5), h)

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._call("memory", NS(used=3 * 2**30, total=80 * 2**30), h)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._call("power", 610500, h)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return self._call("processes", h=h, value=[
            NS(pid=11, usedGpuMemory=2**30), NS(pid=12, usedGpuMemory=None), NS(pid=13, usedGpuMemory=2**62), NS(pid=14)])

    def nvmlDeviceGetProcessUtilization(self, h, since):
        self.since.append(since)
        return self._call("shares", self.shares.get(len(self.since), []), h)

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        return self._call(f"ecc{error_type}{counter}", 100 + 10 * error_type + counter, h)

    def nvmlDeviceGetRemappedRows(self, h):
        return self._call("rows", (5, 6, 1, 0), h)

    def nvmlDeviceGetPciInfo(self, h):
        return self._call("pci", NS(busId=b"00000000:17:00.0"), h)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._call("limit", 700000, h)

    def nvmlDeviceGetUUID(self, h):
        return self._call("uuid", "GPU-1", h)

    def nvmlDeviceGetName(self, h):
        return self._call("name", b"NVIDIA H100", h)

    def nvmlDeviceGetClockInfo(self, h, which):
        return self._call(f"clock{which}", 1980.0 if which == 0 else 2619.0, h)

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        return self._call("maxclock", 1980.9, h, which)

    def nvmlDeviceGetTemperature(self, h, which):
        return self._call("temp", 64, h, which)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._call("reasons", 0x8, h)

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self._call("replay", 3, h)

    def nvmlDeviceGetFieldValues(self, h, ids):
        assert ids == [230, 38, 45, 52, 59]
        return self._call("fields", h=h, value=self.fields if self.fields is not None else [
            _fv(vtype=1, uiVal=2), _fv(ullVal=7), _fv(ullVal=5), _fv(vtype=2, ulVal=9), _fv(vtype=99, ullVal=4)])

    # the Xid event set
    def nvmlEventSetCreate(self):
        return self._call("create", "set")

    def nvmlDeviceRegisterEvents(self, h, kind, event_set):
        self.registered.append((h.value, kind, event_set))
        return self._call(f"register{h.value}", None)

    def nvmlEventSetFree(self, event_set):
        self.freed.append(event_set)

    def nvmlEventSetWait_v2(self, event_set, ms):
        assert ms == 1000
        if event_set != "set":
            raise NVMLError(2)
        if self.events:
            item = self.events.pop(0)
            if isinstance(item, Exception):
                raise item
            return item
        raise NVMLError(10)


def _probe(monkeypatch, nvml):
    monkeypatch.setattr(g, "load_pynvml", lambda: nvml)
    return g.NvmlProbe()


def test_the_constants():
    assert (g.MAX_PROCESSES_PER_DEVICE, g.MAX_PENDING_XIDS, g.XID_WAIT_MS, g.NVML_TIMEOUT, g.NVML_GPU_IS_LOST,
            g.XID_CRITICAL_ERROR) == (64, 256, 1000, 10, 15, 0x8)
    assert g.TEST_ONLY_LIBRARY_VAR == "SERVEWATCH_TEST_ONLY_NVML"
    assert g.FIELD_NAMES == ("recovery_action", "nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors")
    assert g.NVML_REASONS[3] == "not_supported" and g.NVML_REASONS[15] == "gpu_is_lost" and len(g.NVML_REASONS) == 20


def test_every_field_of_a_reading(monkeypatch):
    nvml = FakeNvml(shares={1: [NS(pid=11, timeStamp=50, smUtil=30), NS(pid=11, timeStamp=40, smUtil=99),
                                NS(pid=12, timeStamp=70, smUtil=5)]})
    probe = _probe(monkeypatch, nvml)
    assert probe.error is None
    sample = probe.snapshot(123.5)
    assert (sample.t, sample.available, sample.error, sample.xids) == (123.5, True, None, ())
    (d,) = sample.devices
    assert d.processes == (GpuProcess(11, 2**30, 30.0), GpuProcess(12, None, 5.0), GpuProcess(13, None, None),
                           GpuProcess(14, None, None))
    got = {f: getattr(d, f) for f in (
        "index", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "power_w", "uuid", "pci_bus_id", "name",
        "memory_utilization_pct", "sm_clock_mhz", "sm_clock_max_mhz", "memory_clock_mhz", "power_limit_w",
        "temperature_c", "clock_event_reasons", "ecc_volatile_corrected", "ecc_volatile_uncorrected",
        "ecc_aggregate_corrected", "ecc_aggregate_uncorrected", "remapped_rows_correctable",
        "remapped_rows_uncorrectable", "remap_pending", "remap_failure", "pcie_replay", "recovery_action",
        "nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors", "lost", "unavailable")}
    assert got == {"index": 0, "utilization_pct": 97.0, "memory_used_bytes": 3 * 2**30, "memory_total_bytes": 80 * 2**30,
                   "power_w": 610.5, "uuid": "GPU-1", "pci_bus_id": "00000000:17:00.0", "name": "NVIDIA H100",
                   "memory_utilization_pct": 41.5, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980,
                   "memory_clock_mhz": 2619, "power_limit_w": 700.0, "temperature_c": 64.0,
                   "clock_event_reasons": 8, "ecc_volatile_corrected": 100, "ecc_volatile_uncorrected": 110,
                   "ecc_aggregate_corrected": 101, "ecc_aggregate_uncorrected": 111,
                   "remapped_rows_correctable": 5, "remapped_rows_uncorrectable": 6, "remap_pending": True,
                   "remap_failure": False, "pcie_replay": 3, "recovery_action": 2, "nvlink_crc_errors": 12,
                   "nvlink_replay_errors": 9, "nvlink_recovery_errors": 4, "lost": False, "unavailable": ()}
    assert [type(got[f]) for f in ("utilization_pct", "sm_clock_mhz", "temperature_c", "remap_pending")] == [
        float, int, float, bool]


def test_the_process_shares_keep_the_newest_sample_and_ask_from_the_last_seen(monkeypatch):
    nvml = FakeNvml(devices=2, shares={1: [NS(pid=11, timeStamp=50, smUtil=30), NS(pid=11, timeStamp=50, smUtil=31)],
                                       2: [NS(pid=12, timeStamp=80, smUtil=7)],
                                       3: [NS(pid=11, timeStamp=60, smUtil=1)], 4: []})
    probe = _probe(monkeypatch, nvml)
    h0, h1 = nvml.handles
    assert probe._process_shares(0, h0) == {11: 31.0}                # the same time stamp: the later one
    assert probe._process_shares(1, h1) == {12: 7.0}
    assert probe._process_shares(0, h0) == {11: 1.0}
    assert probe._process_shares(0, h0) == {}
    assert nvml.since == [0, 0, 50, 60]
    assert probe._last_seen_us == {0: 60, 1: 80}


def test_a_process_list_is_bounded(monkeypatch):
    nvml = FakeNvml()
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [NS(pid=i, usedGpuMemory=0) for i in range(70)]
    (d,) = _probe(monkeypatch, nvml).snapshot(0.0).devices
    assert len(d.processes) == 64 and d.processes[-1] == GpuProcess(63, 0, None)


def test_each_read_nvml_refuses_is_none_with_its_reason(monkeypatch):
    fail = {"util": 3, "memory": 4, "power": 3, "processes": 3, "shares": 21, "ecc00": 3, "ecc11": 3, "rows": 3,
            "pci": 999, "limit": 3, "uuid": 3, "name": 3, "clock0": 3, "maxclock": 3, "clock2": 3, "temp": 3,
            "reasons": 77, "replay": 3, "fields": 13}
    (d,) = _probe(monkeypatch, FakeNvml(fail=fail)).snapshot(0.0).devices
    assert (d.utilization_pct, d.memory_used_bytes, d.memory_total_bytes, d.power_w, d.processes, d.uuid,
            d.pci_bus_id, d.name, d.memory_utilization_pct, d.sm_clock_mhz, d.sm_clock_max_mhz, d.memory_clock_mhz,
            d.power_limit_w, d.temperature_c, d.clock_event_reasons, d.ecc_volatile_corrected,
            d.ecc_aggregate_uncorrected, d.remapped_rows_correctable, d.remapped_rows_uncorrectable,
            d.remap_pending, d.remap_failure, d.pcie_replay, d.recovery_action, d.nvlink_crc_errors) == (
        None, None, None, None, (), None, None, None, None, None, None, None, None, None, None, None, None, None, None,
        None, None, None, None, None)
    assert (d.ecc_volatile_uncorrected, d.ecc_aggregate_corrected, d.lost) == (110, 101, False)
    assert dict(d.unavailable) == {
        "utilization_pct": "not_supported", "memory_used_bytes": "no_permission", "power_w": "not_supported",
        "processes": "not_supported", "process_utilization": "no_data", "ecc_volatile_corrected": "not_supported",
        "ecc_aggregate_uncorrected": "not_supported", "remapped_rows": "not_supported", "pci_bus_id": "unknown",
        "power_limit_w": "not_supported", "uuid": "not_supported", "name": "not_supported",
        "sm_clock_mhz": "not_supported", "sm_clock_max_mhz": "not_supported", "memory_clock_mhz": "not_supported",
        "temperature_c": "not_supported", "clock_event_reasons": "nvml_error_77", "pcie_replay": "not_supported",
        "recovery_action": "function_not_found", "nvlink_crc_errors": "function_not_found",
        "nvlink_replay_errors": "function_not_found", "nvlink_recovery_errors": "function_not_found"}
    assert [n for n, _ in d.unavailable] == sorted(n for n, _ in d.unavailable)


def test_a_lost_gpu_is_said_lost(monkeypatch):
    (d,) = _probe(monkeypatch, FakeNvml(fail={"temp": 15})).snapshot(0.0).devices
    assert d.lost is True and d.why_unavailable("temperature_c") == "gpu_is_lost"
    reader = g._Reader()
    assert reader("x", lambda: 5) == 5 and reader.lost is False
    assert reader("y", lambda: 1 / 0) is None
    assert reader.unavailable == {"y": "error_ZeroDivisionError"} and reader.lost is False


def test_field_values_each_with_its_own_return_and_type(monkeypatch):
    fields = [_fv(ret=3), _fv(vtype=0, dVal=1.9), _fv(ret=3), _fv(vtype=4, sllVal=-2), _fv(vtype=5, siVal=6)]
    (d,) = _probe(monkeypatch, FakeNvml(fields=fields)).snapshot(0.0).devices
    assert (d.recovery_action, d.nvlink_crc_errors, d.nvlink_replay_errors, d.nvlink_recovery_errors) == (None, 1, -2, 6)
    assert d.unavailable == (("recovery_action", "not_supported"),)      # one half of the CRC read: its total
    fields = [_fv(vtype=6, usVal=1), _fv(ret=3), _fv(ret=4), _fv(ret=12345), _fv(vtype=3, ullVal=0)]
    (d,) = _probe(monkeypatch, FakeNvml(fields=fields)).snapshot(0.0).devices
    assert (d.recovery_action, d.nvlink_crc_errors, d.nvlink_replay_errors, d.nvlink_recovery_errors) == (1, None, None, 0)
    assert dict(d.unavailable) == {"nvlink_crc_errors": "not_supported", "nvlink_replay_errors": "unknown"}


def test_small_helpers():
    assert [g._bytes(v) for v in (0, 5, 2**62 - 1, 2**62, -1, None, 1.5)] == [0, 5, 2**62 - 1, None, None, None, None]
    assert [g._percent(v) for v in (3, 2.5, None, "7")] == [3.0, 2.5, None, None]
    assert [g._text(v) for v in (b"a\xffb", "x", None, 5)] == ["a\ufffdb", "x", None, None]
    assert g.nvml_reason(NVMLError(3)) == "not_supported"
    assert g.nvml_reason(NVMLError(5)) == "nvml_error_5"
    assert g.nvml_reason(ValueError("x")) == "error_ValueError"

    class NVMLError_DriverNotLoaded(Exception): ...
    class NVMLError_LibraryNotFound(Exception): ...
    class NVMLError_NoPermission(Exception): ...
    assert [g._reason(e()) for e in (NVMLError_DriverNotLoaded, NVMLError_LibraryNotFound, NVMLError_NoPermission,
                                      KeyError)] == [
        "unavailable: no NVIDIA driver", "unavailable: no NVIDIA driver (NVML library not found)",
        "unavailable: no permission", "unavailable: KeyError"]


def test_no_nvml_is_an_unavailable_sample(monkeypatch):
    probe = _probe(monkeypatch, FakeNvml(fail={"nvmlInit": 9}))
    assert probe.error == "unavailable: NVMLError"
    assert probe.snapshot(4.0) == GpuSample(t=4.0, available=False, error="unavailable: NVMLError")
    probe.start_events(time.time)
    assert probe._xid_thread is None

    def missing():
        raise ImportError("no pynvml")
    monkeypatch.setattr(g, "load_pynvml", missing)
    assert g.NvmlProbe().error == "unavailable: nvidia-ml-py not installed"


def test_the_test_only_library_is_loaded_when_named(monkeypatch):
    import pynvml
    loaded = []
    monkeypatch.setattr(ctypes, "CDLL", lambda path: loaded.append(path) or "lib")
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.delenv(g.TEST_ONLY_LIBRARY_VAR, raising=False)
    assert g.load_pynvml() is pynvml and pynvml.nvmlLib is None
    monkeypatch.setenv(g.TEST_ONLY_LIBRARY_VAR, "/x/stand_in.so")
    assert g.load_pynvml() is pynvml and pynvml.nvmlLib == "lib" and loaded == ["/x/stand_in.so"]
    g.load_pynvml()
    assert loaded == ["/x/stand_in.so"]                       # once


def _wait(predicate, seconds=5.0):
    end = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.001)


def test_xid_events_are_queued_with_their_device_and_taken_once(monkeypatch):
    nvml = FakeNvml(devices=2)
    h1 = nvml.handles[1]
    nvml.events = [NVMLError(10), NS(eventType=0x8 | 0x1, device=h1, eventData=79),
                   NS(eventType=0x1, device=h1, eventData=5), NS(eventType=0x8, device=ctypes.c_void_p(0x9), eventData=13)]
    probe = _probe(monkeypatch, nvml)
    assert probe.xids_pending() is False
    probe.start_events(lambda: 42.0)
    first = probe._xid_thread
    probe.start_events(lambda: 0.0)                              # idempotent
    assert probe._xid_thread is first
    _wait(lambda: not nvml.events and len(probe._xids) == 2)
    assert probe.xids_pending() and probe.xid_arrived.is_set()
    assert probe.snapshot(50.0).xids == (GpuXid(42.0, 1, 79), GpuXid(42.0, -1, 13))
    assert not probe.xids_pending() and not probe.xid_arrived.is_set()
    assert probe.snapshot(51.0).xids == ()
    assert nvml.registered == [(0x1000, 8, "set"), (0x1010, 8, "set")] and probe.xid_error is None
    assert (first.name, first.daemon) == ("servewatch-nvml-xid", True)
    probe.close()
    assert not first.is_alive() and nvml.freed == ["set"]


def test_an_xid_wait_error_is_said_and_not_spun_on(monkeypatch):
    nvml = FakeNvml()
    nvml.events = [NVMLError(15)]
    probe = _probe(monkeypatch, nvml)
    waits = []
    monkeypatch.setattr(probe._xid_stop, "wait", lambda s: waits.append(s) or probe._xid_stop.set())
    probe.start_events(time.time)
    probe._xid_thread.join(5)
    assert probe.xid_error == "gpu_is_lost" and waits == [1.0] and nvml.freed == ["set"]


def test_xid_registration_failures(monkeypatch):
    nvml = FakeNvml(devices=2, fail={"register4096": 3})
    probe = _probe(monkeypatch, nvml)
    probe.start_events(time.time)
    assert probe.xid_error == "not_supported" and probe._xid_thread is not None        # one device registered
    probe.close()
    nvml = FakeNvml(devices=1, fail={"register4096": 3})
    probe = _probe(monkeypatch, nvml)
    probe.start_events(time.time)
    assert probe._xid_thread is None and nvml.freed == ["set"]
    nvml = FakeNvml(fail={"create": 4})
    probe = _probe(monkeypatch, nvml)
    probe.start_events(time.time)
    assert (probe._xid_thread, probe.xid_error, nvml.registered) == (None, "no_permission", [])


def test_the_pending_xids_are_bounded(monkeypatch):
    probe = _probe(monkeypatch, FakeNvml())
    assert probe._xids.maxlen == 256


class _StubProbe:
    def __init__(self):
        self.snapshots = []
        self.pending = False
        self.started = []
        self.closed = False

    def start_events(self, now):
        self.started.append(now)

    def xids_pending(self):
        return self.pending

    def snapshot(self, t):
        self.snapshots.append(t)
        return GpuSample(t=t, available=True)

    def close(self):
        self.closed = True


def test_the_source_reads_at_its_interval_and_earlier_for_an_xid():
    clock = VirtualClock(1000.0)
    probe = _StubProbe()
    source = g.GpuSource(probe, clock, 5.0, check_every=1.0)
    assert (source.reading_every, source.interval, source.kind) == (5.0, 1.0, "gpu")
    assert probe.started == [clock.now]
    got = []
    for step in range(14):
        got += asyncio.run(source.poll())
        if step == 7:
            probe.pending = True
        if step == 8:
            probe.pending = False
        clock.advance(1.0)
    assert [s.t for s in got] == [1000.0, 1005.0, 1008.0, 1013.0]
    assert g.GpuSource(probe, clock, 5.0, check_every=10.0).interval == 5.0
    assert g.GpuSource(probe, clock, 5.0).interval == 5.0
    source.close()
    assert probe.closed


def test_the_source_reads_again_just_under_the_interval_on_a_float_clock():
    clock = VirtualClock(0.1)
    probe = _StubProbe()
    source = g.GpuSource(probe, clock, 0.3)
    asyncio.run(source.poll())
    clock.set(0.1 + 0.3 - 5e-10)                                 # within 1e-9 of the next reading
    assert len(asyncio.run(source.poll())) == 1
    clock.set(clock.now() + 0.3 - 2e-9)
    assert asyncio.run(source.poll()) == []


def test_a_probe_that_raises_is_an_unavailable_sample():
    class Broken:
        def snapshot(self, t):
            raise PermissionError("x")
    clock = VirtualClock(7.0)
    (s,) = asyncio.run(g.GpuSource(Broken(), clock, 5.0).poll())
    assert s == GpuSample(t=7.0, available=False, error="unavailable: PermissionError")
    g.GpuSource(Broken(), clock, 5.0).close()                    # nothing to close: no error


@pytest.mark.parametrize("names", [("nvmlInit",)])
def test_an_init_error_of_each_kind_is_said(monkeypatch, names):
    class NVMLError_NoPermission(Exception):
        value = 4

    class Refusing(FakeNvml):
        def nvmlInit(self):
            raise NVMLError_NoPermission()
    assert _probe(monkeypatch, Refusing()).error == "unavailable: no permission"


def test_each_device_is_read_through_its_own_handle(monkeypatch):
    nvml = FakeNvml(devices=2, shares={1: [NS(pid=11, timeStamp=5, smUtil=30)], 2: [NS(pid=11, timeStamp=6, smUtil=40)]})
    probe = _probe(monkeypatch, nvml)
    first, second = probe.snapshot(0.0).devices
    assert (first.index, second.index, first.unavailable, second.unavailable) == (0, 1, (), ())
    assert (first.sm_clock_max_mhz, first.temperature_c, first.nvlink_crc_errors, first.processes[0].sm_util_pct,
            second.processes[0].sm_util_pct) == (1980, 64.0, 12, 30.0, 40.0)
    probe.snapshot(1.0)
    assert nvml.since == [0, 0, 5, 6]                                # each device asks from its own last sample


def test_a_remap_failure_and_a_crc_total_whose_first_half_nvml_refuses(monkeypatch):
    nvml = FakeNvml(fields=[_fv(vtype=1, uiVal=0), _fv(ret=3), _fv(ullVal=5), _fv(ullVal=1), _fv(ullVal=2)])
    nvml.nvmlDeviceGetRemappedRows = lambda h: (0, 1, 0, 1)
    (d,) = _probe(monkeypatch, nvml).snapshot(0.0).devices
    assert (d.remapped_rows_correctable, d.remapped_rows_uncorrectable, d.remap_pending, d.remap_failure) == (
        0, 1, False, True)
    assert (d.nvlink_crc_errors, d.unavailable) == (5, ())         # the second half alone: the total, no reason


def test_the_last_seen_stamp_is_the_newest_of_any_order_and_zero_stays_zero(monkeypatch):
    nvml = FakeNvml(shares={1: [NS(pid=11, timeStamp=0, smUtil=3)], 2: [NS(pid=11, timeStamp=50, smUtil=30),
                                                                       NS(pid=12, timeStamp=40, smUtil=20)]})
    probe = _probe(monkeypatch, nvml)
    (h,) = nvml.handles
    assert probe._process_shares(0, h) == {11: 3.0} and probe._last_seen_us == {0: 0}
    assert probe._process_shares(0, h) == {11: 30.0, 12: 20.0} and probe._last_seen_us == {0: 50}
    assert nvml.since == [0, 0]


def test_the_xid_thread_goes_on_after_a_timeout_and_after_an_error_without_an_nvml_code(monkeypatch):
    nvml = FakeNvml()
    (h,) = nvml.handles
    nvml.events = [NVMLError(10), RuntimeError("driver"), NS(eventType=0x8, device=h, eventData=48)]
    probe = _probe(monkeypatch, nvml)
    waits = []
    monkeypatch.setattr(probe._xid_stop, "wait", lambda s: waits.append(s))
    probe.start_events(lambda: 9.0)
    _wait(lambda: probe.xids_pending())
    assert (probe.xid_error, waits, probe.snapshot(10.0).xids) == ("error_RuntimeError", [1.0], (GpuXid(9.0, 0, 48),))
    probe._xid_stop.set()
    probe._xid_thread.join(5)
    assert not probe._xid_thread.is_alive()


def test_close_waits_for_the_xid_thread_five_seconds_at_most(monkeypatch):
    probe = _probe(monkeypatch, FakeNvml())
    joined = []
    probe._xid_thread = NS(join=joined.append)
    probe.close()
    probe.close(0.5)
    assert joined == [5.0, 0.5] and probe._xid_stop.is_set()


def test_the_source_reads_at_exactly_a_nanosecond_before_the_interval():
    clock = VirtualClock(0.0)
    probe = _StubProbe()
    source = g.GpuSource(probe, clock, 1.0)
    asyncio.run(source.poll())
    clock.set(source._next_reading - 1e-9)
    assert len(asyncio.run(source.poll())) == 1 and probe.snapshots == [0.0, 1.0 - 1e-9]
