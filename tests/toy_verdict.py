"""A toy verdict, all of it in one module as every verdict module of servewatch/detectors/ is: its settings class,
its detect function, its runbook branch and its spec. tests/test_verdict_seam.py registers it with one line
(`registry.register_module(toy_verdict)`) and finds it everywhere a verdict shows."""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.verdict import (INCIDENT, RESTART, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.timeline.window import Window

NAME = "toy_teapot"
TEAPOT = 418


@dataclass(frozen=True, slots=True)
class ToySettings(Settings):
    """toy_teapot's thresholds."""

    # toy_teapot: /health answered 418 for at least toy_teapot_s without a break.
    toy_teapot_s: float = 3.0

    def validate(self) -> list[str]:
        return [] if self.toy_teapot_s > 0 else [f"toy_teapot_s must be above 0, not {self.toy_teapot_s:g}"]


def detect(window: Window, config: Thresholds) -> list[Verdict]:
    settings = ToySettings.of(config)
    run = []
    for sample in window.health:
        run = run + [sample] if sample.status == TEAPOT else []
    if not run or run[-1].t - run[0].t < settings.toy_teapot_s:
        return []
    first, last = run[0], run[-1]
    return [Verdict(NAME, last.t, first.t, f"/health answered {TEAPOT} for {last.t - first.t:.1f} s "
                                           f"(≥ {settings.toy_teapot_s:g} s)",
                    (Evidence("health", first.t, "status", TEAPOT), Evidence("health", last.t, "status", TEAPOT)),
                    {"answers": len(run)})]


TOY_TEAPOT = RunbookBranch(
    meaning="The server says it is a teapot: /health answers 418 and keeps answering it.",
    check_next=("Whether the server was built as a teapot.",),
    expected_range="/health answers 2xx.",
    safe_action="Pour the tea.",
    rollback="Put the kettle back.",
    restart_destroys="The brew in progress.",
)

SETTINGS = (ToySettings,)
SPECS = (
    VerdictSpec(NAME, detect, INCIDENT, "page", "the server says it is a teapot", TOY_TEAPOT, ("health",),
                action=RESTART),
)
