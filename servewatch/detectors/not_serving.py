"""not_serving: /health answers 2xx, yet a one-token probe gets no token, no counter moves and the gauges
show no admitted work (with work admitted and frozen, that is alive_health_ok_no_progress's verdict).

The idle wedge: an engine that hangs while nothing runs keeps its gauges at 0 running and 0 waiting,
every counter flat and /health at 200 — to a passive reader, an idle server — while every request that
arrives waits forever. Only asking the server for a token tells the two apart (see sources.probe).
A probe that could not be asked (no /v1/models, the model 404s, a 4xx) proves nothing and never counts.
"""

from __future__ import annotations

from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.series import tracks
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.samples import DEADLINE, ProbeSample
from servewatch.timeline.window import Window

NAME = "not_serving"


def detect(window: Window, config: DetectorConfig) -> list[Verdict]:
    if not window.probe or not window.probe[-1].failed:
        return []
    from servewatch.detectors import ranks

    if ranks.detect(window, config):
        return []   # the same missed probe, with the stalled rank named: rank_stalled says it
    # Only probes sent after the counters last moved count: one sent before proves nothing now.
    run = _trailing_failures(window.probe, after=_last_counter_movement(window))
    if not run or len(run) < config.probe_fail_count:
        return []
    first, last = run[0], run[-1]
    asked = asked_at(first)

    health = [h for h in window.health if asked <= h.t <= last.t] or [h for h in window.health if h.t <= last.t][-1:]
    if not health or not all(h.ok for h in health) or not window.health[-1].ok:
        return []   # /health itself is failing: that is health_loss's (or engine_dead's) verdict

    newest = _newest_gauges(window)
    if newest is not None and ((newest[1] or 0) > 0 or (newest[2] or 0) > 0):
        return []   # the gauges show admitted work that does not move: alive_health_ok_no_progress says it

    what = (f"got no token within {last.deadline_s:g} s" if last.outcome == DEADLINE
            else f"failed ({_problem(last)})")
    streak = f" ({len(run)} probes in a row over {last.t - asked:.1f} s)" if len(run) > 1 else ""
    why = (f"a one-token probe {what}{streak} while /health answered {health[-1].status} "
           f"({len(health)} time(s) meanwhile)")
    details: dict[str, float | int | str | bool | None] = {
        "failed_probes": len(run), "last_outcome": last.outcome, "deadline_s": last.deadline_s,
        "last_status": last.status, "last_error": last.error}
    evidence = [Evidence("probe", first.t, "outcome", first.outcome),
                Evidence("health", health[-1].t, "status", health[-1].status)]
    if last is not first:
        evidence.insert(1, Evidence("probe", last.t, "outcome", last.outcome))
    if newest is not None:
        sample, running, waiting = newest
        why += f"; no counter moved (running {_count(running)}, waiting {_count(waiting)})"
        details.update(running=running, waiting=waiting)
        evidence += [Evidence("metrics", sample.t, "running", running),
                     Evidence("metrics", sample.t, "waiting", waiting)]
    return [Verdict(NAME, max(last.t, health[-1].t), asked, why, tuple(evidence), details)]


def asked_at(probe: ProbeSample) -> float:
    """When the probe was sent: its answer time minus the time it waited."""
    waited = probe.latency_s if probe.latency_s is not None else probe.deadline_s
    return probe.t - waited


def _trailing_failures(probes: tuple[ProbeSample, ...], after: float | None) -> list[ProbeSample]:
    run: list[ProbeSample] = []
    for probe in reversed(probes):
        if not probe.failed or (after is not None and asked_at(probe) < after):
            break
        run.append(probe)
    run.reverse()
    return run


def _last_counter_movement(window: Window) -> float | None:
    """The time of the newest scrape whose progress counters differ from the scrape before (any engine)."""
    newest = None
    for track in tracks(window.metrics).values():
        moves = track.progress
        for i in range(len(moves) - 1, 0, -1):
            if moves[i] != moves[i - 1]:
                newest = track.times[i] if newest is None else max(newest, track.times[i])
                break
    return newest


def _newest_gauges(window: Window):
    """(newest scrape, running, waiting summed over its engines), or None without a good scrape."""
    good = window.good_metrics()
    if not good:
        return None
    sample = good[-1]
    running = waiting = None
    for state in sample.engines:
        running = _add(running, state.running)
        waiting = _add(waiting, state.waiting)
    return sample, running, waiting


def _add(total, value):
    if value is None:
        return total
    return value if total is None else total + value


def _count(value) -> str:
    return "?" if value is None else f"{value:g}"


def _problem(probe: ProbeSample) -> str:
    if probe.status is not None:
        return f"HTTP {probe.status}"
    return probe.error or "no answer"
