"""The machine's freezes, measured rather than assumed, and the case log CI prints.

A freeze meter (servewatch.lab.freeze) runs for the whole session. The drills of test_7_drill judge a timing
bound they missed against the longest freeze it measured from that fault's injection to the end of its
traffic: a miss no longer than the freeze runs those faults once more (`servewatch drill --only`), as does any
miss of a fault whose window the host spent a quarter or more of frozen (test_7_drill.FROZEN_SHARE); anything
else fails at once. Every case's longest freeze is written to the case log CI prints at the end.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from servewatch.lab.freeze import FreezeMeter

CASE_LOG_ENV = "SERVEWATCH_CASE_LOG"

_meter: FreezeMeter | None = None


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


def frozen(since: float, until: float | None = None) -> float:
    """How long [since, until] the host spent in the freezes the meter measured (each clipped to it)."""
    return _meter.frozen(since, until) if _meter is not None else 0.0


def record_case(nodeid: str, outcome: str, started: float, ended: float, *, rerun: bool, failure: str = "") -> None:
    """One line per case attempt in the file CI prints as a table (SERVEWATCH_CASE_LOG)."""
    path = os.environ.get(CASE_LOG_ENV)
    if not path:
        return
    line = {"case": nodeid, "outcome": outcome, "seconds": round(ended - started, 1),
            "longest_freeze_s": round(longest_freeze(started, ended), 2), "rerun": rerun, "failure": failure}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
