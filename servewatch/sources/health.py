"""The health probe: GET /health → HealthSample(status, latency), or a sample whose `error` is the
failure's kind in the scrape vocabulary (`sources.scrape`): "connect", "timeout", "http_503", ..."""

from __future__ import annotations

from servewatch.clock import Clock
from servewatch.sources.http import Transport
from servewatch.sources.scrape import ScrapeFailure, http_status_failure
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
        if isinstance(answer, ScrapeFailure):
            return [HealthSample(t=t, status=None, latency_s=None, error=answer.label)]
        error = None if 200 <= answer.status < 300 else http_status_failure(answer.status).label
        return [HealthSample(t=t, status=answer.status, latency_s=answer.elapsed_s, error=error)]

    async def close_connections(self) -> None:
        """Let go of the transport's idle connections (when the recording ends)."""
        close = getattr(self._transport, "close", None)
        if close is not None:
            await close()
