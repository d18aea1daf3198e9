"""Durations are monotonic: a wall clock stepped backwards and forwards by minutes (NTP, `date -s`)
neither invents nor hides a verdict."""

from __future__ import annotations

import asyncio

from servewatch.clock import RealClock, VirtualClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.watch import Recorder
from servewatch.watch.sim_target import sim_sources
from tests.sim_harness import Phase, Workload

EPOCH = 1_800_000_000.0
# (monotonic seconds after the start, step of the wall clock): back 5 minutes, then forward 10 minutes,
# both while a stall is on the record, and back 2 minutes while the server is healthy.
STEPS = ((15.0, -300.0), (28.0, +600.0), (50.0, -120.0))


class World:
    """Monotonic time (driven, virtual) and a wall clock that takes the STEPS."""

    def __init__(self):
        self.monotonic = VirtualClock(start=1000.0)

    def wall(self) -> float:
        elapsed = self.monotonic.now() - 1000.0
        return EPOCH + elapsed + sum(step for at, step in STEPS if elapsed >= at)


class SteppedRealClock(RealClock):
    """The production clock, read over the World's clocks, drivable by the virtual-time recorder."""

    def __init__(self, world: World):
        super().__init__(wall=world.wall, monotonic=world.monotonic.now)
        self.world = world

    def set(self, t: float) -> None:
        self.world.monotonic.set(t - self._offset)

    async def sleep(self, seconds: float) -> None:
        self.world.monotonic.advance(max(0.0, seconds))
        await asyncio.sleep(0)


def test_real_clock_durations_ignore_wall_clock_steps():
    world = World()
    clock = SteppedRealClock(world)
    readings = []
    for _ in range(60):
        readings.append((clock.now(), world.wall()))
        world.monotonic.advance(1.0)
    durations = {round(b[0] - a[0], 9) for a, b in zip(readings, readings[1:])}
    wall_durations = {round(b[1] - a[1], 9) for a, b in zip(readings, readings[1:])}
    assert durations == {1.0}
    assert wall_durations == {1.0, -299.0, 601.0, -119.0}   # the wall clock did step


def _run(make_clock):
    world = World()
    clock = make_clock(world)
    engine = SimEngine(SimConfig(seed=3), world.monotonic)
    engine.inject({"kind": "stall", "at": 10.0})
    engine.inject({"kind": "clear", "at": 35.0})
    workload = Workload(engine, [Phase(70, rate=3)], seed=3)
    recorder = Recorder(sim_sources(engine, clock, 0.5), clock)

    def advance(t: float) -> None:
        workload.advance(t - clock._offset if isinstance(clock, RealClock) else t)

    asyncio.run(recorder.run_virtual(70.0, advance=advance))
    t0 = clock.now() - 70.0
    fired = [(f.verdict.name, round(f.verdict.t - t0, 2)) for f in recorder.fired]
    cleared = [(c.verdict.name, round(c.t - t0, 2)) for c in recorder.cleared]
    return fired, cleared


def test_wall_clock_steps_change_no_verdict():
    stepped = _run(SteppedRealClock)
    steady = _run(lambda world: world.monotonic)
    fired, cleared = stepped
    assert [name for name, _ in fired] == ["alive_health_ok_no_progress"]
    assert [name for name, _ in cleared] == ["alive_health_ok_no_progress"]
    assert stepped == steady, "a wall-clock step moved, added or removed a verdict"
