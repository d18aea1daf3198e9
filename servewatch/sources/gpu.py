"""GPUs via NVML (nvidia-ml-py): a full reading per device on a slower cadence, Xid events as they happen, and a
typed "unavailable" sample when there is no NVML at all.

Per device: identity (index, UUID, PCI bus id, name), utilisation, memory, SM and memory clocks, power and its
limit, temperature, clock-event (throttle) reasons, ECC counts, remapped rows, the PCIe replay counter, and each
compute process with its memory and SM share. A field NVML cannot give is None with NVML's reason
(`GpuDevice.unavailable`), never a zero. Xid critical errors arrive through an NVML event set on their own
thread (`nvmlEventSetWait` with a timeout: the thread sleeps in the driver between events); the source checks
for them at the recorder's own cadence and takes a reading at once when one came.

TEST-ONLY: when SERVEWATCH_TEST_ONLY_NVML names a library, pynvml loads that one instead of the driver's
libnvidia-ml.so.1 (servewatch/lab/nvml_stand_in.c, built by the tests and the lab). Nothing else does.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import os
import threading
from collections.abc import Callable

from servewatch.clock import Clock
from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample, GpuXid

MAX_PROCESSES_PER_DEVICE = 64
MAX_PENDING_XIDS = 256
TEST_ONLY_LIBRARY_VAR = "SERVEWATCH_TEST_ONLY_NVML"
XID_WAIT_MS = 1000         # one nvmlEventSetWait: the thread wakes this often to see whether it must stop

# NVML's return codes → the reason a field is unavailable (a short token; NVML_ERROR_* in nvml.h).
NVML_REASONS = {1: "uninitialized", 2: "invalid_argument", 3: "not_supported", 4: "no_permission",
                6: "not_found", 9: "driver_not_loaded", 10: "timeout", 12: "library_not_found",
                13: "function_not_found", 14: "corrupted_inforom", 15: "gpu_is_lost", 16: "reset_required",
                17: "operating_system", 18: "lib_rm_version_mismatch", 20: "memory", 21: "no_data",
                26: "deprecated", 27: "not_ready", 28: "gpu_not_found", 999: "unknown"}
NVML_TIMEOUT = 10
NVML_GPU_IS_LOST = 15
XID_CRITICAL_ERROR = 0x8   # nvmlEventTypeXidCriticalError
# nvmlDeviceGetFieldValues ids (nvml.h NVML_FI_DEV_*) -> the GpuDevice field; CRC flit and data errors add up.
FIELD_IDS = ((230, "recovery_action"), (38, "nvlink_crc_errors"), (45, "nvlink_crc_errors"),
             (52, "nvlink_replay_errors"), (59, "nvlink_recovery_errors"))
FIELD_NAMES = tuple(dict.fromkeys(name for _, name in FIELD_IDS))
_VALUE_ATTRIBUTES = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _bytes(value) -> int | None:
    """NVML's usedGpuMemory: bytes, or None when it cannot say (it reports NVML_VALUE_NOT_AVAILABLE then)."""
    return int(value) if isinstance(value, int) and 0 <= value < 2**62 else None


def nvml_reason(exc: BaseException) -> str:
    """NVML's reason for a failed call as a token: "not_supported", "gpu_is_lost", ..."""
    value = getattr(exc, "value", None)
    if isinstance(value, int):
        return NVML_REASONS.get(value, f"nvml_error_{value}")
    return f"error_{type(exc).__name__}"


def load_pynvml():
    """pynvml, with the test-only stand-in library loaded in place of the driver's when the variable names one."""
    import pynvml

    path = os.environ.get(TEST_ONLY_LIBRARY_VAR)
    if path:
        with pynvml.libLoadLock:
            if pynvml.nvmlLib is None:
                pynvml.nvmlLib = ctypes.CDLL(path)
    return pynvml


class _Reader:
    """One device's reads: each value, or None with NVML's reason noted."""

    def __init__(self):
        self.unavailable: dict[str, str] = {}

    def __call__(self, name: str, read: Callable):
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - NVMLError_* (not supported, no permission, GPU lost, ...)
            self.unavailable[name] = nvml_reason(exc)
            return None

    @property
    def lost(self) -> bool:
        return "gpu_is_lost" in self.unavailable.values()


def _percent(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _text(value) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return value if isinstance(value, str) else None


class NvmlProbe:
    def __init__(self):
        self.error: str | None = None
        self._nvml = None
        self._handles = []
        self._last_seen_us = {}            # device index -> newest process-utilisation sample's timestamp
        self._xids: collections.deque[GpuXid] = collections.deque(maxlen=MAX_PENDING_XIDS)
        self._xid_lock = threading.Lock()
        self._xid_thread: threading.Thread | None = None
        self._xid_stop = threading.Event()
        self.xid_error: str | None = None  # why Xid events are not watched (None while they are)
        self.xid_arrived = threading.Event()   # set when an event is queued (what a test waits on)
        try:
            pynvml = load_pynvml()
            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except ImportError:
            self.error = "unavailable: nvidia-ml-py not installed"
        except Exception as exc:  # noqa: BLE001 - NVMLError_* (no driver, no library, no device)
            self.error = _reason(exc)

    # --- Xid events -----------------------------------------------------------------------------------

    def start_events(self, now: Callable[[], float]) -> None:
        """Watch every device for Xid critical errors on a thread of its own (idempotent)."""
        if self._nvml is None or self._xid_thread is not None:
            return
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except Exception as exc:  # noqa: BLE001
            self.xid_error = nvml_reason(exc)
            return
        registered = 0
        for handle in self._handles:
            try:
                nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL_ERROR, event_set)
                registered += 1
            except Exception as exc:  # noqa: BLE001 - e.g. not supported on this device
                self.xid_error = nvml_reason(exc)
        if not registered:
            nvml.nvmlEventSetFree(event_set)
            return
        addresses = {ctypes.cast(h, ctypes.c_void_p).value: i for i, h in enumerate(self._handles)}
        self._xid_thread = threading.Thread(target=self._watch_xids, args=(event_set, addresses, now),
                                            name="servewatch-nvml-xid", daemon=True)
        self._xid_thread.start()

    def _watch_xids(self, event_set, addresses: dict, now: Callable[[], float]) -> None:
        nvml = self._nvml
        try:
            while not self._xid_stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, XID_WAIT_MS)
                except Exception as exc:  # noqa: BLE001
                    if getattr(exc, "value", None) == NVML_TIMEOUT:
                        continue
                    self.xid_error = nvml_reason(exc)
                    self._xid_stop.wait(XID_WAIT_MS / 1000)     # e.g. a lost GPU: do not spin on the error
                    continue
                if not data.eventType & XID_CRITICAL_ERROR:
                    continue
                index = addresses.get(ctypes.cast(data.device, ctypes.c_void_p).value, -1)
                with self._xid_lock:
                    self._xids.append(GpuXid(now(), index, int(data.eventData)))
                    self.xid_arrived.set()
        finally:
            try:
                nvml.nvmlEventSetFree(event_set)
            except Exception:  # noqa: BLE001
                pass

    def xids_pending(self) -> bool:
        with self._xid_lock:
            return bool(self._xids)

    def _take_xids(self) -> tuple[GpuXid, ...]:
        with self._xid_lock:
            taken = tuple(self._xids)
            self._xids.clear()
            self.xid_arrived.clear()
        return taken

    def close(self, timeout: float = 5.0) -> None:
        """Stop the Xid thread (it wakes within XID_WAIT_MS)."""
        self._xid_stop.set()
        if self._xid_thread is not None:
            self._xid_thread.join(timeout)

    # --- readings ---------------------------------------------------------------------------------------

    def snapshot(self, t: float) -> GpuSample:
        if self._nvml is None:
            return GpuSample(t=t, available=False, error=self.error)
        devices = tuple(self._device(index, handle) for index, handle in enumerate(self._handles))
        return GpuSample(t=t, available=True, devices=devices, xids=self._take_xids())

    def _device(self, index: int, handle) -> GpuDevice:
        nvml = self._nvml
        read = _Reader()
        utilization = read("utilization_pct", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = read("memory_used_bytes", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power = read("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        running = read("processes", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or ()
        shares = read("process_utilization", lambda: self._process_shares(index, handle)) or {}
        processes = tuple(GpuProcess(int(p.pid), _bytes(getattr(p, "usedGpuMemory", None)), shares.get(int(p.pid)))
                          for p in list(running)[:MAX_PROCESSES_PER_DEVICE])
        ecc = {}
        for name, error_type, counter in (("ecc_volatile_corrected", 0, 0), ("ecc_volatile_uncorrected", 1, 0),
                                          ("ecc_aggregate_corrected", 0, 1), ("ecc_aggregate_uncorrected", 1, 1)):
            ecc[name] = read(name, lambda e=error_type, c=counter: int(nvml.nvmlDeviceGetTotalEccErrors(handle, e, c)))
        rows = read("remapped_rows", lambda: nvml.nvmlDeviceGetRemappedRows(handle))
        pci = read("pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(handle))
        limit = read("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
        fields = self._field_values(handle, read)
        return GpuDevice(
            index=index,
            utilization_pct=_percent(getattr(utilization, "gpu", None)),
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            power_w=power, processes=processes,
            uuid=_text(read("uuid", lambda: nvml.nvmlDeviceGetUUID(handle))),
            pci_bus_id=_text(pci.busId) if pci is not None else None,
            name=_text(read("name", lambda: nvml.nvmlDeviceGetName(handle))),
            memory_utilization_pct=_percent(getattr(utilization, "memory", None)),
            sm_clock_mhz=read("sm_clock_mhz", lambda: int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
            sm_clock_max_mhz=read("sm_clock_max_mhz",
                                  lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))),
            memory_clock_mhz=read("memory_clock_mhz",
                                  lambda: int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))),
            power_limit_w=limit,
            temperature_c=read("temperature_c",
                               lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
            clock_event_reasons=read("clock_event_reasons",
                                     lambda: int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))),
            **ecc,
            remapped_rows_correctable=int(rows[0]) if rows is not None else None,
            remapped_rows_uncorrectable=int(rows[1]) if rows is not None else None,
            remap_pending=bool(rows[2]) if rows is not None else None,
            remap_failure=bool(rows[3]) if rows is not None else None,
            pcie_replay=read("pcie_replay", lambda: int(nvml.nvmlDeviceGetPcieReplayCounter(handle))),
            **fields,
            lost=read.lost,
            unavailable=tuple(sorted(read.unavailable.items())))

    def _field_values(self, handle, read: _Reader) -> dict[str, int | None]:
        """The recovery action and the NVLink error totals, in one nvmlDeviceGetFieldValues call; each field NVML
        does not give (a GPU without NVLink, a driver before the recovery action) unavailable with its reason."""
        values = read("field_values", lambda: self._nvml.nvmlDeviceGetFieldValues(handle, [f for f, _ in FIELD_IDS]))
        out: dict[str, int | None] = {name: None for name in FIELD_NAMES}
        if values is None:
            for name in FIELD_NAMES:
                read.unavailable[name] = read.unavailable["field_values"]
            del read.unavailable["field_values"]
            return out
        for (field_id, name), value in zip(FIELD_IDS, values):
            if value.nvmlReturn != 0:
                if out[name] is None:      # (a total with one half read is that half, in either order)
                    read.unavailable.setdefault(name, NVML_REASONS.get(int(value.nvmlReturn), "unknown"))
                continue
            number = getattr(value.value, _VALUE_ATTRIBUTES.get(int(value.valueType), "ullVal"))
            out[name] = int(number) + (out[name] or 0)
            read.unavailable.pop(name, None)
        return out

    def _process_shares(self, index: int, handle) -> dict[int, float]:
        """Each process's SM share (%) from its newest utilisation sample since the last reading."""
        samples = self._nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen_us.get(index, 0))
        newest: dict[int, tuple[int, float]] = {}
        for s in samples:
            stamp = int(s.timeStamp)
            if int(s.pid) not in newest or stamp >= newest[int(s.pid)][0]:
                newest[int(s.pid)] = (stamp, float(s.smUtil))
            self._last_seen_us[index] = max(self._last_seen_us.get(index, 0), stamp)
        return {pid: share for pid, (_, share) in newest.items()}


def _reason(exc: Exception) -> str:
    name = type(exc).__name__
    if "DriverNotLoaded" in name:
        return "unavailable: no NVIDIA driver"
    if "LibraryNotFound" in name:
        return "unavailable: no NVIDIA driver (NVML library not found)"
    if "NoPermission" in name:
        return "unavailable: no permission"
    return f"unavailable: {name}"


class GpuSource:
    """A full reading every `interval`; checked every `check_every` (when given) for Xid events that came in
    between, which bring a reading forward so that they reach the timeline within a check."""

    kind = "gpu"

    def __init__(self, probe, clock: Clock, interval: float, check_every: float | None = None):
        self._probe = probe
        self._clock = clock
        self.reading_every = interval
        self.interval = min(interval, check_every) if check_every else interval
        self._next_reading: float | None = None
        start = getattr(probe, "start_events", None)
        if start is not None:
            start(clock.now)

    async def poll(self) -> list[GpuSample]:
        now = self._clock.now()
        pending = getattr(self._probe, "xids_pending", None)
        if self._next_reading is not None and now < self._next_reading - 1e-9 and not (pending and pending()):
            return []
        self._next_reading = now + self.reading_every
        try:
            # NVML can hang on a wedged GPU (as nvidia-smi does): never on the event loop.
            return [await asyncio.to_thread(self._probe.snapshot, now)]
        except Exception as exc:  # noqa: BLE001
            return [GpuSample(t=self._clock.now(), available=False, error=_reason(exc))]

    def close(self) -> None:
        close = getattr(self._probe, "close", None)
        if close is not None:
            close()
