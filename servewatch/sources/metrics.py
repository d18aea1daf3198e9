"""The /metrics scrape → canonical EngineState per engine (via the dialects), or a sample whose `error`
is the failure's kind in the one scrape vocabulary (see `sources.scrape`: "connect", "timeout",
"http_503", "protocol", "too_large", "too_many_series", "parse", "no_engine_metrics").

Each source reads its server's successive scrapes through the layout of the previous one
(`exposition.layout`): the same families as a full parse, at a fraction of its cost."""

from __future__ import annotations

from servewatch.clock import Clock
from servewatch.exposition.layout import RepeatingParser
from servewatch.exposition.parser import DEFAULT_MAX_BYTES, DEFAULT_MAX_SERIES
from servewatch.sources.http import Transport
from servewatch.sources.scrape import ScrapeBounds, ScrapeFailure, read_metrics
from servewatch.timeline.samples import MetricsSample


class MetricsSource:
    kind = "metrics"

    def __init__(self, transport: Transport, clock: Clock, interval: float, *, slot_limit: int | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_series: int = DEFAULT_MAX_SERIES):
        self._transport = transport
        self._clock = clock
        self.interval = interval
        self.slot_limit = slot_limit      # from the target's command line when known (never stored)
        self.bounds = ScrapeBounds(max_bytes=max_bytes, max_series=max_series)
        self.parser = RepeatingParser()
        self.dialect: str | None = None   # the engine the newest understood scrape named (the slots source asks it)

    def read_scrape(self, text: str, *, max_bytes: int):
        from servewatch.dialects import read_families, wanted_families

        return read_families(self.parser.parse(text, wanted_families(), max_bytes=max_bytes))

    async def poll(self) -> list[MetricsSample]:
        answer = await self._transport()
        t = self._clock.now()  # a saturated server can take seconds: stamp the arrival
        if isinstance(answer, ScrapeFailure):
            return [MetricsSample(t=t, dialect=None, naming=None, error=answer.label)]
        scrape = read_metrics(answer.status, answer.body, self.bounds, elapsed_s=answer.elapsed_s,
                              read_scrape=self.read_scrape)
        if isinstance(scrape, ScrapeFailure):
            return [MetricsSample(t=t, dialect=None, naming=None, scrape_s=answer.elapsed_s, error=scrape.label)]
        for state in scrape.engines:
            if state.slot_limit is None and self.slot_limit is not None:
                state.slot_limit = self.slot_limit
        self.dialect = scrape.dialect or self.dialect
        return [MetricsSample(t=t, dialect=scrape.dialect, naming=scrape.naming,
                              engines=tuple(scrape.engines), scrape_s=answer.elapsed_s)]

    async def close_connections(self) -> None:
        """Let go of the transport's idle connections (when the recording ends)."""
        close = getattr(self._transport, "close", None)
        if close is not None:
            await close()
