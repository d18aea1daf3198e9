"""target_restarted: the thing we watch is not the thing we were watching.

Identity is pid + create time: a reused PID is a different process. Counters that go down mean the
exporter restarted (Prometheus counters only reset with their process). Several restarts or deaths in a
short window are one crash loop (detectors/crash_loop.py), reported once instead of a restart verdict per start.
"""

from __future__ import annotations

from servewatch.detectors.evidence.crash_loop import _COUNTERS, in_crash_loop
from servewatch.detectors.series import num, tracks, where
from servewatch.detectors.verdict import INCIDENT, INFO, Evidence, RunbookBranch, Thresholds, Verdict, VerdictSpec
from servewatch.timeline.window import Window

def detect(window: Window, config: Thresholds) -> list[Verdict]:
    if in_crash_loop(window, config):
        return []    # one crash_loop verdict instead of one restart verdict per start
    return _restarts(window)


def _restarts(window: Window) -> list[Verdict]:
    found: list[tuple[float, str, tuple[Evidence, ...], dict]] = []

    identities = [p for p in window.process if p.alive and p.root_create_time is not None]
    for a, b in zip(identities, identities[1:]):
        if (a.root_pid, a.root_create_time) != (b.root_pid, b.root_create_time):
            found.append((b.t, f"process identity changed: pid {a.root_pid} started at {a.root_create_time:.2f} → "
                               f"pid {b.root_pid} started at {b.root_create_time:.2f}",
                          (Evidence("process", a.t, "root_create_time", a.root_create_time),
                           Evidence("process", b.t, "root_create_time", b.root_create_time)),
                          {"by": "pid_identity", "old_pid": a.root_pid, "new_pid": b.root_pid}))

    for key, track in sorted(tracks(window.metrics).items()):
        for i, c in track.counter_drops:
            name, va, vb = _COUNTERS[c], track.counter_columns[c][i - 1], track.counter_columns[c][i]
            ta, tb = track.times[i - 1], track.times[i]
            found.append((tb, f"counter {name} went down {num(va)} → {num(vb)}{where(key)}: the exporter restarted",
                          (Evidence("metrics", ta, f"counters.{name}", va),
                           Evidence("metrics", tb, f"counters.{name}", vb)),
                          {"by": "counter_reset", "engine": key, "counter": name}))

    if not found:
        return []
    found.sort(key=lambda f: f[0])
    onset, why, evidence, details = found[-1]
    same_time = [f for f in found if f[0] == onset]
    if len(same_time) > 1:
        why = "; ".join(f[1] for f in same_time)
        evidence = tuple(e for f in same_time for e in f[2])
    details = {**details, "restarts_seen": len(found)}
    details.pop("engine", None)  # one restart verdict for the target, whichever engine showed it
    return [Verdict("target_restarted", onset, onset, why, evidence, details)]


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

TARGET_RESTARTED = RunbookBranch(
    meaning="The target's identity changed (PID + create time) or its counters reset: it restarted.",
    check_next=(
        "Whether a previous bundle shows an engine death, an exit or a stall just before: the restart "
        "may have been the supervisor's answer to it.",
        "Readiness after the restart: startup stages and the time to /health 200.",
        "Counter deltas across the reset are meaningless: compare from the new baseline only.",
    ),
    expected_range="A stable identity between planned deploys.",
    safe_action="Confirm the restart was intended; if not, read the previous bundle before anything else.",
    rollback="Nothing to roll back: the restart already happened.",
    restart_destroys="Already destroyed: KV and prefix cache, in-flight requests, cumulative counters.",
)

SETTINGS = ()
SPECS = (
    VerdictSpec("target_restarted", detect, INCIDENT, "ticket",
                "the target restarted", TARGET_RESTARTED, ("process", "metrics"), labels=("by",), action=INFO),
)
