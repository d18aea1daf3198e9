"""The freeze meter sees a stop of its own process as a gap of that length, and only inside its window."""

import os
import signal
import time

from servewatch.lab.freeze import FreezeMeter


def _wait_for_gap(meter: FreezeMeter, timeout_s: float = 10.0) -> list[tuple[float, float]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:   # the gap lands in a file; there is no event to wait on
        gaps = meter.gaps()
        if gaps:
            return gaps
        time.sleep(0.02)
    return []


def test_a_stopped_meter_records_the_stop_as_a_freeze(tmp_path):
    with FreezeMeter(tmp_path / "freezes.txt") as meter:
        deadline = time.monotonic() + 30
        while not meter.measuring() and time.monotonic() < deadline:   # its first line is in a file
            time.sleep(0.01)
        assert meter.measuring()
        before = time.monotonic()
        os.kill(meter.proc.pid, signal.SIGSTOP)
        time.sleep(0.8)   # the freeze being measured, not a wait for an event
        os.kill(meter.proc.pid, signal.SIGCONT)
        after = time.monotonic()
        gaps = _wait_for_gap(meter)
        assert gaps, "no gap recorded for a 0.8 s stop"
        longest = meter.longest(before, after)
        # the file holds milliseconds: its two rounded ends may shorten the gap by up to 1 ms (a CI run: 0.7999...)
        assert 0.8 - 0.001 <= longest <= (after - before) + 0.25, (longest, after - before)
        # A window that ends before the stop does not see it (other, shorter gaps may be there).
        stop_gap = max((g for g in gaps if g[1] >= before), key=lambda g: g[1] - g[0])
        assert stop_gap[0] > before - 0.3
        earlier = [end - start for start, end in meter.gaps() if end < stop_gap[0] - 0.01]
        assert meter.longest(0.0, stop_gap[0] - 0.01) == max(earlier, default=0.0)
        assert meter.alive()
    assert not meter.alive()


def test_no_file_means_no_freeze(tmp_path):
    meter = FreezeMeter(tmp_path / "never-started.txt")
    assert meter.longest(0.0) == 0.0 and meter.gaps() == []


def test_the_time_frozen_adds_every_gap_clipped_to_the_window(tmp_path):
    # The gaps a real DP=2 vLLM case met in CI (monotonic seconds): frozen 13.29 s of a 14.77 s detection,
    # the longest gap 5.15 s.
    path = tmp_path / "freezes.txt"
    path.write_text("# measuring from 28800.000\n"
                    "28866.368 28870.315\n28871.369 28876.518\n28876.518 28878.784\n28878.834 28879.663\n"
                    "28879.864 28880.702\n28880.789 28881.720\n28881.720 28884.996\n28885.146 28888.017\n")
    meter = FreezeMeter(path)
    since, until = 28870.367, 28870.367 + 14.774
    assert round(meter.longest(since, until), 2) == 5.15
    assert round(meter.frozen(since, until), 2) == 13.29
    # clipped: half of the first gap inside the window counts half
    assert round(meter.frozen(28868.0, 28871.0), 3) == round(28870.315 - 28868.0, 3)
    assert meter.frozen(0.0, 1.0) == 0.0
