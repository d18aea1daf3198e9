"""target_restarted, crash_loop: the thing we watch is not the thing we were watching.

Identity is pid + create time: a reused PID is a different process. Counters that go down mean the
exporter restarted (Prometheus counters only reset with their process). Several restarts or deaths in a
short window are one crash loop, reported once with the first failure's evidence, instead of a
restart verdict per start.
"""

from __future__ import annotations

from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.evidence.crash_loop import _COUNTERS, crash_loop_episodes, in_crash_loop
from servewatch.detectors.series import num, tracks, where
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.window import Window

def detect(window: Window, config: DetectorConfig) -> list[Verdict]:
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


# --- crash_loop (its episodes: detectors/evidence/crash_loop.py) -------------------------------------

def detect_crash_loop(window: Window, config: DetectorConfig) -> list[Verdict]:
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
