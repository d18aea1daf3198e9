"""CI's retry policy for real-engine cases, run through pytest and pytest-rerunfailures exactly as .ci/run
runs them: a missed timing bound is retried once only when the freeze meter measured a freeze long enough
to explain it; any other failure fails at once; a freeze inside a detection's window widens its bound."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CONFORMANCE = Path(__file__).parent / "conformance"
CI_RUN = Path(__file__).parents[1] / ".ci" / "run"

CASES = '''
import sys, time
sys.path.insert(0, {conformance!r})
import lab_timing

class Meter:
    def __init__(self, freeze): self.freeze = freeze
    def longest(self, since, until=None): return self.freeze
    def frozen(self, since, until=None): return self.freeze   # one freeze: frozen as long as the longest

class NeverWatcher:
    def wait_for(self, name, timeout_s, after=0.0, where=None): return None
    def describe(self): return "no verdicts"

class Line:
    def __init__(self, arrived, data): self.arrived, self.data = arrived, data

class LateWatcher:
    def __init__(self, late_s): self.late_s = late_s
    def wait_for(self, name, timeout_s, after=0.0, where=None): return Line(after + self.late_s, {{}})
    def describe(self): return ""

def test_missed_under_a_long_freeze():
    lab_timing._meter = Meter(30.0)
    lab_timing.expect_verdict(NeverWatcher(), "stall", after=time.monotonic(), bound_s=3.0, wait_s=4.0)

def test_missed_with_no_freeze():
    lab_timing._meter = Meter(0.1)
    lab_timing.expect_verdict(NeverWatcher(), "stall", after=time.monotonic(), bound_s=3.0, wait_s=4.0)

def test_late_within_the_bound_plus_the_freeze():
    lab_timing._meter = Meter(5.0)
    lab_timing.expect_verdict(LateWatcher(7.0), "stall", after=time.monotonic(), bound_s=3.0)

def test_late_beyond_the_bound_plus_the_freeze():
    lab_timing._meter = Meter(1.0)
    lab_timing.expect_verdict(LateWatcher(7.0), "stall", after=time.monotonic(), bound_s=3.0)

def test_a_logic_failure():
    assert 1 == 2
'''


def _only_rerun_pattern() -> str:
    match = re.search(r'--only-rerun "([^"]+)"', CI_RUN.read_text())
    assert match, ".ci/run no longer retries by --only-rerun"
    return match.group(1)


def test_ci_retries_only_a_freeze_explained_miss(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES.format(conformance=str(CONFORMANCE)))
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--reruns", "1",
                           "--only-rerun", _only_rerun_pattern(), str(tmp_path / "test_cases.py")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = done.stdout
    attempts = re.findall(r"::(\w+) (PASSED|FAILED|RERUN)", out)
    outcome = dict(attempts)   # the last attempt of each
    reruns = [name for name, status in attempts if status == "RERUN"]
    assert reruns == ["test_missed_under_a_long_freeze"], out     # retried once, nothing else retried
    assert outcome["test_missed_under_a_long_freeze"] == "FAILED"  # the fake freeze is there on the retry too
    assert outcome["test_missed_with_no_freeze"] == "FAILED"
    assert outcome["test_late_within_the_bound_plus_the_freeze"] == "PASSED"
    assert outcome["test_late_beyond_the_bound_plus_the_freeze"] == "FAILED"
    assert outcome["test_a_logic_failure"] == "FAILED"
    assert "explained by the freeze: retried once" in out and "not explained by a freeze" in out
    assert done.returncode == 1
