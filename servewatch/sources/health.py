"""The health probe: GET /health → HealthSample(status, latency), or a typed failure sample."""

from __future__ import annotations

from servewatch.clock import Clock
from servewatch.sources.http import FetchFailure, Transport
from servewatch.timeline.samples import HealthSample


class HealthSource:
    kind = "health"

    def __init__(self, transport: Transport, clock: Clock, interval: float):
        self._transport = transport
        self._clock = clock
        self.interval = interval

    async def poll(self) -> list[HealthSample]:
        answer = await self._transport()
        t = self._clock.now()  # when the answer arrived
        if isinstance(answer, FetchFailure):
            return [HealthSample(t=t, status=None, latency_s=None, error=answer.kind)]
        error = None if 200 <= answer.status < 300 else f"http_{answer.status}"
        return [HealthSample(t=t, status=answer.status, latency_s=answer.elapsed_s, error=error)]
