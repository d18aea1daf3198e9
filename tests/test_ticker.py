"""serve's one timer for every target's 1 s checks (watch.ticker, issue 54): each check keeps its cadence and its
phase, runs once per turn even after a held loop, stops when unregistered, and a failing one stops no other; a
recorder run on it samples and measures its own starvation as one on its own tasks does, with no task for them."""

from __future__ import annotations

import asyncio
import time

import pytest

from servewatch.clock import RealClock, VirtualClock
from servewatch.sources.probe import ProbeAnswer, ProbeSource
from servewatch.timeline.samples import SERVED
from servewatch.watch.ticker import SLOTS, Ticker


async def _until(predicate, steps: int = 100_000) -> None:
    """Yield to the loop until `predicate()` holds (on a virtual clock time moves only as the wheel sleeps)."""
    for _ in range(steps):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def test_each_check_keeps_its_cadence_and_its_own_phase_and_stops_when_removed():
    async def main():
        clock = VirtualClock(start=1000.03)
        ticker = Ticker(clock)
        a, b = [], []
        remove_a = ticker.every(1.0, a.append)
        clock.set(1000.52)
        ticker.every(1.0, b.append)
        assert ticker.registered == 2
        await _until(lambda: len(a) >= 3 and len(b) >= 3)
        # a registered at 1000.03 runs at 1001.0, 1002.0, ...; b at 1000.52: 1001.5, 1002.5, ... (its phase kept
        # to the slot: a twentieth of the cadence)
        assert a[:3] == pytest.approx([1001.0, 1002.0, 1003.0])
        assert b[:3] == pytest.approx([1001.5, 1002.5, 1003.5])
        remove_a()
        remove_a()                                   # idempotent
        seen = len(a)
        await _until(lambda: len(b) >= 6)
        assert len(a) == seen and ticker.registered == 1
        ticker.close()
        assert ticker.registered == 0

    asyncio.run(main())
    assert SLOTS == 20


def test_a_held_loop_runs_each_overdue_check_once_and_a_failing_check_stops_no_other(capsys):
    async def main():
        clock = VirtualClock(start=2000.0)
        ticker = Ticker(clock, tool="serve")
        calls: dict[str, list[float]] = {"a": [], "b": []}

        def failing(now: float) -> None:
            raise RuntimeError("broken")

        ticker.every(1.0, calls["a"].append)
        ticker.every(1.0, failing)
        clock.set(2000.4)
        ticker.every(1.0, calls["b"].append)
        await _until(lambda: len(calls["a"]) >= 1 and len(calls["b"]) >= 1)
        a, b = len(calls["a"]), len(calls["b"])
        clock.advance(3.3)                           # the loop held 3.3 s: three turns went by unrun
        await _until(lambda: len(calls["a"]) > a and len(calls["b"]) > b)
        assert len(calls["a"]) == a + 1 and len(calls["b"]) == b + 1      # once each, not once per turn missed
        assert calls["a"][-1] == calls["b"][-1]      # both at once, on the wake after the hold
        await _until(lambda: len(calls["b"]) >= b + 3)
        after = calls["b"][b + 1:]                   # then back on its own phase (x.4 s) and cadence
        assert [round((t - 2000.4) % 1.0, 6) % 1.0 for t in after] == [0.0] * len(after)
        assert [y - x for x, y in zip(after, after[1:])] == pytest.approx([1.0] * (len(after) - 1))
        ticker.close()

    asyncio.run(main())
    said = [line for line in capsys.readouterr().err.splitlines() if "timed check failed" in line]
    assert said and said[0] == "servewatch serve: a timed check failed: RuntimeError"


def test_no_cadence_or_slot_count_that_cannot_turn():
    with pytest.raises(ValueError):
        Ticker(VirtualClock(), slots=0)
    with pytest.raises(ValueError):
        Ticker(VirtualClock()).every(0.0, lambda now: None)


class _Served:
    def answer(self):
        return ProbeAnswer(SERVED, 0.001, 200, 1)

    def cancel(self) -> None:
        pass


def test_a_recorder_on_the_ticker_probes_and_measures_its_starvation_with_no_task_for_either(capsys):
    from servewatch.watch.recorder import Recorder
    from servewatch.watch.targets import callable_sources

    clock = RealClock()
    ticker = Ticker(clock, tool="serve")
    names: list[set[str]] = []
    held: list[float] = []

    def health():
        names.append({task.get_coro().__qualname__ for task in asyncio.all_tasks()})
        if len(names) == 5:
            started = time.monotonic()
            time.sleep(1.6)     # the starvation measured: the loop is held, as a node under CPU pressure holds it
            held.append(time.monotonic() - started)
        if len(recorder.ring.window().probe) >= 4 and held and recorder.gaps.beats >= 10:
            recorder.stop()
        return 200

    probe = ProbeSource(lambda deadline_s, **route: _Served(), clock, probe_interval_s=0.3, check_s=0.1)
    sources = [*callable_sources(clock, 0.1, health=health, metrics=lambda: "# no engine here\n"), probe]
    recorder = Recorder(sources, clock, tool="serve")

    async def main():
        await recorder.run(duration=20, ticker=ticker)
        return ticker.registered

    assert asyncio.run(main()) == 0                 # unregistered when the run ends
    assert recorder.stopped                         # stopped by the condition, not the 20 s deadline
    probes = recorder.ring.window().probe
    assert [p.outcome for p in probes] == [SERVED] * len(probes) and len(probes) >= 4
    spaced = [y.t - x.t for x, y in zip(probes, probes[1:])]
    assert all(s >= 0.3 - 0.1 / SLOTS for s in spaced)           # the probe's own interval, checked every 0.1 s
    [gap] = [g for g in recorder.gaps.gaps if g.seconds >= 1.6]
    assert gap.seconds <= held[0] + 1.0             # the hold, plus at most a threshold
    assert any("recorder starved" in line for line in capsys.readouterr().err.splitlines())
    running = set().union(*names)
    assert "Recorder._heartbeat" not in running     # the heartbeat and the probe's checks: plain calls, no task
    assert sum(1 for n in running if n == "Recorder._source_loop") == 1    # (set: health's and metrics' loops)
    assert "_Wheel._turn" in running



def test_serves_fleet_runs_every_targets_probe_check_and_heartbeat_on_its_one_ticker():
    import contextlib
    from dataclasses import replace

    from servewatch.serve.config import FLEET_RECORDING, ServeConfig
    from servewatch.serve.fleet import Fleet
    from servewatch.serve.targets import spec_for
    from servewatch.sinks.export.exporter import FleetExporter
    from servewatch.transport.contract import Http1Transport
    from tests.serve_harness import sim_target, until

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            sims = [await stack.enter_async_context(sim_target()) for _ in range(2)]
            transport = await stack.enter_async_context(Http1Transport())
            specs = [spec_for(sim.url, f"t{i}") for i, sim in enumerate(sims)]
            config = ServeConfig(targets=tuple(specs), recording=replace(FLEET_RECORDING, interval=0.5))
            fleet = Fleet(config, transport, RealClock(), FleetExporter(lambda: []))
            try:
                await fleet.apply(specs)

                async def both_checked():       # each target: its probe's check, its heartbeat and its slot
                    # listing's check (vLLM lists none: idle), on the wheel
                    return fleet.ticker.registered == 6 and all(
                        run.recorder.gaps.beats >= 3 and run.recorder.ring.window().metrics
                        for run in fleet.runs.values())
                await until(both_checked, 10, "both targets beating on the fleet's ticker")
                names = [task.get_coro().__qualname__ for task in asyncio.all_tasks()]
                assert "Recorder._heartbeat" not in names and names.count("_Wheel._turn") == 1
                assert names.count("Recorder._source_loop") == 4        # /health and /metrics, each target
            finally:
                await fleet.close()
            assert fleet.ticker.registered == 0

    asyncio.run(asyncio.wait_for(main(), timeout=60))


def test_an_idle_source_is_only_looked_at_until_it_has_something_to_ask_then_polls_on_its_own_task():
    from servewatch.watch.recorder import Recorder
    from servewatch.watch.targets import callable_sources

    clock = RealClock()
    ticker = Ticker(clock, tool="serve")

    class Listing:                      # as sources.slots.EngineSlotsSource: idle until the engine lists slots
        kind, interval = "slots", 0.1

        def __init__(self):
            self.lists, self.polls, self.listed_at = False, [], None

        def idle(self) -> bool:
            return not self.lists

        async def poll(self):
            self.polls.append(clock.now())
            return []

    listing = Listing()

    def health():
        if recorder.gaps.beats >= 5 and not listing.lists:
            listing.lists, listing.listed_at = True, clock.now()
        if len(listing.polls) >= 3:
            recorder.stop()
        return 200

    sources = [*callable_sources(clock, 0.1, health=health, metrics=lambda: "# no engine here\n"), listing]
    recorder = Recorder(sources, clock, tool="serve")

    async def main():
        await recorder.run(duration=20, ticker=ticker)

    asyncio.run(main())
    assert recorder.stopped and listing.listed_at is not None
    assert listing.polls[0] >= listing.listed_at            # never polled while idle
    assert len(listing.polls) >= 3                          # then on its cadence, on its own task
    # the first three polls' gaps (the stop asked at the third may land after a fourth on a loaded machine: 1 in
    # 4,525 tests of the fast suite, 2026-12-08)
    first = listing.polls[:3]
    assert [y - x for x, y in zip(first, first[1:])] == pytest.approx([0.1] * 2, abs=0.09)


def test_the_probes_rank_check_asks_nothing_and_makes_no_window_while_the_ring_holds_no_process_sample():
    """The probe's check asks the detectors' suspicion (a stalled rank: ask at once) only while the ring holds what
    suspicion reads, the process view; a remote target has none, and without one suspicion finds nothing anyway."""
    from servewatch.detectors import DetectorConfig, ranks
    from servewatch.timeline.ring import Ring
    from servewatch.timeline.samples import HealthSample, ProcessSample

    assert ranks.SUSPICION_READS == "process"
    clock = VirtualClock(start=500.0)
    asked = []

    def suspicion(window):
        asked.append(window)
        return ranks.suspicion(window, DetectorConfig())

    ring = Ring.for_history(60.0, {"health": 1.0, "process": 1.0, "probe": 1.0})
    ring.add(HealthSample(499.0, 200, 0.01))
    probe = ProbeSource(lambda deadline_s, **route: _Served(), clock, probe_interval_s=5.0, check_s=1.0)
    probe.bind_timeline(ring, suspicion, reads=ranks.SUSPICION_READS)
    assert ranks.suspicion(ring.window(), DetectorConfig()) is None      # what it would have said: nothing
    probe.poll_now()
    assert asked == [] and not ring.holds("process") and ring.holds("health")
    ring.add(ProcessSample(t=500.0, root_pid=1, root_create_time=0.0, alive=True))
    clock.advance(1.0)
    probe.poll_now()
    assert len(asked) == 1 and [p.t for p in asked[0].process] == [500.0]
    unbound = ProbeSource(lambda deadline_s, **route: _Served(), clock, probe_interval_s=5.0, check_s=1.0)
    unbound.bind_timeline(Ring.for_history(60.0, {"health": 1.0}), suspicion)    # no `reads`: always asked
    unbound.poll_now()
    assert len(asked) == 2
