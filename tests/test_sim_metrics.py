"""The simulator's /metrics against real expositions: every vLLM family of the real 0.32 CPU capture and
the SGLang 0.5.23 families the simulator emits must match name, type, HELP, label names and bucket edges."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from servewatch.clock import VirtualClock
from servewatch.dialects import read_scrape
from servewatch.sim import SimConfig, SimEngine

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _shape(family) -> dict:
    """What must match: type, HELP, label names per sample suffix, and bucket edges."""
    labels: dict[str, set[str]] = {}
    edges: list[str] = []
    for sample in family.samples:
        suffix = sample.name[len(family.name):]
        labels.setdefault(suffix, set()).update(k for k in sample.labels if k != "le")
        if suffix == "_bucket" and sample.labels["le"] not in edges:
            edges.append(sample.labels["le"])
    return {"type": family.type, "help": family.documentation, "labels": labels, "edges": edges}


def _busy_engine(dialect: str, **overrides) -> SimEngine:
    clock = VirtualClock()
    config = SimConfig(dialect=dialect, profile="tiny-cpu", max_num_seqs=16, seed=3, **overrides)
    engine = SimEngine(config, clock)
    for i in range(24):
        engine.submit(prompt_tokens=300 + i, max_tokens=40, ignore_eos=i % 2 == 0, prefix_key="shared")
    engine.run_until(clock.now() + 30)
    return engine


@pytest.fixture(scope="module")
def vllm_text() -> str:
    return _busy_engine("vllm").metrics_text()


@pytest.fixture(scope="module")
def sglang_text() -> str:
    return _busy_engine("sglang").metrics_text()


def test_every_vllm_family_of_the_real_capture_exists_with_the_same_shape(vllm_text):
    real = _families((FIXTURES / "vllm_idle.prom").read_text())
    sim = _families(vllm_text)
    wanted = [name for name in real if name.startswith("vllm:")]
    assert len(wanted) >= 70  # counters, their _created gauges, histograms, gauges
    missing = [name for name in wanted if name not in sim]
    assert missing == []
    for name in wanted:
        assert _shape(sim[name]) == _shape(real[name]), name


def test_vllm_http_and_process_families_exist(vllm_text):
    sim = _families(vllm_text)
    for name in ("http_requests", "process_resident_memory_bytes", "python_info", "process_start_time_seconds"):
        assert name in sim


def test_vllm_exposition_text_is_byte_compatible_in_form(vllm_text):
    lines = vllm_text.splitlines()
    # labels sorted (le in place) and engine/model_name on every engine series, as the real server writes
    assert 'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0' in lines
    assert any(line.startswith('vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="tiny"} ')
               for line in lines)
    assert "# TYPE vllm:num_preemptions_created gauge" in lines
    info = next(line for line in lines if line.startswith("vllm:cache_config_info{"))
    assert 'block_size="128"' in info and 'num_gpu_blocks="64"' in info and 'kv_cache_size_tokens="8192"' in info
    assert info.endswith(" 1.0")


def test_vllm_counters_reflect_the_work_done(vllm_text):
    sim = _families(vllm_text)
    value = {s.name: s.value for f in sim.values() for s in f.samples if not s.labels.get("le")
             and "finished_reason" not in s.labels and "source" not in s.labels}
    finished = sum(s.value for s in sim["vllm:request_success"].samples if s.name.endswith("_total"))
    assert finished == 24
    assert value["vllm:request_prompt_tokens_count"] == 24
    assert value["vllm:generation_tokens_total"] == value["vllm:request_generation_tokens_sum"]
    assert value["vllm:prefix_cache_hits_total"] > 0          # shared prefix_key => cache hits
    assert value["vllm:iteration_tokens_total_count"] > 40    # one observation per engine step
    assert value["vllm:num_requests_running"] == 0


def test_sglang_families_match_the_registration_code_exposition(sglang_text):
    real = _families((FIXTURES / "synthetic_from_registration_code.prom").read_text())
    sim = _families(sglang_text)
    core = ["sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:kv_used_tokens",
            "sglang:kv_available_tokens", "sglang:max_total_num_tokens", "sglang:num_retracted_reqs",
            "sglang:cuda_graph_passes", "sglang:realtime_tokens", "sglang:prompt_tokens", "sglang:generation_tokens",
            "sglang:num_requests", "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
            "sglang:e2e_request_latency_seconds", "sglang:queue_time_seconds",
            "sglang:request_time_per_output_token_seconds", "sglang:prompt_tokens_histogram"]
    for name in core:
        assert name in sim, name
        assert _shape(sim[name]) == _shape(real[name]), name
    shared = [name for name in sim if name in real]
    assert len(shared) >= len(core)
    for name in shared:
        assert _shape(sim[name]) == _shape(real[name]), name


def test_sglang_exposition_is_multiprocess_style(sglang_text):
    assert "_created" not in sglang_text
    # No prometheus_client process/python collectors (multiprocess mode); SGLang's own
    # sglang:process_cpu_seconds_total is one of its families.
    assert not any(line.startswith(("process_", "python_")) for line in sglang_text.splitlines())
    lines = sglang_text.splitlines()
    sum_at = next(i for i, line in enumerate(lines) if line.startswith("sglang:inter_token_latency_seconds_sum"))
    assert lines[sum_at + 1].startswith("sglang:inter_token_latency_seconds_bucket")
    assert any('pid="' in line for line in lines if line.startswith("sglang:num_retracted_reqs{"))


def test_sglang_tokenizer_families_appear_only_after_a_request():
    engine = SimEngine(SimConfig(dialect="sglang", profile="tiny-cpu"), VirtualClock())
    idle = _families(engine.metrics_text())
    assert "sglang:num_running_reqs" in idle
    assert "sglang:prompt_tokens" not in idle


@pytest.mark.parametrize("dialect,naming", [("vllm", "vllm-0.32"), ("sglang", "sglang-0.5.23")])
def test_servewatch_recognises_the_dialect(dialect, naming):
    engine = _busy_engine(dialect)
    scrape = read_scrape(engine.metrics_text())
    assert scrape.dialect == dialect
    assert scrape.naming == naming
    assert len(scrape.engines) == 1
    state = scrape.engines[0]
    assert state.counters.steps == engine.steps
    assert state.running == 0


def test_same_seed_same_numbers():
    a = [line for line in _busy_engine("vllm").metrics_text().splitlines() if line.startswith("vllm:")]
    b = [line for line in _busy_engine("vllm").metrics_text().splitlines() if line.startswith("vllm:")]
    assert a == b
