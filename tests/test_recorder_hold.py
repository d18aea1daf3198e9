"""A recorder told to hold its verdicts (guard draining the server it started) keeps recording and
neither starts nor ends a verdict: a server shutting down on request is not an incident."""

from __future__ import annotations

from servewatch.clock import VirtualClock
from servewatch.timeline.samples import HealthSample
from servewatch.watch.recorder import Recorder
from servewatch.watch.targets import callable_sources


def _recorder() -> Recorder:
    clock = VirtualClock()
    return Recorder(callable_sources(clock, 1.0, health=lambda: 200, metrics=lambda: ""), clock)


def _failing_health(recorder: Recorder, start: float, n: int) -> None:
    recorder.ring.extend([HealthSample(t=start + i, status=503, latency_s=0.01) for i in range(n)])


def test_held_verdicts_neither_start_nor_end_while_samples_are_still_recorded():
    held, free = _recorder(), _recorder()
    for recorder in (held, free):
        recorder.ring.extend([HealthSample(t=100.0, status=200, latency_s=0.01)])
    held.hold_verdicts()
    for recorder in (held, free):
        _failing_health(recorder, 101.0, 5)
    assert [f.verdict.name for f in free.detect()] == ["health_loss"]     # what the drain would have said
    assert held.detect() == [] and held.fired == []
    assert len(held.ring.window().health) == 6                            # ... though it was recorded


def test_a_verdict_held_at_the_drain_does_not_clear_either():
    recorder = _recorder()
    _failing_health(recorder, 100.0, 5)
    assert [f.verdict.name for f in recorder.detect()] == ["health_loss"]
    recorder.hold_verdicts()
    recorder.ring.extend([HealthSample(t=110.0 + i, status=200, latency_s=0.01) for i in range(3)])
    recorder.detect()
    assert recorder.cleared == []
