"""Typed samples: what each source contributes to the timeline.

Every sample carries `t`, the wall-clock time (epoch seconds) at which the answer *arrived*, not when
it was asked for (a saturated server can take seconds to answer a scrape). A source that fails
produces a sample with `error` set (a short class such as "connect", "timeout", "http_503",
"too_large", "parse", "no_such_process", "unavailable") instead of raising.

Samples hold only aggregate, allow-listed fields: never prompts, completions, token ids, request
ids, headers, URL query strings, paths, environment or command lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.dialects.base import Slot
from servewatch.engine.state import EngineState
from servewatch.timeline import kinds


@dataclass(frozen=True, slots=True)
class HealthSample:
    t: float
    status: int | None            # HTTP status, None when no answer
    latency_s: float | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True, slots=True)
class MetricsSample:
    t: float
    dialect: str | None
    naming: str | None
    engines: tuple[EngineState, ...] = ()
    scrape_s: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessMember:
    pid: int
    create_time: float
    role: str                      # "api" | "engine_core" | "worker" | "other"
    title: str                     # process title such as "VLLM::EngineCore" (never the command line)
    status: str                    # psutil status: running, sleeping, stopped, zombie, ...
    rss_bytes: int | None = None
    threads: int | None = None
    cpu_percent: float | None = None
    ppid: int | None = None        # the parent's pid (the rank model reads parentage: a DP worker's rank is its parent's)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    t: float
    root_pid: int
    root_create_time: float | None
    alive: bool
    members: tuple[ProcessMember, ...] = ()
    exit_code: int | None = None   # when knowable (our own child, or reaped)
    exit_signal: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process NVML lists on a device (compute), with the device memory it holds and its share of the SMs
    (NVML's per-process utilisation) when NVML says."""
    pid: int
    memory_used_bytes: int | None
    sm_util_pct: float | None = None


# NVML's clock-event (throttle) reasons, as bits of `GpuDevice.clock_event_reasons` (nvmlClocksEventReason*).
CLOCK_IDLE = 0x1
CLOCK_APP_SETTING = 0x2
CLOCK_SW_POWER_CAP = 0x4
CLOCK_HW_SLOWDOWN = 0x8
CLOCK_SYNC_BOOST = 0x10
CLOCK_SW_THERMAL = 0x20
CLOCK_HW_THERMAL = 0x40
CLOCK_HW_POWER_BRAKE = 0x80
CLOCK_REASON_WORDS = {CLOCK_IDLE: "idle", CLOCK_APP_SETTING: "application clocks", CLOCK_SW_POWER_CAP: "power cap",
                      CLOCK_HW_SLOWDOWN: "HW slowdown", CLOCK_SYNC_BOOST: "sync boost",
                      CLOCK_SW_THERMAL: "SW thermal slowdown", CLOCK_HW_THERMAL: "HW thermal slowdown",
                      CLOCK_HW_POWER_BRAKE: "HW power brake"}


# NVML's GPU recovery action (nvmlDeviceGpuRecoveryAction_t; the action an Xid 154 reports).
RECOVERY_WORDS = {0: "none", 1: "reset the GPU", 2: "reboot the node", 3: "drain peer-to-peer traffic",
                  4: "drain peer-to-peer traffic and reset the GPU", 5: "recover the IMEX domain",
                  6: "reset the GPU's PCIe bus", 7: "reboot the system"}


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU as NVML answers for it. A field NVML cannot give is None, with NVML's reason under its name in
    `unavailable` ("not_supported", "no_permission", "gpu_is_lost", ...): never a zero that was not read."""
    index: int
    utilization_pct: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_w: float | None
    processes: tuple[GpuProcess, ...] = ()      # which ranks run on it (pids as the host sees them)
    uuid: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None
    memory_utilization_pct: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_clock_mhz: int | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    clock_event_reasons: int | None = None      # a bit set of the CLOCK_* reasons
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    pcie_replay: int | None = None
    recovery_action: int | None = None          # NVML's GPU recovery action (RECOVERY_* below); 0: none needed
    nvlink_crc_errors: int | None = None        # NVLink CRC errors (flit + data), all links and lanes
    nvlink_replay_errors: int | None = None
    nvlink_recovery_errors: int | None = None
    lost: bool = False                          # NVML answers "GPU is lost": it fell off the bus
    unavailable: tuple[tuple[str, str], ...] = ()   # (field, NVML's reason) for each field it could not give
    # The Kubernetes pod using the GPU, as dcgm-exporter labels it (its kubelet pod-resources mapping): operator
    # metadata kept in bundles and why lines, never a label on an exported series. None: not said.
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None

    def why_unavailable(self, name: str) -> str | None:
        return dict(self.unavailable).get(name)


@dataclass(frozen=True, slots=True)
class GpuXid:
    """An Xid critical error event NVML delivered (nvmlEventTypeXidCriticalError): when servewatch's event
    thread received it, the device it names, and the code."""
    t: float
    index: int
    xid: int


@dataclass(frozen=True, slots=True)
class GpuSample:
    t: float
    available: bool
    devices: tuple[GpuDevice, ...] = ()
    error: str | None = None       # e.g. "unavailable: no NVIDIA driver"
    xids: tuple[GpuXid, ...] = ()  # the Xid events received since the previous GPU sample, each at its own time
    server_pod: str | None = None  # the pod the watched server runs in (its process's HOSTNAME), where read


@dataclass(frozen=True, slots=True)
class LogEvent:
    t: float
    kind: str                      # "stats" | "preemption" | "retraction" | "error" | "engine_dead" | "startup" | "startup_failure" | ...
    fields: dict[str, float | int | str] = field(default_factory=dict)  # parsed numbers / fixed literals only


# How an active probe (a one-token completion asked of an idle server) ended.
# psutil statuses of a process that cannot run: SIGSTOP, or a tracer holding it (gdb, py-spy without --nonblocking)
STOPPED = ("stopped", "tracing-stop")

SERVED = "served"              # a token came back within the deadline
DEADLINE = "deadline"          # no answer within the deadline
FAILED = "failed"              # the server answered, but with an error (5xx, no token, a dropped connection)
UNAVAILABLE = "unavailable"    # the probe could not be asked (no /v1/models, model 404, 4xx): says nothing
PROBE_OUTCOMES = (SERVED, DEADLINE, FAILED, UNAVAILABLE)


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """One active probe. Its outcome and timing only: never the prompt, the completion or the model name."""

    t: float                       # when the answer arrived, or when the deadline passed
    outcome: str                   # one of PROBE_OUTCOMES
    latency_s: float | None        # request sent -> answer (None without an answer)
    deadline_s: float              # the deadline it was asked with
    status: int | None = None      # HTTP status of the completion request
    tokens: int | None = None      # completion tokens the answer reported
    error: str | None = None       # a short class: "timeout", "http_503", "no_models", "http_404", ...
    engine: str | None = None      # the data-parallel engine (DP rank) it was aimed at; None: not aimed

    @property
    def failed(self) -> bool:
        """The server was asked and did not serve (a probe that could not be asked is not a failure)."""
        return self.outcome in (DEADLINE, FAILED)


# Outcomes of requests through `servewatch proxy`: "ok" or the request record's error class.
REQUEST_OUTCOMES = ("ok", "connect", "timeout", "http_4xx", "http_5xx", "stream_cut", "truncated", "client_abort")


@dataclass(frozen=True, slots=True)
class RequestsSample:
    """The request path as `servewatch proxy` sees it at one instant: counts and ages only, never a
    request's content, id, path or tenant."""

    t: float
    in_flight: int                     # completions and chat completions between arrival and end
    waiting_first_token: int           # of those, streamed ones sent upstream with no token yet
    oldest_s: float | None             # age of the oldest in flight
    oldest_waiting_s: float | None     # the longest a streamed request has waited for its first token
    quiet_s: float | None              # since an in-flight stream last got a byte (or a request ended); None with no stream in flight
    ttft_p99_s: float | None           # p99 TTFT of the recent finished streams
    ttft_count: int                    # how many TTFTs that p99 rests on
    expected_ttft_s: float | None      # the oldest waiting one's expected TTFT from its size and recent prefill speed
    outcomes: dict[str, int] = field(default_factory=dict)   # cumulative, by REQUEST_OUTCOMES
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SlotView:
    """One slot of the engine's slot listing as the slots source saw it: its numbers (dialects.base.Slot: never a
    prompt, text, task id or sampling setting), and how long it has been busy on one request."""

    slot: Slot
    busy_s: float | None          # since the first reading that saw it busy on this request; None when idle


@dataclass(frozen=True, slots=True)
class SlotsSample:
    """The engine's slot picture (where its dialect lists slots: Dialect.slots_path), read by sources.slots."""

    t: float                                 # when the answer arrived (or the failure)
    slots: tuple[SlotView, ...] = ()
    elapsed_s: float | None = None
    error: str | None = None                 # the failure's kind in the scrape vocabulary ("timeout", "http_503", ...)

    @property
    def busy(self) -> int:
        return sum(1 for view in self.slots if view.slot.busy)

    @property
    def prefilling(self) -> int:
        return sum(1 for view in self.slots if view.slot.prefilling)


Sample = (HealthSample | MetricsSample | ProcessSample | GpuSample | LogEvent | ProbeSample | RequestsSample
          | SlotsSample)

# The source kinds' sample types (timeline.kinds): the built-in ones in SOURCE_KINDS order, then each kind added
# after them with its one `kinds.register(name, Sample, fields={...})` line.
kinds.attach_builtin(HealthSample, MetricsSample, ProcessSample, GpuSample, LogEvent, ProbeSample, RequestsSample,
                     SlotsSample)
