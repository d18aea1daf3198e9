"""A bundle read back for reporting: its metadata, decoded samples and verdicts, and chart series."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servewatch.detectors.verdict import Verdict
from servewatch.sinks import serialize, series
from servewatch.sinks.verify import load_bundle
from servewatch.timeline.samples import Sample


@dataclass(frozen=True)
class Incident:
    name: str                       # the bundle's directory name
    meta: dict                      # incident.json
    samples: tuple[Sample, ...]
    verdicts: tuple[Verdict, ...]

    @property
    def series(self) -> dict[str, list[series.Point]]:
        return series.timeline_series(self.samples)

    @property
    def markers(self) -> list[series.Marker]:
        return [series.Marker(t=v.t, onset=v.onset, label=v.name) for v in self.verdicts]


def load_incident(path: str | Path) -> Incident:
    """Read a bundle whose hashes, schema and identity check out (recomputation is `verify`'s job)."""
    path = Path(path)
    meta, sample_dicts = load_bundle(path)
    return Incident(
        name=path.name,
        meta=meta,
        samples=tuple(serialize.sample_from_dict(d) for d in sample_dicts),
        verdicts=tuple(serialize.verdict_from_dict(d) for d in meta["verdicts"]),
    )
