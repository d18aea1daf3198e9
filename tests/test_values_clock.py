"""Values of servewatch/clock.py (issue 50: every sample's time comes from here, found by the mutation rule): real time
read on the monotonic clock anchored once to the wall clock, virtual time that moves only when told, and the
ISO 8601 stamps to the millisecond. Each figure computed by hand beside the assertion."""

from __future__ import annotations

import asyncio

import pytest

from servewatch.clock import RealClock, VirtualClock, iso8601, parse_iso8601


def test_real_time_is_the_monotonic_clock_anchored_to_the_wall_once():
    wall = iter([1_700_000_000.5, 9e9])                  # a wall clock read once: a later step is never seen
    mono = [100.25]
    clock = RealClock(wall=lambda: next(wall), monotonic=lambda: mono[0])
    assert clock.now() == 1_700_000_000.5                 # anchored: the wall's reading at the start
    mono[0] = 160.75                                      # 60.5 s later on the monotonic clock
    assert clock.now() == 1_700_000_061.0
    assert next(wall) == 9e9                              # (the wall was read once)


def test_virtual_time_moves_only_when_told():
    clock = VirtualClock()
    assert clock.now() == 1_800_000_000.0
    clock.advance(2.5)
    clock.advance(0.0)
    assert clock.now() == 1_800_000_002.5
    clock.set(1_800_000_010.0)
    clock.set(1_800_000_010.0)                            # the same time again: allowed
    assert clock.now() == 1_800_000_010.0
    with pytest.raises(ValueError) as back:
        clock.advance(-0.001)
    assert str(back.value) == "virtual time cannot go backwards"
    with pytest.raises(ValueError) as back:
        clock.set(1_800_000_009.999)
    assert str(back.value) == "virtual time cannot go backwards"
    assert VirtualClock(5.0).now() == 5.0

    async def sleeps():
        loop = asyncio.get_running_loop()
        start = loop.time()
        await clock.sleep(1.5)
        await clock.sleep(-3.0)                           # a deadline already passed: no time, not backwards
        return clock.now(), loop.time() - start

    virtual, real = asyncio.run(sleeps())
    assert virtual == 1_800_000_011.5 and real < 0.5     # virtual time passed; real time did not (one yield)


def test_real_sleep_of_a_passed_deadline_does_not_wait():
    async def go():
        loop = asyncio.get_running_loop()
        start = loop.time()
        await RealClock().sleep(-5.0)
        return loop.time() - start

    assert asyncio.run(go()) < 1.0


def test_stamps_to_the_millisecond():
    assert iso8601(1_700_000_000.0) == "2023-11-14T22:13:20.000Z"
    assert iso8601(1_700_000_000.1234) == "2023-11-14T22:13:20.123Z"
    assert parse_iso8601("2023-11-14T22:13:20.123Z") == 1_700_000_000.123
    assert parse_iso8601(" 2023-11-14T22:13:20Z\n") == 1_700_000_000.0
    assert parse_iso8601("2023-11-14T22:13:20") == 1_700_000_000.0               # no offset: UTC
    assert parse_iso8601("2023-11-15T00:13:20+02:00") == 1_700_000_000.0
    with pytest.raises(ValueError):
        parse_iso8601("yesterday")


def test_a_stamp_without_an_offset_is_utc_in_any_time_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert parse_iso8601("2023-11-14T22:13:20") == 1_700_000_000.0
    finally:
        monkeypatch.undo()
        time.tzset()
