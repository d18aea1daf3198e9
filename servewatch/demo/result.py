"""What a demo run produced, phase by phase."""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.demo.plan import Phase
from servewatch.load.records import RequestRecord
from servewatch.sinks.base import Fired


@dataclass(slots=True)
class PhaseResult:
    phase: Phase
    start: float
    end: float = 0.0
    fault_at: float | None = None
    cleared_at: float | None = None
    records: list[RequestRecord] = field(default_factory=list)
    summary: dict = field(default_factory=dict)          # the load generator's summary (signature row inside)
    fired: list[Fired] = field(default_factory=list)     # verdicts that fired during this phase
    health: dict[str, int] = field(default_factory=dict)  # /health answers from the fault to the phase end

    def detection_s(self, fired: Fired) -> float | None:
        """Seconds from the injected fault to the verdict (None for scenario phases)."""
        return None if self.fault_at is None else fired.verdict.t - self.fault_at


@dataclass(slots=True)
class DemoResult:
    mode: str                                # "virtual" | "realtime"
    dialect: str
    out_dir: str
    phases: list[PhaseResult] = field(default_factory=list)
    bundles: list[str] = field(default_factory=list)
    bundle_failures: int = 0
    report_html: str | None = None
    report_md: str | None = None
    wall_s: float = 0.0
    slot_limit: int | None = None            # the built-in engine's slot limit (max-num-seqs) for this run

    def shapes(self):
        """Each workload's announced shape against what it achieved (servewatch.demo.shape)."""
        from servewatch.demo.shape import check_shapes

        return check_shapes(self.scenarios, self.slot_limit)

    @property
    def scenarios(self) -> list[PhaseResult]:
        return [p for p in self.phases if not p.phase.is_fault]

    @property
    def incidents(self) -> list[PhaseResult]:
        return [p for p in self.phases if p.phase.is_fault]

    def missing_verdicts(self) -> list[str]:
        """Expected verdicts that did not fire — the demo fails loudly rather than pretend."""
        missing = []
        for p in self.incidents:
            names = {f.verdict.name for f in p.fired}
            missing.extend(f"{p.phase.name}: {name}" for name in p.phase.expect if name not in names)
        return missing
