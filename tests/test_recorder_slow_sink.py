"""A slow disk must not stop the watch: in real time the bundle sink runs off the event loop, so the
sources keep polling while a bundle is being written."""

from __future__ import annotations

import asyncio
import threading

from servewatch.clock import RealClock
from servewatch.watch.recorder import Recorder
from servewatch.watch.targets import callable_sources


def test_sources_keep_polling_while_a_bundle_is_written():
    writing = threading.Event()
    polled_while_writing = threading.Event()
    probes_during_write = []

    def health():
        if writing.is_set() and not polled_while_writing.is_set():
            probes_during_write.append(1)
            if len(probes_during_write) >= 3:
                polled_while_writing.set()
        raise ConnectionRefusedError("down")        # the target is down: health_loss fires after 3 probes

    def slow_sink(verdict, window, verdicts):
        writing.set()
        # A disk that takes as long as the watch keeps probing: released only by further probes.
        released = polled_while_writing.wait(timeout=20)
        return "incident-bundle" if released else None

    clock = RealClock()
    sources = callable_sources(clock, 0.01, health=health, metrics=lambda: "# no engine here\n")
    recorder = Recorder(sources, clock, on_verdict=slow_sink, stop_when=lambda fired: True)
    asyncio.run(recorder.run(duration=60))

    assert [f.verdict.name for f in recorder.fired] == ["health_loss"]
    assert recorder.fired[0].bundle == "incident-bundle", "no probe ran while the bundle was being written"
    assert len(probes_during_write) >= 3


def test_a_sink_that_raises_in_the_worker_is_counted_and_watching_goes_on():
    def failing_sink(verdict, window, verdicts):
        raise OSError(28, "No space left on device")

    def down():
        raise ConnectionRefusedError("down")

    clock = RealClock()
    sources = callable_sources(clock, 0.01, health=down, metrics=lambda: "# no engine here\n")
    recorder = Recorder(sources, clock, on_verdict=failing_sink, stop_when=lambda fired: True)
    asyncio.run(recorder.run(duration=60))
    assert recorder.sink_failures == 1 and recorder.fired[0].bundle is None
