"""A crash loop across guard's own restarts: the ledger of lives, the decision, and guard end to end
restarted three times around a server that fails at every start."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servewatch.actions.lives import Life, crash_loop, describe, load, pins, save
from servewatch.bundle.writer import DEFAULT_KEEP, BundleWriter, pinned

GUARD = [sys.executable, "-m", "servewatch", "guard"]


def life(ended, status=1, **kw):
    return Life(started=ended - 5, ended=ended, exit_status=status, why=f"the server exited {status}", **kw)


def test_three_failures_within_the_window_are_a_loop_starting_at_the_first():
    lives = [life(100, bundle="b1", first_verdict="process_exit"), life(160), life(220)]
    run = crash_loop(lives, count=3, window_s=180)
    assert run == lives
    assert "3 failed starts in 120 s" in describe(run) and "b1 is pinned" in describe(run)


@pytest.mark.parametrize("lives, why", [
    ([life(100), life(160)], "two failures are not three"),
    ([life(10), life(160), life(220)], "the first is 210 s before the newest: outside 180 s"),
    ([life(100), life(130, status=0), life(160), life(220)], "a clean exit between ends the run"),
    ([life(100), life(160), life(220, status=0)], "the newest life was clean"),
    ([life(100), life(160), life(220, status=143, stopped=True)], "the newest was asked to stop (a drain)"),
])
def test_what_is_not_a_crash_loop(lives, why):
    assert crash_loop(lives, count=3, window_s=180) is None, why


def test_the_ledger_round_trips_keeps_the_newest_and_a_broken_one_is_one_line(tmp_path):
    path = tmp_path / "state" / "lives.json"
    assert load(path) == ([], None)
    lives = [life(float(i)) for i in range(40)]
    assert save(path, lives) is None
    assert load(path) == (lives[-32:], None)
    path.write_text("{not json")
    got, problem = load(path)
    assert got == [] and str(path) in problem and "unreadable guard ledger" in problem
    (tmp_path / "a-file").write_text("")
    assert "cannot write the guard ledger" in save(tmp_path / "a-file" / "lives.json", lives)


def test_guard_restarted_around_a_failing_server_reports_one_crash_loop_and_pins_the_first_bundle(tmp_path):
    out, ledger = tmp_path / "out", tmp_path / "lives.json"
    failing = [sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit(7)"]

    # How long three guard runs take is the machine's business (40 s each on a busy 2-core VM): the crash-loop
    # window is set far beyond any run, so the verdict rests on the three failures, never on the wall clock
    # (the window itself is tested above with explicit times). The timeout only stops a hung run.
    def run_guard():
        proc = subprocess.run([*GUARD, "http://127.0.0.1:9", "--interval", "0.2", "--json", "--out", str(out),
                               "--lives", str(ledger), "--set", "crash_loop.window_s=86400", "--", *failing],
                              capture_output=True, text=True, timeout=900)
        return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()]

    runs = [run_guard()]
    first_bundle = next(line["bundle"] for line in runs[0][1] if line.get("verdict") == "process_exit")
    # Bundles newer than the first failure's, more than --out keeps (4): without a hold on the first
    # failure's bundle, the next run's first write rotates it out before any loop is known (a loaded
    # machine makes several bundles per failed life and did exactly this).
    for n in range(DEFAULT_KEEP):
        shutil.copytree(first_bundle, out / f"incident-20990101T00000{n}Z-process_exit-0000000{n}")
    assert pinned(out) == {Path(first_bundle).name}
    runs += [run_guard() for _ in range(2)]
    assert [code for code, _ in runs] == [7, 7, 7]          # the orchestrator still sees the server's own status
    assert not [line for _, lines in runs[:2] for line in lines if line.get("guard") == "crash_loop"]
    loop = [line for line in runs[2][1] if line.get("guard") == "crash_loop"]
    assert len(loop) == 1 and loop[0]["failures"] == 3 and loop[0]["first_exit"] == 7
    assert loop[0]["first_bundle"] == first_bundle.rsplit("/", 1)[-1]
    assert pinned(out) == {loop[0]["first_bundle"]}
    # the churn's later bundles rotate; the first failure's stays
    BundleWriter(out, keep=1)._rotate()
    left = {p.name for p in BundleWriter(out).bundles()}
    assert loop[0]["first_bundle"] in left and len(left) == 2


@pytest.mark.parametrize("history, hold, release", [
    ([life(100, bundle="b1")], {"b1"}, set()),
    ([life(100, bundle="b1"), life(160, bundle="b2")], {"b1", "b2"}, set()),
    ([life(100, bundle="b1"), life(160, bundle="b2"), life(220, bundle="b3")], {"b1"}, {"b2", "b3"}),
    ([life(100, bundle="b1", loop_first=True), life(160, bundle="b2"), life(220, bundle="b3"),
      life(280, status=0, bundle="b4")], set(), {"b2", "b3", "b4"}),
    ([life(10, bundle="b1"), life(200, bundle="b2")], {"b2"}, {"b1"}),
])
def test_every_failure_that_may_start_a_loop_is_held_and_released_once_settled(history, hold, release):
    """The bundles of a streak are held until the loop is said (then only its first stays) or a clean
    life or the window ends the streak; a loop's first is never released."""
    assert pins(history, count=3, window_s=180) == (hold, release)
