"""A slow disk must not stop the watch: in real time the bundle sink runs off the event loop, so the
sources keep polling while a bundle is being written."""

from __future__ import annotations

import asyncio
import threading

from servewatch.clock import RealClock
from servewatch.sinks.base import CallbackSink
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

    def slow_sink(fired):
        writing.set()
        # A disk that takes as long as the watch keeps probing: released only by further probes.
        released = polled_while_writing.wait(timeout=20)
        return "incident-bundle" if released else None

    clock = RealClock()
    sources = callable_sources(clock, 0.01, health=health, metrics=lambda: "# no engine here\n")
    recorder = Recorder(sources, clock, sinks=[CallbackSink(slow_sink)], stop_when=lambda fired: True)
    asyncio.run(recorder.run(duration=60))

    assert [f.verdict.name for f in recorder.fired] == ["health_loss"]
    assert recorder.fired[0].bundle == "incident-bundle", "no probe ran while the bundle was being written"
    assert len(probes_during_write) >= 3


def test_a_sink_that_raises_in_the_worker_is_counted_and_watching_goes_on():
    def failing_sink(fired):
        raise OSError(28, "No space left on device")

    def down():
        raise ConnectionRefusedError("down")

    clock = RealClock()
    sources = callable_sources(clock, 0.01, health=down, metrics=lambda: "# no engine here\n")
    recorder = Recorder(sources, clock, sinks=[CallbackSink(failing_sink)], stop_when=lambda fired: True)
    asyncio.run(recorder.run(duration=60))
    assert recorder.sink_failures == 1 and recorder.fired[0].bundle is None


class _BlockingProbe:
    """A /proc read that hangs (a vLLM worker holding its memory-map lock): released only once the
    health probe has run 5 more times, or after 20 s."""

    pid = 4242

    def __init__(self, released: threading.Event):
        self.released = released
        self.calls = 0

    def slot_limit(self):
        return None

    def snapshot(self, t):
        from servewatch.timeline.samples import ProcessSample

        self.calls += 1
        if self.calls == 1:
            self.freed_by_probes = self.released.wait(timeout=20)
        else:   # the hung read came back and the process source polls again: done
            self.loop.call_soon_threadsafe(self.recorder.stop)
        return ProcessSample(t=t, root_pid=self.pid, root_create_time=1.0, alive=True)


def test_health_keeps_polling_while_a_process_read_hangs():
    released = threading.Event()
    probes = []

    def health():
        probes.append(1)
        if len(probes) >= 5:
            released.set()
        return 200

    clock = RealClock()
    probe = _BlockingProbe(released)
    sources = callable_sources(clock, 0.01, health=health, metrics=lambda: "# no engine here\n", process_probe=probe)

    recorder = Recorder(sources, clock)

    async def run():
        probe.loop, probe.recorder = asyncio.get_running_loop(), recorder
        await recorder.run(duration=60)

    asyncio.run(run())
    assert probe.freed_by_probes, "no health probe ran while the process read hung"
