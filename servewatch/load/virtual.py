"""The same load, driven in virtual time against servewatch's simulator in-process (no HTTP, no
sleeping): what `servewatch demo --fast` and the signature tests use.

The simulator's in-process API is synchronous and step-driven (`engine.run_until(t)`,
`engine.submit(...)`), so instead of an asyncio transport this driver walks one merged timeline of
arrivals and /metrics sampling times. Records are built by the same code as over HTTP
(client.finish_record), with each token its own chunk at the engine's exact token time; requests are
sent exactly when scheduled (schedule delay 0: there is no client to be late).
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable

from servewatch.errors import ServewatchError
from servewatch.load import prompts as P
from servewatch.load.client import RequestSpec, finish_record
from servewatch.transport.stream import StreamState
from servewatch.load.records import RequestRecord, TIMEOUT, HTTP_4XX, HTTP_5XX
from servewatch.load.runner import LoadResult, _plan_replay, build_prompts
from servewatch.load.scenarios import LoadConfig, arrival_times
from servewatch.load.server_view import ServerView
from servewatch.load.summary import summarize

START_MARGIN_S = 0.05


class SimCounter:
    """The simulator's documented token counter, used as the tokenizer (exact on the simulator)."""

    source = "tokenizer"

    async def count(self, text: str) -> int:
        from servewatch.sim import tokens

        return tokens.count_tokens(text)


def _run_coro(coro):
    """Run a coroutine that never awaits anything pending (our counters are synchronous inside)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("virtual driver: unexpected await")


def finish_from_engine(rec: RequestRecord, spec: RequestSpec, handle, now: float) -> None:
    """Complete `rec` from the simulator's request handle as the HTTP client would have seen the stream:
    one token per chunk at the engine's token times, the server's usage, its finish reason."""
    state = StreamState(False, False)
    state.chunk_t = array("d", [t - rec.sent for t in handle.token_times])
    state.chunk_k = array("I", [1]) * len(handle.token_times)
    state.completion_tokens = handle.output_len
    state.prompt_tokens = handle.prompt_len
    state.finish_reason = handle.finish_reason
    state.saw_done = handle.finished
    end = handle.finished_ts if handle.finished and handle.finished_ts is not None else now
    rec.e2e_s = end - rec.sent
    finish_record(rec, state, spec)


def run_load_virtual(config: LoadConfig, engine, *, read_scrape: Callable | None = None,
                     drain_s: float | None = None, trace=None) -> LoadResult:
    """Run `config` against a `servewatch.sim.SimEngine` whose clock is a VirtualClock (a trace replay too:
    `config.trace`, read here unless `trace` is given)."""
    try:
        config = config.resolved()
    except ValueError as exc:
        raise ServewatchError(str(exc)) from None
    if config.concurrency is not None:
        raise ServewatchError("the virtual-time driver runs rate-based scenarios only (no --concurrency)")
    clock = engine.clock
    model = config.model or engine.config.model_name
    counter = SimCounter()
    notes: list[str] = []
    replay = None
    if config.trace is not None:
        replay = _run_coro(_plan_replay(config, counter, trace, notes))
        offsets = replay.offsets
        prompts: list[P.Prompt] = []
    else:
        offsets = arrival_times(config.arrival, config.rate, seed=config.seed, requests=config.requests,
                                duration_s=config.duration_s)
        prompts = _run_coro(build_prompts(config, counter, len(offsets) or 1))
    view = ServerView(None, clock.now, None, config.metrics_interval_s, read_scrape=read_scrape) \
        if config.metrics_interval_s > 0 else None

    def scrape() -> None:
        now = clock.now()
        if engine.health() == 0:
            view.add_error(now, "connect")
        else:
            view.ingest(engine.metrics_text(), now, now)

    if view is not None:
        scrape()
    t0 = clock.now() + START_MARGIN_S
    live: dict[int, tuple[RequestSpec, RequestRecord, object]] = {}
    records: list[RequestRecord] = []
    next_id = 0

    def submit(scheduled: float) -> None:
        nonlocal next_id
        i = next_id
        next_id += 1
        if replay is not None:
            row = replay.trace.rows[i]
            text = replay.texts[i] if replay.texts is not None else replay.maker.text(i, row)
            prompt = P.Prompt(text, max(1, row.input_tokens), max(1, row.input_tokens), counter.source)
            max_tokens = max(1, row.output_tokens)
        else:
            prompt = prompts[i % len(prompts)]
            max_tokens = config.output_tokens
        spec = RequestSpec(i, scheduled, "", b"", prompt.tokens, max_tokens, True,
                           prompt.text if config.keep_text else None)
        rec = RequestRecord(id=i, scheduled=scheduled, prompt_tokens_target=prompt.tokens,
                            max_tokens=max_tokens, sent=clock.now())
        if config.keep_text:
            rec.prompt = prompt.text
        from servewatch.sim import EngineDeadError, RequestRejected

        if engine.health() == 0:
            rec.error, rec.error_detail = "connect", "the simulated server is not answering"
            rec.sent = None
            records.append(rec)
            return
        try:
            handle = engine.submit(prompt=prompt.text, max_tokens=max_tokens, ignore_eos=True)
        except RequestRejected:
            rec.http_status, rec.error, rec.error_detail = 400, HTTP_4XX, "HTTP 400"
            rec.e2e_s = 0.0
            records.append(rec)
            return
        except EngineDeadError:
            rec.http_status, rec.error, rec.error_detail = 500, HTTP_5XX, "HTTP 500"
            rec.e2e_s = 0.0
            records.append(rec)
            return
        rec.http_status = 200
        live[i] = (spec, rec, handle)

    def collect(force_timeout: bool = False) -> None:
        for i in [i for i, (_, _, h) in live.items() if h.finished or force_timeout]:
            spec, rec, handle = live.pop(i)
            if not handle.finished:
                rec.error, rec.error_detail = TIMEOUT, f"no end within {config.request_timeout_s:g} s"
                engine.abort(handle)
            finish_from_engine(rec, spec, handle, clock.now())
            records.append(rec)

    # one merged timeline: ("arrival", t) and ("scrape", t)
    events: list[tuple[float, int, str]] = []
    for off in offsets:
        heapq.heappush(events, (t0 + off, 0, "arrival"))
    end_of_arrivals = t0 + (offsets[-1] if offsets else 0.0)
    interval = config.metrics_interval_s
    if view is not None:
        heapq.heappush(events, (t0 + interval, 1, "scrape"))
    drain = drain_s if drain_s is not None else config.request_timeout_s
    give_up_at = None
    while True:
        t, _, kind = heapq.heappop(events) if events else (None, 0, "")
        if t is None:
            break
        engine.run_until(max(t, clock.now()))
        collect()
        if kind == "arrival":
            submit(t)
        elif kind == "scrape":
            scrape()
            arrivals_left = any(k == "arrival" for _, _, k in events)
            if arrivals_left or live:
                if not arrivals_left and give_up_at is None:
                    give_up_at = max(clock.now(), end_of_arrivals) + drain
                if give_up_at is not None and clock.now() >= give_up_at:
                    collect(force_timeout=True)
                else:
                    heapq.heappush(events, (t + interval, 1, "scrape"))
        if view is None and not events and live:
            # no sampling ticks: step the engine until the live requests finish or the drain ends
            limit = clock.now() + drain
            while live and clock.now() < limit:
                engine.run_until(min(limit, clock.now() + 1.0))
                collect()
            collect(force_timeout=True)
    wall = clock.now() - t0
    if view is not None:
        scrape()
    records.sort(key=lambda r: r.id)
    server = view.summary() if view is not None else None
    summary = summarize(config, records, wall_s=wall, prompt_source=counter.source,
                        prompts_exact=all(p.exact for p in prompts), server=server, client_name="virtual")
    summary["model"] = model
    if replay is not None:
        summary["scenario"] = summary["arrival"] = "trace"
        summary["trace"] = replay.summary()
        summary["requested_rate"] = summary["trace"]["mean_rate"]
    summary["notes"] = ["virtual time against the in-process simulator", *notes]
    return LoadResult(config, records, view.samples if view else [], summary, counter.source, model,
                      summary["notes"])
