"""gpu_fault and gpu_throttled: the GPU under the engine, read with the engine's own progress.

gpu_fault: on a GPU that counts as this engine's (`gpus_held` states the rule, once), an Xid event the table
does not call informational, an uncorrectable ECC count that rose in the window, a row-remap failure, or a GPU
that answers "GPU is lost" (fallen off the bus). The why line names the GPU (index, UUID, bus id, and the pod
using it where the source names one), the rank on it, the Xid with its meaning and NVIDIA's action (`xid.py`),
and how the GPU was counted as the engine's when not by a process list. Each firing carries the action class of its
own fault (xid.ACTION_CLASS; Verdict.action): drain when the fault needs the hardware (reset the GPU, reboot),
restart for restart_app, page (a person decides) for the rest; the why line ends with the same (xid.CLASS_WORDS).

gpu_throttled: the clocks of a GPU the engine holds are held down by a thermal, power-brake or hardware-slowdown
reason (NVML's clock-event reasons; a power cap at full load is normal and not one) for gpu_throttle_sustain_s,
and the engine's token rate since then is down by gpu_throttle_drop against its rate over the
gpu_throttle_baseline_s before, with requests running: the cause of a slowdown that otherwise reads as overload.

Silent on a healthy busy engine, an idle one (the idle reason is not a throttle), a long prefill (no throttle
reason), and a correctable ECC count however it grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servewatch.detectors import xid as xids
from servewatch.detectors.evidence.gpus import _readings
from servewatch.detectors.series import generated_total, num, once_per_window
from servewatch.detectors.verdict import (DRAIN, INCIDENT, PAGE, RESTART, Evidence, RunbookBranch, Settings, Thresholds,
                                          Verdict, VerdictSpec)
from servewatch.timeline.ranks import rank_view, rank_words
from servewatch.timeline.samples import (CLOCK_HW_POWER_BRAKE, CLOCK_HW_SLOWDOWN, CLOCK_HW_THERMAL, CLOCK_REASON_WORDS,
                                         CLOCK_SW_THERMAL, RECOVERY_WORDS, GpuDevice, GpuSample)
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class GpuThrottleSettings(Settings):
    """gpu_throttled's thresholds."""

    # gpu_throttled: a GPU the engine holds has its SM clock under gpu_clock_held_share of its maximum for a
    # thermal, power-brake or HW-slowdown reason for gpu_throttle_sustain_s, and the token rate since is down by
    # gpu_throttle_drop (a share) against the rate over the gpu_throttle_baseline_s before, with requests running.
    gpu_throttle_sustain_s: float = 10.0
    gpu_throttle_drop: float = 0.2
    gpu_throttle_baseline_s: float = 30.0
    gpu_clock_held_share: float = 0.9

    def validate(self) -> list[str]:
        return self.shares("gpu_throttle_drop", "gpu_clock_held_share")


THROTTLE_REASONS = CLOCK_HW_SLOWDOWN | CLOCK_SW_THERMAL | CLOCK_HW_THERMAL | CLOCK_HW_POWER_BRAKE


def _identity(window: Window) -> dict[int, GpuDevice]:
    """Each device index's newest reading that still knew its UUID (a lost GPU forgets who it is)."""
    known: dict[int, GpuDevice] = {}
    for sample in _readings(window):
        for device in sample.devices:
            if device.uuid is not None or device.index not in known:
                known[device.index] = device
    return known


def _engine_pids(window: Window) -> set[int] | None:
    """Every pid of the target's tree at its newest process sample; None when no process list is read."""
    samples = [p for p in window.process if p.error is None and p.members]
    if not samples:
        return None
    return {m.pid for m in samples[-1].members}


@dataclass(frozen=True)
class Held:
    """The GPUs that count as the engine's: device index -> the engine's pids on it (None: every device counts),
    and, for the GPUs counted without a process list of their own (`unlisted`), how they were counted."""
    devices: dict[int, set[int]] | None
    unlisted: frozenset[int] = frozenset()
    how: str = ""                 # words for the why line: "dcgm-exporter lists no processes: ..."
    by: str = ""                  # for the details: "every_gpu" or "pod"

    def holds(self, index: int) -> bool:
        return self.devices is None or index in self.devices

    def words(self, index: int) -> str:
        """"; how they were counted" for a device counted without a process list, else ""."""
        return f"; {self.how}" if index in self.unlisted and self.how else ""

    def details(self, index: int) -> dict[str, str]:
        """{"attributed": "every_gpu" | "pod"} for a device counted without a process list, else {}."""
        return {"attributed": self.by} if index in self.unlisted else {}


def gpus_held(readings: Sequence[GpuSample], pids: set[int] | None) -> Held:
    """The rule that says which GPUs are the engine's, for gpu_fault, gpu_throttled and the bundle's GPU panel:
    - no process list of the engine read (`pids` None): every GPU counts (nothing says otherwise);
    - a GPU whose readings list its processes (NVML): the engine's when a pid of the engine's tree is on it
      anywhere in the window;
    - a GPU whose source cannot list its processes (`processes` unavailable: dcgm-exporter, or NVML refused):
      every such GPU counts, and the why line says so; unless the server's pod is known (the HOSTNAME of its
      process, as the source read it) and the window's GPUs carry pod labels: then only those whose pod label
      is that pod count (the kubelet's own word for which pod holds which GPU)."""
    if pids is None:
        return Held(None)
    devices: dict[int, set[int]] = {}
    unlisted: dict[int, str] = {}          # index -> why its processes are not listed
    listed: set[int] = set()               # the devices whose process list was read at least once
    labelled: dict[int, str | None] = {}   # index -> its newest pod label
    server_pod = None
    for sample in readings:
        server_pod = sample.server_pod or server_pod
        for device in sample.devices:
            on = {p.pid for p in device.processes if p.pid in pids}
            if on:
                devices.setdefault(device.index, set()).update(on)
            reason = device.why_unavailable("processes")
            if reason is None:
                listed.add(device.index)
            else:
                unlisted[device.index] = reason
                labelled[device.index] = device.pod
    unlisted = {i: r for i, r in unlisted.items() if i not in listed}
    if not unlisted:
        return Held(devices)
    reason = sorted(set(unlisted.values()))[0]
    exporter = reason == "not_exported"
    source = "dcgm-exporter lists no processes" if exporter else f"NVML could not list the GPUs' processes ({reason})"
    if server_pod is not None and any(labelled[i] for i in unlisted):
        counted = frozenset(i for i in unlisted if labelled[i] == server_pod)
        how = (f"{source}: the GPUs whose pod label is {server_pod} (the server's pod, its HOSTNAME) counted as "
               "this server's")
        return Held(devices | {i: set() for i in counted}, frozenset(unlisted), how, "pod")
    how = f"{source}: every GPU {'on its page ' if exporter else ''}counted as this server's"
    return Held(devices | {i: set() for i in unlisted}, frozenset(unlisted), how, "every_gpu")


def _held(window: Window) -> Held:
    return gpus_held(_readings(window), _engine_pids(window))


def gpu_words(device: GpuDevice | None, index: int, *, pod: bool = True) -> str:
    """"GPU 1 (GPU-aaaa..., bus 00000000:2A:00.0, NVIDIA H100 80GB HBM3, pod vllm-0, namespace llm,
    container vllm)": the pod where its source names one (dcgm-exporter's labels) and `pod` asks for it."""
    if device is None:
        return f"GPU {index}"
    pods = [f"{key} {value}" for key, value in (("pod", device.pod), ("namespace", device.namespace),
                                                 ("container", device.container)) if value and pod]
    parts = [p for p in (device.uuid, f"bus {device.pci_bus_id}" if device.pci_bus_id else None, device.name, *pods)
             if p]
    return f"GPU {index}" + (f" ({', '.join(parts)})" if parts else "")


def _rank_on(window: Window, pids: set[int]) -> tuple[str, str | None, int | None]:
    """The rank on a device: in words, as a token ("TP1"; "none" for a process without a rank), and its pid
    (("", None, None) when no process of the engine is on it)."""
    samples = [p for p in window.process if p.error is None and p.members]
    ranks = rank_view(samples[-1]) if samples else ()
    on = sorted((r for r in ranks if r.pid in pids), key=lambda r: r.pid)
    if on:
        return rank_words(on[0], ranks), ",".join(f"{a}{n}" for a, n in on[0].axes) or "none", on[0].pid
    if pids:
        pid = min(pids)
        return f"pid {pid}", "none", pid
    return "", None, None


# --- gpu_fault ------------------------------------------------------------------------------------------

def detect_gpu_fault(window: Window, config: Thresholds) -> list[Verdict]:
    readings = _readings(window)
    if not readings:
        return []
    held = _held(window)
    faults = []        # (hardware, onset, evidence, index, xid row or None, what, fault)
    first, last = readings[0], readings[-1]
    recovery = {d.index: d.recovery_action for d in last.devices if d.recovery_action is not None}
    for sample in window.gpu:
        for event in sample.xids:
            row = xids.lookup(event.xid)
            if event.xid == xids.RECOVERY_XID and event.index in recovery:
                row = xids.with_recovery(row, recovery[event.index])     # the driver's reported action wins
            if row.action == xids.IGNORE or not held.holds(event.index):
                continue
            faults.append((row.hardware, event.t, Evidence("gpu", sample.t, f"xids.{event.index}", event.xid),
                           event.index, row, f"Xid {event.xid} ({row.meaning}; NVIDIA: {xids.ACTION_WORDS[row.action]})",
                           "xid"))
    before = {d.index: d for d in first.devices}
    for device in last.devices:
        if not held.holds(device.index):
            continue
        if device.lost:
            onset = _first(readings, device.index, lambda d: d.lost)
            faults.append((True, onset, Evidence("gpu", onset, f"devices.{device.index}.lost", True), device.index,
                           None, "the GPU is lost (NVML: GPU is lost; fallen off the bus); NVIDIA: reboot the node",
                           "lost"))
            continue
        if device.recovery_action and not any(f[3] == device.index and f[0] for f in faults):
            action = xids.RECOVERY_ACTIONS.get(device.recovery_action, xids.UNKNOWN)
            onset = _first(readings, device.index, lambda d: d.recovery_action == device.recovery_action)
            faults.append((action in xids.HARDWARE_ACTIONS, onset,
                           Evidence("gpu", onset, f"devices.{device.index}.recovery_action", device.recovery_action),
                           device.index, None, f"NVML's recovery action is {device.recovery_action} "
                                               f"({RECOVERY_WORDS.get(device.recovery_action, 'unknown')})",
                           "recovery_action"))
        if device.remap_failure:
            onset = _first(readings, device.index, lambda d: bool(d.remap_failure))
            faults.append((True, onset, Evidence("gpu", onset, f"devices.{device.index}.remap_failure", True),
                           device.index, None, "row remapping failed (no spare rows left); reset the GPU, then "
                                               "replace it", "remap_failure"))
        was = before.get(device.index)
        now_unc, was_unc = device.ecc_volatile_uncorrected, was.ecc_volatile_uncorrected if was else None
        if now_unc is not None and was_unc is not None and now_unc > was_unc:
            onset = _first(readings, device.index, lambda d: (d.ecc_volatile_uncorrected or 0) > was_unc)
            faults.append((True, onset, Evidence("gpu", onset, f"devices.{device.index}.ecc_volatile_uncorrected",
                                                 now_unc), device.index, None,
                           f"uncorrectable ECC errors {num(was_unc)} → {num(now_unc)} in the window; reset the GPU",
                           "ecc_uncorrectable"))
    if not faults:
        return []
    faults.sort(key=lambda f: (not f[0], f[1]))       # a fault that needs the hardware first, then the oldest
    devices = {f[3] for f in faults}
    hardware, onset, evidence, index, row, what, fault = faults[0]
    identity = _identity(window).get(index)
    pids = (held.devices or {}).get(index, set())
    rank, rank_token, rank_pid = _rank_on(window, pids)
    action = (row.action if row is not None else xids.REBOOT if fault == "lost" else
              xids.RECOVERY_ACTIONS.get(identity_recovery(window, index), xids.UNKNOWN) if fault == "recovery_action"
              else xids.RESET_GPU)
    cls = xids.action_class(action)      # this firing's action class: the sentence and the field say the same
    tail = f": {xids.CLASS_WORDS[cls]}"
    others = f" (and {len(devices) - 1} more GPU(s))" if len(devices) > 1 else ""
    why = f"{gpu_words(identity, index)}{' under ' + rank if rank else ''}: {what}{tail}{others}{held.words(index)}"
    details = {"fault": fault, "gpu_index": index, "gpu_uuid": identity.uuid if identity else None,
               "gpu_bus_id": identity.pci_bus_id if identity else None,
               "xid": row.code if row is not None else None, "xid_mnemonic": row.mnemonic if row is not None else None,
               "action": action, "hardware": hardware, "rank": rank_token, "rank_pid": rank_pid,
               "gpus": len(devices), **held.details(index)}
    return [Verdict("gpu_fault", window.end, min(onset, window.end), why, (evidence,), details, action=cls)]


def identity_recovery(window: Window, index: int) -> int | None:
    """The newest recovery action NVML gave for device `index`."""
    for sample in reversed(_readings(window)):
        for device in sample.devices:
            if device.index == index and device.recovery_action is not None:
                return device.recovery_action
    return None


def _first(readings: list[GpuSample], index: int, holds) -> float:
    """The time of the first reading (of the newest run) in which `holds(device)`."""
    onset = readings[-1].t
    for sample in reversed(readings):
        device = next((d for d in sample.devices if d.index == index), None)
        if device is None or not holds(device):
            break
        onset = sample.t
    return onset


# --- gpu_throttled --------------------------------------------------------------------------------------

def _throttled(device: GpuDevice, config: Thresholds) -> bool:
    reasons = device.clock_event_reasons
    if reasons is None or not reasons & THROTTLE_REASONS:
        return False
    if device.sm_clock_mhz is not None and device.sm_clock_max_mhz:
        return device.sm_clock_mhz < config.gpu_clock_held_share * device.sm_clock_max_mhz
    return True


def reason_words(reasons: int) -> str:
    return " + ".join(words for bit, words in CLOCK_REASON_WORDS.items() if reasons & bit & THROTTLE_REASONS)


def _token_rate(window: Window, start: float, end: float) -> tuple[float | None, float, float]:
    """Generation tokens per second between the scrapes nearest inside [start, end] (None with under two)."""
    points = [(m.t, generated_total(m.engines) or 0.0) for m in window.good_metrics() if start <= m.t <= end]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None, 0.0, 0.0
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]), points[0][0], points[-1][0]


@once_per_window
def throttle_state(window: Window, config: Thresholds) -> Verdict | None:
    """`_throttle_state`, computed once per window (undecorated there: mutmut mutates no decorated function)."""
    return _throttle_state(window, config)


def _throttle_state(window: Window, config: Thresholds) -> Verdict | None:
    """The gpu_throttled verdict the window supports (shared with overload, which it explains)."""
    readings = _readings(window)
    if len(readings) < 2:
        return None
    held = _held(window)
    last = readings[-1]
    hot = [d for d in last.devices if held.holds(d.index) and _throttled(d, config)]
    if not hot:
        return None
    device = hot[0]
    onset = _first(readings, device.index, lambda d: _throttled(d, config))
    if last.t - onset < config.gpu_throttle_sustain_s:
        return None
    before, b0, b1 = _token_rate(window, onset - config.gpu_throttle_baseline_s, onset)
    after, a0, a1 = _token_rate(window, onset, window.end)
    if before is None or after is None or before <= 0 or after > (1 - config.gpu_throttle_drop) * before:
        return None
    metrics = window.good_metrics()
    running = sum(e.running or 0 for e in metrics[-1].engines)
    if running <= 0:
        return None     # nothing runs: a slower rate is less demand, not a slower GPU
    identity = _identity(window).get(device.index, device)
    rank, rank_token, rank_pid = _rank_on(window, (held.devices or {}).get(device.index, set()))
    clocks = (f"{num(device.sm_clock_mhz)} of {num(device.sm_clock_max_mhz)} MHz" if device.sm_clock_mhz is not None
              and device.sm_clock_max_mhz else "clocks down")
    temperature = f", {num(device.temperature_c)} °C" if device.temperature_c is not None else ""
    power = (f", {num(device.power_w)} of {num(device.power_limit_w)} W" if device.power_w is not None
             and device.power_limit_w is not None else "")
    why = (f"{gpu_words(identity, device.index)}{' under ' + rank if rank else ''}: SM clock {clocks} held by "
           f"{reason_words(device.clock_event_reasons)} for {last.t - onset:.0f} s{temperature}{power}; tokens "
           f"{before:.0f}/s → {after:.0f}/s ({after / before - 1:+.0%}) with {num(running)} running: the GPU is "
           f"slowed, not the demand up{held.words(device.index)}")
    cause = ("thermal" if device.clock_event_reasons & (CLOCK_SW_THERMAL | CLOCK_HW_THERMAL) else
             "power_brake" if device.clock_event_reasons & CLOCK_HW_POWER_BRAKE else "hw_slowdown")
    evidence = (Evidence("gpu", onset, f"devices.{device.index}.clock_event_reasons", device.clock_event_reasons),
                Evidence("gpu", last.t, f"devices.{device.index}.sm_clock_mhz", device.sm_clock_mhz),
                Evidence("metrics", a1, "counters.generation_tokens", round(after, 3)))
    details = {"cause": cause, "gpu_index": device.index, "gpu_uuid": identity.uuid, "sm_clock_mhz": device.sm_clock_mhz,
               "sm_clock_max_mhz": device.sm_clock_max_mhz, "temperature_c": device.temperature_c,
               "tokens_per_s_before": round(before, 3), "tokens_per_s_after": round(after, 3),
               "running": running, "rank": rank_token, "rank_pid": rank_pid, **held.details(device.index)}
    return Verdict("gpu_throttled", window.end, onset, why, evidence, details)


def detect_gpu_throttled(window: Window, config: Thresholds) -> list[Verdict]:
    found = throttle_state(window, config)
    return [found] if found is not None else []



# --- a node's GPUs, judged once (servewatch gpu-check: node-problem-detector's custom plugin) -------------------

def node_gpu_problems(devices, last_xids: dict[int, int] | None = None) -> list[str]:
    """What makes this node's GPUs unfit for work, one sentence per GPU at fault, from one reading (NVML's, or
    dcgm-exporter's page with each device's last Xid): a GPU lost (fallen off the bus), a row-remap failure,
    uncorrectable ECC errors since the driver loaded (the volatile count), NVML's recovery action asking for a
    reset or a reboot, or a last Xid whose NVIDIA action needs the hardware. Empty: nothing to drain for. One
    reading has no history: an Xid NVML delivered as an event before this process started is not seen (the
    recorder's event thread sees those; dcgm-exporter's last-Xid value keeps the newest)."""
    problems = []
    last_xids = last_xids or {}
    for d in sorted(devices, key=lambda d: d.index):
        found = []
        if d.lost:
            found.append("lost (NVML: GPU is lost; fallen off the bus)")
        if d.remap_failure:
            found.append("row remapping failed (no spare rows left)")
        if d.ecc_volatile_uncorrected:
            found.append(f"{num(d.ecc_volatile_uncorrected)} uncorrectable ECC error(s) since the driver loaded")
        if d.recovery_action and xids.RECOVERY_ACTIONS.get(d.recovery_action) in xids.HARDWARE_ACTIONS:
            found.append(f"NVML's recovery action is {d.recovery_action} "
                         f"({RECOVERY_WORDS.get(d.recovery_action, 'unknown')})")
        code = last_xids.get(d.index)
        if code:
            row = xids.lookup(code)
            if row.action_class == DRAIN:          # the class a gpu_fault for it carries: the node drains
                found.append(f"last Xid {code} ({row.meaning}; NVIDIA: {xids.ACTION_WORDS[row.action]})")
        if found:
            problems.append(f"{gpu_words(d, d.index, pod=False)}: {'; '.join(found)}")   # the node's, not a pod's
    return problems


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

GPU_FAULT = RunbookBranch(
    meaning="A GPU that a process of this engine holds reported a fault: an Xid critical error (NVML's event), an "
            "uncorrectable ECC error, a row-remap failure, or it no longer answers NVML at all (fallen off the "
            "bus). The why line names the GPU (index, UUID, PCI bus id), the rank on it, the Xid with its meaning "
            "and NVIDIA's immediate action from the Xid catalogue "
            "(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html). Where that action needs the "
            "hardware (reset the GPU, reboot the node), restarting the server puts it back on the same broken GPU.",
    check_next=(
        "`nvidia-smi -q -i UUID` for the named GPU: ECC errors, retired pages / remapped rows (pending, failure), "
        "and whether it answers at all.",
        "The kernel log where it can be read (`dmesg | grep -i xid`): the Xid's own line, with its pid and the "
        "codes that came with it (a 48 followed by 63/64, a 154 naming the recovery action).",
        "The other GPUs of the node: one Xid on one GPU is that GPU; the same Xid on every GPU is the node "
        "(power, PCIe switch, driver).",
    ),
    expected_range="No Xid beyond informational ones (63 a page retired as designed, 92 a high corrected-error "
                   "rate), 0 uncorrectable volatile ECC errors, no row-remap failure, every GPU answering NVML.",
    safe_action="For a hardware action (reset_gpu, reboot): drain the node (cordon it, stop routing to it) and do not "
                "restart the server on that GPU; reset the GPU (`nvidia-smi -r -i UUID`) or reboot as NVIDIA's "
                "action says, then run a diagnostic (dcgmi diag) before returning it. For restart_app: restart the "
                "process.",
    rollback="Return the node to scheduling once the GPU has been reset or replaced and a diagnostic passes.",
    restart_destroys="Nothing the fault has not already destroyed: the requests on that GPU are lost with it. A "
                     "restart onto the same GPU makes a crash loop out of a hardware fault.",
    by_cause={},
)

GPU_THROTTLED = RunbookBranch(
    meaning="A GPU the engine holds runs with its SM clock held down by a thermal, power-brake or hardware-"
            "slowdown reason (NVML's clock-event reasons), and the engine's token rate fell since: the slowdown "
            "is the GPU, not more demand. Without the GPU's reasons it reads as overload.",
    check_next=(
        "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i UUID`: which reason is active, the temperature and "
        "the power draw against its limit.",
        "The node's cooling and power: fans, inlet temperature, a PSU or power-brake signal (HW power brake is "
        "asserted by the system, not the GPU).",
        "Whether other GPUs of the node are throttled too (the node's cooling) or only this one (its slot, its "
        "heatsink).",
    ),
    expected_range="Under load a GPU runs at or near its maximum SM clock; a software power cap at full load is "
                   "normal, thermal and HW slowdown are not.",
    safe_action="Page the owner of the hardware; move load away from the node if the rate it serves no longer "
                "meets the SLO. Adding replicas elsewhere helps; adding load here does not.",
    rollback="Return load once the clocks are back at their maximum under load for several readings.",
    restart_destroys="The KV and prefix caches; a restart does not cool a GPU.",
)

SETTINGS = (GpuThrottleSettings,)
SPECS = (
    VerdictSpec("gpu_fault", detect_gpu_fault, INCIDENT, "page",
                "a GPU the engine holds reported a fault (an Xid, uncorrectable ECC, a row-remap failure, off the bus)",
                GPU_FAULT, ("gpu", "process"), labels=("gpu_uuid", "xid", "action"), action=DRAIN,
                action_by="per fault: drain for a GPU reset or reboot, restart when a process restart helps, "
                          "else page", actions=(DRAIN, RESTART, PAGE)),
    VerdictSpec("gpu_throttled", detect_gpu_throttled, INCIDENT, "ticket",
                "the token rate fell while the GPU's clocks are held by a thermal, power-brake or HW-slowdown reason",
                GPU_THROTTLED, ("gpu", "metrics", "process"), labels=("cause",), action=PAGE),
)
