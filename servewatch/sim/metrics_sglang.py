"""SGLang 0.5.23-era /metrics for the simulator, written the way SGLang's multiprocess
collector writes it: no `_created` series, no process/python collectors, labels sorted (with `le` in
place), histograms as sum / buckets / count, tokenizer-process families present only once a request
used them, `num_retracted_reqs` / `num_paused_reqs` with a `pid` label, and scheduler gauges that are
refreshed only when the scheduler logs (each prefill batch, every `decode_log_interval` decode
batches, and when it goes idle) — so they freeze, like the real ones, when the scheduler hangs.
"""

from __future__ import annotations

import os

from servewatch.dialects import sglang as dialect
from servewatch.dialects.sglang import TOKENS_HISTOGRAM_EDGES, HELP
from servewatch.sim.metrics import Hist, counter, gauge, histogram, make_registry, render, sorted_labels

_STREAMING = ("true", "false")


class SglangMetrics:
    def __init__(self, engine, created: float):
        self.engine = engine
        cfg = engine.config
        self.gpu = cfg.hw.device == "GPU"
        self.sched = sorted_labels({"engine_type": "unified", "model_name": cfg.model_name, "moe_ep_rank": "0",
                                    "pp_rank": "0", "tp_rank": "0"})
        self.tok = sorted_labels({"engine_type": "unified", "model_name": cfg.model_name})
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
        self.registry = make_registry(self.families, with_process=False)

    # --- hooks -----------------------------------------------------------------------------------
    def on_admitted(self, admission) -> None:
        request = admission.request
        if request.count_in_metrics:
            self.queue.observe(max(0.0, self.engine.clock.now() - request.queued_ts))
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

    def on_idle(self, now: float) -> None:
        self.refresh(now)

    def on_idle_loop(self, now: float) -> None:
        """No batch to run (idle, or nothing admissible): refresh at most once a second."""
        if now - self._refreshed_at >= 1.0:
            self.refresh(now)

    def refresh(self, now: float) -> None:
        """The scheduler's log_stats: publish gauges and flush the realtime token counters."""
        start, tokens = self._gen_window
        throughput = tokens / (now - start) if now > start else 0.0
        self._gen_window = (now, 0)
        self._refreshed_at = now
        self.snapshot = self._take_snapshot(gen_throughput=throughput)
        for mode, value in self._pending_realtime.items():
            self.realtime[mode] += value
            self._pending_realtime[mode] = 0.0

    def on_finished(self, request) -> None:
        if not request.count_in_metrics:
            return
        if request.finish_reason == "abort":
            self.aborted += 1
        s = self._stream(request)
        s["prompt_tokens"] += request.prompt_len
        s["generation_tokens"] += request.output_len
        s["requests"] += 1
        if request.scheduled_ts is None:
            return
        s["e2e"].observe(request.finished_ts - request.arrival)
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
        out.extend(self.http.families())
        return [m for m in out if m.samples]


class SglangHttpStats:
    """SGLang's HTTP middleware counters (0.5.23, with --enable-metrics): every route, the exact status code."""

    def __init__(self):
        self.requests: dict[tuple[str, str], int] = {}
        self.responses: dict[tuple[str, str, str], int] = {}

    def observe(self, handler: str, method: str, status: int, seconds: float, request_bytes: int = 0) -> None:
        self.requests[(handler, method)] = self.requests.get((handler, method), 0) + 1
        key = (handler, method, str(status))
        self.responses[key] = self.responses.get(key, 0) + 1

    def families(self):
        return [
            counter("sglang:http_requests", "Total number of HTTP requests by endpoint and method",
                    [({"endpoint": e, "method": m}, n) for (e, m), n in self.requests.items()], None),
            counter("sglang:http_responses", "Total number of HTTP responses by endpoint and status code",
                    [({"endpoint": e, "method": m, "status_code": c}, n) for (e, m, c), n in self.responses.items()],
                    None),
        ]
