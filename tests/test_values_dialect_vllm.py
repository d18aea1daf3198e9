"""Values of servewatch/dialects/vllm.py (issue 50 item 8: every vLLM number an engine state or a log event holds):
a scrape written here series by series read into each field, the KV connector's role by its series, the KV
capacity from cache_config_info, the naming detected, and each log line's numbers. Each figure by hand beside it."""

from __future__ import annotations

import pytest

from servewatch.dialects import vllm as v
from servewatch.exposition.parser import parse


def _read(text, naming="vllm-0.32"):
    return v.read(parse(text, v.wanted_families()), naming)


E0 = 'model_name="m",engine="0"'
E1 = 'model_name="m",engine="1"'


def test_request_tokens_buckets_are_the_1_2_5_series_up_to_the_length():
    assert v.request_tokens_buckets(1) == (1,)
    assert v.request_tokens_buckets(4) == (1, 2)
    assert v.request_tokens_buckets(5) == (1, 2, 5)
    assert v.request_tokens_buckets(2048) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
    assert v.request_tokens_buckets(0) == ()


def test_startup_failure_numbers_and_their_words():
    kv = ("ValueError: To serve at least one request with the model's max seq len (8192), (1.5 GiB KV cache is "
          "needed, which is larger than the available KV cache memory (0.75 GiB). Try ...")
    numbers = v.startup_failure_numbers(kv)
    assert numbers == {"max_model_len": 8192, "needed_gib": 1.5, "available_gib": 0.75}
    assert type(numbers["max_model_len"]) is int
    assert v.describe_startup_failure({"reason": "To serve at least one request with the model's max seq len",
                                       **numbers}) == (
        "To serve at least one request with the model's max seq len (8192), (1.5 GiB KV cache is needed, which is "
        "larger than the available KV cache memory (0.75 GiB))")
    cpu = ("Available memory on node 0 (3.5/16.0 GiB) on startup is less than desired CPU memory utilization "
           "(0.9, 14.4 GiB)")
    numbers = v.startup_failure_numbers(cpu)
    assert numbers == {"node": 0, "available_gib": 3.5, "total_gib": 16.0, "utilization": 0.9, "desired_gib": 14.4}
    assert v.describe_startup_failure({"reason": "is less than desired CPU memory utilization", **numbers}) == (
        "Available memory on node 0 (3.5/16.0 GiB) on startup is less than desired CPU memory utilization "
        "(0.9, 14.4 GiB)")
    assert v.startup_failure_numbers("EngineCore failed to start.") == {}
    assert v.describe_startup_failure({"reason": "EngineCore failed to start."}) == "EngineCore failed to start."
    assert v.describe_startup_failure({}) == "unknown"


def test_older_stats_lines_and_the_dump_at_death():
    older = v.record_stats("Avg prompt throughput: 1.5 tokens/s, Avg generation throughput: 20.0 tokens/s, "
                           "Running: 3 reqs, Waiting: 4 reqs, GPU KV cache usage: 55.5%, Prefix cache hit rate: 7.5%")
    assert (older.source, older.naming) == ("stats line without an engine number",
                                            "vLLM stats lines without an engine number")
    assert older.values == {"running": 3, "waiting": 4, "kv_pct": 55.5, "prompt_tps": 1.5, "gen_tps": 20.0,
                            "prefix_hit_pct": 7.5}
    v0 = v.record_stats("Avg prompt throughput: 1.5 tokens/s, Avg generation throughput: 20.0 tokens/s, "
                        "Running: 3 reqs, Swapped: 0 reqs, Pending: 4 reqs, GPU KV cache usage: 55.5%, "
                        "CPU KV cache usage: 0.0%")
    assert v0.naming == "vLLM V0 stats lines (with Swapped and Pending)" and v0.values["waiting"] == 4
    dump = v.record_stats("Dumping scheduler stats: SchedulerStats(num_running_reqs=5, num_waiting_reqs=2, "
                          "step_counter=0, kv_cache_usage=0.25, x=1)")
    assert (dump.source, dump.naming, dump.values) == ("engine dump at death", None,
                                                       {"running": 5, "waiting": 2, "kv_pct": 25.0})
    assert v.record_stats("nothing") is None


def test_the_stats_reading_of_a_stats_line():
    reading = v.stats_reading({"engine": 1, "running": 8, "waiting": 11, "kv_pct": 95.2, "prompt_tps": 40.0,
                               "gen_tps": 3511.2, "preemptions": 16, "other": 1})
    assert (reading.source, reading.naming, reading.labels) == ("stats line", "vllm, with the engine index",
                                                                {"engine": "1"})
    assert reading.values == {"running": 8, "waiting": 11, "kv_pct": 95.2, "prompt_tps": 40.0, "gen_tps": 3511.2,
                              "preemptions": 16, "prefix_hit_pct": None}
    assert v.stats_reading({}).labels == {}


def test_the_naming_detected():
    assert v.detect(parse("x 1\n", ("x",))) is None
    assert v.detect(parse(f"vllm:num_requests_running{{{E0}}} 1\n", v.wanted_families())) == "vllm-legacy"
    assert v.detect(parse(f"vllm:kv_cache_usage_perc{{{E0}}} 0.5\n", v.wanted_families())) == "vllm-0.11"
    for marker in ("vllm:num_requests_waiting_by_reason", "vllm:engine_sleep_state"):
        assert v.detect(parse(f"{marker}{{{E0}}} 1\n", v.wanted_families())) == "vllm-0.32"
    assert v.detect(parse(f"vllm:prompt_tokens_by_source_total{{{E0}}} 1\n", v.wanted_families())) == "vllm-0.32"


def test_a_scrape_of_two_engines_read_into_every_field():
    text = f"""\
vllm:num_requests_running{{{E0}}} 3
vllm:num_requests_running{{{E1}}} 1
vllm:num_requests_waiting{{{E0}}} 4
vllm:num_requests_waiting_by_reason{{{E0},reason="capacity"}} 4
vllm:num_requests_waiting_by_reason{{{E0},reason="deferred"}} 0
vllm:kv_cache_usage_perc{{{E0}}} 0.25
vllm:kv_cache_usage_perc{{{E1}}} 0.5
vllm:cache_config_info{{engine="0",num_gpu_blocks="100",block_size="16"}} 1
vllm:cache_config_info{{engine="1",kv_cache_size_tokens="800",num_gpu_blocks="None"}} 1
vllm:prompt_tokens_total{{{E0}}} 100
vllm:generation_tokens_total{{{E0}}} 200
vllm:generation_tokens_total{{{E1}}} 20
vllm:num_preemptions_total{{{E0}}} 2
vllm:request_success_total{{{E0},finished_reason="stop"}} 7
vllm:request_success_total{{{E0},finished_reason="abort"}} 1
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_count{{{E0}}} 50
vllm:iteration_tokens_total_sum{{{E0}}} 500
http_requests_total{{handler="/v1/completions",method="POST",status="2xx"}} 6
http_requests_total{{handler="/v1/completions",method="POST",status="5xx"}} 1
http_requests_total{{handler="/health",method="GET",status="2xx"}} 90
# TYPE http_request_size_bytes summary
http_request_size_bytes_sum{{handler="/v1/completions"}} 1200
http_request_size_bytes_count{{handler="/v1/completions"}} 7
http_request_size_bytes_sum{{handler="/metrics"}} 99
http_request_size_bytes_count{{handler="/metrics"}} 9
"""
    zero, one = _read(text)
    assert (zero.dialect, zero.naming, zero.labels) == ("vllm", "vllm-0.32", {"model_name": "m", "engine": "0"})
    assert (zero.running, zero.waiting, zero.waiting_by_reason, zero.slot_limit) == (
        3, 4, {"capacity": 4, "deferred": 0}, None)
    assert (zero.kv_usage, zero.kv_total_tokens, zero.kv_used_tokens) == (0.25, 1600.0, 400.0)
    c = zero.counters
    assert (c.prompt_tokens, c.generation_tokens, c.preemptions, c.steps, c.finished) == (
        100, 200, 2, 50, {"stop": 7, "abort": 1})
    assert (c.responses, c.request_bytes, c.request_bytes_count, c.answered) == ({"2xx": 6, "5xx": 1}, 1200, 7, 6)
    assert zero.kv_transfer is None
    assert (one.running, one.waiting, one.kv_usage, one.kv_total_tokens, one.kv_used_tokens) == (1, None, 0.5, 800.0,
                                                                                                 400.0)
    assert (one.counters.generation_tokens, one.counters.prompt_tokens, one.counters.finished,
            one.counters.responses) == (20, None, {}, {"2xx": 6, "5xx": 1})


def test_kv_capacity_falls_back_to_the_engineless_line_and_answered_needs_the_family():
    text = f"""\
vllm:num_requests_running{{{E0}}} 1
vllm:kv_cache_usage_perc{{{E0}}} 0.5
vllm:cache_config_info{{num_gpu_blocks="10",block_size="4"}} 1
"""
    (state,) = _read(text)
    assert (state.kv_total_tokens, state.kv_used_tokens, state.counters.answered) == (40.0, 20.0, None)
    (state,) = _read(text + 'http_requests_total{handler="/health",method="GET",status="2xx"} 3\n')
    assert state.counters.answered == 0.0 and state.counters.responses == {}
    (bare,) = _read(f"vllm:num_requests_waiting{{{E0}}} 2\n")
    assert (bare.kv_usage, bare.kv_used_tokens, bare.kv_total_tokens) == (None, None, None)
    (only_kv,) = _read(f"vllm:gpu_cache_usage_perc{{{E0}}} 0.75\n", "vllm-legacy")
    assert only_kv.kv_usage == 0.75


def test_kv_total_tokens_and_numbers():
    info = parse('vllm:cache_config_info{engine="0",kv_cache_size_tokens="None",num_gpu_blocks="8",block_size="2"} 1\n'
                 'vllm:cache_config_info{engine="1",num_gpu_blocks="8"} 1\n'
                 'vllm:cache_config_info{engine="2",block_size="8"} 1\n'
                 'vllm:cache_config_info{engine="3",kv_cache_size_tokens="12.5"} 1\n',
                 (v.CACHE_CONFIG_INFO,))[v.CACHE_CONFIG_INFO]
    assert v._kv_total_tokens(info) == {"0": 16.0, "3": 12.5}
    assert v._kv_total_tokens(None) == {}
    assert [v._number(x) for x in ("1.5", "None", "", None, "x", "-2")] == [1.5, None, None, None, None, -2.0]


def _connector(text):
    families = parse(text, v.wanted_families())
    by_reason = {}
    return v._kv_transfer(families, by_reason)


def test_the_kv_connectors_role_by_its_series():
    decode = _read(f"""\
vllm:num_requests_running{{{E0}}} 1
vllm:num_requests_waiting_by_reason{{{E0},reason="deferred"}} 3
vllm:num_requests_kv_fetch_by_stage{{{E0},stage="in_progress"}} 2
vllm:num_requests_kv_fetch_by_stage{{{E0},stage="waiting_to_start"}} 1
vllm:prompt_tokens_by_source_total{{{E0},source="external_kv_transfer"}} 640
vllm:prompt_tokens_by_source_total{{{E0},source="local_compute"}} 12
# TYPE vllm:nixl_xfer_time_seconds histogram
vllm:nixl_xfer_time_seconds_count{{{E0}}} 5
vllm:nixl_xfer_time_seconds_sum{{{E0}}} 0.5
# TYPE vllm:nixl_bytes_transferred histogram
vllm:nixl_bytes_transferred_count{{{E0}}} 5
vllm:nixl_bytes_transferred_sum{{{E0}}} 4096
vllm:nixl_num_failed_transfers_total{{{E0}}} 1
vllm:nixl_num_failed_notifications_total{{{E0}}} 2
""")[0].kv_transfer
    assert (decode.role, decode.waiting_for_kv, decode.fetch_in_progress, decode.external_prompt_tokens,
            decode.local_prompt_tokens, decode.transfers, decode.bytes_transferred, decode.failed_transfers,
            decode.failed_notifications, decode.expired) == ("decode", 3, 2, 640, 12, 5, 4096, 1, 2, None)
    prefill = _connector(f"vllm:nixl_num_kv_expired_reqs_total{{{E0}}} 2\n"
                         f"vllm:num_requests_kv_fetch_by_stage{{{E0},stage=\"in_progress\"}} 0\n")
    (key,) = prefill
    assert (prefill[key].role, prefill[key].expired, prefill[key].fetch_in_progress) == ("prefill", 2, 0)
    producer = _connector(f"vllm:nixl_num_failed_transfers_total{{{E0}}} 0\n")
    assert [t.role for t in producer.values()] == ["prefill"]           # NIXL without the fetch gauge: producer
    consumer = _connector(f"vllm:num_requests_kv_fetch_by_stage{{{E0},stage=\"in_progress\"}} 0\n")
    assert [t.role for t in consumer.values()] == ["decode"]            # fetch without NIXL: kv_consumer
    both = _connector(f"vllm:num_requests_kv_fetch_by_stage{{{E0},stage=\"in_progress\"}} 0\n"
                      "# TYPE vllm:nixl_xfer_time_seconds histogram\n"
                      f"vllm:nixl_xfer_time_seconds_count{{{E0}}} 0\n")
    assert [t.role for t in both.values()] == [None]                    # kv_both, nothing moved yet
    queried = _connector(f"vllm:external_prefix_cache_queries_total{{{E0}}} 4\n")
    assert [t.role for t in queried.values()] == ["prefill"]
    assert _connector(f"vllm:external_prefix_cache_queries_total{{{E0}}} 0\n"
                      f"vllm:prompt_tokens_by_source_total{{{E0},source=\"external_kv_transfer\"}} 0\n"
                      f"vllm:prompt_tokens_by_source_total{{{E0},source=\"local_compute\"}} 9\n") == {}


def test_bucket_args_and_the_alert_series():
    assert v.bucket_args({"itl": [0.01, 0.1], "nope": [1]}) == [
        v.BUCKET_FLAGS["itl"], '{"%s":[0.01,0.1]}' % v.BUCKET_FAMILIES["itl"]]
    assert v.bucket_args({}) == [v.BUCKET_FLAGS["itl"], "{}"]
    new, legacy = v.alert_series("vllm-0.32"), v.alert_series("vllm-legacy")
    assert (new.dialect, new.naming, new.running, new.waiting, new.kv_usage, new.preemptions,
            new.preemptions_lazy) == ("vllm", "vllm-0.32", v.RUNNING, v.WAITING, v.KV_USAGE, v.PREEMPTIONS, False)
    assert legacy.kv_usage == v.KV_USAGE_LEGACY
    assert new.histograms["itl"].name == v.HISTOGRAMS["itl"][0]
    assert legacy.histograms["itl"].name == v.HISTOGRAMS["itl"][1]
    assert sorted(new.histograms) == ["e2e", "itl", "queue", "tpot", "ttft"]
    assert [new.histograms[k].name for k in ("ttft", "tpot", "e2e", "queue")] == [
        v.HISTOGRAMS[k][0] for k in ("ttft", "tpot", "e2e", "queue")]
    ttft = new.histograms["ttft"]
    family = v.BUCKET_FAMILIES["ttft"]
    assert (ttft.kind, ttft.edges, ttft.edge_flag) == ("ttft", tuple(float(e) for e in v.BUCKETS[family]),
                                                  f"{v.BUCKET_FLAGS['ttft']} '{{\"{family}\": [...]}}'")
    assert (new.slot_limit_flag, new.default_slot_limit, new.engine_labels) == ("--max-num-seqs", 256,
                                                                                ("model_name", "engine"))
    assert new.availability.bad == 'status="5xx"' and new.success.bad == 'finished_reason=~"abort|error"'
    with pytest.raises(KeyError):
        v.alert_series("sglang-0.5")


STATS = ("Engine 001: Avg prompt throughput: 40.0 tokens/s, Avg generation throughput: 3511.2 tokens/s, "
         "Running: 8 reqs, Waiting: 11 reqs, Deferred: 2 reqs, KV fetch: 1 waiting to start, 3 in progress, "
         "0 completed waiting, Preemptions: 16, CPU KV cache usage: 95.2%, Prefix cache hit rate: 1.5%, "
         "External prefix cache hit rate: 50.0%")


def test_the_stats_line_and_its_preemptions():
    (stats, kind_fields), (pre, pre_fields) = v.parse_log_message(STATS)
    assert (stats, pre, pre_fields) == ("stats", "preemption", {"count": 16})
    assert kind_fields == {"engine": 1, "prompt_tps": 40.0, "gen_tps": 3511.2, "running": 8, "waiting": 11,
                           "deferred": 2, "kv_fetch_waiting": 1, "kv_fetch_in_progress": 3, "kv_fetch_completed": 0,
                           "preemptions": 16, "kv_pct": 95.2, "prefix_hit_pct": 1.5, "external_hit_pct": 50.0}
    assert v.parse_log_message(STATS.replace("Preemptions: 16", "Preemptions: 0"))[1:] == []


@pytest.mark.parametrize("msg, found", [
    ("CPU KV cache size: 4,511,872 tokens, Maximum concurrency for 2,048 tokens per request: 2203.06x",
     [("startup", {"stage": "kv_cache_size", "tokens": 4511872, "per_request": 2048, "concurrency": 2203.06})]),
    ("GPU KV cache size: 1,000 tokens", [("startup", {"stage": "kv_cache_size", "tokens": 1000})]),
    ("Worker proc VllmWorker-3 died unexpectedly (exit code: -9)",
     [("engine_dead", {"reason": "Worker proc died unexpectedly", "exit_code": -9, "worker_rank": 3})]),
    ("Worker proc VllmWorker-x died unexpectedly (exit code: SIGKILL)",
     [("engine_dead", {"reason": "Worker proc died unexpectedly"})]),
    ("Worker proc w died unexpectedly", [("engine_dead", {"reason": "Worker proc died unexpectedly"})]),
    ("RuntimeError: Engine core initialization failed. See root cause above.",
     [("startup_failure", {"reason": "Engine core initialization failed."})]),
    ("EngineDeadError: EngineCore encountered an issue.", [("engine_dead", {"reason": "EngineDeadError"})]),
    ("CUDA out of memory. Tried to allocate 2.00 GiB",
     [("error", {"reason": "out of memory", "mib": 2048.0})]),
    ("CUDA out of memory. Tried to allocate 20.00 MiB", [("error", {"reason": "out of memory", "mib": 20.0})]),
    ("raise OutOfMemoryError", [("error", {"reason": "out of memory"})]),
    ("Application startup complete.", [("startup", {"stage": "ready"})]),
    ("[shutdown] API server: shutdown triggered", [("shutdown", {"reason": "requested"})]),
    ("Loading weights took 1.25 seconds", [("startup", {"stage": "weights_loaded", "seconds": 1.25})]),
    ("Maximum concurrency for 2,048 tokens per request: 3.5x",
     [("startup", {"stage": "kv_cache_size", "per_request": 2048, "concurrency": 3.5})]),
    ("Starting vLLM API server 0 on http://0.0.0.0:8000", [("startup", {"stage": "api_listening"})]),
    ("Starting vLLM server on http://0.0.0.0:8000", [("startup", {"stage": "api_listening"})]),
    ("Initializing a V1 LLM engine (v0.32) with config", [("startup", {"stage": "engine_start"})]),
    ("nothing at all", []),
])
def test_each_log_line(msg, found):
    assert v.parse_log_message(msg) == found


@pytest.mark.parametrize("msg, found", [
    ("KV Transfer metrics: Num successful transfers=5, Avg xfer time (ms)=1.5, P90 xfer time (ms)=x, Unknown=3, "
     "Throughput (MB/s)=100",
     [("kv_transfer_stats", {"transfers": 5.0, "avg_xfer_ms": 1.5, "throughput_mb_s": 100.0})]),
    ("Failing 2 request(s) due to KV load failure (failure_policy=fail, 640 tokens affected)",
     [("kv_load_failed", {"requests": 2, "tokens": 640, "recovered": False})]),
    ("Recovered from KV load failure: 3 request(s) rescheduled (96 tokens affected)",
     [("kv_load_failed", {"requests": 3, "tokens": 96, "recovered": True})]),
    ("Releasing expired KV blocks for request cmpl-1 which were retrieved by 2 remote worker(s) before lease expired",
     [("kv_expired", {"retrieved_by": 2})]),
    ("NIXL transfer failure: handshake_failed | Context: {}", [("kv_transfer_failure",
                                                                {"failure_type": "handshake_failed"})]),
    ("NIXL transfer failure: something_new | Context", [("kv_transfer_failure", {"failure_type": "other"})]),
    ("External Cache Hit!", [("kv_external_hit", {})]),
])
def test_each_kv_connector_line(msg, found):
    assert v.parse_log_message(msg) == found


def test_an_engine_without_a_connector_is_passed_over_and_the_next_one_still_read():
    got = _connector(f"vllm:prompt_tokens_by_source_total{{{E0},source=\"local_compute\"}} 9\n"
                     f"vllm:prompt_tokens_by_source_total{{{E1},source=\"external_kv_transfer\"}} 64\n")
    assert [(dict(key)["engine"], t.role, t.external_prompt_tokens) for key, t in got.items()] == [("1", "decode", 64)]


def test_the_alert_series_ratios_and_the_naming_refused():
    # vLLM's API server counts http_requests_total{handler, method, status} with status as the class (2xx ... 5xx);
    # its engine counts vllm:request_success_total{finished_reason} (stop, length, abort, error)
    for naming in ("vllm-0.32", "vllm-legacy"):
        series = v.alert_series(naming)
        assert series.availability == v.RatioSeries(
            "http_requests_total", bad='status="5xx"', total="",
            good_labels=(("handler", "/v1/completions"), ("method", "POST"), ("status", "2xx")),
            bad_labels=(("handler", "/v1/completions"), ("method", "POST"), ("status", "5xx")))
        assert series.success == v.RatioSeries(
            "vllm:request_success_total", bad='finished_reason=~"abort|error"', total="",
            good_labels=(("finished_reason", "stop"),), bad_labels=(("finished_reason", "error"),))
    with pytest.raises(KeyError, match="'sglang-0.5'"):
        v.alert_series("sglang-0.5")


@pytest.mark.parametrize("msg, found", [
    ("torch.compile takes 12.5 s in total", [("startup", {"stage": "compiled", "seconds": 12.5})]),
    ("Graph capturing finished in 7 secs, took 0.31 GiB", [("startup", {"stage": "graphs_captured", "seconds": 7.0})]),
    ("init engine (profile, create kv cache, warmup model) took 30.25 s",
     [("startup", {"stage": "engine_ready", "seconds": 30.25})]),
    ("Worker proc VllmWorker-1 died unexpectedly (exit code: X5)",
     [("engine_dead", {"reason": "Worker proc died unexpectedly", "worker_rank": 1})]),
    ("Worker proc VllmWorker-2 died unexpectedly (exit code: -9)",
     [("engine_dead", {"reason": "Worker proc died unexpectedly", "exit_code": -9, "worker_rank": 2})]),
])
def test_the_timed_startup_stages_and_an_exit_code_that_is_no_number(msg, found):
    assert v.parse_log_message(msg) == found


def test_responses_to_paths_without_a_route_are_counted_as_unrouted():
    text = (f"vllm:num_requests_running{{{E0}}} 1\n"
            'http_requests_total{handler="none",method="GET",status="4xx"} 3\n'
            'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 2\n')
    (state,) = _read(text)
    assert (state.counters.responses, state.counters.answered) == ({"unrouted": 3, "2xx": 2}, 2)
