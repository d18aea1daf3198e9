"""target_restarted: the thing we watch is not the thing we were watching.

Identity is pid + create time: a reused PID is a different process. Counters that go down mean the
exporter restarted (Prometheus counters only reset with their process).
"""

from __future__ import annotations

from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.series import engine_series, num, progress, where
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.window import Window

_COUNTERS = ("steps", "generation_tokens", "prompt_tokens", "preemptions")


def detect(window: Window, config: DetectorConfig) -> list[Verdict]:
    found: list[tuple[float, str, tuple[Evidence, ...], dict]] = []

    identities = [p for p in window.process if p.alive and p.root_create_time is not None]
    for a, b in zip(identities, identities[1:]):
        if (a.root_pid, a.root_create_time) != (b.root_pid, b.root_create_time):
            found.append((b.t, f"process identity changed: pid {a.root_pid} started at {a.root_create_time:.2f} → "
                               f"pid {b.root_pid} started at {b.root_create_time:.2f}",
                          (Evidence("process", a.t, "root_create_time", a.root_create_time),
                           Evidence("process", b.t, "root_create_time", b.root_create_time)),
                          {"by": "pid_identity", "old_pid": a.root_pid, "new_pid": b.root_pid}))

    for key, points in sorted(engine_series(window.metrics).items()):
        for (sa, a), (sb, b) in zip(points, points[1:]):
            values_a = progress(a) + (a.counters.preemptions,)
            values_b = progress(b) + (b.counters.preemptions,)
            for name, va, vb in zip(_COUNTERS, values_a, values_b):
                if va is not None and vb is not None and vb < va:
                    found.append((sb.t, f"counter {name} went down {num(va)} → {num(vb)}{where(key)}: "
                                        "the exporter restarted",
                                  (Evidence("metrics", sa.t, f"counters.{name}", va),
                                   Evidence("metrics", sb.t, f"counters.{name}", vb)),
                                  {"by": "counter_reset", "engine": key, "counter": name}))
                    break

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
