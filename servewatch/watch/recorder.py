"""The recorder loop: each source on its own cadence, samples into the ring, detectors over the window,
verdicts fired once each and cleared once each, told to every sink through one interface
(`sinks.base.Sink`): first the sinks that may block (off the event loop: a bundle, a delivery), then the
ones that run on it (printing, acting), which see the bundle written.

Two drivers over the same parts:
- `run()` — real time: one task per source, so a slow /metrics scrape never delays the next health
  probe; detection runs whenever new samples arrived. A heartbeat measures the recorder's own sampling
  (`timeline.gaps`): a gap between two wakes over twice the interval plus an allowance is a starved recorder,
  said on stderr at once, kept (`gaps`, and in every bundle over it), and noted on each verdict concluded
  across it (`detectors.starved`).
- `run_virtual()` — virtual time, deterministic and sleep-free: a schedule of due times; before each
  poll, `advance(t)` moves the world (e.g. an in-process simulator) to t.
"""

from __future__ import annotations

import asyncio
import heapq
import sys
from collections.abc import Callable, Sequence
from functools import partial

from servewatch.clock import Clock
from servewatch.detectors import DetectorConfig, ranks, registry, run_detectors
from servewatch.detectors.starved import note_gaps
from servewatch.detectors.verdict import RESTART, Verdict
from servewatch.sinks.base import Cleared, Fired, Sink, ended_by, on_loop
from servewatch.sources.base import Source
from servewatch.timeline.gaps import SamplingGaps, starved_words
from servewatch.timeline.ring import Ring
from servewatch.timeline.window import Window
from servewatch.watch.firing import Latch
from servewatch.watch.options import DEFAULT_HISTORY_S
from servewatch.watch.ticker import Ticker

SETTLE_FRACTION = 0.05    # of the detect interval: how long detection waits for the rest of a round
RECORDS_KEPT = 1000       # fired and cleared verdicts remembered (the newest; the sinks heard all)


class Recorder:
    def __init__(self, sources: Sequence[Source], clock: Clock, *, history_s: float = DEFAULT_HISTORY_S,
                 config: DetectorConfig | None = None, sinks: Sequence[Sink] = (), detect_interval: float | None = None,
                 stop_when: Callable[[Fired], bool] | None = None, tool: str = "watch"):
        if not sources:
            raise ValueError("a recorder needs at least one source")
        self.sources = list(sources)
        self.tool = tool                  # the command running it, as its messages name it
        self.clock = clock
        self.config = config or DetectorConfig()
        self.ring = Ring.for_history(history_s, {s.kind: s.interval for s in self.sources})
        for source in self.sources:
            bind = getattr(source, "bind_timeline", None)   # a source that reads the timeline (the probe)
            if bind is not None:
                bind(self.ring, partial(ranks.suspicion, config=self.config), reads=ranks.SUSPICION_READS)
            bind_verdicts = getattr(source, "bind_verdicts", None)   # a source that acts while one holds (collectives)
            if bind_verdicts is not None:
                bind_verdicts(self.restart_pending)
        self.latch = Latch()
        self.sinks = list(sinks)          # in the order they hear each verdict (the on-loop ones after the rest)
        self.detect_interval = detect_interval or min(s.interval for s in self.sources)
        self.gaps = SamplingGaps(min(s.interval for s in self.sources))   # its own sampling's (run() beats it)
        self.stop_when = stop_when
        self.fired: list[Fired] = []
        self.cleared: list[Cleared] = []
        # Heard on the event loop after the fired sinks, once per condition: (verdict, fired_now) when its
        # evidence first holds (at its firing, or later as probes agree): what acts (guard) listens here.
        self.evidence_listeners: list[Callable[[Verdict, bool], None]] = []
        self.detection_runs = 0
        self.samples_seen = 0
        self.sink_failures = 0
        self.stopped = False
        self.held = False
        self._new_samples: asyncio.Event | None = None
        self._stop_event: asyncio.Event | None = None

    def restart_pending(self) -> bool:
        """A verdict that only a restart helps (a stall, a stalled rank, a collective hang) holds now."""
        return any(found is not None and found.action == RESTART
                   for found in (registry.spec(v.name) for v in self.latch.active))

    # --- the parts both drivers share --------------------------------------------------------------

    async def poll(self, source: Source) -> None:
        try:
            samples = await source.poll()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - sources never raise; if one does, it must not stop the others
            print(f"servewatch {self.tool}: {source.kind} source failed: {type(exc).__name__}", file=sys.stderr)
            return
        self._took(source, samples)

    def _took(self, source: Source, samples) -> None:
        self.keep(source, samples)
        self.samples_seen += len(samples)
        if self._new_samples is not None and samples:
            self._new_samples.set()

    def _poll_now(self, source: Source, now: float | None = None) -> None:
        """`poll` of a source whose poll never waits (its `poll_now`), as a plain call from a shared timer."""
        try:
            samples = source.poll_now()
        except Exception as exc:  # noqa: BLE001 - as in poll: a failing source must not stop the others
            print(f"servewatch {self.tool}: {source.kind} source failed: {type(exc).__name__}", file=sys.stderr)
            return
        self._took(source, samples)

    def keep(self, source: Source, samples) -> None:
        """Put a source's samples on the timeline (a deployment's recorder: on its instance's own)."""
        self.ring.extend(samples)

    def detect(self) -> list[Fired]:
        """Run the detectors over the current window; tell every sink (in this thread) what started and
        what ended."""
        window, verdicts, started, ended, evidenced = self._judge()
        for cleared in ended:
            self._sink_cleared(cleared)
            self._clear(cleared)
        fired = [self._fire(verdict, self._sink_fired(verdict, window, verdicts), window, verdicts)
                 for verdict in started]
        self._evidence(evidenced, started)
        return fired

    async def detect_in_background(self) -> list[Fired]:
        """`detect` for the real-time loop: the sinks that may block (a bundle written and fsynced to a
        disk that may be slow) run in a worker thread, so the source tasks keep polling meanwhile."""
        window, verdicts, started, ended, evidenced = self._judge()
        loop = asyncio.get_running_loop()
        off_loop = any(not on_loop(sink) for sink in self.sinks)
        for cleared in ended:
            if off_loop:
                await loop.run_in_executor(None, self._sink_cleared, cleared)
            self._clear(cleared)
        fired = []
        for verdict in started:
            bundle = None
            if off_loop:
                bundle = await loop.run_in_executor(None, self._sink_fired, verdict, window, verdicts)
            fired.append(self._fire(verdict, bundle, window, verdicts))
        self._evidence(evidenced, started)
        return fired

    def hold_verdicts(self) -> None:
        """From now on no verdict starts or ends (the samples are still recorded): the server is being
        stopped on purpose (guard's drain), and what a shutdown looks like is not an incident."""
        self.held = True

    def _evidence(self, evidenced: Sequence[Verdict], started: Sequence[Verdict]) -> None:
        for verdict in evidenced:
            fired_now = any(verdict is s for s in started)
            for listener in self.evidence_listeners:
                listener(verdict, fired_now)

    def _judge(self) -> tuple[Window, list[Verdict], list[Verdict], list[Cleared], list[Verdict]]:
        window = self.ring.window()
        if self.held:
            return window, [], [], [], []
        verdicts = note_gaps(run_detectors(window, self.config), self.gaps.gaps)
        self.detection_runs += 1
        update = self.latch.update(verdicts)
        end = window.end if window.end is not None else self.clock.now()
        ended = [Cleared(verdict, end, ended_by(verdict, window)) for verdict in update.cleared]
        return window, verdicts, list(update.fired), ended, list(update.evidenced)

    def _fire(self, verdict: Verdict, bundle: str | None, window: Window, verdicts: Sequence[Verdict]) -> Fired:
        record = Fired(verdict, bundle)                 # kept without the window it was judged on
        self.fired.append(record)
        if len(self.fired) > 2 * RECORDS_KEPT:          # a watch runs for months: keep the newest
            del self.fired[:-RECORDS_KEPT]
        event = Fired(verdict, bundle, window, tuple(verdicts))
        for sink in self.sinks:
            if on_loop(sink):
                sink.on_fired(event)            # the command's own reaction: what it raises ends the run
        if self.stop_when is not None and self.stop_when(record):
            self.stop()
        return record

    def _clear(self, cleared: Cleared) -> None:
        self.cleared.append(cleared)
        if len(self.cleared) > 2 * RECORDS_KEPT:
            del self.cleared[:-RECORDS_KEPT]
        for sink in self.sinks:
            if on_loop(sink):
                sink.on_cleared(cleared)

    def _sink_fired(self, verdict: Verdict, window: Window, verdicts: Sequence[Verdict]) -> str | None:
        """The sinks that may block, in order; the first artifact one wrote (the bundle)."""
        event = Fired(verdict, None, window, tuple(verdicts))
        for sink in self.sinks:
            if not on_loop(sink):
                path = self._call(sink.on_fired, verdict.name, event)
                if path is not None and event.bundle is None:
                    event = Fired(verdict, str(path), window, event.verdicts)   # the later sinks see it
        return event.bundle

    def _sink_cleared(self, cleared: Cleared) -> None:
        for sink in self.sinks:
            if not on_loop(sink):
                self._call(sink.on_cleared, cleared.verdict.name, cleared)

    def _call(self, method, name: str, *args):
        try:
            return method(*args)
        except Exception as exc:  # noqa: BLE001 - a failing sink is counted; watching continues (fail open)
            self.sink_failures += 1
            print(f"servewatch {self.tool}: could not record {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None

    def close_sinks(self) -> None:
        for sink in self.sinks:
            self._call(sink.close, "close")

    def stop(self) -> None:
        """End the run (from an on-loop sink, a signal handler or stop_when)."""
        self.stopped = True
        if self._stop_event is not None:
            self._stop_event.set()

    # --- real time ----------------------------------------------------------------------------------

    async def run(self, duration: float | None = None, ticker: Ticker | None = None) -> None:
        """`ticker`: a timer shared by many recorders (serve's fleet): the heartbeat and the sources whose poll
        never waits (`poll_now`: the request-path probe's check) run from it as plain calls, on the same
        cadence, instead of a task each."""
        self._new_samples = asyncio.Event()
        self._stop_event = asyncio.Event()
        if self.stopped:
            self._stop_event.set()
        timed: list[Callable[[], None]] = []      # what unregisters each check from the shared timer
        tasks = []
        for source in self.sources:
            if ticker is not None and hasattr(source, "poll_now"):
                self._poll_now(source)
                timed.append(ticker.every(source.interval, partial(self._poll_now, source)))
            elif ticker is not None and hasattr(source, "idle") and source.idle():
                timed.append(self._while_idle(source, ticker, tasks))
            else:
                tasks.append(asyncio.create_task(self._source_loop(source)))
        if ticker is not None:
            self._beat(self.clock.now())
            timed.append(ticker.every(self.gaps.interval_s, self._beat))
        else:
            tasks.append(asyncio.create_task(self._heartbeat()))
        detector = asyncio.create_task(self._detect_loop())
        stop = asyncio.create_task(self._stop_event.wait())
        try:
            done, _ = await asyncio.wait({stop, detector}, timeout=duration, return_when=asyncio.FIRST_COMPLETED)
            if detector in done and detector.exception() is not None:
                raise detector.exception()
        finally:
            for remove in timed:
                remove()
            for task in [*tasks, detector, stop]:
                task.cancel()
            await asyncio.gather(*tasks, detector, stop, return_exceptions=True)
            for source in self.sources:
                cancel_pending = getattr(source, "cancel_pending", None)   # e.g. a probe still waiting
                if cancel_pending is not None:
                    cancel_pending()
                close_connections = getattr(source, "close_connections", None)   # idle keep-alive ones
                if close_connections is not None:
                    await close_connections()
            self._new_samples = None
            self._stop_event = None

    def _while_idle(self, source: Source, ticker: Ticker, tasks: list[asyncio.Task]) -> Callable[[], None]:
        """A source whose poll asks nothing and returns nothing while it is `idle()` (the slot listing of an engine
        that has none) is only looked at from the shared timer, on its cadence; once it is not idle it polls on a
        task of its own, as without the timer. What unregisters it."""
        def check(now: float) -> None:
            if not source.idle():
                remove()
                tasks.append(asyncio.create_task(self._source_loop(source)))
        remove = ticker.every(source.interval, check)
        return remove

    async def _source_loop(self, source: Source) -> None:
        due = self.clock.now()
        while True:
            await self.poll(source)
            due += source.interval
            now = self.clock.now()
            if due < now:  # the poll overran its slot(s): skip them rather than burst
                due = now
            await self.clock.sleep(due - now)

    async def _heartbeat(self) -> None:
        """Wake every sampling interval and note the time since the last wake: a starved recorder (its process
        not run, or its loop held) shows as a gap, said once on stderr as it ends."""
        while True:
            self._beat(self.clock.now())
            await self.clock.sleep(self.gaps.interval_s)

    def _beat(self, now: float) -> None:
        gap = self.gaps.beat(now)
        if gap is not None:
            print(f"servewatch {self.tool}: {starved_words(gap, self.gaps.interval_s)}", file=sys.stderr, flush=True)

    async def _detect_loop(self) -> None:
        rested = None         # when the rest of half a detect interval after the last detection ends
        while not self.stopped:
            await self._new_samples.wait()
            # Sources polled at the same moment answer within moments of each other: judge them together
            # (one detection per round instead of one per source), and at most once per half a detect interval:
            # at the end of that rest or when the samples came, whichever is later, plus the settling time. One
            # sleep for both (a wake-up fewer a round than a sleep each).
            now = self.clock.now()
            start = now if rested is None else max(now, rested)
            await self.clock.sleep(start + self.detect_interval * SETTLE_FRACTION - now)
            self._new_samples.clear()
            await self.detect_in_background()
            rested = self.clock.now() + self.detect_interval / 2

    # --- virtual time -------------------------------------------------------------------------------

    async def run_virtual(self, duration: float, advance: Callable[[float], None] | None = None) -> None:
        """Poll every source at its due times for `duration` virtual seconds, detecting every
        detect_interval. `advance(t)` must bring the world (and the clock) to t; without it the clock
        is set to t (it needs `set`, like VirtualClock)."""
        start = self.clock.now()
        end = start + duration
        schedule = [(start, i) for i in range(len(self.sources))]
        heapq.heapify(schedule)
        next_detect = start
        while schedule and not self.stopped:
            due, i = heapq.heappop(schedule)
            if due > end:
                break
            if advance is not None:
                advance(due)
            if self.clock.now() < due:
                self.clock.set(due)
            source = self.sources[i]
            await self.poll(source)
            heapq.heappush(schedule, (due + source.interval, i))
            instant_done = schedule[0][0] > due
            if instant_done and due >= next_detect:
                self.detect()
                next_detect = due + self.detect_interval
