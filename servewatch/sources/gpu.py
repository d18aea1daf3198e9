"""GPUs via NVML (nvidia-ml-py) on a slower cadence; a typed "unavailable" sample when there is none."""

from __future__ import annotations

import asyncio

from servewatch.clock import Clock
from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample

MAX_PROCESSES_PER_DEVICE = 64


def _bytes(value) -> int | None:
    """NVML's usedGpuMemory: bytes, or None when it cannot say (it reports NVML_VALUE_NOT_AVAILABLE then)."""
    return int(value) if isinstance(value, int) and 0 <= value < 2**62 else None


class NvmlProbe:
    def __init__(self):
        self.error: str | None = None
        self._nvml = None
        self._handles = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except ImportError:
            self.error = "unavailable: nvidia-ml-py not installed"
        except Exception as exc:  # noqa: BLE001 - NVMLError_* (no driver, no library, no device)
            self.error = _reason(exc)

    def snapshot(self, t: float) -> GpuSample:
        if self._nvml is None:
            return GpuSample(t=t, available=False, error=self.error)
        nvml = self._nvml
        devices = []
        for index, handle in enumerate(self._handles):
            utilization = _maybe(lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            memory = _maybe(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
            power = _maybe(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            running = _maybe(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or ()
            processes = tuple(GpuProcess(int(p.pid), _bytes(getattr(p, "usedGpuMemory", None)))
                              for p in list(running)[:MAX_PROCESSES_PER_DEVICE])
            devices.append(GpuDevice(index=index, utilization_pct=utilization,
                                     memory_used_bytes=int(memory.used) if memory is not None else None,
                                     memory_total_bytes=int(memory.total) if memory is not None else None,
                                     power_w=power, processes=processes))
        return GpuSample(t=t, available=True, devices=tuple(devices))


def _reason(exc: Exception) -> str:
    name = type(exc).__name__
    if "DriverNotLoaded" in name:
        return "unavailable: no NVIDIA driver"
    if "LibraryNotFound" in name:
        return "unavailable: no NVIDIA driver (NVML library not found)"
    if "NoPermission" in name:
        return "unavailable: no permission"
    return f"unavailable: {name}"


def _maybe(read):
    try:
        return read()
    except Exception:  # noqa: BLE001
        return None


class GpuSource:
    kind = "gpu"

    def __init__(self, probe, clock: Clock, interval: float):
        self._probe = probe
        self._clock = clock
        self.interval = interval

    async def poll(self) -> list[GpuSample]:
        try:
            # NVML can hang on a wedged GPU (as nvidia-smi does): never on the event loop.
            return [await asyncio.to_thread(self._probe.snapshot, self._clock.now())]
        except Exception as exc:  # noqa: BLE001
            return [GpuSample(t=self._clock.now(), available=False, error=_reason(exc))]
