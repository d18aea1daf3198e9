"""crash_loop: the target dies or restarts again and again.

Several restarts or deaths in a short window (their episodes: detectors/evidence/crash_loop.py) are one crash
loop, reported once with the first failure's evidence, instead of a restart verdict per start.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.evidence.crash_loop import crash_loop_episodes
from servewatch.detectors.verdict import (INCIDENT, PAGE, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class CrashLoopSettings(Settings):
    """crash_loop's thresholds (target_restarted, health_loss and the error verdicts yield to a loop)."""

    # crash_loop: at least crash_loop_count restarts or deaths within crash_loop_window_s (at most the
    # lookback); engine-death lines closer than crash_loop_burst_s are one death.
    crash_loop_count: int = 3
    crash_loop_window_s: float = 180.0
    crash_loop_burst_s: float = 10.0

    def validate(self) -> list[str]:
        return self.counts("crash_loop_count")


def detect_crash_loop(window: Window, config: Thresholds) -> list[Verdict]:
    found = crash_loop_episodes(window, config)
    if found is None:
        return []
    what, episodes = found
    first, last = episodes[0][0], episodes[-1][0]
    why = (f"{len(episodes)} {what} in {last - first:.0f} s (≥ {config.crash_loop_count:g} within "
           f"{config.crash_loop_window_s:g} s): a crash loop")
    first_failure = _first_failure(window, first)
    if first_failure:
        why += f"; the first: {first_failure[0]}"
    evidence = tuple(e for _, e in episodes[:3]) + tuple(first_failure[1] if first_failure else ())
    return [Verdict("crash_loop", last, first, why, evidence,
                    {"episodes": len(episodes), "by": what.split(" ")[0], "span_s": round(last - first, 1)})]


def _first_failure(window: Window, before: float) -> tuple[str, tuple[Evidence, ...]] | None:
    """What the window says about the first failure of the loop: its engine-death or startup-failure
    line, or the first exit's code."""
    for event in window.logs:
        if event.kind in ("engine_dead", "startup_failure") and event.t <= before + 1.0:
            return (f"{event.kind.replace('_', ' ')} ({event.fields.get('reason', 'unknown')})",
                    (Evidence("log", event.t, "reason", event.fields.get("reason")),))
    for p in window.process:
        if not p.alive and p.exit_code is not None:
            return f"exit code {p.exit_code}", (Evidence("process", p.t, "exit_code", p.exit_code),)
    return None


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

CRASH_LOOP = RunbookBranch(
    meaning="The target died or was restarted several times within a few minutes: one failure repeating "
            "under a supervisor (systemd, Kubernetes, a wrapper script), not unrelated restarts.",
    check_next=(
        "The first failure the verdict names (its engine-death or startup-failure line, or its exit code): "
        "the later ones usually repeat it, and later restarts overwrite its log and counters.",
        "How far each start gets (the startup stages): dying at the same stage every time is a "
        "configuration or resource fault (KV sizing, memory, a missing file), not load.",
        "Whether the deaths follow traffic: an engine that dies a fixed time after ready under load points "
        "at a request pattern (an activation out-of-memory at high concurrency).",
        "The supervisor's restart policy and back-off: a loop without back-off hides the cause in churn.",
    ),
    expected_range="No restart between planned deploys.",
    safe_action="Stop the supervisor from restarting this replica (or give it a back-off), keep its log and "
                "the first failure's bundle, and fix the cause before the next start.",
    rollback="Re-enable the restarts once one start has stayed up through a peak window.",
    restart_destroys="Each restart already destroyed the previous start's evidence: in-flight requests, the "
                     "KV cache, counters and the tail of the log if it is not kept.",
)

SETTINGS = (CrashLoopSettings,)
SPECS = (
    VerdictSpec("crash_loop", detect_crash_loop, INCIDENT, "page",
                "the target dies or restarts again and again", CRASH_LOOP, ("process", "metrics", "log"),
                labels=("by",), action=PAGE),
)
