"""Time as a dependency: real time for production, virtual time for tests and `--fast`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Protocol


def iso8601(t: float) -> str:
    """An epoch-seconds stamp as UTC ISO 8601 to the millisecond ("2024-05-01T12:00:00.000Z")."""
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso8601(text: str) -> float:
    """An ISO 8601 stamp (as iso8601 writes it, or with an offset) as epoch seconds; one without an offset
    is read as UTC. ValueError when it is not one."""
    stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (reading as epoch seconds for RealClock)."""

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    """Real time measured on the monotonic clock: `now()` reads as epoch seconds (the wall clock is read
    once, to anchor it), so every duration between two readings is monotonic — an NTP step or a manual
    `date -s` can neither invent a stall nor hide one. The stamps drift from the wall clock by whatever
    steps it takes after the start; they are labels, never used for arithmetic with the wall clock."""

    def __init__(self, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic):
        self._monotonic = monotonic
        self._offset = wall() - monotonic()

    def now(self) -> float:
        return self._monotonic() + self._offset

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class VirtualClock:
    """A clock that only moves when told to. `advance` is the only way time passes."""

    def __init__(self, start: float = 1_800_000_000.0):
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("virtual time cannot go backwards")
        self._now += seconds

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError("virtual time cannot go backwards")
        self._now = t

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)
