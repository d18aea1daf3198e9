"""Run one load scenario on one asyncio loop: precomputed arrivals on an absolute timeline (or a
fixed concurrency), one task per request, a watchdog for deadlines, the server view alongside.

`run_load(config)` is the library entry point; `run_load_async` runs inside a caller's loop with an
injectable client (anything with http1.Http1Client's `request`/`close`) and clock (`now()`/`sleep()`).
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from servewatch import stopping
from servewatch.clock import RealClock
from servewatch.errors import ServewatchError, SourceUnavailable
from servewatch.load import prompts as P
from servewatch.load.client import Deadline, RequestSpec, build_body, run_request
from servewatch.transport.http1 import Endpoint, Http1Client
from servewatch.load.records import CONNECT, HTTP_5XX, STREAM_CUT, RequestRecord
from servewatch.load.scenarios import LoadConfig, arrival_times, prompt_lengths
from servewatch.load.sender import TimedSender
from servewatch.load.server_view import ServerSample, ServerView
from servewatch.load.summary import summarize

START_MARGIN_S = 0.05
WATCHDOG_TICK_S = 0.25
PROGRESS_TICK_S = 0.25
SERVER_TOKENIZE_POOL = 32
MAX_PREWARM = 256
SENDER_LEAD_S = 0.05        # a request is handed to the sender thread this long before its time: a loop busy
                            # reading a burst of streams for less than this still hands it over in time
RESERVE_S = 0.25            # idle connections are kept ready for this long of arrivals ahead (the sender writes
                            # only on an idle one; without one a request connects on the loop, late)
RESERVE_MARGIN = 8
SENDER_SWITCH_S = 0.0002    # interpreter switch interval while the sender runs (default 5 ms)
_switching = {"runs": 0, "saved": 0.0}
_switching_lock = threading.Lock()


def _quick_switching(on: bool) -> bool:
    """The interpreter's switch interval is the process's: the first of overlapping rate runs (a drill runs
    workloads side by side in threads) saves it and sets SENDER_SWITCH_S, the last one out restores it. Saved
    and restored per run, an overlap left 0.000199 s behind (the second run saved the first one's value, which
    reads back a microsecond short), and every later restore drifted by one more."""
    with _switching_lock:
        if on:
            if _switching["runs"] == 0:
                _switching["saved"] = sys.getswitchinterval()
                sys.setswitchinterval(SENDER_SWITCH_S)
            _switching["runs"] += 1
        else:
            _switching["runs"] -= 1
            if _switching["runs"] == 0:
                sys.setswitchinterval(_switching["saved"])
    return on
# A closed-loop worker whose request could not connect, or got a 5xx, waits this long before its next: a
# refused connection comes back in microseconds, and four workers sent 118,858 requests in 20 s at a vLLM that
# had stopped (a drill's graceful stop, 2026-12-02); with that pause, a vLLM whose engine core had stopped first
# answered 500 at once and got 17,836 in 20 s (the standard drill's graceful stop, the same day). A storm no real
# client makes (the OpenAI client waits at least 0.5 s before it retries a 5xx) and a CPU the watched machine lacks.
REFUSED_PAUSE_S = 0.1
PAUSE_AFTER = (CONNECT, HTTP_5XX)


@dataclass(slots=True)
class Progress:
    elapsed_s: float
    done: int
    total: int | None
    in_flight: int
    errors: int
    tokens_out: int
    duration_s: float | None


@dataclass(slots=True)
class LoadResult:
    config: LoadConfig
    records: list[RequestRecord]
    server_samples: list[ServerSample]
    summary: dict
    prompt_source: str
    model: str
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # a load run asks one model through one API: each of its records says which, as the proxy's do
        for rec in self.records:
            rec.model, rec.api = self.model, self.config.api


def make_client(config: LoadConfig, endpoint: Endpoint):
    if config.client == "aiohttp":
        from servewatch.load.aiohttp_client import AiohttpClient

        return AiohttpClient(endpoint, connect_timeout=config.connect_timeout_s, headers=config.headers)
    return Http1Client(endpoint, connect_timeout=config.connect_timeout_s, headers=config.headers)


async def resolve_model(client, timeout_s: float = 10.0, url: str = "") -> str:
    where = f"{url.rstrip('/')}/v1/models" if url else "/v1/models"
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.request("GET", "/v1/models")
            try:
                body = await response.read_all(1 << 20)
            finally:
                response.release()
    except TimeoutError:
        raise SourceUnavailable(f"no answer from {where} within "
                                f"{timeout_s:g} s; is the server up? (or pass --model)") from None
    except Exception as exc:  # noqa: BLE001
        raise SourceUnavailable(f"cannot read {where} ({str(exc) or type(exc).__name__}); "
                                "is the server up? (or pass --model)") from None
    if response.status != 200:
        raise SourceUnavailable(f"{where} answered HTTP {response.status} (pass --model)")
    try:
        return json.loads(body)["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise SourceUnavailable(f"{where} lists no model (pass --model)") from None


class Watchdog:
    """Cancels requests past their total or idle deadline; no timer per read on the hot path."""

    def __init__(self, now, request_timeout_s: float, idle_timeout_s: float):
        self._now = now
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.in_flight: dict[int, tuple[asyncio.Task, Deadline]] = {}

    def check(self) -> None:
        t = self._now()
        for task, deadline in list(self.in_flight.values()):
            if deadline.fired is not None or task.done():
                continue
            if t - deadline.start > self.request_timeout_s:
                deadline.fired = f"no end within {self.request_timeout_s:g} s"
            elif t - deadline.last > self.idle_timeout_s:
                deadline.fired = f"no bytes for {self.idle_timeout_s:g} s"
            else:
                continue
            task.cancel()


class _Run:
    def __init__(self, config: LoadConfig, client, clock, specs_for, total: int | None,
                 on_progress: Callable[[Progress], None] | None, *,
                 stop_sending: Callable[[], bool] | None = None,
                 on_record: Callable[[RequestRecord], None] | None = None):
        self.config = config
        self.stop_sending = stop_sending or (lambda: False)   # True: no request is sent after now (the run's end
                                                              # comes early); those in flight finish
        self.on_record = on_record                            # each finished request, as it finishes
        self.client = client
        self.clock = clock
        # RealClock.now is time.time; calling it directly saves a Python frame on every body read
        self.now = time.time if type(clock) is RealClock else clock.now
        self.specs_for = specs_for
        self.total = total
        self.on_progress = on_progress
        self.records: list[RequestRecord] = []
        self.watchdog = Watchdog(clock.now, config.request_timeout_s, config.idle_timeout_s)
        self.errors = 0
        self.tokens_out = 0
        self.started = 0.0
        self.tasks: set[asyncio.Task] = set()
        self.sender: TimedSender | None = None

    async def one(self, spec: RequestSpec, presend=None, not_before: float | None = None) -> RequestRecord:
        if not_before is not None:
            early = not_before - self.now()
            if early > 0:
                await self.clock.sleep(early)
        deadline = Deadline(self.now())
        task = asyncio.current_task()
        self.watchdog.in_flight[spec.id] = (task, deadline)
        try:
            rec = await run_request(self.client, spec, self.now, deadline, api=self.config.api,
                                    keep_text=self.config.keep_text, presend=presend)
        except Exception as exc:  # noqa: BLE001 - a client bug costs one request, never the run
            rec = RequestRecord(id=spec.id, scheduled=spec.scheduled, prompt_tokens_target=spec.prompt_tokens,
                                max_tokens=spec.max_tokens, error=STREAM_CUT,
                                error_detail=f"client error: {type(exc).__name__}")
        finally:
            self.watchdog.in_flight.pop(spec.id, None)
        self.records.append(rec)
        if self.on_record is not None:
            self.on_record(rec)
        if rec.error is not None:
            self.errors += 1
        self.tokens_out += rec.output_tokens or 0
        return rec

    def _spawn(self, spec: RequestSpec) -> None:
        presend = None
        send_now = getattr(self.client, "send_now", None)
        if send_now is not None:
            # write it now, in the dispatcher's own turn of the loop, when a connection is idle
            stamp: list[float] = []
            presend = send_now("POST", spec.path, spec.body, on_sent=lambda: stamp.append(self.now()))
            if presend is not None:
                presend.sent = stamp[0]
        self._task(self.one(spec, presend))

    def _hand_over(self, spec: RequestSpec) -> None:
        """Give the request to the sender thread, which writes it at its time; without an idle
        connection, a task sends it at its time through the loop."""
        pending = self.client.prepare("POST", spec.path, spec.body, due=spec.scheduled)
        if pending is None:
            self._task(self.one(spec, None, not_before=spec.scheduled))
            return
        self.sender.submit(spec.scheduled, pending)
        self._task(self.one(spec, pending))

    def _task(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def use_sender(self) -> bool:
        """A sender thread when the client can prepare requests and time is real."""
        return hasattr(self.client, "prepare") and type(self.clock) is RealClock

    async def by_rate(self, offsets: list[float], t0: float) -> None:
        # Measured against a timer-callback dispatcher (loop.call_at sending from the callback): no
        # better under load, and uvloop's cached loop time skews the epoch -> loop-clock mapping.
        # With a sender thread the loop only prepares each request SENDER_LEAD_S ahead; the thread
        # writes it at its time even while the loop is busy reading streams.
        sleep, now = self.clock.sleep, self.now
        lead = 0.0
        quick = False
        if self.use_sender():
            self.sender = TimedSender(asyncio.get_running_loop(), time.time,
                                      self.config.sender_priority == "realtime").start()
            lead = SENDER_LEAD_S
            quick = _quick_switching(True)
        reserve = _Reserve(self.client, offsets, t0) if self.sender is not None else None
        try:
            i, n = 0, len(offsets)
            while i < n and not self.stop_sending():
                # absolute times: every request due before the horizon is handed over in one turn of the loop
                # (one wake-up per batch, not a timer per request), then one sleep to the next one's lead
                horizon = now() + lead
                while i < n and t0 + offsets[i] <= horizon:
                    spec = self.specs_for(i, t0 + offsets[i])
                    if self.sender is not None:
                        self._hand_over(spec)
                    else:
                        self._spawn(spec)
                    i += 1
                if reserve is not None:
                    reserve.top_up(i, now())
                if i < n:
                    delay = t0 + offsets[i] - lead - now()
                    if delay > 0:
                        await sleep(delay)
            while self.tasks:
                await asyncio.gather(*list(self.tasks), return_exceptions=True)
        finally:
            if reserve is not None:
                reserve.close()
            if quick:
                _quick_switching(False)

    async def by_concurrency(self, t0: float) -> None:
        config = self.config
        counter = iter(range(config.requests if config.requests is not None else 10**12))
        end = t0 + config.duration_s if config.duration_s is not None else None
        delay = t0 - self.now()
        if delay > 0:
            await self.clock.sleep(delay)

        async def worker() -> None:
            while True:
                scheduled = self.now()
                if (end is not None and scheduled >= end) or self.stop_sending():
                    return
                i = next(counter, None)
                if i is None:
                    return
                if (await self.one(self.specs_for(i, scheduled))).error in PAUSE_AFTER:
                    await self.clock.sleep(REFUSED_PAUSE_S)

        await asyncio.gather(*(worker() for _ in range(config.concurrency)))

    async def tick(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.clock.sleep(min(WATCHDOG_TICK_S, PROGRESS_TICK_S))
            self.watchdog.check()
            if self.on_progress is not None:
                self.on_progress(Progress(self.now() - self.started, len(self.records), self.total,
                                          len(self.watchdog.in_flight), self.errors, self.tokens_out,
                                          self.config.duration_s))


class _Reserve:
    """Idle connections kept ahead of the arrivals of the next RESERVE_S (at most MAX_PREWARM), opened by one
    background task at a time, so that the sender finds one for each request when it is prepared."""

    def __init__(self, client, offsets: list[float], t0: float):
        self.client, self.offsets, self.t0 = client, offsets, t0
        self.task: asyncio.Task | None = None

    def top_up(self, i: int, now: float) -> None:
        if self.task is not None and not self.task.done():
            return
        from bisect import bisect_right

        ahead = bisect_right(self.offsets, now - self.t0 + RESERVE_S, lo=i) - i
        want = min(MAX_PREWARM, ahead + RESERVE_MARGIN)
        self.task = asyncio.get_running_loop().create_task(self.client.prewarm(want))

    def close(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()


def prewarm_count(config: LoadConfig, replay=None) -> int:
    """Connections to open before the first request: the concurrency, or about two seconds of
    arrivals (a guess at what will be in flight), at most MAX_PREWARM."""
    if config.concurrency is not None:
        return min(config.concurrency, MAX_PREWARM)
    rate = config.rate
    if replay is not None:
        first = replay.offsets[:int(2 * 64)]        # the trace's opening rate
        rate = (len(first) - 1) / first[-1] if len(first) > 1 and first[-1] > 0 else len(first)
    return min(MAX_PREWARM, max(1, math.ceil(2 * rate)))


async def _plan_replay(config: LoadConfig, counter, trace, notes: list[str]):
    """The trace (read here unless the caller read it, and said its bad rows itself) as a replay plan."""
    from servewatch.load import trace as T
    from servewatch.load import trace_replay

    if trace is None:
        try:
            trace = T.read_trace(config.trace, max_rows=config.max_rows, window=config.window,
                                 block=config.trace_block)
        except OSError as exc:
            raise SourceUnavailable(f"--trace {config.trace}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ServewatchError(f"--trace {config.trace}: {exc}") from None
        notes.extend(bad.words() for bad in trace.bad)
    if not trace.rows:
        raise ServewatchError(f"--trace {config.trace}: no rows to replay"
                              + (" in the --window asked for" if config.window else ""))
    replay = await trace_replay.plan(trace, config.speed, counter, config.seed)
    if replay.texts is None and replay.maker.tokens_per_word != 1.0:
        notes.append(f"trace prompts sized at {replay.maker.tokens_per_word:.3f} tokens a word (measured by the "
                     f"{counter.source} counter on a sample), not counted one by one (over "
                     f"{trace_replay.EXACT_ROWS} rows); server usage is the truth")
    elif not replay.exact:
        notes.append("some trace prompts could not be built to the exact token count; server usage is the truth")
    return replay


async def build_prompts(config: LoadConfig, counter, count: int) -> list[P.Prompt]:
    pool = max(1, min(count, config.prompt_pool,
                      SERVER_TOKENIZE_POOL if counter.source == "server" else config.prompt_pool))
    lengths = prompt_lengths(config.prompt_tokens, config.prompt_stdev, pool, seed=config.seed)
    rng = random.Random(f"prompts:{config.seed}")
    return [await P.build_prompt(counter, n, rng) for n in lengths]


async def run_load_async(config: LoadConfig, *, client=None, clock=None,
                         on_progress: Callable[[Progress], None] | None = None,
                         read_scrape: Callable | None = None, metrics_client=None,
                         salvage_on_cancel: bool = False, trace=None,
                         stop_sending: Callable[[], bool] | None = None,
                         on_record: Callable[[RequestRecord], None] | None = None) -> LoadResult:
    """Run the load described by `config`. Errors of single requests are records, never raised;
    a bad configuration or an unreachable target without --model raises ServewatchError.
    With `salvage_on_cancel` (the CLI's Ctrl-C), a cancelled run returns what it recorded so far,
    with summary["interrupted"] set, instead of raising CancelledError. `stop_sending` (called before each
    request is sent; True: send no more, let those in flight finish) ends the run early; `on_record` is given
    each request's record as it finishes (a drill watching for the first good request after a fault)."""
    try:
        config = config.resolved()
    except ValueError as exc:
        raise ServewatchError(str(exc)) from None
    try:
        endpoint = Endpoint.parse(config.url)
    except ValueError as exc:
        raise ServewatchError(str(exc)) from None
    clock = clock or RealClock()
    own_client = client is None
    client = client or make_client(config, endpoint)
    own_metrics = metrics_client is None and config.metrics_interval_s > 0
    if own_metrics:
        metrics_client = Http1Client(endpoint, connect_timeout=config.connect_timeout_s, max_idle=2)
    notes: list[str] = []
    try:
        model = config.model or await resolve_model(client, url=config.url)
        try:
            counter = await P.make_counter(config.tokenizer, client=client, model=model)
        except (OSError, ValueError, ImportError) as exc:
            raise ServewatchError(f"--tokenizer {config.tokenizer}: {exc}") from None
        if counter.source == "approx":
            notes.append("prompt token counts are APPROXIMATE (no tokenizer, no /tokenize): "
                         "one short word per token; server usage is the truth")
        replay = None
        if config.trace is not None:
            try:
                replay = await _plan_replay(config, counter, trace, notes)
            except (TimeoutError, OSError, RuntimeError, ValueError) as exc:   # /tokenize slow, down or odd
                what = f"no answer within {getattr(counter, 'timeout_s', 10):g} s" if isinstance(exc, TimeoutError) else (str(exc) or type(exc).__name__)
                raise ServewatchError(f"{config.url}/tokenize: {what} while the trace's prompts were being measured; "
                                      "give --tokenizer DIR to count tokens locally, or retry when the server "
                                      "answers") from None
            offsets = replay.offsets
            total = len(offsets)
        elif config.concurrency is None:
            offsets = arrival_times(config.arrival, config.rate, seed=config.seed,
                                    requests=config.requests, duration_s=config.duration_s)
            total: int | None = len(offsets)
        else:
            offsets = []
            total = config.requests
        try:
            prompts = [] if replay is not None else await build_prompts(config, counter, total or config.prompt_pool)
        except (TimeoutError, OSError, RuntimeError, ValueError) as exc:   # /tokenize slow, down or odd
            what = f"no answer within {getattr(counter, 'timeout_s', 10):g} s" if isinstance(exc, TimeoutError) else (str(exc) or type(exc).__name__)
            raise ServewatchError(f"{config.url}/tokenize: {what} while the prompts were being measured; give "
                                  "--tokenizer DIR to count tokens locally, or retry when the server answers") from None
        if replay is None and not all(p.exact for p in prompts) and counter.source != "approx":
            notes.append("some prompts could not be built to the exact token count; see prompts_exact")
        path = "/v1/chat/completions" if config.api == "chat" else "/v1/completions"
        bodies = [build_body(config.api, model, p.text, config.output_tokens) for p in prompts]

        def specs_for(i: int, scheduled: float) -> RequestSpec:
            k = i % len(prompts)
            return RequestSpec(i, scheduled, path, bodies[k], prompts[k].tokens, config.output_tokens,
                               True, prompts[k].text if config.keep_text else None)

        if replay is not None:
            specs_for = replay.specs_for(path, model, config.api, config.keep_text)
        run = _Run(config, client, clock, specs_for, total, on_progress, stop_sending=stop_sending,
                   on_record=on_record)
        view = None
        if config.metrics_interval_s > 0:
            view = ServerView(metrics_client, clock.now, None if isinstance(clock, RealClock) else clock.sleep,
                              config.metrics_interval_s, read_scrape=read_scrape)
            await view.scrape_once()        # the baseline, before the first request
        if hasattr(client, "prewarm"):
            await client.prewarm(prewarm_count(config, replay))
        gc.collect()
        gc.freeze()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        ticker = loop.create_task(run.tick(stop))
        sampler = loop.create_task(view.run(stop)) if view is not None else None
        t0 = clock.now() + START_MARGIN_S
        run.started = t0
        interrupted = False
        in_flight_at_stop = 0
        try:
            if config.concurrency is None:
                await run.by_rate(offsets, t0)
            else:
                await run.by_concurrency(t0)
        except asyncio.CancelledError:
            if not salvage_on_cancel:
                raise
            interrupted = True
            in_flight_at_stop = len(run.watchdog.in_flight)
        finally:
            wall = clock.now() - t0
            stop.set()
            for task in list(run.tasks):
                task.cancel()
            if run.sender is not None:
                run.sender.close()
            ticker.cancel()
            await asyncio.gather(ticker, *([sampler] if sampler else []), return_exceptions=True)
            gc.unfreeze()
        if view is not None and not interrupted:
            await view.scrape_once()        # the final state, after the last request
        server = view.summary() if view is not None else None
        records = sorted(run.records, key=lambda r: r.id)
        summary = summarize(config, records, wall_s=wall, prompt_source=counter.source,
                            prompts_exact=all(p.exact for p in prompts), server=server,
                            client_name=config.client)
        summary["model"] = model
        if replay is not None:
            summary["scenario"] = summary["arrival"] = "trace"
            summary["trace"] = replay.summary()
            summary["requested_rate"] = summary["trace"]["mean_rate"]      # the trace's own, after --speed
            summary["prompts_exact"] = replay.exact
        # how rate-scheduled requests were written: by the sender thread at "realtime" or "normal"
        # scheduling priority, or None (by the event loop)
        summary["send_thread"] = run.sender.priority if run.sender is not None else None
        summary["interrupted"] = interrupted
        if interrupted:
            notes.append(f"interrupted after {len(records)} finished requests; "
                         f"{in_flight_at_stop} in flight were dropped")
        summary["notes"] = notes
        return LoadResult(config, records, view.samples if view else [], summary, counter.source, model, notes)
    finally:
        if own_client:
            await client.close()
        if own_metrics:
            await metrics_client.close()


def loop_factory(kind: str):
    """`auto`: uvloop when installed (its C transports roughly halve the per-read cost), else asyncio."""
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise ServewatchError("event loop uvloop asked for but not installed (pip install uvloop)") from None
        return None
    return uvloop.new_event_loop


def run_load(config: LoadConfig, **kwargs) -> LoadResult:
    """Blocking entry point: runs `run_load_async` in a fresh event loop (see loop_factory)."""
    box: list[LoadResult] = []

    async def main() -> None:
        # The main task must not return the result: on closing, asyncio.Runner restores the SIGINT
        # handler and Python 3.11's signal module builds a repr of the old handler, which holds the
        # task and so its result — every record (measured: 0.8 CPU-s for 1000 x 100 tokens).
        remove = None
        if kwargs.get("salvage_on_cancel") and threading.current_thread() is threading.main_thread():
            # ^C, SIGTERM or SIGHUP: the run is cancelled and what finished is kept (servewatch.stopping)
            remove = stopping.on_stop(asyncio.get_running_loop(), asyncio.current_task().cancel)
        try:
            box.append(await run_load_async(config, **kwargs))
        except asyncio.CancelledError:
            if remove is not None and stopping.received() is not None:
                raise KeyboardInterrupt from None     # stopped before the first request: nothing to keep
            raise
        finally:
            if remove is not None:
                remove()

    with asyncio.Runner(loop_factory=loop_factory(config.event_loop)) as runner:
        runner.run(main())
    return box[0]
