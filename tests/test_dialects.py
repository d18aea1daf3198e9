"""Dialects map each engine's names onto one EngineState; values must agree with the raw scrape."""

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servewatch.dialects import base, read_scrape

VLLM_KV = "vllm_kv_pressure_t0.prom"
SGLANG = "synthetic_from_registration_code.prom"


def raw(text: str, sample_name: str, **labels) -> float:
    """Sum of raw sample values by an independent parser (prometheus_client)."""
    total, seen = 0.0, False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == sample_name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
                seen = True
    assert seen, sample_name
    return total


def test_vllm_032_fixture_maps_every_canonical_field(metrics_fixture):
    text = metrics_fixture(VLLM_KV)
    scrape = read_scrape(text)
    assert (scrape.dialect, scrape.naming) == ("vllm", "vllm-0.32")
    [engine] = scrape.engines
    assert engine.labels == {"model_name": "tiny", "engine": "0"}
    assert engine.running == raw(text, "vllm:num_requests_running")
    assert engine.waiting == raw(text, "vllm:num_requests_waiting")
    assert engine.waiting_by_reason["capacity"] == raw(text, "vllm:num_requests_waiting_by_reason", reason="capacity")
    assert engine.kv_usage == raw(text, "vllm:kv_cache_usage_perc")
    assert engine.kv_total_tokens == 8192  # cache_config_info kv_cache_size_tokens="8192"
    assert engine.counters.generation_tokens == raw(text, "vllm:generation_tokens_total")
    assert engine.counters.prompt_tokens == raw(text, "vllm:prompt_tokens_total")
    assert engine.counters.preemptions == raw(text, "vllm:num_preemptions_total")
    assert engine.counters.steps == raw(text, "vllm:iteration_tokens_total_count")
    assert engine.counters.finished["length"] == raw(text, "vllm:request_success_total", finished_reason="length")
    assert set(engine.histograms) == {"ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode"}
    itl = engine.histograms["itl"]
    assert itl.count == raw(text, "vllm:inter_token_latency_seconds_count")
    assert itl.sum == raw(text, "vllm:inter_token_latency_seconds_sum")
    assert itl.edges[0] == 0.01 and itl.cumulative[0] == raw(text, "vllm:inter_token_latency_seconds_bucket", le="0.01")
    assert engine.slot_limit is None  # max_num_seqs is not exported by vLLM


def without(text: str, *prefixes: str) -> str:
    return "\n".join(line for line in text.splitlines()
                     if not any(p in line for p in prefixes)) + "\n"


def test_vllm_011_generation_is_detected_when_the_new_families_are_absent(metrics_fixture):
    text = without(metrics_fixture(VLLM_KV), "waiting_by_reason", "engine_sleep_state", "prompt_tokens_by_source")
    scrape = read_scrape(text)
    assert (scrape.dialect, scrape.naming) == ("vllm", "vllm-0.11")
    assert scrape.engines[0].waiting_by_reason == {}
    assert scrape.engines[0].waiting == raw(text, "vllm:num_requests_waiting")


def test_vllm_legacy_gpu_cache_usage_name_feeds_kv_usage(metrics_fixture):
    text = without(metrics_fixture(VLLM_KV), "waiting_by_reason", "engine_sleep_state", "prompt_tokens_by_source")
    text = text.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    scrape = read_scrape(text)
    assert scrape.naming == "vllm-legacy"
    assert scrape.engines[0].kv_usage == raw(text, "vllm:gpu_cache_usage_perc")


def test_sglang_0523_fixture(metrics_fixture):
    text = metrics_fixture(SGLANG)
    scrape = read_scrape(text)
    assert (scrape.dialect, scrape.naming) == ("sglang", "sglang-0.5.23")
    [engine] = scrape.engines
    assert engine.labels["tp_rank"] == "0" and engine.labels["model_name"] == "Qwen/Qwen3-0.6B"
    assert engine.running == raw(text, "sglang:num_running_reqs")
    assert engine.waiting == raw(text, "sglang:num_queue_reqs")
    assert engine.kv_usage == raw(text, "sglang:token_usage")
    assert engine.kv_used_tokens == raw(text, "sglang:kv_used_tokens")
    assert engine.kv_total_tokens == raw(text, "sglang:max_total_num_tokens")
    assert engine.counters.steps == raw(text, "sglang:cuda_graph_passes_total")  # summed over modes
    assert engine.counters.generation_tokens == raw(text, "sglang:generation_tokens_total")
    assert engine.counters.prompt_tokens == raw(text, "sglang:prompt_tokens_total")
    assert engine.histograms["ttft"].count == raw(text, "sglang:time_to_first_token_seconds_count")


SGLANG_0410 = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 3.0
sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 3.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 7.0
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 7.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.5
sglang:token_usage{engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 0.5
# TYPE sglang:total_retracted_reqs gauge
sglang:total_retracted_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 4.0
sglang:total_retracted_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 4.0
# TYPE sglang:avg_request_queue_latency gauge
sglang:avg_request_queue_latency{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.2
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 1234.0
# TYPE something_else_total counter
something_else_total 5.0
"""


def test_sglang_0410_names_one_state_per_rank():
    scrape = read_scrape(SGLANG_0410)
    assert (scrape.dialect, scrape.naming) == ("sglang", "sglang-0.4.10")
    assert [e.labels["tp_rank"] for e in scrape.engines] == ["0", "1"]
    for engine in scrape.engines:
        assert (engine.running, engine.waiting, engine.kv_usage) == (3.0, 7.0, 0.5)
        assert engine.counters.preemptions == 4.0
        assert engine.counters.generation_tokens == 1234.0  # model-level counter seen by each rank
        assert engine.counters.steps is None  # 0.4.10 exports no step counter
        assert engine.counters.tokens_shared   # ... so the model's tokens still tell progress (series.progress)


# SGLang 0.5.23 at --data-parallel-size 2, shaped as the lab server's scrape of 2026-12-05: each scheduler's series
# carry dp_rank, the tokenizer process counts the model's tokens once, with no rank.
SGLANG_0523_DP2 = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.0
# TYPE sglang:cuda_graph_passes_total counter
sglang:cuda_graph_passes_total{dp_rank="0",engine_type="unified",mode="decode_none",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 786.0
sglang:cuda_graph_passes_total{dp_rank="1",engine_type="unified",mode="decode_none",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 129.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 1040.0
"""


def test_sglang_data_parallel_ranks_count_their_own_steps_and_share_the_models_tokens():
    from servewatch.detectors.series import generated_total, progress, progress_totals

    scrape = read_scrape(SGLANG_0523_DP2)
    assert [e.labels["dp_rank"] for e in scrape.engines] == ["0", "1"]
    assert [e.counters.steps for e in scrape.engines] == [786.0, 129.0]
    assert [e.counters.generation_tokens for e in scrape.engines] == [1040.0, 1040.0]
    assert all(e.counters.tokens_shared for e in scrape.engines)
    # A rank's progress is its own steps: rank 0's tokens are not rank 1's
    assert [progress(e) for e in scrape.engines] == [(786.0, None, None), (129.0, None, None)]
    assert progress_totals(scrape.engines) == (915.0, 0, 0)
    assert generated_total(scrape.engines) == 1040.0          # the server's tokens, once


def test_one_sglang_engine_owns_its_tokens():
    one = "\n".join(line for line in SGLANG_0523_DP2.splitlines() if 'dp_rank="1"' not in line) + "\n"
    (engine,) = read_scrape(one).engines
    assert not engine.counters.tokens_shared
    assert engine.counters.generation_tokens == 1040.0


def test_unknown_families_are_ignored_and_non_engine_text_has_no_dialect():
    scrape = read_scrape("# TYPE foo_total counter\nfoo_total 1\n# TYPE bar gauge\nbar 2\n")
    assert scrape.dialect is None and scrape.engines == []


def as_openmetrics(text: str) -> str:
    """The same scrape as OpenMetrics text: counters typed without `_total`, `_created` samples inside the
    counter/histogram family instead of separate gauge families, and `# EOF`."""
    out = []
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")) and line.split()[2].endswith("_created"):
            continue
        if line.startswith("# TYPE ") and line.endswith(" counter"):
            name = line.split()[2]
            line = f"# TYPE {name[:-len('_total')]} counter" if name.endswith("_total") else line
        if line.startswith("# HELP ") and line.split()[2].endswith("_total"):
            parts = line.split(" ", 3)
            line = " ".join([parts[0], parts[1], parts[2][:-len("_total")], *parts[3:]])
        out.append(line)
    return "\n".join(out) + "\n# EOF\n"


def test_openmetrics_counters_are_read_like_text_004(metrics_fixture):
    text = metrics_fixture(VLLM_KV)
    plain, om = read_scrape(text), read_scrape(as_openmetrics(text))
    assert (om.dialect, om.naming) == ("vllm", "vllm-0.32")
    [a], [b] = plain.engines, om.engines
    assert b.counters == a.counters
    assert b.counters.generation_tokens == raw(text, "vllm:generation_tokens_total")
    assert b.histograms == a.histograms and b.waiting_by_reason == a.waiting_by_reason


def test_a_subclass_declared_with_its_module_takes_the_modules_declarations_and_states_only_what_differs():
    import types

    from servewatch.dialects.base import Dialect

    module = types.ModuleType("fake_engine")
    exec('NAME = "fake"\nSLOT_LIMIT_FLAG = "--slots"\nREADY_LINE = "fake ready"\n'
         'def detect(families):\n    return "fake-1"\n'
         'def wanted_families():\n    return ("fake_running",)\n'
         'def read(families, naming):\n    return []\n', vars(module))

    class FakeDialect(Dialect, module=module):
        slot_limit_flag = "--max-fakes"          # the class body wins over the module

    fake = FakeDialect()                          # detect, wanted_families and read bound: not abstract
    assert (fake.name, fake.slot_limit_flag) == ("fake", "--max-fakes")
    assert fake.detect({}) == "fake-1" and fake.wanted_families() == ("fake_running",)
    assert fake.grammar_literals() == frozenset({"fake", "--slots", "fake ready"})
    assert fake.parse_log_message("fake ready") == []            # not declared: the interface's default


@pytest.mark.parametrize("source, said", [
    ("IDENTITY_LABEL = ('replica',)", "fake_module.IDENTITY_LABEL is not a Dialect name; did you mean IDENTITY_LABELS?"),
    ("def parse_log_messages(msg):\n    return []",
     "fake_module.parse_log_messages is not a Dialect name; did you mean parse_log_message?"),
])
def test_a_misspelled_dialect_constant_fails_at_class_creation(source, said):
    import types

    module = types.ModuleType("fake_module")
    exec(source, vars(module))
    for value in vars(module).values():
        if isinstance(value, types.FunctionType):
            value.__module__ = "fake_module"
    with pytest.raises(TypeError, match=re.escape(said)):
        class Misspelled(base.Dialect, module=module):
            name = "misspelled"


def test_a_misspelled_class_attribute_fails_at_class_creation():
    with pytest.raises(TypeError, match="health_dead_stauts is not a Dialect name; did you mean health_dead_status"):
        class Misspelled(base.Dialect):
            health_dead_stauts = 503
