"""Timing bounds on a real engine, with the machine's freezes measured rather than assumed.

A freeze meter (servewatch.lab.freeze) runs for the whole session. A detection is held to the bound its
own verdict implies — the threshold it reports (checked against the documented defaults pinned below),
plus two scrape cadences, plus the time the meter measured the host frozen between the fault and the verdict:

    line = expect_verdict(watcher, "alive_health_ok_no_progress", after=stopped_at, cadence_s=0.5,
                          threshold_s=stall_threshold)

A bound missed while the meter saw a freeze long enough to explain the overshoot raises
`FreezeExplainedMiss`, which CI retries once (pytest-rerunfailures `--only-rerun FreezeExplainedMiss`);
a bound missed with no such freeze raises a plain AssertionError and fails at once. Both messages carry
the figures, and every case's longest freeze is written to the case log CI prints at the end.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from servewatch.lab.freeze import FreezeMeter

# The stall threshold's documented defaults (README, "Verdicts"): max(2 s, 4 x the recent cadence), at
# most 60 s. Pinned here, not read from the code, so a changed default fails the real-engine cases.
STALL_FLOOR_S = 2.0
STALL_K = 4.0
STALL_CEILING_S = 60.0

SHUTDOWN_LOG_WAIT_S = 2.0   # documented default: a vanished engine waits this long for a shutdown line

CASE_LOG_ENV = "SERVEWATCH_CASE_LOG"

_meter: FreezeMeter | None = None


class FreezeExplainedMiss(AssertionError):
    """A timing bound missed while the freeze meter measured a freeze at least as long as the overshoot."""


def start_meter(path: Path) -> FreezeMeter:
    global _meter
    if _meter is None:
        _meter = FreezeMeter(path).start()
        deadline = time.monotonic() + 60
        while not _meter.measuring() and time.monotonic() < deadline:   # its first line lands in a file
            time.sleep(0.05)
    return _meter


def stop_meter() -> None:
    if _meter is not None:
        _meter.stop()


def longest_freeze(since: float, until: float | None = None) -> float:
    return _meter.longest(since, until) if _meter is not None else 0.0


def frozen_time(since: float, until: float | None = None) -> float:
    """The time within [since, until] the meter spent frozen (every gap, clipped)."""
    return _meter.frozen(since, until) if _meter is not None else 0.0


def check_within(what: str, took_s: float, bound_s: float, *, since: float) -> None:
    """`took_s` (measured from monotonic `since`) must not exceed `bound_s` plus the time the meter measured
    the host frozen meanwhile (every freeze in the interval: a detection delayed by two is delayed by both)."""
    until = since + took_s
    frozen = frozen_time(since, until)
    if took_s > bound_s + frozen:   # the freezes are already in the bound: nothing left to explain it
        raise AssertionError(f"{what}: took {took_s:.2f} s, bound {bound_s:.2f} s + {frozen:.2f} s frozen "
                             f"meanwhile (longest freeze {longest_freeze(since, until):.2f} s) — not explained "
                             f"by a freeze")


def expect_verdict(watcher, name: str, *, after: float, bound_s: float, wait_s: float | None = None, where=None):
    """The first `name` verdict after monotonic `after`, arrived within `bound_s` plus the freeze measured
    meanwhile. Waits up to `wait_s` (default: twice the bound, at least 10 s) so a late verdict's figure is
    still seen; a verdict that never came inside the wait is a miss a freeze can explain only if the
    meter saw one at least as long as the wait beyond the bound."""
    wait_s = max(10.0, 2 * bound_s) if wait_s is None else wait_s
    assert wait_s > bound_s, f"waiting {wait_s} s for a verdict bound to {bound_s} s cannot tell late from never"
    line = watcher.wait_for(name, timeout_s=max(0.0, after + wait_s - time.monotonic()), after=after, where=where)
    if line is None:
        freeze = frozen_time(after)
        message = (f"no {name} within {wait_s:.1f} s (bound {bound_s:.2f} s); frozen {freeze:.2f} s meanwhile "
                   f"(longest freeze {longest_freeze(after):.2f} s); {watcher.describe()}")
        if freeze >= wait_s - bound_s:
            raise FreezeExplainedMiss(message + " — explained by the freeze: retried once")
        raise AssertionError(message + " — not explained by a freeze")
    check_within(f"{name} detection", line.arrived - after, bound_s, since=after)
    return line


def stall_bound(line, cadence_s: float, *, stopped_at: float | None = None) -> float:
    """The bound a stall verdict implies: its threshold — which must be the documented
    max(STALL_FLOOR_S, STALL_K x basis) from the basis it reports — plus two scrape cadences. Given the
    (monotonic) time of the stop, plus how long after it the last step in flight landed on the counters:
    such a step still reaches them through the engine core and the API server a moment later, so the
    quiet time the threshold counts may begin after the stop (the verdict's own onset says when)."""
    details = line.data.get("details") or {}
    threshold = details.get("threshold_s")
    assert isinstance(threshold, (int, float)), f"the stall verdict reports no threshold_s: {line.data}"
    basis = max(details.get("longest_gap_s") or 0.0, details.get("scrape_gap_s") or 0.0)
    expected = STALL_CEILING_S if details.get("engine_busy") else min(STALL_CEILING_S, max(STALL_FLOOR_S, STALL_K * basis))
    assert abs(threshold - expected) <= 1e-6, (
        f"stall threshold {threshold:.3f} s is not the documented max({STALL_FLOOR_S:g} s, {STALL_K:g} x "
        f"{basis:.3f} s recent cadence) = {expected:.3f} s")
    landed = 0.0 if stopped_at is None else landed_after(line, stopped_at)
    return threshold + 2 * cadence_s + landed


def landed_after(line, stopped_at: float) -> float:
    """Seconds from the stop (monotonic) to the verdict's onset (its last counter movement), 0 if before."""
    stop_epoch = stopped_at + (time.time() - time.monotonic())
    return max(0.0, _epoch(line.data["onset"]) - stop_epoch)


def expect_stall(watcher, *, after: float, cadence_s: float, wait_s: float = 20.0,
                 name: str = "alive_health_ok_no_progress", where=None):
    """The stall verdict after `after`, within the bound it implies (`stall_bound`) plus the freeze measured
    meanwhile. A stall that never came is judged against the floor's bound."""
    line = watcher.wait_for(name, timeout_s=max(0.0, after + wait_s - time.monotonic()), after=after, where=where)
    if line is None:
        expect_verdict(watcher, name, after=after, bound_s=STALL_FLOOR_S + 2 * cadence_s, wait_s=wait_s, where=where)
    bound = stall_bound(line, cadence_s, stopped_at=after)
    check_within(f"{name} detection (threshold {line.data['details']['threshold_s']:.2f} s + 2 x {cadence_s:g} s "
                 f"cadence + {landed_after(line, after):.2f} s until the last step in flight landed)",
                 line.arrived - after, bound, since=after)
    return line


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def record_case(nodeid: str, outcome: str, started: float, ended: float, *, rerun: bool, failure: str = "") -> None:
    """One line per case attempt in the file CI prints as a table (SERVEWATCH_CASE_LOG)."""
    path = os.environ.get(CASE_LOG_ENV)
    if not path:
        return
    line = {"case": nodeid, "outcome": outcome, "seconds": round(ended - started, 1),
            "longest_freeze_s": round(longest_freeze(started, ended), 2), "rerun": rerun, "failure": failure}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
