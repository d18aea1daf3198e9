"""What a detector returns: a typed verdict that names the samples it rests on."""

from __future__ import annotations

from dataclasses import dataclass, field

VERDICT_NAMES = (
    "alive_health_ok_no_progress",
    "engine_dead",
    "process_exit",
    "health_loss",
    "overload",
    "kv_pressure",
    "preemption",
    "histogram_blind",
    "target_restarted",
)


@dataclass(frozen=True, slots=True)
class Evidence:
    """A pointer to one stored sample and the field of it that matters."""

    source: str            # "health" | "metrics" | "process" | "gpu" | "log"
    t: float               # the sample's time: with `source` it identifies the sample
    field: str             # e.g. "status", "counters.generation_tokens", "running"
    value: float | int | str | bool | None


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str              # one of VERDICT_NAMES
    t: float               # when the detector concluded (time of the newest sample it used)
    onset: float           # when the condition began, as the samples show it
    why: str               # one line, with the numbers
    evidence: tuple[Evidence, ...] = ()
    details: dict[str, float | int | str | bool | None] = field(default_factory=dict)  # e.g. {"cause": "slots"}

    @property
    def since_s(self) -> float:
        return self.t - self.onset
