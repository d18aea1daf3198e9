"""A made-up source (as a built-in one is a module of servewatch/sources/): a kind, a cadence and `poll()`
(servewatch.sources.base.Source), here reading queue depths from a function, each sample stamped when read. Its
sample is tests/toy_queue_sample.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from servewatch.clock import Clock
from tests.toy_queue_sample import NAME, QueueSample


class QueueSource:
    kind = NAME

    def __init__(self, clock: Clock, depth: Callable[[], int], interval: float = 0.5):
        self.clock, self.depth, self.interval = clock, depth, interval
        self.queued_since: float | None = None

    async def poll(self) -> Sequence[QueueSample]:
        t, depth = self.clock.now(), self.depth()
        self.queued_since = (self.queued_since or t) if depth else None
        return [QueueSample(t, depth, t - self.queued_since if depth else None)]
