"""CI's retry policy for the real-engine drills (tests/conformance/test_7_drill.py): the faults of a drill run
once more, alone, only when every expectation it missed is a time bound overshot by no more than the longest
freeze the meter measured from that fault's injection to the end of its traffic, or belongs to a fault whose
window the host spent a quarter or more of frozen; a verdict that never fired, a wrong /health, a bound
overshot by more than the freeze, with the host frozen for less than that: the drill fails at once."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "conformance"))

import lab_timing  # noqa: E402
import test_7_drill as drill  # noqa: E402


class Meter:
    """One freeze of `freeze` seconds inside every window asked about (clipped to it)."""

    def __init__(self, freeze: float):
        self.freeze = freeze

    def longest(self, since, until=None) -> float:
        return self.freeze

    def frozen(self, since, until=None) -> float:
        return min(self.freeze, until - since)


def _doc(*faults) -> dict:
    """drill.json's faults and plan as `servewatch drill` writes them: each fault's checks made by the drill's
    own expectation code (servewatch.drill.expect), so that the policy reads the words the drill writes."""
    from servewatch.drill.expect import check
    from servewatch.drill.plan import plan_from_dict
    from servewatch.drill.run import StepResult

    plan = plan_from_dict({"name": "p", "target": {"engine": "sim"},
                           "faults": [{"kind": "stop", "name": f"f{i}", "hold_s": 10, "observe_s": 6, "expect": e}
                                      for i, (e, _) in enumerate(faults, 1)]})
    docs = []
    for i, (step, (_, measured)) in enumerate(zip(plan.steps, faults), 1):
        result = StepResult(index=i, kind=step.kind, name=step.name, injected_at=time.time() - 60, **measured)
        result.checks = check(step.expect, result)
        docs.append(result.to_json())
    return {"faults": docs, "plan": plan.to_json()}


LATE_STALL = ({"fire": {"alive_health_ok_no_progress": 5}}, {"detected": {"alive_health_ok_no_progress": 7.0}})
NEVER = ({"fire": {"alive_health_ok_no_progress": 5}}, {"detected": {}})
LATE_RECOVERY = ({"recover_within_s": 20}, {"recovery_s": 23.5})
OFF_THRESHOLD = ({"fire_by_threshold": {"startup_stalled": 2.5}},
                 {"detected": {"startup_stalled": 34.0}, "thresholds": {"startup_stalled": 30.0}})
MET = ({"fire": {"engine_dead": 3}}, {"detected": {"engine_dead": 0.4}})
# a bound derived in the run: 2 x 12 s + 3 s = 27 s, recovered after 30 s (3 s over)
LATE_RECOVERY_IN_REQUESTS = ({"recover_within": {"requests": 2, "plus_s": 3}},
                             {"recovery_s": 30.0, "impact": {"e2e_outside_s": 12.0}})


@pytest.fixture
def meter(monkeypatch):
    def set_freeze(seconds: float) -> None:
        monkeypatch.setattr(lab_timing, "_meter", Meter(seconds))
    return set_freeze


@pytest.mark.parametrize("faults, freeze, explained", [
    ((LATE_STALL,), 2.5, True),              # 2 s over its bound, a 2.5 s freeze meanwhile
    ((LATE_STALL,), 1.5, False),             # 2 s over, 1.5 s frozen: not explained
    ((NEVER,), 7.0, False),                  # never fired, the host frozen 7 s of the 31 s window: the code's
    ((NEVER,), 8.0, True),                   # ... 8 s of 31 s (over a quarter): the host's, run again
    ((NEVER,), 60.0, True),                  # ... the whole window
    ((LATE_RECOVERY, MET), 4.0, True),       # the met fault is not judged
    ((LATE_RECOVERY, LATE_STALL), 2.5, False),   # one of two overshoots (3.5 s) beyond the freeze
    ((OFF_THRESHOLD,), 2.0, True),           # 1.5 s past threshold + allowance, 2 s frozen
    ((OFF_THRESHOLD,), 1.0, False),
    ((LATE_RECOVERY_IN_REQUESTS,), 3.5, True),
    ((LATE_RECOVERY_IN_REQUESTS,), 2.5, False),
])
def test_a_drill_runs_missed_faults_again_only_when_a_freeze_explains_every_miss(meter, faults, freeze, explained):
    meter(freeze)
    reason = drill._freeze_explained(_doc(*faults))
    assert bool(reason) is explained, reason
    if explained:
        assert reason.startswith("explained by the freezes measured meanwhile") and "freeze" in reason


def test_a_wrong_health_answer_is_no_freeze_under_a_quarter_of_its_window(meter):
    meter(7.0)                               # of the 31 s window
    health = ({"health": "ok"}, {"health": {"503": 4}})
    assert drill._freeze_explained(_doc(health)) == ""
    meter(8.0)
    assert "the host froze 8.0 s of its 31 s window" in drill._freeze_explained(_doc(health))
