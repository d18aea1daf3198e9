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
        assert 0.8 <= longest <= (after - before) + 0.25, (longest, after - before)
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
