"""The slot picture: an engine's slot listing (`Dialect.slots_path`, read by `Dialect.read_slots`) → which slot is
busy, since when it has been seen busy on the same request, and the tokens it has processed; or a reading whose
`error` is the failure's kind in the scrape vocabulary ("connect", "timeout", "http_503", "too_large", "parse").

Bounded like every source: the transport's timeout and byte bound (`http_transport`, the project's HTTP/1.1 client
under `transport.contract`). An engine's listing may wait on its loop (Dialect.metrics_wait_on_engine): then a
timeout is the loop's silence, as /metrics's is. A slot holds numbers only; the engine's task id is used to tell
one request from the next on a slot and is never kept in a reading.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from servewatch.clock import Clock
from servewatch.dialects.base import Dialect
from servewatch.kinds import PARSE, TIMEOUT
from servewatch.sources.http import Transport
from servewatch.sources.scrape import ScrapeFailure, http_status_failure
from servewatch.timeline.samples import SlotsSample, SlotView  # noqa: F401 (SlotView: read from here too)

MAX_BYTES = 1 * 2**20        # a listing of 256 slots without debug fields is about 60 kB


# The reading is the timeline's sample (kind "slots", with its SlotView): the recorder keeps it in the window and
# bundles.
SlotsReading = SlotsSample


class SlotsSource:
    """Polled like a source (`poll()` never raises): one reading of a known dialect's slot listing per poll."""

    kind = "slots"

    def __init__(self, transport: Transport, clock: Clock, interval: float, dialect: Dialect):
        self._transport = transport
        self._clock = clock
        self.interval = interval
        self.dialect = dialect
        self._busy_since: dict[int, tuple[object, float]] = {}     # slot id -> (its request's task id, first seen)

    async def poll(self) -> list[SlotsReading]:
        answer = await self._transport()
        t = self._clock.now()
        if isinstance(answer, ScrapeFailure):
            return [SlotsReading(t, error=answer.label, elapsed_s=answer.elapsed_s)]
        if answer.status != 200:
            return [SlotsReading(t, error=http_status_failure(answer.status).label, elapsed_s=answer.elapsed_s)]
        try:
            data = json.loads(answer.body)
            slots = self.dialect.read_slots(data)
        except (ValueError, UnicodeDecodeError):
            return [SlotsReading(t, error=PARSE, elapsed_s=answer.elapsed_s)]
        tasks = _task_ids(data)
        views = []
        seen: dict[int, tuple[object, float]] = {}
        for slot in slots:
            if not slot.busy:
                views.append(SlotView(slot, None))
                continue
            task = tasks.get(slot.id)
            before = self._busy_since.get(slot.id)
            since = before[1] if before is not None and before[0] == task else t
            seen[slot.id] = (task, since)
            views.append(SlotView(slot, t - since))
        self._busy_since = seen
        return [SlotsReading(t, tuple(views), answer.elapsed_s)]

    async def close_connections(self) -> None:
        close = getattr(self._transport, "close", None)
        if close is not None:
            await close()


# After a listing that timed out, the next is asked this many cadences later, doubling to MAX_BACKOFF_S: a request
# to a hung loop holds one of the server's few HTTP threads while it waits (until the loop answers or, where the
# engine polls for it, about a second after the client hangs up), and a watcher must not take them all: that would
# silence /health too, health_loss's symptom, not the engine's.
MAX_BACKOFF_S = 60.0


class EngineSlotsSource:
    """The recorder's slots source for a target whose engine is not known when watching starts: `dialect_now()`
    says the engine (from the newest scrape); where its dialect has a slot listing (`slots_path`), each poll reads
    it through `transport_for(path)`; for any other engine a poll returns nothing and asks nothing."""

    kind = "slots"

    def __init__(self, transport_for: Callable[[str], Transport], clock: Clock, interval: float,
                 dialect_now: Callable[[], Dialect | None]):
        self._transport_for = transport_for
        self._clock = clock
        self.interval = interval
        self._dialect_now = dialect_now
        self._source: SlotsSource | None = None
        self._next_at = 0.0
        self._backoff_s = 0.0

    def idle(self) -> bool:
        """A poll now would ask nothing and return nothing: the engine is not known yet or lists no slots."""
        dialect = self._dialect_now()
        return dialect is None or dialect.slots_path is None

    async def poll(self) -> list[SlotsSample]:
        dialect = self._dialect_now()
        if dialect is None or dialect.slots_path is None:
            return []
        if self._source is None or self._source.dialect is not dialect:
            if self._source is not None:
                await self._source.close_connections()
            self._source = SlotsSource(self._transport_for(dialect.slots_path), self._clock, self.interval, dialect)
        if self._clock.now() < self._next_at:
            return []
        readings = await self._source.poll()
        if readings and readings[-1].error == TIMEOUT:
            self._backoff_s = min(MAX_BACKOFF_S, max(2 * self.interval, 2 * self._backoff_s))
            self._next_at = readings[-1].t + self._backoff_s
        else:
            self._backoff_s, self._next_at = 0.0, 0.0
        return readings

    async def close_connections(self) -> None:
        if self._source is not None:
            await self._source.close_connections()


def _task_ids(data) -> dict[int, object]:
    """slot id -> the engine's task id on it (compared between readings, never stored)."""
    return {item["id"]: item.get("id_task") for item in data if isinstance(item, dict) and "id" in item}


def read_once(url: str, dialect: Dialect, *, timeout_s: float, max_bytes: int = MAX_BYTES) -> SlotsReading:
    """One reading of a slot listing for a one-shot command (`inspect`): never raises, a failure is its `error`."""
    import asyncio

    from servewatch.clock import RealClock
    from servewatch.sources.http import http_transport
    from servewatch.transport.contract import Http1Transport

    async def once() -> SlotsReading:
        async with Http1Transport() as transport:
            get = http_transport(transport, url, timeout_s=timeout_s, max_bytes=max_bytes)
            return (await SlotsSource(get, RealClock(), 0.0, dialect).poll())[0]

    return asyncio.run(once())


def reading_json(reading: SlotsReading) -> dict:
    """A reading as numbers and the failure's kind (what `inspect --json` prints)."""
    return {"error": reading.error, "busy": reading.busy, "prefilling": reading.prefilling,
            "slots": [{"id": v.slot.id, "busy": v.slot.busy, "prefilling": v.slot.prefilling, "n_ctx": v.slot.n_ctx,
                       "prompt_processed": v.slot.prompt_processed, "prompt_cached": v.slot.prompt_cached,
                       "decoded": v.slot.decoded, "remaining": v.slot.remaining, "busy_s": v.busy_s}
                      for v in reading.slots]}
