"""crash_loop on hand-built windows: a server that `watch URL` sees restart (its counters reset) again and
again is one crash loop, not a restart verdict per start."""

from __future__ import annotations

from servewatch.detectors import DetectorConfig, run_detectors
from tests.timeline_builders import Timeline


def names(timeline: Timeline) -> set[str]:
    return {v.name for v in run_detectors(timeline.window(), DetectorConfig())}


def restarting(resets: int, every: int = 20) -> Timeline:
    tl = Timeline(interval=1.0, with_process=False).ticks(every, running=2, prompt=10)
    for _ in range(resets):
        tl.tick(running=2, prompt=10, reset=True).ticks(every - 1, running=2, prompt=10)
    return tl


def test_three_counter_resets_in_three_minutes_are_one_crash_loop():
    tl = restarting(3)
    found = {v.name: v for v in run_detectors(tl.window(), DetectorConfig())}
    assert "crash_loop" in found and "target_restarted" not in found
    assert found["crash_loop"].details["episodes"] == 3 and "counters reset" in found["crash_loop"].why


def test_two_restarts_are_still_restarts():
    assert "crash_loop" not in names(restarting(2)) and "target_restarted" in names(restarting(2))


def test_restarts_spread_over_more_than_the_window_are_not_a_loop():
    tl = restarting(3, every=70)            # 70 s apart: two of them in any 180 s
    assert "crash_loop" not in names(tl)


def test_the_count_and_window_are_settings():
    tl = restarting(2)
    assert "crash_loop" in {v.name for v in run_detectors(tl.window(), DetectorConfig(crash_loop_count=2))}
