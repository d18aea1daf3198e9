"""What an alert rule or a dashboard reads from an engine, per metric naming: the series of
each signal (running, waiting, KV, preemptions, availability, request success, latency histograms), the
flag that changes a histogram's edges, and the slot-limit flag. Each dialect describes itself with these
(`Dialect.alert_series`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LatencyHistogram:
    kind: str                   # ttft | tpot | itl | e2e | queue
    name: str                   # the family name, without _bucket/_count/_sum
    edges: tuple[float, ...]
    edge_flag: str              # the engine flag that sets these edges


@dataclass(frozen=True)
class RatioSeries:
    """A counter split into bad and all events by one label (an SLI's numerator and denominator)."""

    counter: str                # exposed sample name (…_total)
    bad: str                    # label matchers selecting the bad events, e.g. status="5xx"
    total: str                  # label matchers selecting all counted events ('' for every series)
    bad_counter: str = ""       # when bad events live in another counter (SGLang's aborted requests)
    good_labels: tuple[tuple[str, str], ...] = ()   # what one good / one bad event's series carries
    bad_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EngineSeries:
    dialect: str
    naming: str
    running: str
    waiting: str
    kv_usage: str
    preemptions: str            # a counter (or cumulative gauge) of preempted / retracted requests
    preemptions_lazy: bool      # the engine creates the series only at the first preemption
    availability: RatioSeries | None
    success: RatioSeries | None
    histograms: dict[str, LatencyHistogram] = field(default_factory=dict)
    slot_limit_flag: str = ""
    default_slot_limit: int | None = None
    engine_labels: tuple[str, ...] = ()   # labels the engine adds (never on its HTTP counters)
    # The counter of tokens generated (exposed name, `_total`): the engine's progress. The simulator writes it
    # for a dialect it has no hand-written exposition of (servewatch.sim.metrics_series); "" where unstated.
    generation_tokens: str = ""
    # The counters of prompt tokens computed and of the engine's steps (exposed names, `_total`), where the simulator
    # writes them too; "" where unstated.
    prompt_tokens: str = ""
    steps: str = ""

    def histogram(self, kind: str) -> LatencyHistogram | None:
        return self.histograms.get(kind)
