"""GPUs from NVIDIA dcgm-exporter's /metrics, where NVML is not reachable from here (a Kubernetes node where the GPU
operator runs dcgm-exporter): the same GPU picture as `sources.gpu`, joined by UUID.

Read from dcgm-exporter's default counters (etc/default-counters.csv: DCGM_FI_DEV_SM_CLOCK, _MEM_CLOCK,
_GPU_TEMP, _POWER_USAGE, _PCIE_REPLAY_COUNTER, _GPU_UTIL, _MEM_COPY_UTIL, _XID_ERRORS, _FB_FREE, _FB_USED,
_UNCORRECTABLE_REMAPPED_ROWS, _CORRECTABLE_REMAPPED_ROWS, _ROW_REMAP_FAILURE), plus the clock-event reasons and
ECC totals where the exporter's counters list adds them. A field the page does not carry is unavailable with the
reason "not_exported", never 0. dcgm-exporter lists no processes (`processes` is unavailable "not_exported"), so a
GPU read here is tied to no rank; its `pod`, `namespace` and `container` labels (present when its kubelet
pod-resources mapping is on) name the pod using the GPU and are kept on the device. Given the watched server's pid,
the source also reads the pod that server runs in: the HOSTNAME in its /proc/PID/environ (Kubernetes sets it to the
pod's name), once, and nothing else of that environment. detectors.gpu says how the two attribute a GPU.

DCGM_FI_DEV_XID_ERRORS is the value of the last Xid on the device: a value that changes between two pages, to
a code other than 0, is one Xid event at the second page's time (a value already there at the first page is older
than this watch and is not reported).

Bounds: each read has a deadline (READ_TIMEOUT_S, on top of the transport's own), a page over MAX_PAGE_BYTES or
with more than MAX_SERIES series of the families read is refused (a typed unavailable sample), and the page is
parsed off the event loop, so that a slow, huge or hostile exporter costs its own GPU cadence and nothing else.
"""

from __future__ import annotations

import asyncio
import re

from servewatch.clock import Clock
from servewatch.exposition.parser import DEFAULT_MAX_BYTES, DEFAULT_MAX_SERIES, parse
from servewatch.sources.http import Transport
from servewatch.sources.scrape import ScrapeFailure, http_status_failure
from servewatch.timeline.samples import GpuDevice, GpuSample, GpuXid

MIB = 2**20
NOT_EXPORTED = "not_exported"
# dcgm-exporter's default counters with its pod labels: 13 series and about 3.7 KB a GPU (tests/fixtures/dcgm),
# so about 30 KB for 8 GPUs. These bounds
# leave room for MIG instances (7 per GPU) and the profiling counters, and no more.
READ_TIMEOUT_S = 5.0
MAX_PAGE_BYTES = 4 * MIB
MAX_SERIES = 8192
MAX_ENVIRON_BYTES = 1 * MIB
# A Kubernetes object name (RFC 1123 subdomain): a label or HOSTNAME of another shape is not kept.
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
POD_LABELS = ("pod", "namespace", "container")

# DCGM field -> (GpuDevice field, scale)
FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_pct", float),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("memory_utilization_pct", float),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", int),
    "DCGM_FI_DEV_MEM_CLOCK": ("memory_clock_mhz", int),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", float),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", float),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", float),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay", int),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_volatile_corrected", int),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_volatile_uncorrected", int),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_aggregate_corrected", int),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_aggregate_uncorrected", int),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_correctable", int),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows_uncorrectable", int),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remap_failure", bool),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("remap_pending", bool),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", int),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", int),
}
FB_USED, FB_FREE, XID = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_XID_ERRORS"
FAMILIES = (*FIELDS, FB_USED, FB_FREE, XID)
# The GpuDevice fields a page may give: those it does not are unavailable ("not_exported").
READ_FIELDS = tuple(dict.fromkeys([f for f, _ in FIELDS.values()] + ["memory_used_bytes", "memory_total_bytes"]))


def read_page(text: str | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES,
              max_series: int = DEFAULT_MAX_SERIES) -> tuple[tuple[GpuDevice, ...], dict[int, int]]:
    """The devices of one dcgm-exporter page, by the `gpu` label's index, and each device's last-Xid value."""
    families = parse(text, FAMILIES, max_bytes=max_bytes, max_series=max_series)
    values: dict[int, dict[str, object]] = {}
    identity: dict[int, dict[str, str]] = {}
    last_xid: dict[int, int] = {}
    for name, family in families.items():
        for sample in family.samples:
            index = sample.labels.get("gpu", "")
            if not index.isdigit() or sample.value != sample.value:     # no device index, or NaN
                continue
            index = int(index)
            identity.setdefault(index, {k: sample.labels[k] for k in ("UUID", "pci_bus_id", "modelName")
                                        if sample.labels.get(k)}
                                | {k: sample.labels[k] for k in POD_LABELS if K8S_NAME.match(sample.labels.get(k, ""))})
            if name == XID:
                last_xid[index] = int(sample.value)
            elif name in (FB_USED, FB_FREE):
                values.setdefault(index, {})[name] = int(sample.value) * MIB
            elif name in FIELDS:
                field, scale = FIELDS[name]
                values.setdefault(index, {})[field] = scale(sample.value)
    devices = []
    for index in sorted(set(values) | set(identity)):
        got = dict(values.get(index, {}))
        used, free = got.pop(FB_USED, None), got.pop(FB_FREE, None)
        got["memory_used_bytes"] = used
        got["memory_total_bytes"] = used + free if used is not None and free is not None else None
        ids = identity.get(index, {})
        unavailable = tuple(sorted([(f, NOT_EXPORTED) for f in READ_FIELDS if got.get(f) is None]
                                   + [("processes", NOT_EXPORTED)]))
        devices.append(GpuDevice(index=index, utilization_pct=got.pop("utilization_pct", None),
                                 memory_used_bytes=got.pop("memory_used_bytes"),
                                 memory_total_bytes=got.pop("memory_total_bytes"), power_w=got.pop("power_w", None),
                                 uuid=ids.get("UUID"), pci_bus_id=ids.get("pci_bus_id"), name=ids.get("modelName"),
                                 pod=ids.get("pod"), namespace=ids.get("namespace"), container=ids.get("container"),
                                 unavailable=unavailable, **got))
    return tuple(devices), last_xid


def server_pod(pid: int, proc_root: str = "/proc") -> str | None:
    """The pod a process runs in: the HOSTNAME of its environment when it has a Kubernetes name's shape (None:
    unreadable, unset, or another shape). Only that variable is looked at; nothing of the environment is kept."""
    try:
        with open(f"{proc_root}/{pid}/environ", "rb") as f:
            data = f.read(MAX_ENVIRON_BYTES)
    except OSError:
        return None
    for item in data.split(b"\0"):
        if item.startswith(b"HOSTNAME="):
            name = item.removeprefix(b"HOSTNAME=").decode("ascii", "replace")
            return name if K8S_NAME.match(name) else None
    return None


def _too_large() -> str:
    size = f"{MAX_PAGE_BYTES / MIB:g} MiB" if MAX_PAGE_BYTES >= MIB else f"{MAX_PAGE_BYTES:,} bytes"
    return f"too_large (a page over {size})"


def _failure(exc: Exception) -> str:
    """A page that could not be read, in the scrape vocabulary's words."""
    from servewatch.errors import BodyTooLarge, TooManySeries

    if isinstance(exc, TooManySeries):
        return f"too_many_series (over {MAX_SERIES:,})"
    if isinstance(exc, BodyTooLarge):
        return _too_large()
    return "not_prometheus_text"


class DcgmSource:
    """dcgm-exporter's /metrics (`--gpu-metrics URL`) as GPU samples."""

    kind = "gpu"

    def __init__(self, transport: Transport, clock: Clock, interval: float, *, pid: int | None = None,
                 proc_root: str = "/proc"):
        self._transport = transport
        self._clock = clock
        self.interval = interval
        self._last_xid: dict[int, int] | None = None
        self._pid, self._proc_root = pid, proc_root
        self._pod_read = pid is None
        self._pod: str | None = None      # the pod the watched server runs in, read once

    async def _server_pod(self) -> str | None:
        if not self._pod_read:
            self._pod_read = True
            self._pod = await asyncio.to_thread(server_pod, self._pid, self._proc_root)
        return self._pod

    async def poll(self) -> list[GpuSample]:
        try:
            answer = await asyncio.wait_for(self._transport(), READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            return [GpuSample(t=self._clock.now(), available=False,
                              error=f"unavailable: dcgm-exporter timeout (no page within {READ_TIMEOUT_S:g} s)")]
        t = self._clock.now()
        if isinstance(answer, ScrapeFailure):
            return [GpuSample(t=t, available=False, error=f"unavailable: dcgm-exporter {answer.label}")]
        if not 200 <= answer.status < 300:
            return [GpuSample(t=t, available=False,
                              error=f"unavailable: dcgm-exporter {http_status_failure(answer.status).label}")]
        if len(answer.body) > MAX_PAGE_BYTES:
            return [GpuSample(t=t, available=False, error=f"unavailable: dcgm-exporter {_too_large()}")]
        try:        # off the event loop: the other targets' sources go on while a large page is read
            devices, last_xid = await asyncio.to_thread(read_page, answer.body, max_bytes=MAX_PAGE_BYTES,
                                                        max_series=MAX_SERIES)
        except Exception as exc:  # noqa: BLE001 - a page that is not Prometheus text, or over the bounds
            return [GpuSample(t=t, available=False, error=f"unavailable: dcgm-exporter {_failure(exc)}")]
        xids = ()
        if self._last_xid is not None:
            xids = tuple(GpuXid(t, index, code) for index, code in sorted(last_xid.items())
                         if code and code != self._last_xid.get(index))
        self._last_xid = last_xid
        return [GpuSample(t=t, available=bool(devices), devices=devices, xids=xids,
                          error=None if devices else "unavailable: no DCGM_FI_DEV_* series",
                          server_pod=await self._server_pod())]

    async def close_connections(self) -> None:
        close = getattr(self._transport, "close", None)
        if close is not None:
            await close()
