"""A read-only slice of the timeline: what detectors see, and what a bundle freezes.

A `Window` holds one time-ordered tuple per sample kind. It is immutable and holds no clock: every
question a detector asks ("how long has this lasted?") is answered from the samples' own times, so
the same window always gives the same verdicts (that is what `verify` relies on).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter

from servewatch.kinds import SOURCE_KINDS
from servewatch.timeline import kinds
from servewatch.timeline.kinds import kind_of
from servewatch.timeline.samples import (GpuSample, HealthSample, LogEvent, MetricsSample, ProbeSample, ProcessSample,
                                         RequestsSample, Sample, SlotsSample)

_time = attrgetter("t")

__all__ = ["InstanceWindow", "Window", "kind_of"]


@dataclass(frozen=True, slots=True)
class InstanceWindow:
    """One server of a deployment (a prefill or a decode instance of a disaggregated pair) and its own timeline:
    each instance is recorded as a target of its own; the deployment's window holds them side by side."""

    name: str          # a short token (host:port unless named): never a path
    role: str          # "prefill" | "decode": what the deployment says it is
    window: Window


@dataclass(frozen=True, slots=True)
class Window:
    health: tuple[HealthSample, ...] = ()
    metrics: tuple[MetricsSample, ...] = ()
    process: tuple[ProcessSample, ...] = ()
    gpu: tuple[GpuSample, ...] = ()
    logs: tuple[LogEvent, ...] = ()
    probe: tuple[ProbeSample, ...] = ()
    requests: tuple[RequestsSample, ...] = ()      # from `servewatch proxy`
    slots: tuple[SlotsSample, ...] = ()            # the slot picture, where the engine lists its slots
    # A deployment (prefill and decode instances watched as one target): each instance's own window, with its
    # role. The verdicts of one engine are judged on each instance's window, the pair's on all of them together.
    instances: tuple[InstanceWindow, ...] = ()
    # The samples of the kinds registered beyond the built-in ones (timeline.kinds.register), by kind: read them
    # with `of(kind)`.
    added: tuple[tuple[str, tuple], ...] = ()

    @classmethod
    def from_samples(cls, samples: Iterable[Sample]) -> Window:
        """Group samples by kind, each kind sorted by time (stable for equal times)."""
        by_kind: dict[str, list] = {kind: [] for kind in kinds.names()}
        for sample in samples:
            by_kind[kind_of(sample)].append(sample)
        return cls.of_kinds({kind: tuple(sorted(items, key=lambda s: s.t)) for kind, items in by_kind.items()})

    @classmethod
    def of_kinds(cls, by_kind: Mapping[str, tuple], instances: tuple[InstanceWindow, ...] = ()) -> Window:
        """A window of each kind's time-ordered samples, by kind name."""
        fields = {}
        added = []
        for name, samples in by_kind.items():
            field = kinds.get(name).field
            if field is not None:
                fields[field] = samples
            elif samples:
                added.append((name, samples))
        return cls(**fields, instances=instances, added=tuple(added))

    def of(self, kind: str) -> tuple:
        field = kinds.get(kind).field
        if field is not None:
            return getattr(self, field)
        return next((samples for name, samples in self.added if name == kind), ())

    def samples(self) -> Iterator[Sample]:
        """Every sample, ordered by time (kinds in registry order, the built-in ones first, for equal times)."""
        merged = [s for kind in kinds.names() for s in self.of(kind)]
        return iter(sorted(merged, key=lambda s: s.t))

    def __len__(self) -> int:
        return sum(len(self.of(kind)) for kind in kinds.names()) + sum(len(i.window) for i in self.instances)

    @property
    def start(self) -> float | None:
        firsts = [self.of(kind)[0].t for kind in kinds.names() if self.of(kind)]
        firsts += [t for i in self.instances if (t := i.window.start) is not None]
        return min(firsts) if firsts else None

    @property
    def end(self) -> float | None:
        """The time of the newest sample (of any instance's, in a deployment): the window's "now"."""
        lasts = [samples[-1].t for samples in _builtin(self) if samples]     # every detector asks: the fields at once
        if self.added:
            lasts += [samples[-1].t for kind in kinds.added() if (samples := self.of(kind.name))]
        lasts += [t for i in self.instances if (t := i.window.end) is not None]
        return max(lasts) if lasts else None

    def since(self, t: float) -> Window:
        """The samples at or after `t` (each instance's too)."""
        instances = tuple(InstanceWindow(i.name, i.role, i.window.since(t)) for i in self.instances)
        added = tuple((kind.name, samples) for kind in kinds.added()
                      if (samples := _since(self.of(kind.name), t))) if self.added else ()
        return Window(**dict(zip(_BUILTIN_FIELDS, [_since(samples, t) for samples in _builtin(self)])),
                      instances=instances, added=added)

    def instance(self, name: str) -> InstanceWindow | None:
        return next((i for i in self.instances if i.name == name), None)

    def good_metrics(self) -> tuple[MetricsSample, ...]:
        """Scrapes that answered and were understood."""
        return tuple(m for m in self.metrics if m.error is None and m.engines)


# The built-in kinds' fields: every one read in one call.
_BUILTIN_FIELDS = tuple(kinds.get(name).field for name in SOURCE_KINDS)
_builtin = attrgetter(*_BUILTIN_FIELDS)


def _since(samples: tuple, t: float) -> tuple:
    if not samples or samples[0].t >= t:
        return samples
    return samples[bisect_left(samples, t, key=_time):]      # each kind's tuple is in time order

