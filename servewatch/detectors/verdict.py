"""What a detector returns (a typed verdict that names the samples it rests on), and what declares a
verdict (its spec: detector, kind, severity, runbook branch, evidence and label allow-lists; its settings class)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from servewatch.timeline import kinds


@dataclass(frozen=True, slots=True)
class Evidence:
    """A pointer to one stored sample and the field of it that matters."""

    source: str            # one of the source kinds (servewatch.timeline.kinds)
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
    # This firing's own action class, where its evidence decides it (gpu_fault: its fault's NVIDIA action); None:
    # its spec's. Read through registry.action_for, the one place every consumer asks.
    action: str | None = None

    @property
    def since_s(self) -> float:
        return self.t - self.onset


class Thresholds(Protocol):
    """What a detect function reads its thresholds from: detectors/config.py's DetectorConfig, the flat view composed
    of every verdict module's settings class (a field of each, by its name: `config.stall_floor_s`). Verdict modules
    type their config with this and never import config.py, which imports them (through the registry)."""

    lookback_s: float

    def __getattr__(self, name: str) -> Any: ...


class Settings:
    """A verdict module's thresholds, declared beside its detect function: a frozen dataclass of plain numbers (units
    in the names, each default written once there). detectors/config.py composes them into DetectorConfig; a field
    `stall_floor_s` is `--set stall.floor_s=5`, TOML `[stall] floor_s = 5` and a bundle's stored `stall_floor_s`."""

    __slots__ = ()

    def validate(self) -> list[str]:
        """What is wrong with these values together, one phrase each naming the setting (empty: nothing). A value's
        own type and sign are checked where it is read (detectors/settings.py)."""
        return []

    @classmethod
    def of(cls, config: object) -> Settings:
        """These settings as `config` (a DetectorConfig) holds them; a field it lacks keeps its default (a verdict
        registered after DetectorConfig was composed, such as a test's)."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)})

    def shares(self, *names: str) -> list[str]:
        return [f"{name} is a share from 0 to 1, not {getattr(self, name):g}" for name in names
                if not 0 <= getattr(self, name) <= 1]

    def counts(self, *names: str) -> list[str]:
        return [f"{name} counts at least 1, not {getattr(self, name):g}" for name in names if getattr(self, name) < 1]

    def ordered(self, low: str, high: str) -> list[str]:
        a, b = getattr(self, low), getattr(self, high)
        return [f"{low} ({a:g}) is above {high} ({b:g})"] if a > b else []


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

# What helps, once a verdict's evidence holds (its action class). Every consumer that acts reads it: guard's
# default --act-on, serve's livez and readyz, the alert rules' labels and Alertmanager's routes, the drill's
# judgement of what a fault demanded.
RESTART = "restart"        # only a restart helps: guard kills the tree, livez fails, a kubelet restarts the pod
DRAIN = "drain"            # the hardware under it is at fault: take the node out (readyz fails); a restart onto it is wrong
PAGE = "page"              # a person decides (overload, KV pressure, errors, a stalled start): nothing acts by itself
INFO = "info"              # to know; nothing to do now
ACTION_CLASSES = {
    RESTART: "only a restart helps",
    DRAIN: "the hardware under it is at fault: drain the node, do not restart onto it",
    PAGE: "a person decides",
    INFO: "to know; nothing to do now",
}


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
    action: str = INFO                       # one of ACTION_CLASSES: what helps once the evidence below holds
    # The evidence an action waits for, beyond the verdict itself: how long the condition must have held (the
    # verdict's onset to its newest sample) and how many probes in a row must have got no token.
    hold_s: float = 0.0
    probes: int = 0
    # Detail keys that must be True for the action to be taken: a verdict without them is reported, not acted on.
    requires: tuple[str, ...] = ()
    # How a firing chooses its own action class (Verdict.action), in words, and the classes it may choose from;
    # empty: every firing has `action`.
    action_by: str = ""
    actions: tuple[str, ...] = ()
    # The verdicts this one gives way to: when one of them holds in the same window, this one is not reported (the
    # same symptom, said better there). Applied in one place, detectors.run_detectors; detectors never call each other
    # for it.
    yields_to: tuple[str, ...] = ()
    # A verdict about a deployment (prefill and decode instances together): its detector reads the window's
    # instances (Window.instances) and its firing names, as its `act_on` detail, the one instance whose process tree
    # may be acted on (none: a person decides). Every other verdict is judged on each instance's own window.
    pair: bool = False

    def evidence_holds(self, verdict: Verdict) -> bool:
        """Whether `verdict` (of this spec) carries the evidence its action class waits for."""
        if verdict.since_s < self.hold_s:
            return False
        if self.action_by and verdict.action is None:
            return False           # a firing that does not say its own action (action_by) is not proven: reported
        if any(verdict.details.get(key) is not True for key in self.requires):
            return False
        if self.probes:
            failed = verdict.details.get("failed_probes")
            return isinstance(failed, int) and failed >= self.probes
        return True

    def evidence_words(self) -> str:
        """The evidence in words, e.g. "2 probes in a row with no token" ("" when the verdict is enough)."""
        parts = []
        if self.hold_s:
            parts.append(f"held {self.hold_s:g} s")
        if self.probes:
            parts.append(f"{self.probes} probes in a row with no token" if self.probes > 1 else "a probe with no token")
        parts.extend(f"{key} fault" for key in self.requires)
        if self.action_by:
            parts.append(self.action_by)
        return ", ".join(parts)

    def __post_init__(self):
        problems = []
        for action in (self.action, *self.actions):
            if action not in ACTION_CLASSES:
                problems.append(f"action {action!r} is not one of {', '.join(ACTION_CLASSES)}")
        if bool(self.action_by) != bool(self.actions):
            problems.append("action_by and actions go together")
        if self.hold_s < 0 or self.probes < 0:
            problems.append("hold_s and probes are never negative")
        if self.kind not in (INCIDENT, FINDING):
            problems.append(f"kind {self.kind!r} is not {INCIDENT!r} or {FINDING!r}")
        if self.severity not in SEVERITIES:
            problems.append(f"severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if not self.name.isidentifier() or not self.name.islower():
            problems.append("the name must be a lower-case identifier")
        unknown = set(self.evidence_sources) - set(kinds.names())
        if unknown:
            problems.append(f"unknown evidence sources {sorted(unknown)}")
        if problems:
            raise ValueError(f"verdict {self.name!r}: " + "; ".join(problems))
