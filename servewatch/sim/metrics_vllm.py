"""vLLM 0.32-era /metrics for the simulator: every scheduling, KV, token, request and latency family
of the real exposition (vllm/v1/metrics/loggers.py), same names, HELP, types, labels (sorted, as the
real server writes them) and bucket edges, plus prometheus_client's `_created` gauges and the default
process/platform/GC collectors of a single-process server.
"""

from __future__ import annotations

from servewatch.dialects import vllm as dialect
from servewatch.dialects.vllm import HELP, PROMPT_SOURCES, CACHED_SOURCES, ADMISSION_REASONS, SLEEP_STATES
from servewatch.sim.metrics import HttpStats, Hist, counter, gauge, histogram, make_registry, render, sorted_labels

GPU_MEMORY_UTILIZATION = {"h100-8b": "0.9", "rtx3060-7b": "0.85", "tiny-cpu": "0.92"}

# (histogram name, bucket family) in registration order
_LATENCY = (
    ("vllm:time_to_first_token_seconds", "time_to_first_token"),
    ("vllm:inter_token_latency_seconds", "inter_token_latency"),
    ("vllm:request_time_per_output_token_seconds", "inter_token_latency"),
    ("vllm:e2e_request_latency_seconds", "request_latency"),
    ("vllm:request_queue_time_seconds", "request_latency"),
    ("vllm:request_inference_time_seconds", "request_latency"),
    ("vllm:request_prefill_time_seconds", "request_latency"),
    ("vllm:request_decode_time_seconds", "request_latency"),
)


class VllmMetrics:
    def __init__(self, engine, created: float):
        self.engine = engine
        cfg = engine.config
        self.created = created
        self.base = sorted_labels({"engine": "0", "model_name": cfg.model_name})
        tok = dialect.request_tokens_buckets(cfg.max_model_len)
        self.c = {name: 0.0 for name in ("prefix_cache_queries", "prefix_cache_hits", "num_preemptions",
                                         "prompt_tokens", "prompt_tokens_cached", "generation_tokens")}
        self.by_source = dict.fromkeys(PROMPT_SOURCES, 0.0)
        self.cached_by_source = dict.fromkeys(CACHED_SOURCES, 0.0)
        self.success = dict.fromkeys(dialect.FINISH_REASONS, 0.0)
        self.h = {
            "vllm:request_prompt_tokens": Hist(tok),
            "vllm:request_generation_tokens": Hist(tok),
            "vllm:iteration_tokens_total": Hist(dialect.BUCKETS["iteration_tokens"]),
            "vllm:request_max_num_generation_tokens": Hist(tok),
            "vllm:request_params_n": Hist(dialect.BUCKETS["request_params_n"]),
            "vllm:request_params_max_tokens": Hist(tok),
        }
        for name, family in _LATENCY:
            self.h[name] = Hist(dialect.BUCKETS[family])
        self.h["vllm:request_num_preemptions"] = Hist(dialect.BUCKETS["request_num_preemptions"])
        self.h["vllm:request_prefill_kv_computed_tokens"] = Hist(tok)
        self.external_queries = self.external_hits = 0.0
        # the NIXL connector's histograms (nixl/stats.py), on a P/D instance only
        self.nixl = ({name: Hist(edges) for name, edges in dialect.NIXL_BUCKETS.items()}
                     if engine.pd is not None else {})
        self.http = HttpStats(created)
        self.registry = make_registry(self.families, with_process=True)

    # --- hooks from the engine -----------------------------------------------------------------
    def on_admitted(self, admission) -> None:
        self.c["prefix_cache_queries"] += admission.query_tokens
        self.c["prefix_cache_hits"] += admission.hit_tokens
        if self.engine.pd is not None:
            # the connector is asked about every prompt, on both sides (a real prefill: queries 1,063, hits 0);
            # decode finds the transferred ones
            self.external_queries += admission.request.prompt_len
            self.external_hits += admission.request.external_tokens

    def on_kv_received(self, seconds: float, nbytes: float) -> None:
        """A transfer this (decode) instance read: NIXL records its time and size on the reading side."""
        self.nixl[dialect.NIXL_XFER_TIME].observe(seconds)
        self.nixl[dialect.NIXL_POST_TIME].observe(min(seconds, 0.001))
        self.nixl[dialect.NIXL_BYTES].observe(nbytes)
        self.nixl[dialect.NIXL_DESCRIPTORS].observe(max(1.0, nbytes / 2**14))

    def on_kv_failed(self, prompt_tokens: int) -> None:
        """A request failed for its KV load (failure_policy=fail): finished with reason "error"."""
        self.success["error"] = self.success.get("error", 0.0) + 1

    def on_step(self, result) -> None:
        plan = result.plan
        self.h["vllm:iteration_tokens_total"].observe(plan.num_tokens)
        self.c["num_preemptions"] += len(plan.preempted)
        counted = [r for r in result.sampled if r.count_in_metrics]
        self.c["generation_tokens"] += len(counted)
        ttft = self.h["vllm:time_to_first_token_seconds"]
        for request in result.first_tokens:
            if not request.count_in_metrics:
                continue
            hit, external = request.prefix_hit_tokens, request.external_tokens
            self.c["prompt_tokens"] += request.prompt_len
            self.by_source["local_compute"] += request.prompt_len - hit - external
            self.by_source["local_cache_hit"] += hit
            self.by_source["external_kv_transfer"] += external
            self.c["prompt_tokens_cached"] += hit + external
            self.cached_by_source["device"] += hit
            self.cached_by_source["p2p"] += external
            ttft.observe(result.t - request.arrival)
        itl = self.h["vllm:inter_token_latency_seconds"]
        for gap, n in result.itl_groups.items():
            itl.observe(gap, n)

    def on_finished(self, request) -> None:
        if not request.count_in_metrics:
            return
        self.success[request.finish_reason] = self.success.get(request.finish_reason, 0.0) + 1
        if request.scheduled_ts is None:
            return
        h = self.h
        h["vllm:request_prompt_tokens"].observe(request.prompt_len)
        h["vllm:request_generation_tokens"].observe(request.output_len)
        h["vllm:request_max_num_generation_tokens"].observe(request.max_tokens)
        h["vllm:request_params_n"].observe(1)
        h["vllm:request_params_max_tokens"].observe(request.max_tokens)
        h["vllm:request_num_preemptions"].observe(request.preemptions)
        h["vllm:request_prefill_kv_computed_tokens"].observe(request.prompt_len - request.prefix_hit_tokens)
        h["vllm:e2e_request_latency_seconds"].observe(request.finished_ts - request.arrival)
        h["vllm:request_queue_time_seconds"].observe(request.scheduled_ts - request.queued_ts)
        first, last = request.first_token_ts, request.last_token_ts
        if first is not None:
            h["vllm:request_prefill_time_seconds"].observe(first - request.scheduled_ts)
            h["vllm:request_decode_time_seconds"].observe(last - first)
            h["vllm:request_inference_time_seconds"].observe(last - request.scheduled_ts)
            tpot = (last - first) / (request.output_len - 1) if request.output_len > 1 else 0.0
            h["vllm:request_time_per_output_token_seconds"].observe(tpot)

    # --- exposition ----------------------------------------------------------------------------
    def text(self) -> str:
        return render(self.registry)

    def families(self):
        e, base, created = self.engine, self.base, self.created
        one = [(base, 0.0)]
        out = [counter(n, HELP[n], one, created) for n in (
            "vllm:estimated_flops_per_gpu", "vllm:estimated_read_bytes_per_gpu", "vllm:estimated_write_bytes_per_gpu")]
        deferred = float(e.pd.waiting_for_kv) if e.pd is not None else 0.0
        out.append(gauge(dialect.RUNNING, HELP[dialect.RUNNING], [(base, e.num_running)]))
        out.append(gauge(dialect.WAITING, HELP[dialect.WAITING], [(base, e.num_waiting + deferred)]))
        out.append(gauge(dialect.WAITING_BY_REASON, HELP[dialect.WAITING_BY_REASON], [
            (sorted_labels(base, {"reason": "capacity"}), e.num_waiting),
            (sorted_labels(base, {"reason": "deferred"}), deferred)]))
        if e.pd is not None and e.pd.role == "decode":     # registered on a KV consumer only
            out.append(gauge(dialect.KV_FETCH_BY_STAGE, HELP[dialect.KV_FETCH_BY_STAGE], [
                (sorted_labels(base, {"stage": stage}), deferred if stage == "in_progress" else 0.0)
                for stage in dialect.KV_FETCH_STAGES]))
        out.append(gauge(dialect.ENGINE_SLEEP_STATE, HELP[dialect.ENGINE_SLEEP_STATE],
                         [(sorted_labels(base, {"sleep_state": s}), v) for s, v in SLEEP_STATES]))
        out.append(gauge(dialect.KV_USAGE, HELP[dialect.KV_USAGE], [(base, e.kv_usage)]))
        for name, value in (("vllm:prefix_cache_queries", self.c["prefix_cache_queries"]),
                            ("vllm:prefix_cache_hits", self.c["prefix_cache_hits"]),
                            ("vllm:external_prefix_cache_queries", self.external_queries),
                            ("vllm:external_prefix_cache_hits", self.external_hits),
                            ("vllm:mm_cache_queries", 0.0), ("vllm:mm_cache_hits", 0.0),
                            ("vllm:num_preemptions", self.c["num_preemptions"]),
                            ("vllm:prompt_tokens", self.c["prompt_tokens"])):
            out.append(counter(name, HELP[name], [(base, value)], created))
        out.append(counter("vllm:prompt_tokens_by_source", HELP["vllm:prompt_tokens_by_source"],
                           [(sorted_labels(base, {"source": s}), v) for s, v in self.by_source.items()], created))
        out.append(counter("vllm:prompt_tokens_cached", HELP["vllm:prompt_tokens_cached"],
                           [(base, self.c["prompt_tokens_cached"])], created))
        out.append(counter("vllm:prompt_tokens_cached_by_source", HELP["vllm:prompt_tokens_cached_by_source"],
                           [(sorted_labels(base, {"source": s}), v) for s, v in self.cached_by_source.items()],
                           created))
        out.append(counter("vllm:generation_tokens", HELP["vllm:generation_tokens"],
                           [(base, self.c["generation_tokens"])], created))
        out.append(counter("vllm:request_success", HELP["vllm:request_success"],
                           [(sorted_labels(base, {"finished_reason": r}), v) for r, v in self.success.items()],
                           created))
        out.append(counter("vllm:admission_rejections", HELP["vllm:admission_rejections"],
                           [(sorted_labels({"model_name": base["model_name"], "reason": r}), 0.0)
                            for r in ADMISSION_REASONS], created))
        for name, hist in self.h.items():
            out.append(histogram(name, HELP[name], [(base, hist)], created))
        if e.pd is not None:
            out.extend(self._nixl_families())
        out.append(gauge(dialect.CACHE_CONFIG_INFO, HELP[dialect.CACHE_CONFIG_INFO],
                         [(self._cache_config_labels(), 1.0)]))
        out.extend(self.http.families())
        return out

    def _nixl_families(self):
        """The NIXL connector's series (nixl/stats.py NixlPromMetrics): per engine, on both sides of the pair."""
        pd, base, created = self.engine.pd, self.base, self.created
        out = [histogram(name, HELP[name], [(base, hist)], created) for name, hist in self.nixl.items()]
        for name, value in ((dialect.NIXL_FAILED_TRANSFERS, pd.failed_transfers + pd.failed_notifications),
                            (dialect.NIXL_FAILED_NOTIFICATIONS, pd.failed_notifications),
                            (dialect.NIXL_EXPIRED, pd.expired),
                            (dialect.NIXL_AFTER_EXPIRY, pd.notifications_after_expiry)):
            family = name[:-len("_total")]
            out.append(counter(family, HELP[family], [(base, value)], created))
        return out

    def _cache_config_labels(self) -> dict[str, str]:
        cfg = self.engine.config
        hw = cfg.hw
        tokens = cfg.num_blocks * cfg.block_size
        labels = {
            "_block_size_resolved": "True", "block_size": str(cfg.block_size), "cache_dtype": "auto",
            "cache_hit_alignment_tokens": "None", "effective_attention_block_size": str(cfg.block_size),
            "enable_mamba_shared_prefix_checkpoint": "False",
            "enable_prefix_caching": str(cfg.enable_prefix_caching), "engine": "0",
            "gpu_memory_utilization": GPU_MEMORY_UTILIZATION.get(cfg.profile, "0.9"), "hash_block_size": "None",
            "is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None",
            "kv_cache_max_concurrency": str(round(tokens / cfg.max_model_len, 2)),
            "kv_cache_memory_bytes": str(int(tokens * hw.kv_bytes_per_token)),
            "kv_cache_size_tokens": str(tokens), "kv_offloading_backend": "native", "kv_offloading_size": "None",
            "kv_sharing_fast_prefill": "False", "mamba_block_size": "None", "mamba_cache_dtype": "auto",
            "mamba_cache_mode": "none", "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "float32",
            "num_cpu_blocks": "None", "num_gpu_blocks": str(cfg.num_blocks), "num_gpu_blocks_override": "None",
            "prefix_cache_retention_interval": "0", "prefix_caching_hash_algo": "sha256",
            "prefix_match_unit": "None", "replayssm_buffer_len": "16", "skip_page_size_padded": "None",
            "sliding_window": "None", "swa_bounded_replay": "True", "use_kda_recoverssm": "False",
            "use_replayssm": "False", "user_specified_block_size": "False",
        }
        return sorted_labels(labels)
