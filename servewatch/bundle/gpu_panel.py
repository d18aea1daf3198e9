"""The GPU panel of a bundle's report: per rank, the GPU(s) it holds over the window — utilisation, power, SM
clock, temperature, whether a throttle reason held the clocks down — with its Xid events and the moment it was
lost. Read from the bundle's GPU samples (NVML's readings) and its newest process sample (the rank model); the
HTML report (report_html) and the Markdown summary (summarize) draw the same panels."""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.bundle.series import Marker, Point
from servewatch.detectors.gpu import THROTTLE_REASONS, gpu_words, gpus_held, reason_words
from servewatch.detectors.xid import ACTION_WORDS, lookup
from servewatch.timeline.ranks import rank_view, rank_words
from servewatch.timeline.samples import GpuDevice, GpuSample, ProcessSample

SERIES = ("utilization_pct", "power_w", "sm_clock_mhz", "temperature_c", "throttled")
LABELS = {"utilization_pct": "utilisation (%)", "power_w": "power (W)", "sm_clock_mhz": "SM clock (MHz)",
          "temperature_c": "temperature (°C)", "throttled": "clocks held (1 = yes)"}


@dataclass(frozen=True)
class GpuXidSeen:
    t: float
    xid: int
    meaning: str
    action: str          # NVIDIA's action in words, or "not in the table" for a code the table does not know


@dataclass(frozen=True)
class GpuPanel:
    holder: str                              # "TP rank 1 of 2 (VLLM::Worker_TP1, pid 812)", "pid 812", or ""
    index: int
    gpu: str                                 # "GPU 1 (GPU-…, bus 00000000:18:00.0, NVIDIA H100 80GB HBM3)"
    series: dict[str, list[Point]]
    throttles: list[tuple[float, float, str]] = field(default_factory=list)   # (from, to, the reasons in words)
    xids: list[GpuXidSeen] = field(default_factory=list)
    lost_at: float | None = None             # the first reading that answered "GPU is lost"

    @property
    def markers(self) -> list[Marker]:
        out = [Marker(x.t, x.t, f"Xid {x.xid}") for x in self.xids]
        if self.lost_at is not None:
            out.append(Marker(self.lost_at, self.lost_at, "lost"))
        return out


def gpu_panels(samples) -> list[GpuPanel]:
    """One panel per (rank, GPU) of the engine, ranks in order; where no rank holds a GPU, one per GPU NVML listed
    with the engine's pids on it; and one per GPU that counts as the engine's without a process list of its own
    (detectors.gpu.gpus_held: every GPU when no process list at all; dcgm-exporter's GPUs, by pod label where
    it can). A GPU's title names the pod using it where the source names one."""
    readings = [s for s in samples if isinstance(s, GpuSample) and s.available and s.devices]
    xids = [x for s in samples if isinstance(s, GpuSample) for x in s.xids]     # each at its own time
    if not readings and not xids:
        return []
    process = next((s for s in reversed(samples) if isinstance(s, ProcessSample) and s.error is None and s.members),
                   None)
    engine = {m.pid for m in process.members} if process is not None else None
    holders: dict[int, set[int]] = {}
    identity: dict[int, GpuDevice] = {}
    for sample in readings:
        for d in sample.devices:
            if d.uuid is not None or d.index not in identity:
                identity[d.index] = d
            holders.setdefault(d.index, set()).update(p.pid for p in d.processes
                                                      if engine is None or p.pid in engine)
    for x in xids:
        holders.setdefault(x.index, set())
    counted = gpus_held(readings, engine).devices
    ranks = rank_view(process)
    by_pid = {r.pid: r for r in ranks}
    pairs: list[tuple[tuple, str, int]] = []      # (order, holder words, device index)
    for index, pids in sorted(holders.items()):
        ranked = sorted((by_pid[p] for p in pids if p in by_pid), key=lambda r: (r.axes, r.pid))
        if ranked:
            pairs += [((0, r.axes, r.pid, index), rank_words(r, ranks), index) for r in ranked]
        elif pids:
            pid = min(pids)
            title = next((m.title for m in process.members if m.pid == pid), "") if process is not None else ""
            pairs.append(((1, (), pid, index), f"pid {pid}" + (f" ({title})" if title else ""), index))
        elif counted is None or index in counted:
            pairs.append(((2, (), 0, index), "", index))
    return [_panel(holder, index, identity.get(index), readings, xids) for _, holder, index in sorted(pairs)]


def _panel(holder: str, index: int, identity: GpuDevice | None, readings: list[GpuSample], xids) -> GpuPanel:
    series: dict[str, list[Point]] = {name: [] for name in SERIES}
    throttles: list[tuple[float, float, str]] = []
    lost_at = None
    for sample in readings:
        d = next((d for d in sample.devices if d.index == index), None)
        if d is None:
            continue
        if d.lost and lost_at is None:
            lost_at = sample.t
        reasons = d.clock_event_reasons
        held = None if reasons is None else int(bool(reasons & THROTTLE_REASONS))
        for name, value in (("utilization_pct", d.utilization_pct), ("power_w", d.power_w),
                            ("sm_clock_mhz", d.sm_clock_mhz), ("temperature_c", d.temperature_c),
                            ("throttled", held)):
            series[name].append((sample.t, None if value is None else float(value)))
        if held:
            words = reason_words(reasons)
            if throttles and throttles[-1][2] == words and throttles[-1][1] == _previous(series, sample.t):
                throttles[-1] = (throttles[-1][0], sample.t, words)
            else:
                throttles.append((sample.t, sample.t, words))
    seen = []
    for x in sorted(xids, key=lambda x: x.t):
        if x.index != index:
            continue
        row = lookup(x.xid)
        seen.append(GpuXidSeen(x.t, x.xid, row.meaning, ACTION_WORDS.get(row.action, "not in the table")))
    return GpuPanel(holder, index, gpu_words(identity, index), series, throttles, seen, lost_at)


def _previous(series: dict[str, list[Point]], t: float) -> float | None:
    """The time of the reading before the one at `t` (a throttle run continues only from the reading before)."""
    times = [p[0] for p in series["throttled"]]
    return times[-2] if len(times) >= 2 and times[-1] == t else None


def panel_title(panel: GpuPanel) -> str:
    return f"{panel.holder}: {panel.gpu}" if panel.holder else panel.gpu


def throttle_words(panel: GpuPanel, t0: float) -> str:
    """"HW thermal slowdown from +12.5 s to +30.5 s" for each run of readings with a throttle reason."""
    return "; ".join(f"{words} from +{a - t0:.1f} s to +{b - t0:.1f} s" if b > a else f"{words} at +{a - t0:.1f} s"
                     for a, b, words in panel.throttles)


def xid_words(x: GpuXidSeen, t0: float) -> str:
    return f"Xid {x.xid} at +{x.t - t0:.1f} s ({x.meaning}; NVIDIA: {x.action})"
