"""Everything servewatch knows about SGLang's outside: metric names 0.4.10 → 0.5.23, bucket edges,
health semantics and log grammar.

Sources: SGLang 0.5.23 `srt/observability/metrics_collector.py` (0.4.10 and 0.5.5 for older names),
`srt/entrypoints/http_server.py` for health, `srt/managers/scheduler*.py` for log lines.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from collections.abc import Mapping

from servewatch.dialects import base, pytorch
from servewatch.dialects.series import EngineSeries, LatencyHistogram, RatioSeries
from servewatch.engine.state import Counters, EngineState, KvTransfer
from servewatch.exposition.model import Family

NAME = "sglang"
TITLE = "SGLang"
PREFIX = "sglang:"
# Scheduler series carry rank labels; tokenizer-process series only model_name (+ engine_type).
IDENTITY_LABELS = ("model_name", "engine_type", "dp_rank", "tp_rank", "pp_rank", "moe_ep_rank")
# A request with this header runs on that data-parallel rank's scheduler (0.5.23:
# srt/entrypoints/openai/serving_base.py:271-300 `extract_routed_dp_rank_from_header` reads it, over the body's
# routed_dp_rank, for completions (serving_completions.py:109) and chat; the data-parallel controller sends such a
# request straight to that rank, srt/managers/data_parallel_controller.py:865-878).
DP_RANK_HEADER = "X-Data-Parallel-Rank"
DP_RANK_LABEL = "dp_rank"         # the scheduler's series carry dp_rank (its engine key words it: "DP rank 1")
DP_RANK_IN_KEY_WORDS = True
MODEL_LABELS = ("model_name",)

# --- metric names -----------------------------------------------------------------------------
RUNNING = "sglang:num_running_reqs"
WAITING = "sglang:num_queue_reqs"
TOKEN_USAGE = "sglang:token_usage"                         # fraction 0..1
KV_USED_TOKENS = "sglang:kv_used_tokens"                   # 0.5.23
NUM_USED_TOKENS = "sglang:num_used_tokens"                 # 0.4.10+
KV_AVAILABLE_TOKENS = "sglang:kv_available_tokens"
MAX_TOTAL_NUM_TOKENS = "sglang:max_total_num_tokens"       # 0.5.23 constant
GEN_THROUGHPUT = "sglang:gen_throughput"
PROMPT_TOKENS = "sglang:prompt_tokens_total"               # tokenizer process, label is_streaming (0.5.23)
GENERATION_TOKENS = "sglang:generation_tokens_total"
NUM_REQUESTS = "sglang:num_requests_total"
NUM_ABORTED = "sglang:num_aborted_requests_total"
RETRACTED_REQUESTS = "sglang:num_retracted_requests_total"  # 0.5.23 counter
RETRACTED_LEGACY = "sglang:total_retracted_reqs"           # 0.4.10 gauge (cumulative)
FORWARD_PASSES = "sglang:cuda_graph_passes_total"          # 0.5.23: label mode; sum over modes = steps
REALTIME_TOKENS = "sglang:realtime_tokens_total"           # 0.5.23: label mode
NUM_RETRACTED_REQS_GAUGE = "sglang:num_retracted_reqs"     # gauge, multiprocess mode "all": extra pid label
# The HTTP middleware's counter (with --enable-metrics): labels endpoint (the route, or the raw path of
# an unmatched one), method, status_code (the exact code).
HTTP_RESPONSES = "sglang:http_responses_total"
HTTP_HANDLER_LABEL = "endpoint"
HTTP_STATUS_LABEL = "status_code"
# Endpoints a watcher, a load balancer or the launcher itself calls: not the clients' requests.
HTTP_MONITORING_HANDLERS = ("/health", "/health_generate", "/metrics", "/ready", "/model_info", "/get_model_info",
                            "/server_info", "/get_server_info", "/v1/models", "/version", "/get_load", "/v1/loads",
                            "/freeze_gc")

HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("sglang:time_to_first_token_seconds",),
    "itl": ("sglang:inter_token_latency_seconds",),
    "tpot": ("sglang:request_time_per_output_token_seconds", "sglang:time_per_output_token_seconds"),
    "e2e": ("sglang:e2e_request_latency_seconds",),
    "queue": ("sglang:queue_time_seconds",),
}

# Prefill/decode disaggregation (observability/metrics_collector.py): the scheduler's queues, refreshed with its
# other gauges (a QueueCount: the total under the default labels, per priority under priority="<n>" when
# priority scheduling is on); counters and histograms appear once first used. engine_type says the role
# (disaggregation/utils.py DisaggregationMode.to_engine_type: prefill, decode, unified; "dynamic" with role switch).
PREFILL_BOOTSTRAP_QUEUE = "sglang:num_prefill_bootstrap_queue_reqs"
PREFILL_INFLIGHT_QUEUE = "sglang:num_prefill_inflight_queue_reqs"
DECODE_PREALLOC_QUEUE = "sglang:num_decode_prealloc_queue_reqs"
DECODE_TRANSFER_QUEUE = "sglang:num_decode_transfer_queue_reqs"
BOOTSTRAP_FAILED = "sglang:num_bootstrap_failed_reqs_total"
TRANSFER_FAILED = "sglang:num_transfer_failed_reqs_total"
KV_TRANSFER_LATENCY = "sglang:kv_transfer_latency_ms"        # histogram, observed by the prefill per transfer
KV_TRANSFER_TOTAL_MB = "sglang:kv_transfer_total_mb"         # histogram: MiB (bytes / 1024 / 1024) per transfer
ENGINE_TYPE_LABEL = "engine_type"
PD_ROLES = ("prefill", "decode")
PRIORITY_LABEL = "priority"

# Metric-naming markers.
MARKERS_0_5_23 = (FORWARD_PASSES, REALTIME_TOKENS, KV_USED_TOKENS, MAX_TOTAL_NUM_TOKENS,
                  "sglang:request_time_per_output_token_seconds")
MARKERS_0_5_5 = ("sglang:num_prefill_prealloc_queue_reqs", "sglang:engine_startup_time",
                 "sglang:num_running_reqs_offline_batch", "sglang:per_stage_req_latency_seconds")
MARKERS_0_4_10 = ("sglang:avg_request_queue_latency", RETRACTED_LEGACY, "sglang:num_prefill_infight_queue_reqs")

# --- bucket edges (0.5.23 defaults) -------------------------------------------------------------
BUCKETS = {
    "time_to_first_token": (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400),
    "e2e_request_latency": (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
                            1200, 1800, 2400),
    "inter_token_latency": (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
                            0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0),
    "kv_transfer_latency_ms": (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000),
    "kv_transfer_total_mb": (1, 5, 10, 50, 100, 500, 1000, 5000, 10000),
    "queue_time": (0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50,
                   60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800,
                   2000, 2500, 3000),
}
# One flag per histogram replaces its edges (server_args), each followed by its edges; the queue-time edges
# are fixed in the metrics collector, and TPOT shares ITL's.
BUCKET_FLAGS = {"ttft": "--bucket-time-to-first-token", "itl": "--bucket-inter-token-latency",
                "e2e": "--bucket-e2e-request-latency"}
FORWARD_PASS_MODES = ("prefill_cuda_graph", "prefill_none", "decode_cuda_graph", "decode_none")
REALTIME_TOKEN_MODES = ("prefill_compute", "prefill_cache", "decode")

# --- health semantics -------------------------------------------------------------------------
# GET /health: 503 while starting (before warmup) and during graceful shutdown; by default it runs a
# real one-token generation and returns 200 only if *any* output arrives within
# SGLANG_HEALTH_CHECK_TIMEOUT (20 s), else 503 (status UnHealthy). /metrics is served by the HTTP
# process from multiprocess files, so it keeps answering (frozen) while the scheduler hangs.
HEALTH_CHECK_TIMEOUT_S = 20
PROCESS_ROLES = {"sglang::scheduler": "engine_core", "sglang::detokenizer": "worker"}
# Ranked processes: a scheduler titled "sglang::scheduler" plus " DP<n>", " PP<n>", " TP<n>" (only when that size
# is over one), ... with spaces made "_" (srt/managers/scheduler.py); the detokenizer and the data-parallel
# controller carry no rank.
RANK_TITLES = {"sglang::scheduler": "scheduler", "sglang::detokenizer": "detokenizer",
               "sglang::data_parallel_controller": "dp_controller"}
SLOT_LIMIT_FLAG = "--max-running-requests"
CONTEXT_LENGTH_FLAG = "--context-length"
MEMORY_BUDGET = ("mem_fraction_static", "--mem-fraction-static", None)   # its default depends on the GPU

# --- log grammar --------------------------------------------------------------------------------
LOG_PREFIX = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?"
                        r"(?: (?P<process>[A-Z_]+\d+(?: [A-Z_]+\d+)*))?\] (?P<msg>.*)$")   # process: the ranks
LOG_CLOCK_FORMAT = "%Y-%m-%d %H:%M:%S"
DECODE_LINE = re.compile(
    r"Decode batch(?: \[\d+\])?[,.] #running-req: (?P<running>\d+), (?:#token: (?P<tokens>\d+), )?"
    r"(?:full )?token usage: (?P<token_usage>[\d.]+).*?gen throughput \(token/s\): (?P<gen_tps>[\d.]+), "
    r"#queue-req: (?P<queue>\d+)"
)
PREFILL_LINE = re.compile(
    r"Prefill batch(?: \[\d+\])?[,.] #new-seq: (?P<new_seq>\d+), #new-token: (?P<new_tokens>\d+), "
    r"#cached-token: (?P<cached_tokens>\d+), (?:full )?token usage: (?P<token_usage>[\d.]+).*?"
    r"#running-req: (?P<running>\d+), #queue-req: (?P<queue>\d+)"
)
# Disaggregation (managers/scheduler_components/metrics_reporter.py): a decode instance's Decode batch line and a
# prefill's Prefill batch line carry their queues.
PD_DECODE_QUEUES = re.compile(r"#prealloc-req: (?P<prealloc>\d+), #transfer-req: (?P<transfer>\d+)")
PD_PREFILL_QUEUES = re.compile(r"#bootstrap-req: (?P<bootstrap>\d+), #inflight-req: (?P<inflight>\d+)")
# disaggregation/prefill.py and decode.py: "<Side> <stage> failed for request rank=.. <rid> <room> with exception
# KVTransferError(bootstrap_room=N): Request N timed out after 300.0s in KVPoll.WaitingForInput" (common/conn.py);
# only the side, the stage, the seconds and the poll state are read.
KV_TRANSFER_FAILED_LINE = re.compile(r"(?P<side>Prefill|Decode) (?P<stage>transfer|bootstrap|handshake) failed for "
                                     r"request")
KV_POLL_TIMEOUT = re.compile(r"timed out after (?P<seconds>[\d.]+)s in KVPoll\.(?P<poll>\w+)")
KV_FAILURE_STAGES = ("transfer", "bootstrap", "handshake")
KV_POLL_STATES = ("Bootstrapping", "WaitingForInput", "Transferring")
# common/conn.py's warning_once lines when a bootstrap or a transfer times out.
KV_TIMEOUT_LINES = ("Some requests timed out when bootstrapping",
                    "Some requests fail to receive KV Cache transfer done signal after bootstrapping")
RETRACTION_LINE = re.compile(
    r"KV cache pool is full\. Retract requests\. #retracted_reqs: (?P<retracted>\d+), "
    r"#new_tokens_gained: (?P<tokens_gained>\d+)"
)
WATCHDOG_LINE = re.compile(r"(?:(?P<component>\w+) watchdog|Watchdog) timeout \(self\.watchdog_timeout=(?P<timeout>[\d.]+)")
# SIGTERM to the main process (a requested stop): it drains, then kills its scheduler and detokenizer
# (seen 4-6 s later on a real 0.5.23) as it exits. SIGTERM to the whole group is a crash instead.
SHUTDOWN_LINE = "Draining requests and shutting down"
ENGINE_DEAD_LINES = (
    "Scheduler hit an exception",
    "SIGQUIT received.",
    "Received sigquit from a child process.",
    "crashed with exit code",
)
ENGINE_ALIVE_SIGNS = "no 'Scheduler hit an exception' / 'crashed with exit code' / SIGQUIT lines in its log"
# Written about once a second while SGLang's own health generation gets no answer for 20 s: a stalled
# or slow scheduler, not a dead one. Seen on a real 0.5.23 whose scheduler was SIGSTOPped for 12 s:
# after SIGCONT it answered /health and /health_generate with 200 and served again.
HEALTH_CHECK_FAILED_LINES = (
    "Health check failed. Server couldn't get a response from detokenizer",
)
STARTUP_FAILURE_LINES = (
    "Not enough memory. Please try to increase --mem-fraction-static.",
    "scheduler died during initialization",
    "Initialization failed. warmup error",
    # 0.5.23 with --tp-size 2 on CPU: its TP group builds a NCCL communicator (init_model_parallel_group leaves
    # use_pynccl on for CPU), and torch refuses the CPU device (tests/fixtures/sglang_real/tp2_cpu_startup_failure.log)
    "Expected a cuda device, but got: cpu",
)
OOM_LINES = ("Prefill out of memory.", "Decode out of memory.", "Out of memory. Try to lower your batch size.")
READY_LINE = "The server is fired up and ready to roll!"

# Startup stages, in the order a 0.5.23 CPU server logged them; uvicorn serves (and /health answers 503)
# from api_listening until the warm-up request has finished ("ready").
STARTUP_STAGE_LINES = (
    ("server_args=", "process_up"),
    ("Init parallel begin.", "engine_start"),
    ("Load weight begin.", "weights_loading"),
    ("Application startup complete.", "api_listening"),
    ("Uvicorn running on", "api_listening"),
)
WEIGHTS_LOADED_LINE = re.compile(r"Load weight end\. elapsed=(?P<seconds>[\d.]+) s")
KV_ALLOCATED_LINE = re.compile(r"KV Cache is allocated\..*#tokens: (?P<tokens>\d+)")
KV_LIMITS_LINE = re.compile(r"max_total_num_tokens=(?P<tokens>\d+),.*max_running_requests=(?P<max_running>\d+)"
                            r"(?:, context_len=(?P<per_request>\d+))?")
# From the 0.5 source (scheduler's model runner); a CPU server does not capture graphs and was not seen to log it.
GRAPHS_CAPTURING_LINE = re.compile(r"Capture (?:cuda |cpu |npu )?graph begin")
GRAPHS_CAPTURED_LINE = re.compile(r"Capture (?:cuda |cpu |npu )?graph end\. Time elapsed: (?P<seconds>[\d.]+) s")
ENGINE_READY_LINE = re.compile(r"Engine startup timings \(s\): load_weight=[\d.]+, kv_cache_allocation=[\d.]+, "
                               r"scheduler_e2e=(?P<seconds>[\d.]+)")

# What reading a whole log after the fact needs beyond parse_log_message (the postmortem).
RECORD_GRAMMAR = base.RecordGrammar(
    engine_processes=("scheduler", "TP", "DP"),
    packages=("sglang",),
    startup_stages=(
        ("weights", WEIGHTS_LOADED_LINE),
        ("KV sizing", re.compile(r"KV Cache is allocated\. .*?#tokens: (?P<tokens>\d+)")),
        ("KV sizing", re.compile(r"max_total_num_tokens=(?P<tokens>\d+), .*?max_running_requests=(?P<max_running>\d+)"
                                 r".*?context_len=(?P<context_len>\d+)")),
        ("graph capture", re.compile(r"Capture cuda graph end\. Time elapsed: (?P<seconds>[\d.]+) s")),
        ("engine init", re.compile(r"Engine startup timings \(s\): load_weight=(?P<load_weight_s>[\d.]+), "
                                   r"kv_cache_allocation=(?P<kv_allocation_s>[\d.]+), "
                                   r"scheduler_e2e=(?P<seconds>[\d.]+)")),
    ),
    settings_marker="server_args=",
    settings=(("max_running_requests", re.compile(r"max_running_requests=(?P<value>\d+)"), int),
              ("mem_fraction_static", re.compile(r"'mem_fraction_static': (?P<value>[\d.]+)"), float)),
    oom_exceptions=pytorch.OOM_EXCEPTIONS, oom_literals=(*pytorch.OOM_LITERALS, *OOM_LINES),
    oom_details=pytorch.OOM_DETAILS,
    signal_lines=(re.compile(r"(?P<signal>SIGTERM|SIGINT|SIGQUIT) received"),
                  re.compile(r"Received (?P<signal>sigquit) from a child process")),
    shutdown_lines=("Gracefully exiting...",),
    exit_code_lines=(re.compile(r"crashed with exit code:? (?P<code>-?\d+)"),),
    timeout_lines=tuple(re.compile(re.escape(line)) for line in HEALTH_CHECK_FAILED_LINES),
)


def detect(families: Mapping[str, Family]) -> str | None:
    if not any(name.startswith(PREFIX) for name in families):
        return None
    if any(name in families for name in MARKERS_0_5_23):
        return "sglang-0.5.23"
    if any(name in families for name in MARKERS_0_5_5):
        return "sglang-0.5.5"
    if any(name in families for name in MARKERS_0_4_10):
        return "sglang-0.4.10"
    return "sglang"


def wanted_families() -> tuple[str, ...]:
    names = [RUNNING, WAITING, TOKEN_USAGE, KV_USED_TOKENS, NUM_USED_TOKENS, KV_AVAILABLE_TOKENS,
             MAX_TOTAL_NUM_TOKENS, PROMPT_TOKENS, GENERATION_TOKENS, NUM_REQUESTS, NUM_ABORTED,
             RETRACTED_REQUESTS, RETRACTED_LEGACY, FORWARD_PASSES, REALTIME_TOKENS, HTTP_RESPONSES,
             PREFILL_BOOTSTRAP_QUEUE, PREFILL_INFLIGHT_QUEUE, DECODE_PREALLOC_QUEUE, DECODE_TRANSFER_QUEUE,
             BOOTSTRAP_FAILED, TRANSFER_FAILED, KV_TRANSFER_LATENCY, KV_TRANSFER_TOTAL_MB,
             *MARKERS_0_5_5, "sglang:num_prefill_infight_queue_reqs", "sglang:avg_request_queue_latency"]
    for candidates in HISTOGRAMS.values():
        names.extend(candidates)
    return tuple(dict.fromkeys(n for name in names for n in base.counter_names(name)))


def read(families: Mapping[str, Family], naming: str) -> list[EngineState]:
    ids = IDENTITY_LABELS
    running = base.sum_by(families.get(RUNNING), ids)
    waiting = base.sum_by(families.get(WAITING), ids)
    usage = base.sum_by(families.get(TOKEN_USAGE), ids)
    used = base.sum_by(base.first_family(families, KV_USED_TOKENS, NUM_USED_TOKENS), ids)
    total = base.sum_by(families.get(MAX_TOTAL_NUM_TOKENS), ids)
    retracted = (base.sum_counter(families, RETRACTED_REQUESTS, ids)
                 or base.sum_by(families.get(RETRACTED_LEGACY), ids))
    steps = base.sum_counter(families, FORWARD_PASSES, ids)
    # Tokenizer-process series are per model, not per rank: each engine of that model sees them.
    prompt = _per_model(base.sum_counter(families, PROMPT_TOKENS, MODEL_LABELS))
    generated = _per_model(base.sum_counter(families, GENERATION_TOKENS, MODEL_LABELS))
    requests = _per_model(base.sum_counter(families, NUM_REQUESTS, MODEL_LABELS))
    aborted = _per_model(base.sum_counter(families, NUM_ABORTED, MODEL_LABELS))
    histograms = {kind: {base.model_key(k): h for k, h in
                         base.histograms_by(base.first_family(families, *names), MODEL_LABELS).items()}
                  for kind, names in HISTOGRAMS.items()}
    responses = base.responses_by_status(families, HTTP_RESPONSES, handler_label=HTTP_HANDLER_LABEL,
                                         status_label=HTTP_STATUS_LABEL, skip_handlers=HTTP_MONITORING_HANDLERS)
    queue_hist = base.histograms_by(base.first_family(families, *HISTOGRAMS["queue"]), ids)
    connector = _kv_transfer(families)

    keys = sorted(set(running) | set(waiting) | set(usage))
    # The tokenizer process counts a model's tokens once for all its ranks (DP > 1): shared, not a rank's own.
    engines_of = Counter(base.model_key(key) for key in keys)
    states = []
    for key in keys:
        model = base.model_key(key)
        finished = {}
        if model in requests:
            finished["all"] = requests[model]
        if model in aborted:
            finished["abort"] = aborted[model]
        engine_histograms = {kind: by_model[model] for kind, by_model in histograms.items() if model in by_model}
        # Queue time is a scheduler series, per rank: a rank's own, or the model's only when the model has one
        # engine (with several, a rank without its own series would show its siblings' queue time as its own).
        if key in queue_hist:
            engine_histograms["queue"] = queue_hist[key]
        elif engines_of[model] > 1:
            engine_histograms.pop("queue", None)
        states.append(base.engine_state(
            NAME, naming, key, {"running": running, "waiting": waiting, "kv_usage": usage, "kv_used_tokens": used,
                                "kv_total_tokens": total, "kv_transfer": connector},
            counters=Counters(
                prompt_tokens=prompt.get(model),
                generation_tokens=generated.get(model),
                preemptions=retracted.get(key),
                steps=steps.get(key),
                finished=finished,
                responses=dict(responses),
                tokens_shared=engines_of[model] > 1,
            ),
            histograms=engine_histograms,
        ))
    return states


def _queue_totals(family: Family | None) -> dict:
    """A QueueCount gauge per engine: the total only (priority "" or none), never the per-priority breakdown."""
    if family is None:
        return {}
    out: dict = {}
    for sample in family.samples:
        if sample.labels.get(PRIORITY_LABEL) or math.isnan(sample.value):
            continue
        key = base.identity(sample.labels, IDENTITY_LABELS)
        out[key] = out.get(key, 0.0) + sample.value
    return out


def _kv_transfer(families: Mapping[str, Family]) -> dict:
    """Each scheduler's side of the disaggregation, for engines whose engine_type is prefill or decode (a
    unified engine exposes the same queues at 0 and has no connector)."""
    ids = IDENTITY_LABELS
    bootstrap = _queue_totals(families.get(PREFILL_BOOTSTRAP_QUEUE))
    inflight = _queue_totals(families.get(PREFILL_INFLIGHT_QUEUE))
    prealloc = _queue_totals(families.get(DECODE_PREALLOC_QUEUE))
    transfer = _queue_totals(families.get(DECODE_TRANSFER_QUEUE))
    bootstrap_failed = base.sum_counter(families, BOOTSTRAP_FAILED, ids)
    transfer_failed = base.sum_counter(families, TRANSFER_FAILED, ids)
    latency = base.sum_by(families.get(KV_TRANSFER_LATENCY), ids, sample_name=KV_TRANSFER_LATENCY + "_count")
    megabytes = base.sum_by(families.get(KV_TRANSFER_TOTAL_MB), ids, sample_name=KV_TRANSFER_TOTAL_MB + "_sum")
    computed = base.sum_counter(families, REALTIME_TOKENS, ids, label="mode")
    out = {}
    for key in sorted(set(bootstrap) | set(inflight) | set(prealloc) | set(transfer) | set(transfer_failed)):
        role = dict(key).get(ENGINE_TYPE_LABEL)
        if role not in PD_ROLES:
            continue
        decode = role == "decode"
        out[key] = KvTransfer(
            role=role,
            waiting_for_kv=_add(prealloc.get(key), transfer.get(key)) if decode else None,
            prefill_queue=None if decode else _add(bootstrap.get(key), inflight.get(key)),
            # the prefill counts finished transfers; a prefill that has sent none yet has the family absent
            transfers=None if decode else latency.get(key, 0.0),
            bytes_transferred=None if decode else megabytes.get(key, 0.0) * 2**20,
            failed_transfers=transfer_failed.get(key, 0.0),
            bootstrap_failed=bootstrap_failed.get(key, 0.0),
            # prompt tokens this scheduler computed itself (a decode that gets its KV computes almost none);
            # SGLang counts no transferred tokens
            local_prompt_tokens=computed.get(key, {}).get("prefill_compute"),
        )
    return out


def _add(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _per_model(values: dict) -> dict[str | None, float]:
    return {base.model_key(k): v for k, v in values.items()}


# --- the exposition's catalogue: HELP text of every family (the simulator writes it) -------------
TOKENS_HISTOGRAM_EDGES = (100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
                          12500, 15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000,
                          100000, 200000, 300000, 400000, 600000, 800000, 1000000, 1100000)
HELP = {
    "sglang:num_bootstrap_failed_reqs": "The number of bootstrap failed requests.",
    "sglang:num_transfer_failed_reqs": "The number of transfer failed requests.",
    KV_TRANSFER_LATENCY: "Histogram of KV cache transfer latency in ms.",
    KV_TRANSFER_TOTAL_MB: "Histogram of KV cache transfer size in MB.",
    "sglang:num_running_reqs": "The number of running requests.",
    "sglang:num_queue_reqs": "The number of requests in the waiting queue.",
    "sglang:num_grammar_queue_reqs": "The number of requests in the grammar waiting queue.",
    "sglang:gen_throughput": "The generation throughput (token/s).",
    "sglang:cache_hit_rate": "The prefix cache hit rate.",
    "sglang:decode_sum_seq_lens": "The sum of all sequence lengths in decode.",
    "sglang:token_usage": "The token usage.",
    "sglang:full_token_usage": "The token usage for full attention layers.",
    "sglang:num_used_tokens": "The number of used tokens.",
    "sglang:kv_available_tokens": "Number of free token slots in the KV cache pool.",
    "sglang:kv_evictable_tokens": "Number of evictable (radix-cached) token slots in the KV cache pool.",
    "sglang:kv_used_tokens": "Number of actively used token slots in the KV cache pool.",
    "sglang:utilization": "The utilization.",
    "sglang:new_token_ratio": "The new token ratio.",
    "sglang:is_cuda_graph": "Whether the batch is using CUDA graph.",
    "sglang:max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
    "sglang:page_size": "KV cache page size in tokens.",
    "sglang:num_pages": "Number of KV cache pages.",
    "sglang:context_len": "Maximum context length.",
    "sglang:num_retracted_reqs": "The number of retracted requests.",
    "sglang:num_paused_reqs": "The number of paused requests by async weight sync.",
    "sglang:realtime_tokens": "Total number of tokens processed (updated on each log interval). mode: "
                              "prefill_compute, prefill_cache, decode.",
    "sglang:cuda_graph_passes": "Total number of forward passes categorized by CUDA graph.",
    "sglang:num_retracted_requests": "Total number of retracted requests.",  # HELP not verified
    "sglang:prompt_tokens": "Number of prefill tokens processed.",
    "sglang:generation_tokens": "Number of generation tokens processed.",
    "sglang:num_requests": "Number of requests processed.",
    "sglang:num_aborted_requests": "Number of requests aborted.",  # HELP not verified
    "sglang:queue_time_seconds": "Histogram of queueing time in seconds.",
    "sglang:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "sglang:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "sglang:e2e_request_latency_seconds": "Histogram of End-to-end request latency in seconds",
    "sglang:request_time_per_output_token_seconds": "Per-request TPOT in seconds: (finished_time - first_token_time)"
                                                    " / (completion_tokens - 1).",
    "sglang:prompt_tokens_histogram": "Histogram of prompt token length.",
    "sglang:uncached_prompt_tokens_histogram": "Histogram of uncached (compute) prompt token length.",
    "sglang:generation_tokens_histogram": "Histogram of generation token length.",
}


# --- what alert rules and dashboards read, per metric naming --------------------------------------

ALERT_NAMINGS = ("sglang-0.5.23",)      # newest first


def _sglang_hist(kind: str, name: str, edges, flag: str) -> LatencyHistogram:
    return LatencyHistogram(kind, name, tuple(float(e) for e in edges), flag)


def alert_series(naming: str) -> EngineSeries:
    if naming not in ALERT_NAMINGS:
        raise KeyError(naming)
    b = BUCKETS
    return EngineSeries(
        dialect=NAME, naming=naming,
        running=RUNNING, waiting=WAITING, kv_usage=TOKEN_USAGE,
        preemptions=RETRACTED_REQUESTS, preemptions_lazy=True,
        # SGLang's HTTP middleware counts every route with its exact status code; probes and scrapes
        # are not user traffic.
        availability=RatioSeries(
            "sglang:http_responses_total", bad='status_code=~"5.."',
            total='endpoint!~"/metrics|/health|/health_generate|/ready|/ping"',
            good_labels=(("endpoint", "/v1/completions"), ("method", "POST"), ("status_code", "200")),
            bad_labels=(("endpoint", "/v1/completions"), ("method", "POST"), ("status_code", "503"))),
        success=RatioSeries(NUM_REQUESTS, bad="", total="", bad_counter=NUM_ABORTED),
        histograms={
            "ttft": _sglang_hist("ttft", HISTOGRAMS["ttft"][0], b["time_to_first_token"], BUCKET_FLAGS["ttft"]),
            "itl": _sglang_hist("itl", HISTOGRAMS["itl"][0], b["inter_token_latency"], BUCKET_FLAGS["itl"]),
            "tpot": _sglang_hist("tpot", HISTOGRAMS["tpot"][0], b["inter_token_latency"], BUCKET_FLAGS["itl"]),
            "e2e": _sglang_hist("e2e", HISTOGRAMS["e2e"][0], b["e2e_request_latency"], BUCKET_FLAGS["e2e"]),
            "queue": _sglang_hist("queue", HISTOGRAMS["queue"][0], b["queue_time"],
                                  "(none: fixed in SGLang's metrics collector)"),
        },
        slot_limit_flag=SLOT_LIMIT_FLAG, default_slot_limit=None,
        engine_labels=IDENTITY_LABELS,
    )


# --- the Dialect ---------------------------------------------------------------------------------

_WATCHDOG_COMPONENTS = ("Scheduler", "TokenizerManager", "DetokenizerManager", "DataParallelController")
WATCHDOG_REASON = "watchdog timeout"
HEALTH_CHECK_FAILED_REASON = "health check failed"


def parse_log_message(msg: str) -> list[base.LogFinding]:
    """SGLang's log grammar: Decode and Prefill batch lines, retractions, watchdog timeouts, startup
    failures, engine deaths, its own failed health generation, out-of-memory, ready."""
    match = DECODE_LINE.search(msg)
    if match:
        fields = base.numbers(match, {"running": int, "tokens": int, "token_usage": float, "gen_tps": float,
                                      "queue": int})
        queues = PD_DECODE_QUEUES.search(msg)
        if queues:
            fields.update(base.numbers(queues, {"prealloc": int, "transfer": int}))
        return [("stats", {"batch": "decode", **fields})]
    match = PREFILL_LINE.search(msg)
    if match:
        fields = base.numbers(match, {"new_seq": int, "new_tokens": int, "cached_tokens": int, "token_usage": float,
                                      "running": int, "queue": int})
        queues = PD_PREFILL_QUEUES.search(msg)
        if queues:
            fields.update(base.numbers(queues, {"bootstrap": int, "inflight": int}))
        return [("stats", {"batch": "prefill", **fields})]
    match = KV_TRANSFER_FAILED_LINE.search(msg)
    if match:
        fields = {"side": match["side"].lower(), "stage": match["stage"]}
        timeout = KV_POLL_TIMEOUT.search(msg)
        if timeout:
            fields["timeout_s"] = float(timeout["seconds"])
            if timeout["poll"] in KV_POLL_STATES:
                fields["poll"] = timeout["poll"]
        return [("kv_transfer_failure", fields)]
    for literal in KV_TIMEOUT_LINES:
        if literal in msg:
            return [("kv_timeout", {"reason": literal})]
    match = RETRACTION_LINE.search(msg)
    if match:
        return [("retraction", base.numbers(match, {"retracted": int, "tokens_gained": int}))]
    match = WATCHDOG_LINE.search(msg)
    if match:
        fields: dict = {"reason": WATCHDOG_REASON, "timeout_s": float(match.group("timeout"))}
        if match.group("component") in _WATCHDOG_COMPONENTS:
            fields["component"] = match.group("component")
        return [("error", fields)]
    for literal in STARTUP_FAILURE_LINES:
        if literal in msg:
            return [("startup_failure", {"reason": literal})]
    for literal in ENGINE_DEAD_LINES:
        if literal in msg:
            return [("engine_dead", {"reason": literal})]
    if SHUTDOWN_LINE in msg:
        return [("shutdown", {"reason": "requested"})]
    for literal in HEALTH_CHECK_FAILED_LINES:
        if literal in msg:
            return [("error", {"reason": HEALTH_CHECK_FAILED_REASON})]
    for literal in OOM_LINES:
        if literal in msg:
            return [("error", {"reason": literal})]
    if READY_LINE in msg:
        return [("startup", {"stage": "ready"})]
    return _startup_stage(msg)


def _startup_stage(msg: str) -> list[base.LogFinding]:
    found = base.startup_stage(msg, STARTUP_STAGE_LINES, (
        (WEIGHTS_LOADED_LINE, "weights_loaded"), (GRAPHS_CAPTURED_LINE, "graphs_captured"),
        (ENGINE_READY_LINE, "engine_ready")))
    if found:
        return found
    if GRAPHS_CAPTURING_LINE.search(msg):
        return [("startup", {"stage": "graphs_capturing"})]
    match = KV_LIMITS_LINE.search(msg)
    if match:
        return [("startup", {"stage": "kv_cache_size", **base.numbers(match, {"tokens": int, "max_running": int,
                                                                               "per_request": int})})]
    match = KV_ALLOCATED_LINE.search(msg)
    if match:
        return [("startup", {"stage": "kv_cache_size", "tokens": int(match.group("tokens"))})]
    return []


def stats_reading(fields: Mapping) -> base.StatsReading:
    usage = fields.get("token_usage")
    return base.StatsReading(f"{fields.get('batch')} batch", f"sglang {fields.get('batch')} batch", {
        "running": fields.get("running"), "waiting": fields.get("queue"),
        "kv_pct": None if usage is None else 100.0 * usage, "gen_tps": fields.get("gen_tps")})


class SglangDialect(base.Dialect, module=sys.modules[__name__]):
    engine_process_titles = (("sglang::scheduler", "engine_core"), ("sglang::detokenizer", "worker"))
    health_dead_status = None     # 503 while starting, draining, or when its health generation times out
    health_runs_through_engine = True
    latency_edges = {"ttft": BUCKETS["time_to_first_token"], "itl": BUCKETS["inter_token_latency"],
                     "e2e": BUCKETS["e2e_request_latency"]}


DIALECT = SglangDialect()
