"""The Prometheus exporter: servewatch's verdicts and derived signals as `servewatch_*` metrics.

Labels are few and bounded: target (a configured name or host:port), verdict and severity (from the
verdict registry), kind (a scrape failure kind), state (a target state). Every label value passes
`safe_token`; nothing request-level (prompts, ids, paths, headers) is ever a label.

`ExporterSink` is the per-target sink the recorder calls (off the event loop); `FleetExporter` holds
the metrics of the whole fleet, and a collector reads the derived signals from each target's window
when /metrics is scraped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from operator import attrgetter

from servewatch.detectors import registry
from servewatch.bundle.serialize import safe_token
from servewatch.sinks.export.verdict_series import VerdictSeries

PREFIX = "servewatch_"
SCRAPE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# The derived signals (servewatch.serve.signals.Signals fields) and how each is exported.
DERIVED = {
    "seconds_since_progress": ("seconds_since_progress",
                               "Seconds since any progress counter (engine steps, generation or prompt tokens) "
                               "last moved, over the kept history"),
    "tokens_per_s": ("generation_tokens_per_second", "Generation tokens per second over the newest 10 s"),
    "steps_per_s": ("engine_steps_per_second", "Engine steps per second over the newest 10 s"),
    "preemptions_per_s": ("preemptions_per_second", "Preemptions (vLLM) or retractions (SGLang) per second"),
    "kv_usage_mean": ("kv_usage_mean_ratio", "KV cache usage, 0..1, averaged over the kept history"),
    "waiting": ("requests_waiting", "Requests waiting in the engine queue, newest scrape"),
    "running_over_slot_limit": ("running_over_slot_limit_ratio",
                                "Running requests divided by the slot limit (max_num_seqs), newest scrape"),
    "queue_wait_mean_s": ("queue_wait_mean_seconds", "Mean time in queue of the requests seen over the history"),
}


def label(value: str) -> str:
    return safe_token(value, "other") or "other"


class FleetExporter:
    def __init__(self, derived: Callable[[], Iterable[tuple[str, object]]] | None = None,
                 ranks: Callable[[], Iterable[tuple[str, object]]] | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

        disable_created_metrics()         # the *_created series double the exposition and say nothing here

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.verdicts = VerdictSeries(_severity)
        self.target_up = Gauge(PREFIX + "target_up", "1 when the newest /health probe got an HTTP answer and "
                               "the newest /metrics scrape succeeded, else 0", ["target"], registry=r)
        self.probe_failures = Counter(PREFIX + "probe_failures", "Health probes that failed (no answer, or not 2xx)",
                                      ["target"], registry=r)
        self.scrape_failures = Counter(PREFIX + "scrape_failures", "Failed /metrics scrapes by failure kind",
                                       ["target", "kind"], registry=r)
        self.scrape_duration = Histogram(PREFIX + "scrape_duration_seconds", "Time to fetch a target's /metrics",
                                         buckets=SCRAPE_BUCKETS, registry=r)
        self.targets = Gauge(PREFIX + "targets", "Targets by state (up, down, backoff)", ["state"], registry=r)
        self.loop_lag = Gauge(PREFIX + "event_loop_lag_seconds", "How late the event loop woke a timer, newest "
                              "measurement", registry=r)
        self.config_errors = Counter(PREFIX + "config_reload_errors", "Discovery refreshes that failed (a file_sd "
                                     "file or Prometheus service discovery; the last good targets were kept)", registry=r)
        self.sink_failures = Counter(PREFIX + "sink_failures", "Alert or webhook deliveries given up",
                                     ["sink"], registry=r)
        self.gpu_fault = Gauge(PREFIX + "gpu_fault", "1 while a gpu_fault verdict holds on a GPU a target's engine "
                               "holds: the GPU's UUID, the Xid (\"none\" for an ECC, row-remap or off-the-bus fault "
                               "without one) and NVIDIA's action (restart_app, reset_gpu, reboot, workflow, "
                               "recovery, unknown)", ["target", "gpu_uuid", "xid", "action"], registry=r)
        self._gpu_faults: dict[str, tuple[str, str, str, str]] = {}
        self._lock = threading.Lock()
        self._active: dict[tuple[str, str], int] = {}
        self.derived = DerivedSeries(derived) if derived is not None else None
        if ranks is not None:         # (target, newest process sample): servewatch_rank_state
            from servewatch.sinks.export.rank_series import RankCollector

            r.register(RankCollector(ranks, label))

    def add_target(self, target: str) -> None:
        target = label(target)
        self.verdicts.add_target(target, [label(spec.name) for spec in registry.specs()])
        self.target_up.labels(target).set(0)
        self.probe_failures.labels(target)

    def remove_target(self, target: str) -> None:
        from servewatch.kinds import FAILURE_KINDS as KINDS

        target = label(target)
        self.verdicts.remove_target(target)
        children = [(metric, (target,)) for metric in (self.target_up, self.probe_failures)]
        children += [(self.scrape_failures, (target, kind)) for kind in KINDS]
        for metric, labels in children:
            try:
                metric.remove(*labels)
            except KeyError:
                pass
        with self._lock:
            for key in [key for key in self._active if key[0] == target]:
                del self._active[key]
        self.gpu_fault_cleared(target)

    def gpu_fault_fired(self, target: str, details: dict) -> None:
        """servewatch_gpu_fault{target,gpu_uuid,xid,action} = 1 for a target's gpu_fault (one per target, as the
        verdict)."""
        target = label(target)
        xid = details.get("xid")
        labels = (target, label(str(details.get("gpu_uuid") or "unknown")),
                  str(xid) if isinstance(xid, int) else "none", label(str(details.get("action") or "unknown")))
        with self._lock:
            old = self._gpu_faults.pop(target, None)
            self._gpu_faults[target] = labels
        if old is not None and old != labels:
            self._remove(self.gpu_fault, old)
        self.gpu_fault.labels(*labels).set(1)

    def gpu_fault_cleared(self, target: str) -> None:
        with self._lock:
            old = self._gpu_faults.pop(label(target), None)
        if old is not None:
            self._remove(self.gpu_fault, old)

    @staticmethod
    def _remove(metric, labels) -> None:
        try:
            metric.remove(*labels)
        except KeyError:
            pass

    def fired(self, target: str, verdict_name: str) -> None:
        target = label(target)
        with self._lock:
            key = (target, verdict_name)
            self._active[key] = self._active.get(key, 0) + 1
        self.verdicts.set_active(target, label(verdict_name), True, fired=True)

    def cleared(self, target: str, verdict_name: str) -> None:
        target = label(target)
        with self._lock:
            key = (target, verdict_name)
            left = self._active[key] = max(0, self._active.get(key, 0) - 1)   # one per engine it held on
        if left == 0:
            self.verdicts.set_active(target, label(verdict_name), False)

    def exposition(self) -> bytes:
        """serve's /metrics body: the registry's metrics, the derived signals and the verdict series."""
        from prometheus_client import generate_latest

        derived = self.derived.exposition() if self.derived is not None else ""
        return generate_latest(self.registry) + (derived + self.verdicts.exposition()).encode()

    def sink(self, target: str) -> ExporterSink:
        return ExporterSink(self, target)


class ExporterSink:
    """A target's verdicts into the fleet exporter."""

    def __init__(self, exporter: FleetExporter, target: str):
        self.exporter, self.target = exporter, target

    def on_fired(self, fired):
        self.exporter.fired(self.target, fired.verdict.name)
        if fired.verdict.name == "gpu_fault":
            self.exporter.gpu_fault_fired(self.target, fired.verdict.details)
        return None

    def on_cleared(self, cleared) -> None:
        self.exporter.cleared(self.target, cleared.verdict.name)
        if cleared.verdict.name == "gpu_fault":
            self.exporter.gpu_fault_cleared(self.target)

    def close(self) -> None:
        pass


def _severity(verdict_name: str) -> str:
    spec = registry.spec(verdict_name)
    return spec.severity if spec else "info"


class DerivedSeries:
    """The derived signals' gauges, written at each /metrics scrape from `derived()`, which yields (target,
    Signals) for every target: one line a target and signal that has a value.

    Written here rather than by prometheus_client's collector, which made a sample object a value and escaped
    and sorted its labels one line at a time: 8 lines a target, 31 of the 39 ms prometheus_client took for
    1,000 targets. The text is what prometheus_client writes for the same gauges (tests compare the two)."""

    def __init__(self, derived: Callable[[], Iterable[tuple[str, object]]]):
        self.derived = derived
        self._families = tuple((field, PREFIX + name, f"# HELP {PREFIX}{name} {_help(help_text)}\n"
                                f"# TYPE {PREFIX}{name} gauge\n") for field, (name, help_text) in DERIVED.items())
        self._values = attrgetter(*DERIVED)
        self._starts: dict[str, tuple[str, ...]] = {}     # target -> each family's line up to its value

    def exposition(self) -> str:
        starts = self._starts
        values_of = self._values
        lines: list[list[str]] = [[] for _ in self._families]
        for target, signals in self.derived():
            start = starts.get(target)
            if start is None:
                if len(starts) >= _TARGETS_KEPT:
                    starts.clear()
                labels = f'{{target="{_escape(label(target))}"}} '
                start = starts[target] = tuple(name + labels for _, name, _ in self._families)
            for family, first, value in zip(lines, start, values_of(signals)):
                if value is not None:
                    family.append(f"{first}{_go_float(value)}\n")
        return "".join(head + "".join(family) for (_, _, head), family in zip(self._families, lines))


_TARGETS_KEPT = 65536
_INF = float("inf")


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape(value: str) -> str:
    """A label value as prometheus_client writes it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _go_float(value) -> str:
    """prometheus_client's floatToGoString(float(value)): repr, but for +Inf, -Inf, NaN and exponents from 1e+06."""
    v = float(value)
    if -_INF < v < 1e6:
        return repr(v)
    from prometheus_client.utils import floatToGoString

    return floatToGoString(v)
