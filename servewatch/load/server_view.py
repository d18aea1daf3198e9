"""The server's own view while a load runs: /metrics sampled every interval through the dialects.

Each sample is stamped when its answer arrives, not when it was asked for. A scrape never delays
the next one: every tick starts its own scrape, at most two are in flight (a tick finding two still
running is counted as skipped). Means over the run come from the deltas of the server's cumulative
histograms and counters between the baseline scrape (before the first request) and the final one.

A scrape runs over the load generator's own HTTP/1.1 client, under the same byte and series bounds
and with the same failure kinds (`servewatch.sources.scrape`) as `inspect` and `watch`.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

from servewatch.engine.served import MEAN_KINDS, delta_mean as _delta_mean, run_means, served, totals
from servewatch.engine.state import EngineState
from servewatch.exposition.parser import check_series
from servewatch.sources.scrape import TIMEOUT, ScrapeBounds, ScrapeFailure, read_metrics

MAX_SCRAPE_BYTES = ScrapeBounds().max_bytes
MAX_IN_FLIGHT = 2


@dataclass(slots=True)
class ServerSample:
    t: float
    scrape_s: float | None
    error: str | None = None
    dialect: str | None = None
    naming: str | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemptions: float | None = None
    queue_mean_s: float | None = None    # mean queue time of requests that left the queue since the previous sample
    engines: tuple[EngineState, ...] = ()

    def to_json(self) -> dict:
        return {"t": round(self.t, 6), "scrape_s": _r(self.scrape_s), "error": self.error,
                "dialect": self.dialect, "generation": self.naming, "running": self.running,
                "waiting": self.waiting, "kv_usage": self.kv_usage, "preemptions": self.preemptions,
                "queue_mean_s": _r(self.queue_mean_s)}


def _r(x):
    return None if x is None else round(x, 7)


def aggregate(sample: ServerSample) -> ServerSample:
    sample.running, sample.waiting, sample.kv_usage = totals(sample.engines)
    sample.preemptions = _sum(e.counters.preemptions for e in sample.engines)
    return sample


def _sum(values) -> float | None:
    values = [v for v in values if v is not None]
    return math.fsum(values) if values else None


class ServerView:
    """Samples `/metrics` of the target with its own connection pool."""

    def __init__(self, client, now: Callable[[], float], sleep, interval_s: float,
                 read_scrape: Callable | None = None, timeout_s: float | None = None,
                 bounds: ScrapeBounds = ScrapeBounds()):
        self._client = client
        self._now = now
        self._sleep = sleep
        self.interval_s = interval_s
        self._read_scrape = read_scrape      # text -> Scrape; the dialects' when None
        self.bounds = bounds
        self._series_check = partial(check_series, max_series=bounds.max_series)   # looked at while a body arrives
        self._timeout = timeout_s if timeout_s is not None else max(5.0, 4 * interval_s)
        self.samples: list[ServerSample] = []
        self.skipped = 0
        self._in_flight: set[asyncio.Task] = set()
        self._prev_good: ServerSample | None = None
        self.first_good: ServerSample | None = None
        self.last_good: ServerSample | None = None

    async def scrape_once(self) -> ServerSample:
        asked = self._now()
        try:
            async with asyncio.timeout(self._timeout):
                response = await self._client.request("GET", "/metrics")
                try:
                    body = await response.read_all(self.bounds.max_bytes, self._series_check)
                finally:
                    response.release()
        except TimeoutError:
            return self.add_error(self._now(), TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - a failing scrape is a sample, never a crash
            from servewatch.transport.contract import SCRAPE_KIND, outcome_of

            return self.add_error(self._now(), SCRAPE_KIND[outcome_of(exc)[0]])
        return self.ingest(body, asked, self._now(), status=response.status)

    def ingest(self, body: bytes | str, asked: float, arrived: float, status: int = 200) -> ServerSample:
        """Read one /metrics answer (fetched by us, or read in-process from a simulator)."""
        scrape = read_metrics(status, body, self.bounds, elapsed_s=arrived - asked, read_scrape=self._read_scrape)
        if isinstance(scrape, ScrapeFailure):
            return self.add(ServerSample(arrived, arrived - asked, error=scrape.label))
        sample = aggregate(ServerSample(arrived, arrived - asked, dialect=scrape.dialect,
                                        naming=scrape.naming, engines=tuple(scrape.engines)))
        if self._prev_good is not None:
            sample.queue_mean_s = _delta_mean(list(sample.engines), list(self._prev_good.engines), "queue")
        return self.add(sample)

    def add_error(self, t: float, error: str) -> ServerSample:
        return self.add(ServerSample(t, None, error=error))

    def add(self, sample: ServerSample) -> ServerSample:
        self.samples.append(sample)
        if sample.error is None:
            if self._prev_good is not None and self._prev_good is not self.first_good:
                self._prev_good.engines = ()     # only the first and the latest keep full states
            self._prev_good = sample
            if self.first_good is None:
                self.first_good = sample
            self.last_good = sample
        return sample

    async def run(self, stop: asyncio.Event) -> None:
        """Tick every interval until `stop` is set; then wait for scrapes still in flight."""
        next_t = self._now() + self.interval_s
        while not stop.is_set():
            delay = next_t - self._now()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay) if self._sleep is None else await self._sleep(delay)
                except TimeoutError:
                    pass
                if stop.is_set():
                    break
            next_t += self.interval_s
            if len(self._in_flight) >= MAX_IN_FLIGHT:
                self.skipped += 1
                continue
            task = asyncio.get_running_loop().create_task(self.scrape_once())
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    def summary(self) -> dict:
        good = [s for s in self.samples if s.error is None]
        errors: dict[str, int] = {}
        for s in self.samples:
            if s.error is not None:
                errors[s.error] = errors.get(s.error, 0) + 1
        first, last = self.first_good, self.last_good
        both = first is not None and last is not None and last is not first
        quantities = served(list(first.engines) if first is not None else None,
                            list(last.engines) if last is not None else None,
                            ((s.running, s.waiting, s.kv_usage) for s in good), len(good) if both else 1)
        return {
            "samples": len(self.samples),
            "errors": errors,
            "skipped_ticks": self.skipped,
            "interval_s": self.interval_s,
            "dialect": good[-1].dialect if good else None,
            "generation": good[-1].naming if good else None,
            "max_running": quantities.max_running,
            "max_waiting": quantities.max_waiting,
            "max_kv": quantities.max_kv,
            "slot_limit": quantities.slot_limit,
            "preemptions": quantities.preemptions,
            "means": quantities.means,
        }
