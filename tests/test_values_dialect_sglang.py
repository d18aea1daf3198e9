"""Values of servewatch/dialects/sglang.py (issue 50 item 8: every SGLang number an engine state or a log event holds):
a scrape written here series by series read into each field (the scheduler's per rank, the tokenizer's per model,
shared between a model's ranks), the disaggregation queues per side, the naming detected, and each log line's
numbers. Each figure by hand beside the assertion."""

from __future__ import annotations

import pytest

from servewatch.dialects import sglang as s
from servewatch.exposition.parser import parse


def _read(text, naming="sglang-0.5.23"):
    return s.read(parse(text, s.wanted_families()), naming)


R0 = 'model_name="m",engine_type="unified",dp_rank="0",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
R1 = 'model_name="m",engine_type="unified",dp_rank="1",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
P0 = 'model_name="m",engine_type="prefill",dp_rank="0",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
D0 = 'model_name="m",engine_type="decode",dp_rank="0",tp_rank="0",pp_rank="0",moe_ep_rank="0"'


def test_the_naming_detected():
    fam = s.wanted_families()
    assert s.detect(parse("x 1\n", ("x",))) is None
    assert s.detect(parse(f"sglang:num_running_reqs{{{R0}}} 1\n", fam)) == "sglang"
    assert s.detect(parse(f"sglang:kv_used_tokens{{{R0}}} 1\n", fam)) == "sglang-0.5.23"
    assert s.detect(parse(f"sglang:num_prefill_prealloc_queue_reqs{{{R0}}} 1\n", fam)) == "sglang-0.5.5"
    assert s.detect(parse(f"sglang:total_retracted_reqs{{{R0}}} 1\n", fam)) == "sglang-0.4.10"
    assert s.detect(parse(f"sglang:kv_used_tokens{{{R0}}} 1\nsglang:total_retracted_reqs{{{R0}}} 1\n",
                          fam)) == "sglang-0.5.23"
    assert s.detect(parse(f"sglang:num_prefill_prealloc_queue_reqs{{{R0}}} 1\n"
                          f"sglang:total_retracted_reqs{{{R0}}} 1\n", fam)) == "sglang-0.5.5"
    assert len(fam) == len(set(fam))


def test_two_ranks_of_one_model_read_into_every_field():
    text = f"""\
sglang:num_running_reqs{{{R0}}} 3
sglang:num_running_reqs{{{R1}}} 1
sglang:num_queue_reqs{{{R0}}} 4
sglang:token_usage{{{R0}}} 0.25
sglang:token_usage{{{R1}}} 0.5
sglang:kv_used_tokens{{{R0}}} 400
sglang:num_used_tokens{{{R0}}} 999
sglang:max_total_num_tokens{{{R0}}} 1600
sglang:num_retracted_requests_total{{{R0}}} 2
sglang:cuda_graph_passes_total{{{R0},mode="decode_cuda_graph"}} 40
sglang:cuda_graph_passes_total{{{R0},mode="prefill_none"}} 10
sglang:prompt_tokens_total{{model_name="m",is_streaming="true"}} 60
sglang:prompt_tokens_total{{model_name="m",is_streaming="false"}} 40
sglang:generation_tokens_total{{model_name="m"}} 200
sglang:num_requests_total{{model_name="m"}} 9
sglang:num_aborted_requests_total{{model_name="m"}} 1
sglang:http_responses_total{{endpoint="/v1/completions",method="POST",status_code="200"}} 8
sglang:http_responses_total{{endpoint="/v1/completions",method="POST",status_code="503"}} 1
sglang:http_responses_total{{endpoint="/health",method="GET",status_code="200"}} 50
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{{{R0},le="1.0"}} 2
sglang:queue_time_seconds_bucket{{{R0},le="+Inf"}} 3
sglang:queue_time_seconds_count{{{R0}}} 3
sglang:queue_time_seconds_sum{{{R0}}} 1.5
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{model_name="m",le="1.0"}} 5
sglang:time_to_first_token_seconds_bucket{{model_name="m",le="+Inf"}} 6
sglang:time_to_first_token_seconds_count{{model_name="m"}} 6
sglang:time_to_first_token_seconds_sum{{model_name="m"}} 3.0
"""
    zero, one = _read(text)
    assert (zero.dialect, zero.naming, zero.labels["dp_rank"], one.labels["dp_rank"]) == ("sglang", "sglang-0.5.23",
                                                                                          "0", "1")
    assert (zero.running, zero.waiting, zero.kv_usage, zero.kv_used_tokens, zero.kv_total_tokens) == (
        3, 4, 0.25, 400, 1600)
    c = zero.counters
    assert (c.prompt_tokens, c.generation_tokens, c.preemptions, c.steps, c.finished, c.tokens_shared) == (
        100, 200, 2, 50, {"all": 9, "abort": 1}, True)
    assert c.responses == {"200": 8, "503": 1}
    assert sorted(zero.histograms) == ["queue", "ttft"]
    assert zero.histograms["queue"].count == 3 and zero.histograms["ttft"].count == 6
    assert one.histograms["ttft"].count == 6                     # the tokenizer's, per model: every rank's
    assert "queue" not in one.histograms     # a scheduler series: rank 1 has none of its own, never rank 0's
    assert (one.running, one.waiting, one.kv_usage, one.kv_used_tokens, one.counters.steps,
            one.counters.preemptions) == (1, None, 0.5, None, None, None)
    assert (one.counters.prompt_tokens, one.counters.tokens_shared, one.kv_transfer) == (100, True, None)


def test_one_rank_owns_its_tokens_and_the_older_names():
    text = f"""\
sglang:num_running_reqs{{{R0}}} 3
sglang:num_used_tokens{{{R0}}} 321
sglang:total_retracted_reqs{{{R0}}} 7
sglang:generation_tokens_total{{model_name="m"}} 5
"""
    (state,) = _read(text, "sglang-0.4.10")
    c = state.counters
    assert (state.kv_used_tokens, c.preemptions, c.generation_tokens, c.tokens_shared, c.finished) == (
        321, 7, 5, False, {})
    (other,) = _read(f"sglang:num_queue_reqs{{{R0}}} 2\nsglang:generation_tokens_total{{model_name=\"x\"}} 5\n")
    assert (other.waiting, other.counters.generation_tokens) == (2, None)
    (usage_only,) = _read(f"sglang:token_usage{{{R0}}} 0.1\n")
    assert usage_only.kv_usage == 0.1


def test_the_disaggregation_queues_per_side():
    text = f"""\
sglang:num_running_reqs{{{P0}}} 1
sglang:num_running_reqs{{{D0}}} 2
sglang:num_prefill_bootstrap_queue_reqs{{{P0}}} 2
sglang:num_prefill_bootstrap_queue_reqs{{{P0},priority="1"}} 50
sglang:num_prefill_inflight_queue_reqs{{{P0}}} 3
sglang:num_decode_prealloc_queue_reqs{{{D0}}} 4
sglang:num_decode_transfer_queue_reqs{{{D0}}} 5
sglang:num_decode_transfer_queue_reqs{{{D0},priority=""}} 1
sglang:num_decode_transfer_queue_reqs{{{D0},priority="0"}} NaN
sglang:num_transfer_failed_reqs_total{{{D0}}} 6
sglang:num_bootstrap_failed_reqs_total{{{P0}}} 7
# TYPE sglang:kv_transfer_latency_ms histogram
sglang:kv_transfer_latency_ms_count{{{P0}}} 8
sglang:kv_transfer_latency_ms_sum{{{P0}}} 80
# TYPE sglang:kv_transfer_total_mb histogram
sglang:kv_transfer_total_mb_count{{{P0}}} 8
sglang:kv_transfer_total_mb_sum{{{P0}}} 1.5
sglang:realtime_tokens_total{{{P0},mode="prefill_compute"}} 900
sglang:realtime_tokens_total{{{D0},mode="decode"}} 30
"""
    states = {st.labels["engine_type"]: st for st in _read(text)}
    decode, prefill = states["decode"].kv_transfer, states["prefill"].kv_transfer
    assert (decode.role, decode.waiting_for_kv, decode.prefill_queue, decode.transfers, decode.bytes_transferred,
            decode.failed_transfers, decode.bootstrap_failed, decode.local_prompt_tokens) == (
        "decode", 10, None, None, None, 6, 0.0, None)
    assert (prefill.role, prefill.waiting_for_kv, prefill.prefill_queue, prefill.transfers, prefill.bytes_transferred,
            prefill.failed_transfers, prefill.bootstrap_failed, prefill.local_prompt_tokens) == (
        "prefill", None, 5, 8, 1.5 * 2**20, 0.0, 7, 900)
    fresh = s._kv_transfer(parse(f"sglang:num_prefill_bootstrap_queue_reqs{{{P0}}} 0\n", s.wanted_families()))
    (t,) = fresh.values()
    assert (t.transfers, t.bytes_transferred, t.prefill_queue) == (0.0, 0.0, 0)
    unified = s._kv_transfer(parse(f"sglang:num_prefill_bootstrap_queue_reqs{{{R0}}} 0\n", s.wanted_families()))
    assert unified == {}
    failed_only = s._kv_transfer(parse(f"sglang:num_transfer_failed_reqs_total{{{D0}}} 1\n", s.wanted_families()))
    (t,) = failed_only.values()
    assert (t.role, t.waiting_for_kv, t.failed_transfers) == ("decode", None, 1)


def test_small_helpers():
    assert s._add(None, None) is None and s._add(1.0, None, 2.0) == 3.0 and s._add(0.0) == 0.0
    assert s._queue_totals(None) == {}
    assert s._per_model({(("model_name", "m"), ("dp_rank", "0")): 3.0}) == {s.base.model_key(
        (("model_name", "m"), ("dp_rank", "0"))): 3.0}


def test_the_alert_series():
    a = s.alert_series("sglang-0.5.23")
    assert (a.dialect, a.naming, a.running, a.waiting, a.kv_usage, a.preemptions, a.preemptions_lazy) == (
        "sglang", "sglang-0.5.23", s.RUNNING, s.WAITING, s.TOKEN_USAGE, s.RETRACTED_REQUESTS, True)
    assert {k: (h.name, h.edges, h.edge_flag) for k, h in a.histograms.items()} == {
        "ttft": (s.HISTOGRAMS["ttft"][0], tuple(float(e) for e in s.BUCKETS["time_to_first_token"]),
                 s.BUCKET_FLAGS["ttft"]),
        "itl": (s.HISTOGRAMS["itl"][0], tuple(float(e) for e in s.BUCKETS["inter_token_latency"]), s.BUCKET_FLAGS["itl"]),
        "tpot": (s.HISTOGRAMS["tpot"][0], tuple(float(e) for e in s.BUCKETS["inter_token_latency"]),
                 s.BUCKET_FLAGS["itl"]),
        "e2e": (s.HISTOGRAMS["e2e"][0], tuple(float(e) for e in s.BUCKETS["e2e_request_latency"]),
                s.BUCKET_FLAGS["e2e"]),
        "queue": (s.HISTOGRAMS["queue"][0], tuple(float(e) for e in s.BUCKETS["queue_time"]),
                  "(none: fixed in SGLang's metrics collector)")}
    assert [h.kind for h in a.histograms.values()] == ["ttft", "itl", "tpot", "e2e", "queue"]
    assert (a.slot_limit_flag, a.default_slot_limit, a.engine_labels) == ("--max-running-requests", None,
                                                                          s.IDENTITY_LABELS)
    assert a.success.bad_counter == s.NUM_ABORTED and a.availability.bad == 'status_code=~"5.."'
    with pytest.raises(KeyError):
        s.alert_series("sglang-0.4.10")


def test_the_stats_reading_of_a_batch_line():
    r = s.stats_reading({"batch": "decode", "running": 3, "queue": 4, "token_usage": 0.25, "gen_tps": 9.5})
    assert (r.source, r.naming, r.values) == ("decode batch", "sglang decode batch",
                                              {"running": 3, "waiting": 4, "kv_pct": 25.0, "gen_tps": 9.5})
    assert s.stats_reading({"batch": "prefill"}).values["kv_pct"] is None


@pytest.mark.parametrize("msg, found", [
    ("Decode batch, #running-req: 3, #token: 38, token usage: 0.01, cuda graph: True, gen throughput (token/s): "
     "212.37, #queue-req: 4",
     [("stats", {"batch": "decode", "running": 3, "tokens": 38, "token_usage": 0.01, "gen_tps": 212.37, "queue": 4})]),
    ("Decode batch [2]. #running-req: 1, full token usage: 0.5, gen throughput (token/s): 1.0, #queue-req: 0, "
     "#prealloc-req: 2, #transfer-req: 3",
     [("stats", {"batch": "decode", "running": 1, "token_usage": 0.5, "gen_tps": 1.0, "queue": 0, "prealloc": 2,
                 "transfer": 3})]),
    ("Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, token usage: 0.02, #running-req: 5, "
     "#queue-req: 6, #bootstrap-req: 7, #inflight-req: 8",
     [("stats", {"batch": "prefill", "new_seq": 1, "new_tokens": 64, "cached_tokens": 0, "token_usage": 0.02,
                 "running": 5, "queue": 6, "bootstrap": 7, "inflight": 8})]),
    ("Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 2, token usage: 0.02, #running-req: 5, #queue-req: 6",
     [("stats", {"batch": "prefill", "new_seq": 1, "new_tokens": 64, "cached_tokens": 2, "token_usage": 0.02,
                 "running": 5, "queue": 6})]),
    ("Decode transfer failed for request rank=0 r1 with exception KVTransferError(bootstrap_room=1): Request 1 "
     "timed out after 300.0s in KVPoll.WaitingForInput",
     [("kv_transfer_failure", {"side": "decode", "stage": "transfer", "timeout_s": 300.0, "poll": "WaitingForInput"})]),
    ("Prefill bootstrap failed for request x: timed out after 30s in KVPoll.Odd",
     [("kv_transfer_failure", {"side": "prefill", "stage": "bootstrap", "timeout_s": 30.0})]),
    ("Prefill handshake failed for request x", [("kv_transfer_failure", {"side": "prefill", "stage": "handshake"})]),
    ("Some requests timed out when bootstrapping", [("kv_timeout",
                                                    {"reason": "Some requests timed out when bootstrapping"})]),
    ("KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 640",
     [("retraction", {"retracted": 2, "tokens_gained": 640})]),
    ("Scheduler watchdog timeout (self.watchdog_timeout=300.0, self.soft=False)",
     [("error", {"reason": "watchdog timeout", "timeout_s": 300.0, "component": "Scheduler"})]),
    ("Other watchdog timeout (self.watchdog_timeout=5)", [("error", {"reason": "watchdog timeout", "timeout_s": 5.0})]),
    ("Watchdog timeout (self.watchdog_timeout=7.5)", [("error", {"reason": "watchdog timeout", "timeout_s": 7.5})]),
    ("Not enough memory. Please try to increase --mem-fraction-static.",
     [("startup_failure", {"reason": "Not enough memory. Please try to increase --mem-fraction-static."})]),
    ("Subprocess scheduler_0 (pid=77) crashed with exit code -9.", [("engine_dead",
                                                                     {"reason": "crashed with exit code"})]),
    ("Draining requests and shutting down", [("shutdown", {"reason": "requested"})]),
    ("Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
     [("error", {"reason": "health check failed"})]),
    ("Prefill out of memory.", [("error", {"reason": "Prefill out of memory."})]),
    ("The server is fired up and ready to roll!", [("startup", {"stage": "ready"})]),
    ("Load weight end. elapsed=2.5 s", [("startup", {"stage": "weights_loaded", "seconds": 2.5})]),
    ("Capture cuda graph begin", [("startup", {"stage": "graphs_capturing"})]),
    ("max_total_num_tokens=1000, chunked_prefill_size=8, max_prefill_tokens=16, max_running_requests=64, "
     "context_len=512, available_gpu_mem=1 GB",
     [("startup", {"stage": "kv_cache_size", "tokens": 1000, "max_running": 64, "per_request": 512})]),
    ("KV Cache is allocated. #tokens: 4096, K size: 1 GB", [("startup", {"stage": "kv_cache_size", "tokens": 4096})]),
    ("Load weight begin. avail mem=10 GB", [("startup", {"stage": "weights_loading"})]),
    ("nothing at all", []),
])
def test_each_log_line(msg, found):
    assert s.parse_log_message(msg) == found


def _transfer(text):
    return s._kv_transfer(parse(text, s.wanted_families()))


def test_each_queue_alone_makes_its_side_and_a_unified_engine_is_passed_over_before_the_next():
    (t,) = _transfer(f"sglang:num_decode_prealloc_queue_reqs{{{D0}}} 4\n").values()
    assert (t.role, t.waiting_for_kv) == ("decode", 4)
    (t,) = _transfer(f"sglang:num_prefill_inflight_queue_reqs{{{P0}}} 3\n").values()
    assert (t.role, t.prefill_queue, t.waiting_for_kv) == ("prefill", 3, None)
    # a prefill scheduler exposes the decode queues too (at 0): they are no KV it waits for
    (t,) = _transfer(f"sglang:num_prefill_bootstrap_queue_reqs{{{P0}}} 1\n"
                     f"sglang:num_decode_prealloc_queue_reqs{{{P0}}} 0\n"
                     f"sglang:num_decode_transfer_queue_reqs{{{P0}}} 0\n").values()
    assert (t.role, t.prefill_queue, t.waiting_for_kv) == ("prefill", 1, None)
    unified_a = R0.replace('model_name="m"', 'model_name="a"')
    decode_b = D0.replace('model_name="m"', 'model_name="b"')
    got = _transfer(f"sglang:num_decode_transfer_queue_reqs{{{unified_a}}} 0\n"
                    f"sglang:num_decode_transfer_queue_reqs{{{decode_b}}} 2\n")
    assert [(dict(k)["model_name"], t.role, t.waiting_for_kv) for k, t in got.items()] == [("b", "decode", 2)]


def test_a_priority_breakdown_before_the_total_is_passed_over():
    family = parse(f"sglang:num_decode_transfer_queue_reqs{{{D0},priority=\"1\"}} 50\n"
                   f"sglang:num_decode_transfer_queue_reqs{{{D0}}} 5\n", s.wanted_families())
    assert list(s._queue_totals(family[s.DECODE_TRANSFER_QUEUE]).values()) == [5.0]


def test_the_0_4_10_markers_are_read_for_the_naming():
    fam = s.wanted_families()
    assert s.detect(parse(f"sglang:avg_request_queue_latency{{{R0}}} 1\n", fam)) == "sglang-0.4.10"
    assert s.detect(parse(f"sglang:num_prefill_infight_queue_reqs{{{R0}}} 1\n", fam)) == "sglang-0.4.10"


def test_a_models_only_engine_keeps_the_models_queue_time_without_its_own():
    # the queue histogram carries the model alone: a rank's own series is absent, the model's is its one engine's
    text = (f"sglang:num_running_reqs{{{R0}}} 1\n"
            "# TYPE sglang:queue_time_seconds histogram\n"
            'sglang:queue_time_seconds_bucket{model_name="m",le="1.0"} 2\n'
            'sglang:queue_time_seconds_bucket{model_name="m",le="+Inf"} 3\n'
            'sglang:queue_time_seconds_count{model_name="m"} 3\n'
            'sglang:queue_time_seconds_sum{model_name="m"} 2.5\n')
    (one,) = _read(text)
    assert one.histograms["queue"].count == 3
    (first, second) = _read(text + f"sglang:num_running_reqs{{{R1}}} 1\n")
    assert ("queue" in first.histograms, "queue" in second.histograms) == (False, False)


def test_the_alert_series_ratios_and_the_naming_refused():
    # SGLang's HTTP middleware: sglang:http_responses_total{endpoint, method, status_code} with the exact code;
    # a request's success is the tokenizer's request counter against its aborted-request counter
    a = s.alert_series("sglang-0.5.23")
    assert a.availability == s.RatioSeries(
        "sglang:http_responses_total", bad='status_code=~"5.."',
        total='endpoint!~"/metrics|/health|/health_generate|/ready|/ping"',
        good_labels=(("endpoint", "/v1/completions"), ("method", "POST"), ("status_code", "200")),
        bad_labels=(("endpoint", "/v1/completions"), ("method", "POST"), ("status_code", "503")))
    assert a.success == s.RatioSeries("sglang:num_requests_total", bad="", total="",
                                      bad_counter="sglang:num_aborted_requests_total")
    with pytest.raises(KeyError, match="'sglang-0.4.10'"):
        s.alert_series("sglang-0.4.10")


@pytest.mark.parametrize("msg, found", [
    ("Capture cuda graph end. Time elapsed: 12.50 s. mem usage=0.31 GB", [("startup", {"stage": "graphs_captured",
                                                                                      "seconds": 12.5})]),
    ("Engine startup timings (s): load_weight=2.10, kv_cache_allocation=0.50, scheduler_e2e=30.25",
     [("startup", {"stage": "engine_ready", "seconds": 30.25})]),
])
def test_the_timed_startup_stages(msg, found):
    assert s.parse_log_message(msg) == found
