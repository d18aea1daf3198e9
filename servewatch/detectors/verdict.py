"""What a detector returns (a typed verdict that names the samples it rests on), and what declares a
verdict (its spec: detector, kind, severity, runbook branch, evidence and label allow-lists)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Evidence:
    """A pointer to one stored sample and the field of it that matters."""

    source: str            # "health" | "metrics" | "process" | "gpu" | "log" | "probe"
    t: float               # the sample's time: with `source` it identifies the sample
    field: str             # e.g. "status", "counters.generation_tokens", "running"
    value: float | int | str | bool | None


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str              # a registered VerdictSpec's name
    t: float               # when the detector concluded (time of the newest sample it used)
    onset: float           # when the condition began, as the samples show it
    why: str               # one line, with the numbers
    evidence: tuple[Evidence, ...] = ()
    details: dict[str, float | int | str | bool | None] = field(default_factory=dict)  # e.g. {"cause": "slots"}

    @property
    def since_s(self) -> float:
        return self.t - self.onset


@dataclass(frozen=True)
class RunbookBranch:
    """What a person does with a verdict: check next, the expected range, the safe action and its
    rollback, and what a restart would destroy."""

    meaning: str
    check_next: tuple[str, ...]
    expected_range: str
    safe_action: str
    rollback: str
    restart_destroys: str
    by_cause: dict[str, str] = field(default_factory=dict)   # the branch to take for a verdict's "cause" detail

    def for_cause(self, cause: object) -> str | None:
        return self.by_cause.get(str(cause)) if cause is not None else None


INCIDENT = "incident"      # something is wrong now: stops `watch --stop-on-incident`, pages
FINDING = "finding"        # a standing property of the target (e.g. a blind histogram): a ticket
SEVERITIES = ("page", "ticket", "info")
SOURCES = ("health", "metrics", "process", "gpu", "log", "probe", "requests")


@dataclass(frozen=True)
class VerdictSpec:
    """One verdict, declared once: everything else (the detector list, output styles, runbook, schema
    enums, exported labels) derives from the registry of these (`servewatch.detectors.registry`)."""

    name: str
    detect: Callable            # (Window, DetectorConfig) -> list[Verdict]
    kind: str                   # INCIDENT or FINDING
    severity: str               # one of SEVERITIES (an alert's severity label; inhibition keys on it)
    summary: str                # one line a person reads in a table or an alert title
    runbook: RunbookBranch
    evidence_sources: tuple[str, ...]        # the sources its evidence may point into
    labels: tuple[str, ...] = ()             # detail keys whose (token) values may become metric labels

    def __post_init__(self):
        problems = []
        if self.kind not in (INCIDENT, FINDING):
            problems.append(f"kind {self.kind!r} is not {INCIDENT!r} or {FINDING!r}")
        if self.severity not in SEVERITIES:
            problems.append(f"severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if not self.name.isidentifier() or not self.name.islower():
            problems.append("the name must be a lower-case identifier")
        unknown = set(self.evidence_sources) - set(SOURCES)
        if unknown:
            problems.append(f"unknown evidence sources {sorted(unknown)}")
        if problems:
            raise ValueError(f"verdict {self.name!r}: " + "; ".join(problems))
