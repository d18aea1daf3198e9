"""SGLang 0.5.23-era /metrics for the simulator, written the way SGLang's multiprocess
collector writes it: no `_created` series, no process/python collectors, labels sorted (with `le` in
place), histograms as sum / buckets / count, tokenizer-process families present only once a request
used them, `num_retracted_reqs` / `num_paused_reqs` with a `pid` label, and scheduler gauges that are
refreshed only when the scheduler logs (each prefill batch, every `decode_log_interval` decode
batches, and when it goes idle) — so they freeze, like the real ones, when the scheduler hangs.
"""

from __future__ import annotations

import math
import os
import time

from servewatch.dialects import sglang as dialect
from servewatch.dialects.sglang import TOKENS_HISTOGRAM_EDGES, HELP
from servewatch.sim.metrics import Hist, counter, gauge, histogram, make_registry, render, sorted_labels

_STREAMING = ("true", "false")

# Families a real SGLang 0.5.23 (CPU, a dense Llama, --enable-metrics) exposes beyond the ones the
# simulator models: their HELP text as that server wrote it. Most stay 0 for a single dense engine
# without speculative decoding, disaggregation, SWA or Mamba layers, exactly as they did there.
_ZERO_SCHEDULER_GAUGES = {
    "sglang:swa_token_usage": "The token usage for SWA layers.",
    "sglang:mamba_usage": "The token usage for Mamba layers.",
    "sglang:swa_available_tokens": "Number of free token slots in the SWA pool (hybrid-SWA only).",
    "sglang:swa_evictable_tokens": "Number of evictable (radix-cached) token slots in the SWA pool.",
    "sglang:swa_used_tokens": "Number of actively used token slots in the SWA pool.",
    "sglang:mamba_available_tokens": "Number of free state slots in the mamba SSM pool (hybrid-SSM only).",
    "sglang:mamba_evictable_tokens": "Number of evictable (radix-cached) state slots in the mamba SSM pool.",
    "sglang:mamba_used_tokens": "Number of actively used state slots in the mamba SSM pool.",
    "sglang:spec_accept_length": "Mean acceptance length of speculative decoding (accepted drafts + bonus token "
                                 "per forward).",
    "sglang:spec_accept_rate": "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
    "sglang:spec_cap_length": "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot "
                              "(0 when no cap is scheduled).",
    "sglang:spec_block_accept_length": "Mean uncapped full-block accept length per verify step (accept + "
                                       "cap-trimmed drafts; exact only in DSpark cap-accept mode).",
    "sglang:spec_num_steps": "Currently active speculative_num_steps.",
    "sglang:spec_num_draft_tokens": "Currently active speculative_num_draft_tokens (decouples from steps under "
                                    "topk>1).",
    "sglang:num_prefill_bootstrap_queue_reqs": "The number of requests in the prefill bootstrap queue.",
    "sglang:num_prefill_inflight_queue_reqs": "The number of requests in the prefill inflight queue.",
    "sglang:num_decode_prealloc_queue_reqs": "The number of requests in the decode prealloc queue.",
    "sglang:num_decode_transfer_queue_reqs": "The number of requests in the decode transfer queue.",
    "sglang:num_decode_host_receive_queue_reqs": "Requests in the decode transfer queue receiving into host memory "
                                                 "or waiting for device admission.",
    "sglang:num_decode_deferred_kv_release_reqs": "The number of failed decode requests whose KV allocations are "
                                                  "held pending transfer drain acknowledgement or timeout.",
    "sglang:pending_prealloc_token_usage": "The token usage for pending preallocated tokens (not preallocated yet).",
    "sglang:prealloc_full_token_usage": "Share of the full-attention KV pool held by decode requests whose KV "
                                        "transfer is pending (preallocated, not yet running); same capacity basis "
                                        "as sglang:full_token_usage.",
    "sglang:prealloc_swa_token_usage": "Share of the SWA KV pool held by decode requests whose KV transfer is "
                                       "pending; same capacity basis as sglang:swa_token_usage.",
    "sglang:num_unique_running_routing_keys": "Number of unique routing keys in running batch.",
}
_EXTRA_HELP = {
    "sglang:weight_memory_usage_gb": "Memory used by model weights in GB.",
    "sglang:kv_cache_memory_usage_gb": "Memory used by the KV cache pools in GB.",
    "sglang:graph_memory_usage_gb": "Memory used by captured device graphs in GB.",
    "sglang:startup_available_gpu_memory_gb": "Available GPU memory in GB at startup.",
    "sglang:fwd_occupancy": "Forward pass GPU occupancy percentage.",
    "sglang:routing_key_running_req_count": "Distribution of routing keys by running request count (gt < count <= le).",
    "sglang:routing_key_all_req_count": "Distribution of routing keys by running+waiting request count "
                                        "(gt < count <= le).",
    "sglang:routing_keys_active": "Number of unique routing keys with active requests",
    "sglang:startup_time_seconds": "Engine startup duration by phase in seconds.",
    "sglang:startup_cuda_graph_time_seconds": "CUDA graph capture duration by phase in seconds.",
    "sglang:prefill_effective_tokens": "Effective prefill tokens with retracted-request re-counts excluded, updated "
                                       "on each log interval. mode: device_hit, host_hit, storage_hit, input. Windowed "
                                       "prefix cache hit rate = rate(sum of *_hit) / rate(sum of all modes); per-tier "
                                       "rate uses a single *_hit mode in the numerator.",
    "sglang:scheduler_idle_seconds": "Total wall time while the scheduler has no runnable or queued work.",
    "sglang:scheduler_process_cpu_seconds": "Total CPU time consumed by the scheduler process across all threads.",
    "sglang:scheduler_stage_seconds": "Total scheduler-loop wall time exclusively attributed to each stage. "
                                      "forward_overlap (full, partial, none): full=both endpoints active, partial=one, "
                                      "none=no observed overlap (including unavailable timing). Not exact "
                                      "overlapped/exposed seconds.",
    "sglang:dp_attention_tokens": "Tokens of MLP-sync steps on this DP rank. kind=scheduled: tokens this rank ran; "
                                  "kind=imbalance: tokens the busiest rank ran beyond this rank, i.e. capacity lost "
                                  "to DP imbalance on this rank. On speculative-decode steps the unit is batch rows "
                                  "(requests).",
    "sglang:dp_attention_steps": "MLP-sync steps on this DP rank. rank_state=idle: this rank had no tokens and only "
                                 "ran to keep the DP collectives in lockstep.",
    "sglang:dp_attention_pairs": "Causal (query, key) pairs attended by MLP-sync steps on this DP rank, pricing every "
                                 "layer as full attention: a decode row reads its sequence, a prefill chunk its prefix "
                                 "plus the pairs within the chunk. kind=scheduled: this rank; kind=imbalance: the "
                                 "busiest rank's excess over this rank. The context-length counterpart of "
                                 "sglang:dp_attention_tokens_total; like it, speculative-decode steps count one query "
                                 "per row. Sliding-window layers execute fewer pairs than counted, so on hybrid-SWA "
                                 "models long rows are overstated.",
    "sglang:dp_attention_token_imbalance_ratio": "Per MLP-sync step, max tokens over mean tokens across the DP ranks "
                                                 "(1.0 = balanced, num_dp_ranks = one busy rank). Reported once per "
                                                 "engine, by the scheduler of DP rank 0.",
    "sglang:dp_attention_sync_wait_seconds": "Wall time of this DP rank's scheduler MLP-sync all-gather per step. On "
                                             "the gloo path (the default with overlap scheduling) this is waiting for "
                                             "the slowest rank; on the device-group paths it also includes the "
                                             "gather's stream sync.",
    "sglang:per_stage_req_latency_seconds": "The latency of each stage of requests.",
    "sglang:cached_tokens": "Number of cached prompt tokens by source (device/host/storage).",
    "sglang:process_cpu_seconds": "Total CPU time consumed by this process (user + system)",
    "sglang:http_requests": "Total number of HTTP requests by endpoint and method",
    "sglang:http_responses": "Total number of HTTP responses by endpoint and status code",
    "sglang:http_requests_active": "Number of currently active HTTP requests",
}
AVAILABLE_MEMORY_GB = 20.84   # what the real CPU server reported at start-up on a 24 GB machine
_GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
_STARTUP_PHASES = ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e")
_STAGE_CATEGORIES = ("other", "recv_requests", "process_input_requests", "get_next_batch_to_run", "process_queue",
                     "run_batch", "process_batch_result", "sanity_check_cache", "idle")
_ROUTING_RANGES = (("0", "1"), ("1", "2"), ("2", "3"), ("3", "5"), ("5", "7"), ("7", "10"), ("10", "20"),
                   ("20", "50"), ("50", "100"), ("100", "200"), ("200", "+Inf"))
_IMBALANCE_EDGES = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0)
_SYNC_WAIT_EDGES = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_STAGE_LATENCY_EDGES = tuple(0.001 * 1.62 ** i for i in range(30))


class SglangHttpStats:
    """SGLang's own HTTP counters (endpoint, method, status_code), fed by the simulator's HTTP layer."""

    def __init__(self):
        self.requests: dict[tuple[str, str], int] = {}
        self.responses: dict[tuple[str, str, str], int] = {}

    def observe(self, handler: str, method: str, status: int, seconds: float,
                request_bytes: int = 0, response_bytes: int = 0) -> None:
        self.requests[(handler, method)] = self.requests.get((handler, method), 0) + 1
        key = (handler, method, str(status))
        self.responses[key] = self.responses.get(key, 0) + 1

    def families(self):
        return [
            counter("sglang:http_requests", _EXTRA_HELP["sglang:http_requests"],
                    [({"endpoint": e, "method": m}, n) for (e, m), n in self.requests.items()], None),
            counter("sglang:http_responses", _EXTRA_HELP["sglang:http_responses"],
                    [({"endpoint": e, "method": m, "status_code": s}, n) for (e, m, s), n in self.responses.items()],
                    None),
            gauge("sglang:http_requests_active", _EXTRA_HELP["sglang:http_requests_active"],
                  [({"endpoint": e, "method": m}, 0.0) for e, m in self.requests]),
        ]


class SglangMetrics:
    def __init__(self, engine, created: float):
        self.engine = engine
        self._created = engine.clock.now()
        cfg = engine.config
        self.gpu = cfg.hw.device == "GPU"
        engine_type = cfg.pd_role or "unified"      # DisaggregationMode.to_engine_type: prefill | decode | unified
        self.sched = sorted_labels({"engine_type": engine_type, "model_name": cfg.model_name, "moe_ep_rank": "0",
                                    "pp_rank": "0", "tp_rank": "0"})
        self.tok = sorted_labels({"engine_type": engine_type, "model_name": cfg.model_name})
        self.kv_latency = Hist(dialect.BUCKETS["kv_transfer_latency_ms"])    # observed by the prefill
        self.kv_total_mb = Hist(dialect.BUCKETS["kv_transfer_total_mb"])
        self.pid = str(os.getpid())
        self.cache_queries = self.cache_hits = 0.0
        self.snapshot = self._take_snapshot(gen_throughput=0.0)
        self.retracted_last = 0
        self.passes = dict.fromkeys(dialect.FORWARD_PASS_MODES, 0.0)
        self.realtime = dict.fromkeys(dialect.REALTIME_TOKEN_MODES, 0.0)
        self._pending_realtime = dict.fromkeys(dialect.REALTIME_TOKEN_MODES, 0.0)
        self.retracted_total = 0.0
        self.per_stream: dict[str, dict] = {}        # is_streaming -> counters and histograms
        self.queue = Hist(dialect.BUCKETS["queue_time"])
        self.itl = Hist(dialect.BUCKETS["inter_token_latency"])
        self.prompt_hist = Hist(TOKENS_HISTOGRAM_EDGES)
        self.uncached_hist = Hist(TOKENS_HISTOGRAM_EDGES)
        self.gen_hist = Hist(TOKENS_HISTOGRAM_EDGES)
        self.aborted = 0.0
        self.decode_steps = 0
        self._gen_window = (engine.clock.now(), 0)
        self._refreshed_at = engine.clock.now()
        self.http = SglangHttpStats()
        self.cached_tokens = 0.0
        self.effective = {"input": 0.0, "device_hit": 0.0, "host_hit": 0.0, "storage_hit": 0.0}
        self.idle_seconds = 0.0
        self._idle_since: float | None = None
        self.stage_latency = {"request_process": Hist(_STAGE_LATENCY_EDGES),
                              "prefill_forward": Hist(_STAGE_LATENCY_EDGES)}
        self.registry = make_registry(self.families, with_process=False)

    # --- hooks -----------------------------------------------------------------------------------
    def on_admitted(self, admission) -> None:
        request = admission.request
        if request.count_in_metrics:
            self.queue.observe(max(0.0, self.engine.clock.now() - request.queued_ts))
        self._idle_since = None
        self.cache_queries += admission.query_tokens
        self.cache_hits += admission.hit_tokens
        self._pending_realtime["prefill_cache"] += admission.hit_tokens

    def on_step(self, result) -> None:
        plan = result.plan
        graph = "cuda_graph" if self.gpu else "none"
        is_prefill = plan.prefill_tokens > 0
        mode = "prefill_none" if is_prefill else f"decode_{graph}"
        self.passes[mode] += 1
        self._pending_realtime["prefill_compute"] += plan.prefill_tokens
        self._pending_realtime["decode"] += plan.decode_tokens
        self.retracted_last = len(plan.preempted)
        self.retracted_total += len(plan.preempted)
        for gap, n in result.itl_groups.items():
            self.itl.observe(gap, n)
        start, tokens = self._gen_window
        self._gen_window = (start, tokens + len(result.sampled))
        if not is_prefill:
            self.decode_steps += 1
        if is_prefill or self.decode_steps % self.engine.config.decode_log_interval == 0:
            self.refresh(result.t)
        for request in result.first_tokens:
            if request.count_in_metrics:
                self._stream(request)["ttft"].observe(result.t - request.arrival)

    def on_kv_sent(self, seconds: float, nbytes: float) -> None:
        """A prefill's transfer done (req_time_stats.compute_and_observe_kv_transfer_metrics): latency and size."""
        self.kv_latency.observe(seconds * 1000)
        self.kv_total_mb.observe(nbytes / 2**20)

    def on_idle(self, now: float) -> None:
        self._count_idle(now)
        self.refresh(now)

    def on_idle_loop(self, now: float) -> None:
        """No batch to run (idle, or nothing admissible): refresh at most once a second."""
        self._count_idle(now)
        if now - self._refreshed_at >= 1.0:
            self.refresh(now)

    def _count_idle(self, now: float) -> None:
        if self._idle_since is not None:
            self.idle_seconds += max(0.0, now - self._idle_since)
        self._idle_since = now

    def refresh(self, now: float) -> None:
        """The scheduler's log_stats: publish gauges and flush the realtime token counters."""
        start, tokens = self._gen_window
        throughput = tokens / (now - start) if now > start else 0.0
        self._gen_window = (now, 0)
        self._refreshed_at = now
        self.snapshot = self._take_snapshot(gen_throughput=throughput)
        self.effective["input"] += self._pending_realtime["prefill_compute"]
        self.effective["device_hit"] += self._pending_realtime["prefill_cache"]
        for mode, value in self._pending_realtime.items():
            self.realtime[mode] += value
            self._pending_realtime[mode] = 0.0

    def on_finished(self, request) -> None:
        if not request.count_in_metrics:
            return
        if request.finish_reason == "abort":
            self.aborted += 1
        self.cached_tokens += request.prefix_hit_tokens
        s = self._stream(request)
        s["prompt_tokens"] += request.prompt_len
        s["generation_tokens"] += request.output_len
        s["requests"] += 1
        if request.scheduled_ts is None:
            return
        s["e2e"].observe(request.finished_ts - request.arrival)
        self.stage_latency["request_process"].observe(max(0.0, request.scheduled_ts - request.queued_ts))
        if request.first_token_ts is not None:
            self.stage_latency["prefill_forward"].observe(max(0.0, request.first_token_ts - request.scheduled_ts))
        if request.first_token_ts is not None and request.output_len > 1:
            s["tpot"].observe((request.finished_ts - request.first_token_ts) / (request.output_len - 1))
        self.prompt_hist.observe(request.prompt_len)
        self.uncached_hist.observe(request.prompt_len - request.prefix_hit_tokens)
        self.gen_hist.observe(request.output_len)

    def _stream(self, request) -> dict:
        key = "true" if request.is_streaming else "false"
        s = self.per_stream.get(key)
        if s is None:
            s = self.per_stream[key] = {
                "prompt_tokens": 0.0, "generation_tokens": 0.0, "requests": 0.0,
                "ttft": Hist(dialect.BUCKETS["time_to_first_token"]),
                "tpot": Hist(dialect.BUCKETS["inter_token_latency"]),
                "e2e": Hist(dialect.BUCKETS["e2e_request_latency"]),
            }
        return s

    def _take_snapshot(self, gen_throughput: float) -> dict[str, float]:
        e = self.engine
        cfg = e.config
        total = cfg.num_blocks * cfg.block_size
        used = e.kv_used_tokens
        return {
            "sglang:num_running_reqs": e.num_running, "sglang:num_queue_reqs": e.num_waiting,
            "sglang:num_grammar_queue_reqs": 0.0, "sglang:gen_throughput": round(gen_throughput, 2),
            "sglang:cache_hit_rate": self.cache_hits / self.cache_queries if self.cache_queries else 0.0,
            "sglang:decode_sum_seq_lens": float(e.running_context_tokens),
            "sglang:token_usage": round(used / total, 2), "sglang:full_token_usage": used / total,
            "sglang:num_used_tokens": used, "sglang:kv_available_tokens": total - used,
            "sglang:kv_evictable_tokens": e.kv_evictable_tokens, "sglang:kv_used_tokens": used,
            "sglang:utilization": 0.0, "sglang:new_token_ratio": 0.7, "sglang:is_cuda_graph": 1.0 if self.gpu else 0.0,
        }

    # --- exposition ----------------------------------------------------------------------------
    def text(self) -> str:
        return render(self.registry)

    def families(self):
        cfg = self.engine.config
        sched = self.sched
        out = [gauge(name, HELP[name], [(sched, value)]) for name, value in self.snapshot.items()]
        total = cfg.num_blocks * cfg.block_size
        for name, value in (("sglang:max_total_num_tokens", total), ("sglang:page_size", cfg.block_size),
                            ("sglang:num_pages", cfg.num_blocks), ("sglang:context_len", cfg.max_model_len)):
            out.append(gauge(name, HELP[name], [(sched, value)]))
        with_pid = sorted_labels(sched, {"pid": self.pid})
        out.append(gauge("sglang:num_retracted_reqs", HELP["sglang:num_retracted_reqs"],
                         [(with_pid, self.retracted_last)]))
        out.append(gauge("sglang:num_paused_reqs", HELP["sglang:num_paused_reqs"], [(with_pid, 0.0)]))
        out.append(counter("sglang:realtime_tokens", HELP["sglang:realtime_tokens"],
                           [(sorted_labels(sched, {"mode": m}), v) for m, v in self.realtime.items() if v], None))
        out.append(counter("sglang:cuda_graph_passes", HELP["sglang:cuda_graph_passes"],
                           [(sorted_labels(sched, {"mode": m}), v) for m, v in self.passes.items() if v], None))
        if self.retracted_total:
            out.append(counter("sglang:num_retracted_requests", HELP["sglang:num_retracted_requests"],
                               [(sched, self.retracted_total)], None))
        streams = [(sorted_labels(self.tok, {"is_streaming": k}), s) for k, s in sorted(self.per_stream.items())]
        for name, key in (("sglang:prompt_tokens", "prompt_tokens"), ("sglang:generation_tokens", "generation_tokens"),
                          ("sglang:num_requests", "requests")):
            out.append(counter(name, HELP[name], [(labels, s[key]) for labels, s in streams], None))
        if self.aborted:
            out.append(counter("sglang:num_aborted_requests", HELP["sglang:num_aborted_requests"],
                               [(self.tok, self.aborted)], None))
        if self.queue.count:
            out.append(histogram("sglang:queue_time_seconds", HELP["sglang:queue_time_seconds"],
                                 [(sched, self.queue)], None, sum_first=True))
        out.append(histogram("sglang:time_to_first_token_seconds", HELP["sglang:time_to_first_token_seconds"],
                             [(labels, s["ttft"]) for labels, s in streams], None, sum_first=True))
        if self.itl.count:
            out.append(histogram("sglang:inter_token_latency_seconds", HELP["sglang:inter_token_latency_seconds"],
                                 [(self.tok, self.itl)], None, sum_first=True))
        out.append(histogram("sglang:e2e_request_latency_seconds", HELP["sglang:e2e_request_latency_seconds"],
                             [(labels, s["e2e"]) for labels, s in streams], None, sum_first=True))
        out.append(histogram("sglang:request_time_per_output_token_seconds",
                             HELP["sglang:request_time_per_output_token_seconds"],
                             [(labels, s["tpot"]) for labels, s in streams], None, sum_first=True))
        for name, hist in (("sglang:prompt_tokens_histogram", self.prompt_hist),
                           ("sglang:uncached_prompt_tokens_histogram", self.uncached_hist),
                           ("sglang:generation_tokens_histogram", self.gen_hist)):
            if hist.count:
                out.append(histogram(name, HELP[name], [(self.tok, hist)], None, sum_first=True))
        out.extend(self._real_only_families())
        return [m for m in out if m.samples]

    def _real_only_families(self):
        """What a real 0.5.23 also exposes; mostly idle for one dense engine, with the same names and labels."""
        cfg = self.engine.config
        sched, tok = self.sched, self.tok
        pd = self.engine.pd
        queues = {}
        if pd is not None:
            queues = {dialect.PREFILL_INFLIGHT_QUEUE: float(len(pd.leases)), dialect.DECODE_TRANSFER_QUEUE:
                      float(pd.waiting_for_kv)}
        out = [gauge(name, text, [(sched, queues.get(name, 0.0))]) for name, text in _ZERO_SCHEDULER_GAUGES.items()]
        if pd is not None:
            for name, value in ((dialect.BOOTSTRAP_FAILED, pd.bootstrap_failed),
                                (dialect.TRANSFER_FAILED, pd.failed_transfers)):
                if value:
                    family = name[:-len("_total")]
                    out.append(counter(family, HELP[family], [(sched, value)], None))
            for name, hist in ((dialect.KV_TRANSFER_LATENCY, self.kv_latency),
                               (dialect.KV_TRANSFER_TOTAL_MB, self.kv_total_mb)):
                if hist.count:
                    out.append(histogram(name, HELP[name], [(sched, hist)], None, sum_first=True))
        kv_gb = cfg.num_blocks * cfg.block_size * cfg.hw.kv_bytes_per_token / 2**30
        for name, value in (("sglang:weight_memory_usage_gb", cfg.hw.weight_bytes / 2**30),
                            ("sglang:kv_cache_memory_usage_gb", kv_gb),
                            ("sglang:startup_available_gpu_memory_gb",
                             cfg.hw.device_total_gib if self.gpu else AVAILABLE_MEMORY_GB),
                            ("sglang:fwd_occupancy", 0.0 if self.gpu else math.nan)):
            out.append(gauge(name, _EXTRA_HELP[name], [(sched, value)]))
        out.append(gauge("sglang:graph_memory_usage_gb", _EXTRA_HELP["sglang:graph_memory_usage_gb"],
                         [(sorted_labels(sched, {"phase": p}), 0.0) for p in _GRAPH_PHASES]))
        for name in ("sglang:routing_key_running_req_count", "sglang:routing_key_all_req_count"):
            out.append(gauge(name, _EXTRA_HELP[name],
                             [(sorted_labels(sched, {"gt": gt, "le": le}), 0.0) for gt, le in _ROUTING_RANGES]))
        out.append(gauge("sglang:routing_keys_active", _EXTRA_HELP["sglang:routing_keys_active"], [({}, 0.0)]))
        startup = {"scheduler_e2e": cfg.startup_seconds, "tokenizer_e2e": cfg.startup_seconds}
        out.append(gauge("sglang:startup_time_seconds", _EXTRA_HELP["sglang:startup_time_seconds"],
                         [(sorted_labels(tok, {"phase": p}), startup.get(p, 0.0)) for p in _STARTUP_PHASES]))
        out.append(gauge("sglang:startup_cuda_graph_time_seconds", _EXTRA_HELP["sglang:startup_cuda_graph_time_seconds"],
                         [(sorted_labels(tok, {"phase": p}), 0.0) for p in _GRAPH_PHASES]))
        out.append(counter("sglang:prefill_effective_tokens", _EXTRA_HELP["sglang:prefill_effective_tokens"],
                           [(sorted_labels(sched, {"mode": m}), v) for m, v in self.effective.items()], None))
        cpu = os.times()
        out.append(counter("sglang:scheduler_idle_seconds", _EXTRA_HELP["sglang:scheduler_idle_seconds"],
                           [(sched, self.idle_seconds)], None))
        out.append(counter("sglang:scheduler_process_cpu_seconds", _EXTRA_HELP["sglang:scheduler_process_cpu_seconds"],
                           [(sched, cpu.user + cpu.system)], None))
        stages = {"idle": self.idle_seconds,
                  "run_batch": max(0.0, self.engine.clock.now() - self._created - self.idle_seconds)}
        out.append(counter("sglang:scheduler_stage_seconds", _EXTRA_HELP["sglang:scheduler_stage_seconds"],
                           [(sorted_labels(sched, {"category": c, "forward_overlap": "none"}), stages.get(c, 0.0))
                            for c in _STAGE_CATEGORIES], None))
        for name, label, values in (("sglang:dp_attention_tokens", "kind", ("scheduled", "imbalance")),
                                    ("sglang:dp_attention_steps", "rank_state", ("active", "idle")),
                                    ("sglang:dp_attention_pairs", "kind", ("scheduled", "imbalance"))):
            out.append(counter(name, _EXTRA_HELP[name], [(sorted_labels(sched, {label: v}), 0.0) for v in values], None))
        for name, edges in (("sglang:dp_attention_token_imbalance_ratio", _IMBALANCE_EDGES),
                            ("sglang:dp_attention_sync_wait_seconds", _SYNC_WAIT_EDGES)):
            out.append(histogram(name, _EXTRA_HELP[name], [(sched, Hist(edges))], None, sum_first=True))
        out.append(histogram("sglang:per_stage_req_latency_seconds", _EXTRA_HELP["sglang:per_stage_req_latency_seconds"],
                             [(sorted_labels(sched, {"stage": k}), h) for k, h in self.stage_latency.items()],
                             None, sum_first=True))
        if self.per_stream:
            out.append(counter("sglang:cached_tokens", _EXTRA_HELP["sglang:cached_tokens"],
                               [(sorted_labels(tok, {"cache_source": "device"}), self.cached_tokens)], None))
        out.append(counter("sglang:process_cpu_seconds", _EXTRA_HELP["sglang:process_cpu_seconds"],
                           [({"component": "tokenizer"}, cpu.user + cpu.system), ({"component": "detokenizer"}, 0.0)],
                           None))
        out.extend(self.http.families())
        return out
