"""Everything servewatch knows about vLLM's outside: metric names across versions, bucket edges,
health semantics and log grammar (V1 engine; 0.11-era and 0.32/0.33-era names).

Sources: vLLM 0.33.0 `vllm/v1/metrics/loggers.py` and `buckets.py`, 0.11.0 for older names; a live
vLLM 0.32.0 CPU server for the log lines and behaviour.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence

from servewatch.dialects import base, pytorch
from servewatch.dialects.series import EngineSeries, LatencyHistogram, RatioSeries
from servewatch.engine.state import Counters, EngineState, KvTransfer
from servewatch.exposition.model import Family

NAME = "vllm"
TITLE = "vLLM"
PREFIX = "vllm:"
IDENTITY_LABELS = ("model_name", "engine")
# A request with this header runs on that data-parallel rank's engine (0.32: generate/base/serving.py:219-232
# `_get_data_parallel_rank` reads it, an int or ignored; openai/completion/serving.py:151 and
# chat_completion/serving.py:327 pass it to the engine client as data_parallel_rank).
DP_RANK_HEADER = "X-data-parallel-rank"
DP_RANK_LABEL = "engine"          # vllm:* series of data-parallel engine n carry engine="n"

# --- metric names (exposed sample/family names as prometheus_client writes them) ----------------
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"       # 0.32+: reason = capacity | deferred
KV_USAGE = "vllm:kv_cache_usage_perc"                            # 0.11+ (fraction 0..1 despite the name)
KV_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"                    # before 0.11; hidden in 0.11
CACHE_CONFIG_INFO = "vllm:cache_config_info"
ENGINE_SLEEP_STATE = "vllm:engine_sleep_state"                   # 0.32+
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source_total"   # 0.32+
GENERATION_TOKENS = "vllm:generation_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
REQUEST_SUCCESS = "vllm:request_success_total"                   # label finished_reason
ITERATION_TOKENS = "vllm:iteration_tokens_total"                 # histogram: _count = engine steps
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
# --- the KV connector (prefill/decode disaggregation), 0.32 ------------------------------------------------
# v1/metrics/loggers.py: decode-side gauges; kv_fetch_by_stage is registered only where the connector's role
# consumes KV (kv_consumer, kv_both), with stages from v1/metrics/stats.py KV_FETCH_STAGES.
KV_FETCH_BY_STAGE = "vllm:num_requests_kv_fetch_by_stage"
KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")
WAITING_REASON_DEFERRED = "deferred"      # waiting_by_reason: KV transfer (also LoRA budget, blocked status)
EXTERNAL_PREFIX_QUERIES = "vllm:external_prefix_cache_queries_total"
EXTERNAL_PREFIX_HITS = "vllm:external_prefix_cache_hits_total"
SOURCE_EXTERNAL = "external_kv_transfer"  # prompt_tokens_by_source{source=...}: tokens that came by KV transfer
SOURCE_LOCAL = "local_compute"
# distributed/kv_transfer/kv_connector/v1/nixl/stats.py NixlPromMetrics (per engine; the "vllm:" prefix): the
# transfer histograms are recorded where the transfer is read (decode, in pull mode); expired leases on the
# prefill ("tracked on the P instance"). failed_transfers includes handshake and notification failures.
NIXL_XFER_TIME = "vllm:nixl_xfer_time_seconds"
NIXL_POST_TIME = "vllm:nixl_post_time_seconds"
NIXL_BYTES = "vllm:nixl_bytes_transferred"
NIXL_DESCRIPTORS = "vllm:nixl_num_descriptors"
NIXL_FAILED_TRANSFERS = "vllm:nixl_num_failed_transfers_total"
NIXL_FAILED_NOTIFICATIONS = "vllm:nixl_num_failed_notifications_total"
NIXL_EXPIRED = "vllm:nixl_num_kv_expired_reqs_total"
NIXL_AFTER_EXPIRY = "vllm:nixl_num_notifications_after_expiry_total"
NIXL_BUCKETS = {
    NIXL_XFER_TIME: (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0),
    NIXL_POST_TIME: (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0),
    NIXL_BYTES: tuple(2 ** (10 + i) for i in range(1, 25, 2)),
    NIXL_DESCRIPTORS: (10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000),
}
# The API server's HTTP counter (prometheus-fastapi-instrumentator, no "vllm:" prefix, the same name in
# 0.11 and 0.32): labels handler (the route, "none" for a path without one), method, status ("2xx", ...).
HTTP_REQUESTS = "http_requests_total"
HTTP_HANDLER_LABEL = "handler"
HTTP_STATUS_LABEL = "status"
HTTP_UNROUTED_HANDLER = "none"
HTTP_REQUEST_SIZE = "http_request_size_bytes"      # summary by handler: the request bodies' bytes
# Handlers whose requests run on the engine. A client that hangs up is answered 2xx here, but vLLM 0.32
# counts its abort nowhere (the API server drops the request before any finished-request statistic):
# on a real vLLM, 8 streams closed after their first chunk left request_success_total unchanged.
HTTP_GENERATION_HANDLERS = ("/v1/completions", "/v1/chat/completions", "/v1/responses")
# Endpoints a watcher or a load balancer polls: not the clients' requests.
HTTP_MONITORING_HANDLERS = ("/health", "/metrics", "/ping", "/version", "/v1/models", "/load", "/is_sleeping",
                            "/server_info")

HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "tpot": ("vllm:request_time_per_output_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
}

# Families whose presence marks the 0.32/0.33-era names (absent from 0.11.0).
NAMING_032_MARKERS = (WAITING_BY_REASON, ENGINE_SLEEP_STATE, PROMPT_TOKENS_BY_SOURCE)

# --- bucket edges (vllm/v1/metrics/buckets.py) ------------------------------------------------
BUCKETS = {
    "request_latency": (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
    "time_to_first_token": (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                            7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
    "inter_token_latency": (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                            10.0, 20.0, 40.0, 80.0),
    "iteration_tokens": (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    "request_params_n": (1, 2, 5, 10, 20),
    "request_num_preemptions": (1, 2, 3, 4, 5, 10, 20),
}


def request_tokens_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's 1-2-5 series up to max_model_len (build_1_2_5_buckets)."""
    edges: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(edges)
            edges.append(value)
        exponent += 1


FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

# --- health semantics -----------------------------------------------------------------------
# GET /health: empty body; 200 while the engine runs; 503 on EngineDeadError (the API server then
# exits within ~5 s unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH). It does NOT check progress: a stopped
# worker leaves /health at 200.
HEALTH_DEAD_STATUS = 503
PROCESS_ROLES = {"VLLM::EngineCore": "engine_core", "VLLM::Worker": "worker", "VLLM::APIServer": "api"}
# Ranked processes (v1/engine/core.py, v1/executor/multiproc_executor.py, v1/engine/coordinator.py in 0.32): the
# engine core "EngineCore" or "EngineCore_DP<n>"; a worker "Worker" plus _DP/_PP/_PCP/_TP/_DCP/_EP suffixes for
# each group larger than one (a DP engine's own worker reads plain "Worker": its DP rank is its parent's).
RANK_TITLES = {"VLLM::EngineCore": "engine_core", "VLLM::Worker": "worker", "VLLM::DPCoordinator": "coordinator"}
SLOT_LIMIT_FLAG = "--max-num-seqs"
CONTEXT_LENGTH_FLAG = "--max-model-len"
MEMORY_BUDGET = ("gpu_memory_utilization", "--gpu-memory-utilization", 0.9)
DEFAULT_MAX_NUM_SEQS = 256

# --- log grammar ----------------------------------------------------------------------------
LOG_PREFIX = re.compile(
    r"^(?:\x1b\[[0-9;]*m)*\((?P<process>[\w:-]+) pid=(?P<pid>\d+)\)(?:\x1b\[[0-9;]*m)* "
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[(?P<where>[^\]]+)\] (?P<msg>.*)$"
)
LOG_CLOCK_FORMAT = "%m-%d %H:%M:%S"          # the prefix's ts: month-day and the server's local time, no year
STATS_LINE = re.compile(
    r"Engine (?P<engine>\d+): Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen_tps>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs, "
    r"Waiting: (?P<waiting>\d+) reqs"
    r"(?:, Deferred: (?P<deferred>\d+) reqs)?"
    r"(?:, KV fetch: (?P<kv_fetch_waiting>\d+) waiting to start, (?P<kv_fetch_in_progress>\d+) in progress, "
    r"(?P<kv_fetch_completed>\d+) completed waiting)?"
    r"(?:, Preemptions: (?P<preemptions>\d+))?"
    r", (?P<device>\w+) KV cache usage: (?P<kv_pct>[\d.]+)%"
    r"(?:, Prefix cache hit rate: (?P<prefix_hit_pct>[\d.]+)%)?"
    r"(?:, Corrupted: \d+ reqs)?(?:, External prefix cache hit rate: (?P<external_hit_pct>[\d.]+)%)?"   # a KV connector's
)
KV_CACHE_SIZE_LINE = re.compile(
    r"(?P<device>\w+) KV cache size: (?P<tokens>[\d,]+) tokens"
    r"(?:, Maximum concurrency for (?P<per_request>[\d,]+) tokens per request: (?P<concurrency>[\d.]+)x)?"
)
ENGINE_DEAD_LINES = (
    "EngineCore encountered a fatal error.",
    "EngineDeadError",
    "engine core exited unexpectedly",
    "Engine core proc",
    "Executor failed.",
)
ENGINE_ALIVE_SIGNS = "/health 200, no EngineDeadError / 'Worker proc ... died' lines"
WORKER_DIED_LINE = re.compile(r"Worker proc (?P<worker>\S+) died unexpectedly(?: \(exit code: (?P<code>[-\w]+)\))?")
STARTUP_FAILURE_LINES = (
    "EngineCore failed to start.",
    "Engine core initialization failed.",
    "No available memory for the cache blocks.",
    "To serve at least one request with the model's max seq len",
    "is less than desired CPU memory utilization",
    "Timed out waiting for engine core processes to start.",
)
READY_LINE = "Application startup complete."
# The API server was asked to stop (SIGTERM, ^C): 0.32 logs this, then stops its engine core first.
SHUTDOWN_LINE = "[shutdown] API server: shutdown triggered"

# Startup stages, in the order a 0.32 CPU server logged them (a GPU server profiles memory and captures
# CUDA graphs between weights_loaded and engine_ready). Literal → stage; patterns carry the seconds.
STARTUP_STAGE_LINES = (
    ("non-default args: ", "process_up"),                      # api_utils.py (0.11: arg_utils) — the API server
    ("Initializing a V1 LLM engine", "engine_start"),          # core.py: the engine core process
    ("Starting to load model", "weights_loading"),             # gpu_/cpu_model_runner.py
    ("Warming up model for the compilation", "compiling"),     # cpu_model_runner.py
    ("Warming up done.", "compiled"),
)
WEIGHTS_LOADED_LINE = re.compile(r"Loading weights took (?P<seconds>[\d.]+) seconds")
COMPILED_LINE = re.compile(r"torch\.compile takes (?P<seconds>[\d.]+) s in total")
GRAPHS_CAPTURED_LINE = re.compile(r"Graph capturing finished in (?P<seconds>[\d.]+) secs")
ENGINE_READY_LINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) s")
KV_CONCURRENCY_LINE = re.compile(r"^Maximum concurrency for (?P<per_request>[\d,]+) tokens per request: "
                                 r"(?P<concurrency>[\d.]+)x")        # 0.11: its own line after the KV size
API_LISTENING_LINE = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on ")   # the address is not kept

# vLLM 0.32/0.33 startup failures, with the numbers that make the message useful
# (v1/core/kv_cache_planning.py:67-87; v1/worker/cpu_worker.py:205-248). The literal prefixes are the
# dialect's STARTUP_FAILURE_LINES.
VLLM_KV_TOO_SMALL = re.compile(
    r"To serve at least one request with the model's max seq len \((?P<max_model_len>\d+)\), "
    r"\((?P<needed_gib>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory "
    r"\((?P<available_gib>[\d.]+) GiB\)"
)
VLLM_CPU_MEMORY_SHORT = re.compile(
    r"Available memory on node (?P<node>\d+) \((?P<available_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) on startup "
    r"is less than desired CPU memory utilization \((?P<utilization>[\d.]+), (?P<desired_gib>[\d.]+) GiB\)"
)
_NUMBERS = {VLLM_KV_TOO_SMALL: {"max_model_len": int, "needed_gib": float, "available_gib": float},
            VLLM_CPU_MEMORY_SHORT: {"node": int, "available_gib": float, "total_gib": float, "utilization": float,
                                    "desired_gib": float}}


def startup_failure_numbers(message: str) -> dict[str, float | int]:
    """The numbers of a known startup-failure message (empty when it is not one we can read)."""
    for pattern, names in _NUMBERS.items():
        match = pattern.search(message)
        if match:
            return {name: kind(match.group(name)) for name, kind in names.items()}
    return {}


def describe_startup_failure(fields) -> str:
    """The engine's own message, rebuilt from the grammar literal and the parsed numbers only."""
    reason = str(fields.get("reason", "unknown"))
    if "max_model_len" in fields:
        return (f"{reason} ({fields['max_model_len']}), ({fields.get('needed_gib')} GiB KV cache is needed, which "
                f"is larger than the available KV cache memory ({fields.get('available_gib')} GiB))")
    if "desired_gib" in fields:
        return (f"Available memory on node {fields.get('node')} ({fields.get('available_gib')}/"
                f"{fields.get('total_gib')} GiB) on startup {reason} ({fields.get('utilization')}, "
                f"{fields.get('desired_gib')} GiB)")
    return reason


OOM_LINE = re.compile(r"OutOfMemoryError|out of memory\. Tried to allocate (?P<mib>[\d.]+) (?P<unit>[MG]iB)")

# --- the KV connector's log lines (0.32) ---------------------------------------------------------------------
# kv_connector/v1/metrics.py KVConnectorLogging.log, after each stats line: NixlKVConnectorStats.reduce()'s keys.
KV_TRANSFER_METRICS_LINE = re.compile(r"KV Transfer metrics: (?P<body>.*)$")
KV_TRANSFER_METRICS_FIELDS = {"Num successful transfers": "transfers", "Avg xfer time (ms)": "avg_xfer_ms",
                              "P90 xfer time (ms)": "p90_xfer_ms", "Avg MB per transfer": "avg_mb",
                              "Throughput (MB/s)": "throughput_mb_s", "Num failed transfers": "failed",
                              "Num KV expired reqs": "expired", "Num notifs after expiry": "after_expiry"}
# v1/core/sched/scheduler.py:3418 (failure_policy=fail, ERROR) and :3427 (recompute, WARNING); the request ids
# that follow are never read.
KV_LOAD_FAILED_LINE = re.compile(r"Failing (?P<requests>\d+) request\(s\) due to KV load failure "
                                 r"\(failure_policy=\w+, (?P<tokens>\d+) tokens affected\)")
KV_LOAD_RECOVERED_LINE = re.compile(r"Recovered from KV load failure: (?P<requests>\d+) request\(s\) rescheduled "
                                    r"\((?P<tokens>\d+) tokens affected\)")
# nixl/base_worker.py:3033 (prefill, WARNING): a lease ran out before decode read the blocks.
KV_EXPIRED_LINE = re.compile(r"Releasing expired KV blocks for request \S+ which were retrieved by (?P<workers>\d+) "
                             r"remote worker\(s\) before lease expired")
# nixl/base_worker.py:1261 (ERROR) "NIXL transfer failure: <type> | Context: {...}" (the context names requests).
NIXL_FAILURE_LINE = re.compile(r"NIXL transfer failure: (?P<failure_type>[a-z_]+)")
NIXL_FAILURE_TYPES = ("handshake_setup_failed", "handshake_failed", "transfer_setup_failed", "transfer_failed",
                      "transfer_exception", "transfer_release_failed", "notification_failed", "other")
EXTERNAL_CACHE_HIT_LINE = "External Cache Hit!"      # example_connector.py:292 (decode found the prefill's KV)

# --- what reading a whole log after the fact needs beyond parse_log_message (the postmortem) ----------
# Before "Engine 000: ", V1 wrote the stats line without the engine part, and the V0 engine wrote
# Swapped/Pending and both KV pools.
OLDER_STATS_LINE = re.compile(
    r"^Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, Avg generation throughput: (?P<gen_tps>[\d.]+) "
    r"tokens/s, Running: (?P<running>\d+) reqs, (?:Swapped: (?P<swapped>\d+) reqs, )?"
    r"(?:Pending|Waiting): (?P<waiting>\d+) reqs, (?P<device>\w+) KV cache usage: (?P<kv_pct>[\d.]+)%"
    r"(?:, CPU KV cache usage: (?P<cpu_kv_pct>[\d.]+)%)?(?:, Prefix cache hit rate: (?P<prefix_hit_pct>[\d.]+)%)?")
# V1's dump when the engine core dies mid-step (dump_input.py): the scheduler's state at death. The
# "Dumping scheduler output" line next to it carries request ids and token ids: never read.
SCHEDULER_STATS_DUMP = re.compile(
    r"Dumping scheduler stats: SchedulerStats\(num_running_reqs=(?P<running>\d+), "
    r"num_waiting_reqs=(?P<waiting>\d+).*?(?:kv_cache_usage|gpu_cache_usage)=(?P<kv>[\d.eE-]+)")
# Older and multi-rank prefixes: "(VllmWorker rank=0 pid=7)", "(EngineCore_0 pid=7)" (0.8-0.11 wrote the
# process part through a stdout hook, in ANSI colour), API-server lines with no process part at all, and a
# process part before a bare message.
_process_part = r"\((?P<process>[A-Za-z][\w:.-]*)(?: rank=(?P<rank>\d+))? pid=(?P<pid>\d+)\) "
OLDER_LOG_PREFIXES = (
    re.compile(r"^(?:" + _process_part + r")?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
               r"(?P<ts>(?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[(?P<where>[^\]]+)\] (?P<msg>.*)$"),
    re.compile(r"^" + _process_part + r"(?P<msg>.*)$", re.DOTALL),
)
RECORD_GRAMMAR = base.RecordGrammar(
    older_prefixes=OLDER_LOG_PREFIXES,
    engine_processes=("EngineCore", "Worker", "VllmWorker"),
    api_process="APIServer",
    packages=("vllm",),
    startup_stages=(
        ("weights", WEIGHTS_LOADED_LINE),
        ("weights", re.compile(r"Model loading took (?P<gib>[\d.]+) GiB(?: memory)? and (?P<seconds>[\d.]+) seconds")),
        ("memory profiling", re.compile(r"Memory profiling takes (?P<seconds>[\d.]+) seconds")),
        ("memory profiling", re.compile(r"Initial profiling/warmup run took (?P<seconds>[\d.]+) s")),
        ("KV sizing", re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")),
        ("compile", COMPILED_LINE),
        ("compile", re.compile(r"Compiling model again due to a load failure")),
        ("graph capture", re.compile(r"Graph capturing finished in (?P<seconds>[\d.]+) secs?, took (?P<gib>[\d.]+) GiB")),
        ("engine init", ENGINE_READY_LINE),
    ),
    settings_marker="non-default args: ",
    settings=(("max_num_seqs", re.compile(r"'max_num_seqs': (?P<value>\d+)"), int),
              ("gpu_memory_utilization", re.compile(r"'gpu_memory_utilization': (?P<value>[\d.]+)"), float)),
    oom_exceptions=pytorch.OOM_EXCEPTIONS, oom_literals=pytorch.OOM_LITERALS, oom_details=pytorch.OOM_DETAILS,
    signal_lines=(re.compile(r"received signal=(?P<signal>SIG[A-Z]+)"),),            # 0.32 engine core
    shutdown_lines=(SHUTDOWN_LINE,),
    force_kill_line=re.compile(r"force killing remaining process (?P<process>[A-Za-z][\w:.-]*)"),
    exit_code_lines=(re.compile(r"(?:died|terminated) with exit code:? (?P<code>-?\d+)"),),
    timeout_lines=(re.compile(r"RPC call to \w+ timed out"), re.compile(r"Timed out waiting for engine core processes to start")),
)


def record_stats(msg: str) -> base.StatsReading | None:
    older = OLDER_STATS_LINE.match(msg)
    if older and not STATS_LINE.search(msg):
        naming = ("vLLM stats lines without an engine number" if older["swapped"] is None else
                      "vLLM V0 stats lines (with Swapped and Pending)")
        return base.StatsReading("stats line without an engine number", naming, base.numbers(older, {
            "running": int, "waiting": int, "kv_pct": float, "prompt_tps": float, "gen_tps": float,
            "prefix_hit_pct": float}))
    dump = SCHEDULER_STATS_DUMP.search(msg)
    if dump:
        return base.StatsReading("engine dump at death", None, {"running": int(dump["running"]),
                                                                "waiting": int(dump["waiting"]),
                                                                "kv_pct": 100.0 * float(dump["kv"])})
    return None


def stats_reading(fields: Mapping) -> base.StatsReading:
    """The periodic stats line (every VLLM_LOG_STATS_INTERVAL s, written by the API server): "Engine 000:"
    is the `engine` label of that engine's /metrics series."""
    engine = fields.get("engine")
    return base.StatsReading("stats line", "vllm, with the engine index", {
        name: fields.get(name) for name in ("running", "waiting", "kv_pct", "prompt_tps", "gen_tps", "preemptions",
                                            "prefix_hit_pct")},
        labels={} if engine is None else {"engine": str(int(engine))})


def detect(families: Mapping[str, Family]) -> str | None:
    """The metric naming, or None when this is not a vLLM exposition."""
    if not any(name.startswith(PREFIX) for name in families):
        return None
    if any(n in families for name in NAMING_032_MARKERS for n in base.counter_names(name)):
        return "vllm-0.32"
    if KV_USAGE in families:
        return "vllm-0.11"
    return "vllm-legacy"


def wanted_families() -> tuple[str, ...]:
    names = [RUNNING, WAITING, WAITING_BY_REASON, KV_USAGE, KV_USAGE_LEGACY, CACHE_CONFIG_INFO,
             ENGINE_SLEEP_STATE, PROMPT_TOKENS, PROMPT_TOKENS_BY_SOURCE, GENERATION_TOKENS, PREEMPTIONS,
             REQUEST_SUCCESS, ITERATION_TOKENS, HTTP_REQUESTS, HTTP_REQUEST_SIZE, *KV_CONNECTOR_FAMILIES]
    for candidates in HISTOGRAMS.values():
        names.extend(candidates)
    return tuple(n for name in names for n in base.counter_names(name))


def read(families: Mapping[str, Family], naming: str) -> list[EngineState]:
    ids = IDENTITY_LABELS
    running = base.sum_by(families.get(RUNNING), ids)
    waiting = base.sum_by(families.get(WAITING), ids)
    by_reason = base.sum_by(families.get(WAITING_BY_REASON), ids, label="reason")
    kv = base.sum_by(base.first_family(families, KV_USAGE, KV_USAGE_LEGACY), ids)
    prompt = base.sum_counter(families, PROMPT_TOKENS, ids)
    generated = base.sum_counter(families, GENERATION_TOKENS, ids)
    preempted = base.sum_counter(families, PREEMPTIONS, ids)
    finished = base.sum_counter(families, REQUEST_SUCCESS, ids, label="finished_reason")
    steps = base.sum_by(families.get(ITERATION_TOKENS), ids, sample_name=ITERATION_TOKENS + "_count")
    histograms = base.histograms_by_kind(families, HISTOGRAMS, ids)
    kv_total = _kv_total_tokens(families.get(CACHE_CONFIG_INFO))
    connector = _kv_transfer(families, by_reason)
    responses = base.responses_by_status(families, HTTP_REQUESTS, handler_label=HTTP_HANDLER_LABEL,
                                         status_label=HTTP_STATUS_LABEL, skip_handlers=HTTP_MONITORING_HANDLERS,
                                         unrouted_handler=HTTP_UNROUTED_HANDLER)
    answered = base.responses_by_status(families, HTTP_REQUESTS, handler_label=HTTP_HANDLER_LABEL,
                                        status_label=HTTP_STATUS_LABEL, only_handlers=HTTP_GENERATION_HANDLERS)
    # The 2xx series of a handler appears with its first answer: before it, the exposed family counts 0
    # (read as "unknown", the first requests a fresh server answered were never weighed against the
    # requests its engine finished, and hang-ups right after them went unseen for a whole window).
    http_exposed = any(name in families for name in base.counter_names(HTTP_REQUESTS))
    answered_2xx = answered.get("2xx", 0.0) if http_exposed else None
    body_bytes, bodies = base.summary_by_handler(families, HTTP_REQUEST_SIZE, handler_label=HTTP_HANDLER_LABEL,
                                                 skip_handlers=(*HTTP_MONITORING_HANDLERS, HTTP_UNROUTED_HANDLER))

    keys = set(running) | set(waiting) | set(kv) | set(generated)
    states = []
    for key in sorted(keys):
        usage = kv.get(key)
        total = kv_total.get(dict(key).get("engine"), kv_total.get(None))
        states.append(base.engine_state(
            NAME, naming, key, {"running": running, "waiting": waiting, "kv_transfer": connector},
            waiting_by_reason=by_reason.get(key, {}),
            slot_limit=None,  # max_num_seqs is not exported; sources may fill it from the process
            kv_usage=usage,
            kv_used_tokens=usage * total if usage is not None and total is not None else None,
            kv_total_tokens=total,
            counters=Counters(
                prompt_tokens=prompt.get(key),
                generation_tokens=generated.get(key),
                preemptions=preempted.get(key),
                steps=steps.get(key),
                finished=finished.get(key, {}),
                responses=dict(responses),
                request_bytes=body_bytes,
                request_bytes_count=bodies,
                answered=answered_2xx,
            ),
            histograms=histograms.get(key) or {},
        ))
    return states


KV_CONNECTOR_FAMILIES = (KV_FETCH_BY_STAGE, EXTERNAL_PREFIX_QUERIES, EXTERNAL_PREFIX_HITS, NIXL_XFER_TIME, NIXL_BYTES,
                         NIXL_FAILED_TRANSFERS, NIXL_FAILED_NOTIFICATIONS, NIXL_EXPIRED)


def _kv_transfer(families: Mapping[str, Family], by_reason: Mapping) -> dict:
    """Each engine's side of a KV connector, where its series show one: the NIXL connector's families, the KV
    fetch gauge (a consumer's), or prompt tokens that came by transfer. An engine without them has none."""
    ids = IDENTITY_LABELS
    fetch = base.sum_by(families.get(KV_FETCH_BY_STAGE), ids, label="stage")
    by_source = base.sum_counter(families, PROMPT_TOKENS_BY_SOURCE, ids, label="source")
    queries = base.sum_counter(families, EXTERNAL_PREFIX_QUERIES, ids)
    transfers = base.sum_by(families.get(NIXL_XFER_TIME), ids, sample_name=NIXL_XFER_TIME + "_count")
    nbytes = base.sum_by(families.get(NIXL_BYTES), ids, sample_name=NIXL_BYTES + "_sum")
    failed = base.sum_counter(families, NIXL_FAILED_TRANSFERS, ids)
    notifications = base.sum_counter(families, NIXL_FAILED_NOTIFICATIONS, ids)
    expired = base.sum_counter(families, NIXL_EXPIRED, ids)
    nixl = set(transfers) | set(failed) | set(expired)
    out = {}
    for key in sorted(set(fetch) | nixl | set(by_source) | set(queries)):     # in the engines' order
        sources = by_source.get(key, {})
        external = sources.get(SOURCE_EXTERNAL)
        if key not in fetch and key not in nixl and not external and not queries.get(key):
            continue            # no connector: the source counter and the external cache at 0 are every engine's
        if external:
            role = "decode"     # prompt tokens arrived by transfer
        elif key not in fetch or expired.get(key):
            role = "prefill"    # a connector that produces KV only, or leases that expired (counted on P)
        elif key not in nixl:
            role = "decode"     # a consumer-only connector (kv_consumer)
        else:
            role = None         # kv_both with nothing transferred yet
        out[key] = KvTransfer(
            role=role,
            waiting_for_kv=by_reason.get(key, {}).get(WAITING_REASON_DEFERRED),
            fetch_in_progress=fetch.get(key, {}).get("in_progress"),
            external_prompt_tokens=external,
            local_prompt_tokens=sources.get(SOURCE_LOCAL),
            transfers=transfers.get(key),
            bytes_transferred=nbytes.get(key),
            failed_transfers=failed.get(key),
            failed_notifications=notifications.get(key),
            expired=expired.get(key),
        )
    return out


def _kv_total_tokens(info: Family | None) -> dict[str | None, float]:
    """KV capacity in tokens per engine index, from cache_config_info's labels."""
    out: dict[str | None, float] = {}
    if info is None:
        return out
    for sample in info.samples:
        labels = sample.labels
        tokens = _number(labels.get("kv_cache_size_tokens"))
        if tokens is None:
            blocks, block_size = _number(labels.get("num_gpu_blocks")), _number(labels.get("block_size"))
            if blocks is not None and block_size is not None:
                tokens = blocks * block_size
        if tokens is not None:
            out[labels.get("engine")] = tokens
    return out


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "None", "") else None
    except ValueError:
        return None


# --- the exposition's catalogue: HELP text of every family (the simulator writes it) -------------
HELP = {
    "vllm:estimated_flops_per_gpu": "Estimated number of floating point operations per GPU (for Model Flops "
                                    "Utilization calculations).",
    "vllm:estimated_read_bytes_per_gpu": "Estimated number of bytes read from memory per GPU (for Model Flops "
                                         "Utilization calculations).",
    "vllm:estimated_write_bytes_per_gpu": "Estimated number of bytes written to memory per GPU (for Model Flops "
                                          "Utilization calculations).",
    RUNNING: "Number of requests in model execution batches.",
    WAITING: "Number of requests waiting to be processed.",
    WAITING_BY_REASON: "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
                               "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
                               "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
    ENGINE_SLEEP_STATE: "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
                                "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
                                "level 2.",
    KV_USAGE: "KV-cache usage. 1 means 100 percent usage.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:external_prefix_cache_queries": "External prefix cache queries from KV connector cross-instance cache "
                                          "sharing, in terms of number of queried tokens.",
    "vllm:external_prefix_cache_hits": "External prefix cache hits from KV connector cross-instance cache sharing, "
                                       "in terms of number of cached tokens.",
    KV_FETCH_BY_STAGE: "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs "
                       "an async KV load that has not started; 'in_progress' = load started and not yet reported "
                       "finished; 'completed_waiting' = load finished, request not running yet.",
    NIXL_XFER_TIME: "Histogram of transfer duration for NIXL KV Cache transfers.",
    NIXL_POST_TIME: "Histogram of transfer post time for NIXL KV Cache transfers.",
    NIXL_BYTES: "Histogram of bytes transferred per NIXL KV Cache transfers.",
    NIXL_DESCRIPTORS: "Histogram of number of descriptors per NIXL  KV Cache transfers.",
    "vllm:nixl_num_failed_transfers": "Number of failed NIXL KV Cache transfers, including handshake and notification "
                                      "failures. NOTE: KV expiry is tracked separately in vllm:nixl_num_kv_expired_reqs.",
    "vllm:nixl_num_failed_notifications": "Number of failed NIXL KV Cache notifications. Retained for compatibility; "
                                          "these failures are also included in vllm:nixl_num_failed_transfers.",
    "vllm:nixl_num_kv_expired_reqs": "Number of requests that had their KV expire. NOTE: This metric is tracked on "
                                     "the P instance.",
    "vllm:nixl_num_notifications_after_expiry": "Number of completion notifications for requests that were no longer "
                                                "tracked, usually because their KV lease expired. The KV blocks may "
                                                "have been reused before the transfer finished. Counted per "
                                                "notification (one per remote rank), not per request.",
    "vllm:mm_cache_queries": "Multi-modal cache queries, in terms of number of queried items.",
    "vllm:mm_cache_hits": "Multi-modal cache hits, in terms of number of cached items.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:prompt_tokens_by_source": "Number of prompt tokens by source.",
    "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
    "vllm:prompt_tokens_cached_by_source": "Prefix-cache hit tokens by the cache tier that supplied them: device "
                                           "(local HBM), host (offloaded to DRAM), disk, p2p (transferred from "
                                           "another vLLM instance) or external_unspecified. Counted at admission; "
                                           "sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:admission_rejections": "Number of admission attempts rejected by a queue limit, by reason.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested generation tokens.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds per request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_num_preemptions": "Histogram of the number of times a request was preempted.",
    "vllm:request_prefill_kv_computed_tokens": "Histogram of new KV tokens computed during prefill (excluding "
                                               "cached tokens).",
    CACHE_CONFIG_INFO: "Information of the LLMEngine CacheConfig",
}
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
SLEEP_STATES = (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0))


# --- what alert rules and dashboards read, per metric naming --------------------------------------

ALERT_NAMINGS = ("vllm-0.32", "vllm-0.11", "vllm-legacy")      # newest first
# Bucket edges are replaced per bucket family, by one flag taking a JSON object keyed by family (0.33,
# vllm/v1/metrics/buckets.py); request_latency is shared by e2e, queue, prefill, decode and inference time.
BUCKET_FAMILIES = {"itl": "inter_token_latency", "ttft": "time_to_first_token", "e2e": "request_latency",
                   "tpot": "inter_token_latency", "queue": "request_latency"}
BUCKET_FLAGS = dict.fromkeys(BUCKET_FAMILIES, "--custom-histogram-buckets")


def bucket_args(edges: Mapping[str, Sequence[float]]) -> list[str]:
    """The flag and its JSON value: {"inter_token_latency": [...], ...}."""
    families = {BUCKET_FAMILIES[kind]: list(kind_edges) for kind, kind_edges in edges.items() if kind in BUCKET_FAMILIES}
    return [BUCKET_FLAGS["itl"], json.dumps(families, separators=(",", ":"))]


def _vllm_hist(kind: str, name: str) -> LatencyHistogram:
    family = BUCKET_FAMILIES[kind]
    return LatencyHistogram(kind, name, tuple(float(e) for e in BUCKETS[family]),
                            f"{BUCKET_FLAGS[kind]} '{{\"{family}\": [...]}}'")


def alert_series(naming: str) -> EngineSeries:
    if naming not in ALERT_NAMINGS:
        raise KeyError(naming)
    legacy = naming == "vllm-legacy"
    itl = HISTOGRAMS["itl"][1 if legacy else 0]
    return EngineSeries(
        dialect=NAME, naming=naming,
        running=RUNNING, waiting=WAITING,
        kv_usage=KV_USAGE_LEGACY if legacy else KV_USAGE,
        preemptions=PREEMPTIONS, preemptions_lazy=False,
        # prometheus-fastapi-instrumentator's counter on vLLM's API server: status is the class (2xx…5xx).
        availability=RatioSeries(
            "http_requests_total", bad='status="5xx"', total="",
            good_labels=(("handler", "/v1/completions"), ("method", "POST"), ("status", "2xx")),
            bad_labels=(("handler", "/v1/completions"), ("method", "POST"), ("status", "5xx"))),
        success=RatioSeries(REQUEST_SUCCESS, bad='finished_reason=~"abort|error"', total="",
                            good_labels=(("finished_reason", "stop"),), bad_labels=(("finished_reason", "error"),)),
        histograms={
            "ttft": _vllm_hist("ttft", HISTOGRAMS["ttft"][0]),
            "tpot": _vllm_hist("tpot", HISTOGRAMS["tpot"][0]),
            "itl": _vllm_hist("itl", itl),
            "e2e": _vllm_hist("e2e", HISTOGRAMS["e2e"][0]),
            "queue": _vllm_hist("queue", HISTOGRAMS["queue"][0]),
        },
        slot_limit_flag=SLOT_LIMIT_FLAG, default_slot_limit=DEFAULT_MAX_NUM_SEQS,
        engine_labels=IDENTITY_LABELS,
    )


# --- the Dialect ---------------------------------------------------------------------------------

_STATS_NUMBERS = {"engine": int, "prompt_tps": float, "gen_tps": float, "running": int, "waiting": int,
                  "deferred": int, "kv_fetch_waiting": int, "kv_fetch_in_progress": int, "kv_fetch_completed": int,
                  "preemptions": int, "kv_pct": float, "prefix_hit_pct": float, "external_hit_pct": float}


def parse_log_message(msg: str) -> list[base.LogFinding]:
    """vLLM's log grammar: periodic stats, KV cache size, worker and engine deaths, startup failures,
    out-of-memory, ready, a requested shutdown, the KV connector's lines."""
    found = _kv_connector_line(msg)
    if found:
        return found
    match = STATS_LINE.search(msg)
    if match:
        fields = base.numbers(match, _STATS_NUMBERS)
        found = [("stats", fields)]
        if fields.get("preemptions"):
            found.append(("preemption", {"count": fields["preemptions"]}))
        return found
    match = KV_CACHE_SIZE_LINE.search(msg)
    if match:
        return [("startup", {"stage": "kv_cache_size",
                             **base.numbers(match, {"tokens": int, "per_request": int, "concurrency": float})})]
    match = WORKER_DIED_LINE.search(msg)
    if match:
        fields: dict = {"reason": WORKER_DIED_REASON}
        code = match.group("code")
        if code and code.lstrip("-").isdigit():
            fields["exit_code"] = int(code)
        rank = re.fullmatch(r"VllmWorker-(\d+)", match.group("worker") or "")
        if rank:     # the executor's worker rank (the TP rank of a TP-only engine): a number, never a name
            fields["worker_rank"] = int(rank.group(1))
        return [("engine_dead", fields)]
    for literal in STARTUP_FAILURE_LINES:
        if literal in msg:
            return [("startup_failure", {"reason": literal, **startup_failure_numbers(msg)})]
    for literal in ENGINE_DEAD_LINES:
        if literal in msg:
            return [("engine_dead", {"reason": literal})]
    match = OOM_LINE.search(msg)
    if match:
        fields = {"reason": OOM_REASON}
        if match.group("mib"):
            fields["mib"] = float(match.group("mib")) * (1024 if match.group("unit") == "GiB" else 1)
        return [("error", fields)]
    if READY_LINE in msg:
        return [("startup", {"stage": "ready"})]
    if SHUTDOWN_LINE in msg:
        return [("shutdown", {"reason": "requested"})]
    return _startup_stage(msg)


def _startup_stage(msg: str) -> list[base.LogFinding]:
    found = base.startup_stage(msg, STARTUP_STAGE_LINES, (
        (WEIGHTS_LOADED_LINE, "weights_loaded"), (COMPILED_LINE, "compiled"), (GRAPHS_CAPTURED_LINE, "graphs_captured"),
        (ENGINE_READY_LINE, "engine_ready")))
    if found:
        return found
    match = KV_CONCURRENCY_LINE.search(msg)
    if match:
        return [("startup", {"stage": "kv_cache_size", **base.numbers(match, {"per_request": int,
                                                                               "concurrency": float})})]
    if API_LISTENING_LINE.search(msg):
        return [("startup", {"stage": "api_listening"})]
    return []


def _kv_connector_line(msg: str) -> list[base.LogFinding]:
    """The KV connector's lines (P/D disaggregation); numbers and grammar literals only, never a request id."""
    match = KV_TRANSFER_METRICS_LINE.search(msg)
    if match:
        fields = {}
        for part in match.group("body").split(", "):
            key, _, value = part.partition("=")
            name = KV_TRANSFER_METRICS_FIELDS.get(key.strip())
            if name is not None:
                try:
                    fields[name] = float(value)
                except ValueError:
                    continue
        return [("kv_transfer_stats", fields)]
    match = KV_LOAD_FAILED_LINE.search(msg) or KV_LOAD_RECOVERED_LINE.search(msg)
    if match:
        return [("kv_load_failed", {"requests": int(match["requests"]), "tokens": int(match["tokens"]),
                                    "recovered": match.re is KV_LOAD_RECOVERED_LINE})]
    match = KV_EXPIRED_LINE.search(msg)
    if match:
        return [("kv_expired", {"retrieved_by": int(match["workers"])})]
    match = NIXL_FAILURE_LINE.search(msg)
    if match:
        kind = match["failure_type"]
        return [("kv_transfer_failure", {"failure_type": kind if kind in NIXL_FAILURE_TYPES else "other"})]
    if EXTERNAL_CACHE_HIT_LINE in msg:
        return [("kv_external_hit", {})]
    return []


WORKER_DIED_REASON = "Worker proc died unexpectedly"
OOM_REASON = "out of memory"


class VllmDialect(base.Dialect, module=sys.modules[__name__]):
    engine_process_titles = (("VLLM::EngineCore", "engine_core"), ("VLLM::Worker_TP0", "worker"))
    latency_edges = {"ttft": BUCKETS["time_to_first_token"], "itl": BUCKETS["inter_token_latency"],
                     "e2e": BUCKETS["request_latency"]}
    exit_zero_after_death_note = "vLLM #48966"


DIALECT = VllmDialect()
