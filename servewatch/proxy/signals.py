"""The proxy as a source for the recorder (`watch`/`serve`): one RequestsSample per poll."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servewatch.timeline.samples import Sample


class RequestsSource:
    kind = "requests"

    def __init__(self, proxy, clock, interval: float):
        self.proxy = proxy
        self.clock = clock
        self.interval = interval

    async def poll(self) -> Sequence[Sample]:
        # ages on the proxy's own clock (the one its request times use), stamped on the recorder's
        return [replace(self.proxy.snapshot(self.proxy.now()), t=self.clock.now())]
