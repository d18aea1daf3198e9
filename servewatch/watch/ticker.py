"""One timer for many recorders' fixed-cadence checks: a timer wheel (serve's fleet).

A recorder on its own wakes a task for each of its periodic checks (the request-path probe's, the heartbeat that
measures its own sampling, a slot listing the engine does not have): three task wake-ups a cadence per target, each
a timer in the event loop's heap, a future and a coroutine step. Serve watches hundreds of targets, so it gives every recorder one `Ticker`: a wheel per
cadence, turned by one task that wakes once a slot (a twentieth of the cadence) and calls, as plain functions, the
checks whose slot it is. A check keeps its own phase (the slot of the moment it was registered, so the fleet's
jittered targets stay spread over the cadence) and its cadence: it runs one cadence after the previous run, give or
take less than a slot at its first run only. When the loop was held past several slots, each check whose slot
went by runs once, at once (as the overdue timers of as many tasks would), never twice for one turn, and then on
its own phase again.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Callable

from servewatch.clock import Clock

SLOTS = 20                 # slots a turn: a check's phase is kept within a twentieth of its cadence


class Ticker:
    """`every(interval, callback)` calls `callback(now)` every `interval` seconds until the function it returns
    is called. Callbacks run on the event loop and must not block; one that raises is said on stderr and kept."""

    def __init__(self, clock: Clock, *, slots: int = SLOTS, tool: str = "serve"):
        if slots < 1:
            raise ValueError("a wheel needs at least one slot")
        self.clock, self.slots, self.tool = clock, slots, tool
        self._wheels: dict[float, _Wheel] = {}

    def every(self, interval: float, callback: Callable[[float], None]) -> Callable[[], None]:
        """Register `callback`: first called one `interval` from now (less than a slot earlier), then every
        `interval`. Returns the function that unregisters it (idempotent)."""
        if interval <= 0:
            raise ValueError("a cadence must be positive")
        wheel = self._wheels.get(interval)
        if wheel is None:
            wheel = self._wheels[interval] = _Wheel(self, interval)
        return wheel.add(callback)

    @property
    def registered(self) -> int:
        """Callbacks registered now, over every cadence."""
        return sum(len(wheel.entries) for wheel in self._wheels.values())

    def close(self) -> None:
        """Stop every wheel (their callbacks are not called again)."""
        for wheel in self._wheels.values():
            wheel.close()
        self._wheels.clear()


class _Entry:
    __slots__ = ("callback", "next_turn")

    def __init__(self, callback: Callable[[float], None], next_turn: int):
        self.callback = callback
        self.next_turn = next_turn       # the absolute slot number from which it is due


class _Wheel:
    def __init__(self, ticker: Ticker, interval: float):
        self.ticker, self.interval = ticker, interval
        self.n = ticker.slots
        self.slot_s = interval / self.n
        self.slots: list[dict[int, _Entry]] = [{} for _ in range(self.n)]
        self.entries: dict[int, int] = {}       # entry key -> its slot
        self._key = 0
        self._task: asyncio.Task | None = None

    def add(self, callback: Callable[[float], None]) -> Callable[[], None]:
        now_slot = math.floor(self.ticker.clock.now() / self.slot_s)
        self._key += 1
        key, slot = self._key, now_slot % self.n
        self.slots[slot][key] = _Entry(callback, now_slot + self.n)
        self.entries[key] = slot
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._turn(now_slot))

        def remove() -> None:
            at = self.entries.pop(key, None)
            if at is not None:
                self.slots[at].pop(key, None)
        return remove

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.entries.clear()
        for slot in self.slots:
            slot.clear()

    async def _turn(self, done: int) -> None:
        """`done`: the absolute number of the last slot processed."""
        clock, slot_s, n = self.ticker.clock, self.slot_s, self.n
        while self.entries:
            await clock.sleep((done + 1) * slot_s - clock.now())
            now = clock.now()
            upto = max(done + 1, math.floor(now / slot_s))
            for number in range(max(done + 1, upto - n + 1), upto + 1):    # a held loop: each slot once
                for entry in list(self.slots[number % n].values()):
                    if entry.next_turn > number:
                        continue
                    entry.next_turn = number + n
                    try:
                        entry.callback(now)
                    except Exception as exc:  # noqa: BLE001 - one target's check never stops the others'
                        print(f"servewatch {self.ticker.tool}: a timed check failed: {type(exc).__name__}",
                              file=sys.stderr, flush=True)
            done = upto
