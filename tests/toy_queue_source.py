"""A made-up source (as a built-in one is a module of servewatch/sources/): a kind, a cadence and `poll()`
(servewatch.sources.base.Source), here answering from a list of readings. Its sample is tests/toy_queue_sample.py."""

from __future__ import annotations

from collections.abc import Sequence

from tests.toy_queue_sample import NAME, QueueSample


class QueueSource:
    kind = NAME
    interval = 0.5

    def __init__(self, readings: Sequence[QueueSample]):
        self._readings = list(readings)

    async def poll(self) -> Sequence[QueueSample]:
        return [self._readings.pop(0)] if self._readings else []
