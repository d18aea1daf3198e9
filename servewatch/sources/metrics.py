"""The /metrics scrape → canonical EngineState per engine (via the dialects), or a typed failure.

Error classes: the transport's ("connect", "timeout", "too_large", "protocol"), "http_<status>",
"parse" (not Prometheus text / not UTF-8), "no_engine_metrics" (valid text, no known engine family,
e.g. vLLM with --disable-log-stats).
"""

from __future__ import annotations

from servewatch.clock import Clock
from servewatch.errors import BodyTooLarge, ExpositionError
from servewatch.sources.http import DEFAULT_MAX_BYTES, FetchFailure, Transport
from servewatch.timeline.samples import MetricsSample


class MetricsSource:
    kind = "metrics"

    def __init__(self, transport: Transport, clock: Clock, interval: float, *, slot_limit: int | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES):
        self._transport = transport
        self._clock = clock
        self.interval = interval
        self.slot_limit = slot_limit      # from the target's command line when known (never stored)
        self._max_bytes = max_bytes

    async def poll(self) -> list[MetricsSample]:
        answer = await self._transport()
        t = self._clock.now()  # a saturated server can take seconds: stamp the arrival
        if isinstance(answer, FetchFailure):
            return [MetricsSample(t=t, dialect=None, generation=None, error=answer.kind)]
        if answer.status != 200:
            return [MetricsSample(t=t, dialect=None, generation=None, scrape_s=answer.elapsed_s,
                                  error=f"http_{answer.status}")]
        return [self._read(t, answer.body, answer.elapsed_s)]

    def _read(self, t: float, body: bytes, elapsed_s: float) -> MetricsSample:
        from servewatch.dialects import read_scrape

        def failed(error: str) -> MetricsSample:
            return MetricsSample(t=t, dialect=None, generation=None, scrape_s=elapsed_s, error=error)

        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return failed("parse")
        try:
            scrape = read_scrape(text, max_bytes=self._max_bytes)
        except BodyTooLarge:
            return failed("too_large")
        except ExpositionError:
            return failed("parse")
        except Exception:  # noqa: BLE001 - whatever the body, a bad scrape is a sample, not a crash
            return failed("parse")
        if scrape.dialect is None or not scrape.engines:
            return MetricsSample(t=t, dialect=scrape.dialect, generation=scrape.generation, scrape_s=elapsed_s,
                                 error="no_engine_metrics")
        for state in scrape.engines:
            if state.slot_limit is None and self.slot_limit is not None:
                state.slot_limit = self.slot_limit
        return MetricsSample(t=t, dialect=scrape.dialect, generation=scrape.generation,
                             engines=tuple(scrape.engines), scrape_s=elapsed_s)
