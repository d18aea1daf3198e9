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
from typing import Callable

from servewatch.engine.state import EngineState
from servewatch.sources.scrape import TIMEOUT, ScrapeBounds, ScrapeFailure, read_metrics

MAX_SCRAPE_BYTES = ScrapeBounds().max_bytes
MAX_IN_FLIGHT = 2
MEAN_KINDS = ("queue", "prefill", "ttft", "itl", "decode", "e2e", "tpot")


@dataclass(slots=True)
class ServerSample:
    t: float
    scrape_s: float | None
    error: str | None = None
    dialect: str | None = None
    generation: str | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemptions: float | None = None
    queue_mean_s: float | None = None    # mean queue time of requests that left the queue since the previous sample
    engines: tuple[EngineState, ...] = ()

    def to_json(self) -> dict:
        return {"t": round(self.t, 6), "scrape_s": _r(self.scrape_s), "error": self.error,
                "dialect": self.dialect, "generation": self.generation, "running": self.running,
                "waiting": self.waiting, "kv_usage": self.kv_usage, "preemptions": self.preemptions,
                "queue_mean_s": _r(self.queue_mean_s)}


def _r(x):
    return None if x is None else round(x, 7)


def _key(engine: EngineState) -> tuple:
    return tuple(sorted(engine.labels.items()))


def _sum(values) -> float | None:
    values = [v for v in values if v is not None]
    return math.fsum(values) if values else None


def aggregate(sample: ServerSample) -> ServerSample:
    engines = sample.engines
    sample.running = _sum(e.running for e in engines)
    sample.waiting = _sum(e.waiting for e in engines)
    kvs = [e.kv_usage for e in engines if e.kv_usage is not None]
    sample.kv_usage = max(kvs) if kvs else None
    sample.preemptions = _sum(e.counters.preemptions for e in engines)
    return sample


def _delta_mean(new: list[EngineState], old: list[EngineState], kind: str) -> float | None:
    """Mean of the observations made between two scrapes, summed over engines present in both."""
    before = {_key(e): e for e in old}
    total_sum = total_count = 0.0
    for engine in new:
        prev = before.get(_key(engine))
        h1 = engine.histograms.get(kind)
        h0 = prev.histograms.get(kind) if prev is not None else None
        if h1 is None or h0 is None or h1.count < h0.count:
            continue                       # missing, or reset between the scrapes
        total_sum += h1.sum - h0.sum
        total_count += h1.count - h0.count
    return total_sum / total_count if total_count > 0 else None


def _counter_delta(new: list[EngineState], old: list[EngineState], get) -> float | None:
    before = {_key(e): e for e in old}
    total = None
    for engine in new:
        prev = before.get(_key(engine))
        if prev is None:
            continue
        a, b = get(prev), get(engine)
        if a is None or b is None or b < a:
            continue
        total = (total or 0.0) + (b - a)
    return total


def run_means(first: list[EngineState], last: list[EngineState]) -> dict:
    means = {kind: _delta_mean(last, first, kind) for kind in MEAN_KINDS}
    finished = _counter_delta(last, first, lambda e: sum(e.counters.finished.values()) if e.counters.finished else None)
    prompt = _counter_delta(last, first, lambda e: e.counters.prompt_tokens)
    generated = _counter_delta(last, first, lambda e: e.counters.generation_tokens)
    means["tokens_in"] = prompt / finished if prompt is not None and finished else None
    means["tokens_out"] = generated / finished if generated is not None and finished else None
    means["finished"] = finished
    return means


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
                    body = await response.read_all(self.bounds.max_bytes)
                finally:
                    response.release()
        except TimeoutError:
            return self.add_error(self._now(), TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - a failing scrape is a sample, never a crash
            from servewatch.http1 import failure_kind

            return self.add_error(self._now(), failure_kind(exc))
        return self.ingest(body, asked, self._now(), status=response.status)

    def ingest(self, body: bytes | str, asked: float, arrived: float, status: int = 200) -> ServerSample:
        """Read one /metrics answer (fetched by us, or read in-process from a simulator)."""
        scrape = read_metrics(status, body, self.bounds, elapsed_s=arrived - asked, read_scrape=self._read_scrape)
        if isinstance(scrape, ScrapeFailure):
            return self.add(ServerSample(arrived, arrived - asked, error=scrape.label))
        sample = aggregate(ServerSample(arrived, arrived - asked, dialect=scrape.dialect,
                                        generation=scrape.generation, engines=tuple(scrape.engines)))
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
        out = {
            "samples": len(self.samples),
            "errors": errors,
            "skipped_ticks": self.skipped,
            "interval_s": self.interval_s,
            "dialect": good[-1].dialect if good else None,
            "generation": good[-1].generation if good else None,
            "max_running": _max(s.running for s in good),
            "max_waiting": _max(s.waiting for s in good),
            "max_kv": _max(s.kv_usage for s in good),
            "slot_limit": None,
            "preemptions": None,
            "means": {},
        }
        first, last = self.first_good, self.last_good
        if first is not None and last is not None and last is not first:
            out["means"] = run_means(list(first.engines), list(last.engines))
            out["preemptions"] = _counter_delta(list(last.engines), list(first.engines),
                                                lambda e: e.counters.preemptions)
        if last is not None:
            limits = [e.slot_limit for e in last.engines if e.slot_limit is not None]
            out["slot_limit"] = sum(limits) if limits else None
        return out


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None
