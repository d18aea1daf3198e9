"""`servewatch advise`: the worked capacity example, model facts, GPU table, edges, flags and bad input."""

from __future__ import annotations

import json
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from fractions import Fraction
from pathlib import Path

import pytest

from servewatch.cli import main
from servewatch.derive import buckets as b
from servewatch.derive.advice import LatencyTargets, checks, plan_edges
from servewatch.derive.capacity import Deployment, alarm_threshold, derive, logits_temporary_bytes
from servewatch.derive.hardware import resolve
from servewatch.derive.model_facts import UnsupportedArchitecture, read_model
from servewatch.derive.observed import add_log, from_scrape
from servewatch.derive.quantities import GiB, MiB, parse_bytes
from servewatch.dialects import sglang, vllm
from servewatch.lab import tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_real"

# Meta-Llama-3-8B's config.json as published (the keys the arithmetic reads, and its neighbours).
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 128000, "eos_token_id": 128001,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
# Qwen2-7B's shape: the 152,064-token vocabulary of the logits-temporary crash.
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
    "max_position_embeddings": 32768, "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "sliding_window": 131072, "use_sliding_window": False, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 152064,
}


def write_config(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def tiny_config() -> dict:
    """The lab's tiny Llama as tiny_model.py writes it."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "bfloat16",
            "vocab_size": tiny_model.VOCAB_SIZE, "tie_word_embeddings": False, "head_dim": 64, **tiny_model.SHAPE}


@pytest.fixture
def llama3(tmp_path) -> Path:
    return write_config(tmp_path / "llama3", LLAMA3_8B)


def worked_example(llama3: Path, **changes):
    """The worked example's assumptions: an H100 (81,559 MiB), vLLM's 0.92 memory share, weights as vLLM
    logs them for Llama-3-8B ('Model loading took 14.96 GiB') and 6 GiB of non-KV reserve."""
    settings = dict(model=read_model(llama3), gpu=resolve("H100", None, None), max_model_len=8192,
                    weights_bytes=parse_bytes("14.96GiB"), reserve_bytes=Fraction(6 * GiB))
    settings.update(changes)
    return derive(Deployment(**settings))


# --- the worked example ----------------------------------------------------------------------------

def test_llama3_8b_stores_128_kib_of_kv_per_token(llama3):
    assert worked_example(llama3).kv_bytes_per_token == 128 * 1024


def test_an_80_gb_h100_is_79_65_gib_neither_80_gib_nor_80e9_bytes():
    memory = resolve("H100", None, None).memory_bytes
    assert round(float(memory / GiB), 2) == 79.65
    assert memory != 80 * GiB and memory != 80 * 10**9


def test_pool_is_428569_token_slots_and_one_8192_token_request_is_1_gib_or_1_9_percent(llama3):
    c = worked_example(llama3)
    assert c.pool_tokens == 428_569
    assert c.engine_pool_tokens == 428_560            # whole 16-token blocks
    assert c.request_bytes == GiB
    assert round(float(c.request_share) * 100, 1) == 1.9
    assert "428,569" in c.figure("pool_tokens").working and "52.3157 GiB" in c.figure("kv_budget").working


def test_an_alarm_at_90_percent_leaves_about_five_maximum_length_admissions(llama3):
    c = worked_example(llama3)
    assert int(c.admissions_at_90) == 5 and 5 < c.admissions_at_90 < 5.5
    assert 0.90 < c.alarm_threshold < 0.91                  # the alarm that leaves exactly five
    assert c.figure("kv_alarm").shown == "90.4 %"
    assert alarm_threshold(428_569, 8192, 6) < 0.9         # six would need a lower alarm


def test_decode_floor_is_15_gb_over_3_35_tb_per_s_or_4_48_ms(llama3):
    c = worked_example(llama3, weights_bytes=None)        # weights from the parameter count: 16.06 GB
    assert read_model(llama3).weight_bytes == 8_030_261_248 * 2
    assert round(float(c.streamed_per_step) / 10**9, 1) == 15.0   # the 1.05 GB embedding table is gathered
    assert c.figure("decode_floor").shown == "4.48 ms"
    assert round(float(c.decode_floor_s) * 1e3, 2) == 4.48
    assert "15.0 GB ÷ 3.35 TB/s" in c.figure("decode_floor").working


def test_logits_temporary_for_193_running_with_a_152064_token_vocabulary_is_111_95_mib(tmp_path):
    # 117,393,408 B = 111.955078 MiB: the worked figure "111.95 MiB" is this to two decimals, truncated
    # (PyTorch's OOM message rounds it to 111.96); shown to three decimals so both readings agree.
    assert logits_temporary_bytes(193, 152_064) == 193 * 152_064 * 4 == 117_393_408
    assert f"{logits_temporary_bytes(193, 152_064) / MiB:.3f}" == "111.955"
    qwen = read_model(write_config(tmp_path / "qwen", QWEN2_7B))
    card = resolve(None, Fraction(11.63 * GiB), None)       # the 12 GiB card that died at 0.9
    c = derive(Deployment(qwen, card, max_model_len=4096, max_num_seqs=193, memory_utilization=Fraction(9, 10),
                          kv_cache_memory_bytes=Fraction(GiB), reserve_bytes=Fraction(0)))
    assert c.figure("logits_temporary").shown.startswith("111.955 MiB")


def test_logits_that_do_not_fit_outside_the_budget_are_called_out(llama3):
    c = worked_example(llama3, max_num_seqs=256, memory_utilization=Fraction(999, 1000))
    assert not c.logits_fit and "does NOT fit" in c.figure("logits_temporary").shown
    assert worked_example(llama3).logits_fit


# --- model facts ---------------------------------------------------------------------------------------

def test_explicit_head_dim_gqa_fp8_kv_and_tp_change_kv_bytes(tmp_path):
    config = {**LLAMA3_8B, "head_dim": 256, "num_attention_heads": 16}      # head_dim stated separately
    model = read_model(write_config(tmp_path / "m", config))
    assert model.head_dim == 256
    gpu = resolve("H100", None, None)
    assert derive(Deployment(model, gpu)).kv_bytes_per_token == 2 * 32 * 8 * 256 * 2
    assert derive(Deployment(model, gpu, kv_cache_dtype="fp8")).kv_bytes_per_token == 2 * 32 * 8 * 256
    assert derive(Deployment(model, gpu, tp=2)).kv_bytes_per_token == 2 * 32 * 4 * 256 * 2
    assert derive(Deployment(model, gpu, tp=16)).kv_bytes_per_token == 2 * 32 * 1 * 256 * 2   # replicated


def test_tied_embeddings_are_streamed_by_the_lm_head(tmp_path):
    untied = read_model(write_config(tmp_path / "u", LLAMA3_8B))
    tied = read_model(write_config(tmp_path / "t", {**LLAMA3_8B, "tie_word_embeddings": True}))
    assert tied.weight_bytes == untied.weight_bytes - untied.embedding_bytes   # no separate LM head
    assert tied.streamed_bytes == tied.weight_bytes
    assert untied.streamed_bytes == untied.weight_bytes - untied.embedding_bytes


def test_safetensors_headers_give_exact_weight_bytes_and_the_embedding_table(tmp_path):
    directory = write_config(tmp_path / "st", tiny_config())
    tensors = {"model.embed_tokens.weight": (2048, 128), "lm_head.weight": (2048, 128),
               "model.layers.0.mlp.up_proj.weight": (256, 128)}
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = shape[0] * shape[1] * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(offset))
    model = read_model(directory)
    assert model.weight_source == "safetensors headers"
    assert model.weight_bytes == offset == (2 * 2048 * 128 + 256 * 128) * 2
    assert model.embedding_bytes == 2048 * 128 * 2


@pytest.mark.parametrize("extra, word", [
    ({"kv_lora_rank": 512, "model_type": "deepseek_v3"}, "latent attention"),
    ({"model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768}, "sliding-window"),
    ({"model_type": "jamba"}, "state-space"),
    ({"layer_types": ["linear_attention", "full_attention"]}, "linear_attention"),
    ({"num_local_experts": 8}, "mixture-of-experts"),
])
def test_architectures_outside_the_formula_are_refused_with_the_reason(tmp_path, extra, word):
    with pytest.raises(UnsupportedArchitecture, match=word):
        read_model(write_config(tmp_path / "x", {**LLAMA3_8B, **extra}))


def test_a_qwen2_sliding_window_that_is_switched_off_is_accepted(tmp_path):
    assert read_model(write_config(tmp_path / "q", QWEN2_7B)).kv_heads == 4


# --- edges and flags -----------------------------------------------------------------------------------

def test_itl_edges_start_below_the_floor_that_vllm_s_first_edge_swallows(llama3):
    c = worked_example(llama3)
    plans, _ = plan_edges(c, LatencyTargets())
    floor = float(c.decode_floor_s)
    assert vllm.BUCKETS["inter_token_latency"][0] > floor        # the default is blind to healthy steps
    itl = plans["itl"].edges
    assert itl[0] < floor
    assert sum(1 for edge in itl if floor / 2 <= edge <= float(c.full_pool_step_s) * 1.25) >= 6   # dense there
    assert sglang.BUCKETS["time_to_first_token"][0] > plans["ttft"].edges[0]


@pytest.mark.parametrize("kind, flag", [("itl", "--slo-itl"), ("ttft", "--slo-ttft"), ("e2e", "--slo-e2e")])
def test_every_slo_threshold_is_an_edge(llama3, kind, flag):
    c = worked_example(llama3)
    plans, _ = plan_edges(c, LatencyTargets(**{kind: 0.037}))
    assert 0.037 in plans[kind].edges
    for plan in plans.values():
        assert all(0 < a < b_ for a, b_ in zip(plan.edges, plan.edges[1:]))


def test_vllm_value_uses_vllm_bucket_families_and_sglang_its_bucket_flags(llama3):
    plans, _ = plan_edges(worked_example(llama3), LatencyTargets(itl=0.05))
    edges = {kind: plan.edges for kind, plan in plans.items()}
    _, value_text = vllm.DIALECT.bucket_args(edges)
    value = json.loads(value_text)
    assert set(value) == {"inter_token_latency", "time_to_first_token", "request_latency"}
    assert set(value) <= set(vllm.BUCKETS)                       # families vLLM defines
    assert value["inter_token_latency"] == list(plans["itl"].edges)
    args = sglang.DIALECT.bucket_args(edges)
    flags = [a for a in args if a.startswith("--")]
    assert flags == ["--bucket-time-to-first-token", "--bucket-inter-token-latency", "--bucket-e2e-request-latency"]
    itl_values = args[args.index("--bucket-inter-token-latency") + 1: args.index("--bucket-e2e-request-latency")]
    assert [float(v) for v in itl_values] == list(plans["itl"].edges)


def test_nice_values_are_short_decimals():
    assert b.nice_values(0.0025, 0.0125, (1, 2, 5)) == [0.005, 0.01]
    assert b.nice_values(0.0029, 0.0061, (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)) == [0.003, 0.004, 0.005, 0.006]


# --- against a real vLLM's recorded scrape and log -----------------------------------------------------

def test_tiny_model_matches_vllm_s_own_cache_size_line_exactly(tmp_path):
    """vLLM 0.32 (CPU) logged 'CPU KV cache size: 8,192 tokens' for --kv-cache-memory-bytes 4194304. 8,192
    is a whole number of its 128-token blocks, so block rounding is invisible at this budget."""
    model = read_model(write_config(tmp_path / "tiny", tiny_config()))
    gpu = resolve(None, Fraction(24 * GiB), None)
    c = derive(Deployment(model, gpu, max_model_len=2048, max_num_seqs=4,
                          kv_cache_memory_bytes=Fraction(4_194_304), block_size=128))
    assert c.kv_bytes_per_token == 512
    observed = add_log(from_scrape((FIXTURES / "idle.prom").read_bytes()),
                       (FIXTURES / "small_slots_server.log").read_text(encoding="utf-8"))
    assert observed.kv_total_tokens == 8192 == c.engine_pool_tokens
    assert observed.kv_cache_memory_bytes == 4_194_304 and observed.block_size == 128
    assert observed.slot_limit == 4
    by_name = {check.name: check for check in checks(Deployment(model, gpu, max_num_seqs=4, max_model_len=2048,
                                                                kv_cache_memory_bytes=Fraction(4_194_304),
                                                                block_size=128), c, observed)}
    assert by_name["KV cache size (tokens)"].agrees is True
    assert by_name["slot limit (max running)"].agrees is True


def test_a_different_kv_dtype_shows_as_a_disagreement_with_the_bytes_the_server_stores(tmp_path):
    model = read_model(write_config(tmp_path / "tiny", tiny_config()))
    deployment = Deployment(model, resolve(None, Fraction(24 * GiB), None), max_model_len=2048, kv_cache_dtype="fp8",
                            kv_cache_memory_bytes=Fraction(4_194_304), block_size=128)
    c = derive(deployment)
    observed = from_scrape((FIXTURES / "idle.prom").read_bytes())
    cache = next(check for check in checks(deployment, c, observed) if check.name.startswith("KV cache size"))
    assert cache.agrees is False and "512 B per token" in cache.explanation


def test_a_blind_itl_histogram_is_explained_by_the_floor(tmp_path):
    model = read_model(write_config(tmp_path / "tiny", tiny_config()))
    deployment = Deployment(model, resolve(None, Fraction(24 * GiB), Fraction(20 * 10**9)), max_model_len=2048,
                            kv_cache_memory_bytes=Fraction(4_194_304), block_size=128)
    observed = from_scrape((FIXTURES / "after_traffic.prom").read_bytes())
    itl = next(check for check in checks(deployment, derive(deployment), observed) if check.name.startswith("ITL"))
    assert observed.histograms["itl"].first_bucket_fraction == 120 / 124
    assert itl.agrees is True and "clear the first edge" in itl.explanation
    plans, _ = plan_edges(derive(deployment), LatencyTargets(), observed)
    mean = observed.histograms["itl"].mean_s
    assert plans["itl"].edges[0] < mean < plans["itl"].edges[-1]
    assert sum(1 for edge in plans["itl"].edges if mean / 4 <= edge <= mean * 4) >= 4   # resolution at the mean


# --- the command ----------------------------------------------------------------------------------------

def test_json_output_carries_every_figure_with_its_working(llama3, capsys):
    assert main(["advise", "--model", str(llama3), "--gpu", "H100", "--max-model-len", "8192",
                 "--weights-bytes", "14.96GiB", "--reserve", "6GiB", "--slo-itl", "50ms", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    figures = {f["key"]: f for f in out["figures"]}
    assert figures["pool_tokens"]["value"] == 428_569
    assert figures["kv_bytes_per_token"]["value"] == 131_072
    assert all(f["formula"] and f["working"] for f in out["figures"])
    assert 0.05 in out["buckets"]["itl"]["edges"]
    assert out["flags"]["vllm"]["args"][0] == "--custom-histogram-buckets"
    assert "'" in out["flags"]["vllm"]["command_line"]                      # the JSON is shell-quoted
    assert str(llama3) not in json.dumps(out)                               # no filesystem path


def test_table_output_names_each_figure_and_prints_copyable_flags(llama3, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["advise", "--model", str(llama3), "--gpu", "H100", "--max-model-len", "8192"]) == 0
    out = capsys.readouterr().out
    for label in ("KV bytes per token", "Pool (token slots)", "Decode floor", "Logits-sized temporary"):
        assert label in out
    flag_line = next(line for line in out.splitlines() if line.startswith("--custom-histogram-buckets "))
    json.loads(flag_line.split(" ", 1)[1].strip("'"))


@pytest.mark.parametrize("config, extra, expected", [
    ({k: v for k, v in LLAMA3_8B.items() if k != "num_hidden_layers"}, ["--gpu", "H100"], "num_hidden_layers"),
    (LLAMA3_8B, ["--gpu", "B300"], "unknown GPU 'B300'"),
    (LLAMA3_8B, ["--gpu", "H100", "--bandwidth", "0"], "--bandwidth must be above 0"),
    (LLAMA3_8B, ["--gpu", "H100", "--tp", "3"], "--tp 3 does not divide the model's 8 KV heads"),
    (LLAMA3_8B, [], "no hardware given"),
    (LLAMA3_8B, ["--gpu", "H100", "--gpu-memory", "lots"], "--gpu-memory"),
    ({**LLAMA3_8B, "kv_lora_rank": 512}, ["--gpu", "H100"], "outside what the KV formula covers"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_2(tmp_path, capsys, config, extra, expected):
    directory = write_config(tmp_path / "bad", config)
    assert main(["advise", "--model", str(directory), *extra]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and lines[0].startswith("servewatch advise: ")
    assert captured.out == ""


def test_weights_bytes_stands_for_an_awq_checkpoint_without_intermediate_size(tmp_path, capsys):
    """A quantised config without intermediate_size: the parameter count cannot be estimated, and need not be."""
    awq = {k: v for k, v in LLAMA3_8B.items() if k != "intermediate_size"}
    awq["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    directory = write_config(tmp_path / "awq", awq)
    assert main(["advise", "--model", str(directory), "--gpu", "H100"]) == 2       # nothing to size the weights by
    assert "give --weights-bytes" in capsys.readouterr().err
    assert main(["advise", "--model", str(directory), "--gpu", "H100", "--weights-bytes", "5.2GiB", "--json"]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert model["weight_bytes"] == int(5.2 * 2**30) and "--weights-bytes" in model["weight_source"]


def test_unknown_gpu_with_both_overrides_is_fine(llama3, capsys):
    assert main(["advise", "--model", str(llama3), "--gpu", "B300", "--gpu-memory", "180GiB",
                 "--bandwidth", "8TB/s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu"]["bandwidth_bytes_per_s"] == 8e12


class _Metrics(BaseHTTPRequestHandler):
    body = (FIXTURES / "after_traffic.prom").read_bytes()

    def do_GET(self):  # noqa: N802
        status, body = (200, self.body) if self.path == "/metrics" else (404, b"")
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_against_a_live_url_reads_its_metrics_and_explains_each_check(tmp_path, capsys):
    directory = write_config(tmp_path / "tiny", tiny_config())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        code = main(["advise", "--model", str(directory), "--gpu-memory", "24GiB", "--bandwidth", "20GB/s",
                     "--kv-cache-memory-bytes", "4194304", "--block-size", "128", "--max-model-len", "2048",
                     "--against", f"http://127.0.0.1:{server.server_address[1]}", "--json"])
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["observed"]["dialect"] == "vllm" and out["observed"]["kv_total_tokens"] == 8192
    by_name = {check["name"]: check for check in out["checks"]}
    assert by_name["KV cache size (tokens)"]["agrees"] is True
    assert by_name["ITL first bucket vs decode floor"]["observed"].startswith("96.8% of 124")
    assert by_name["slot limit (max running)"]["agrees"] is None       # vLLM does not export it
    mean = out["observed"]["histograms"]["itl"]["mean_s"]
    assert out["buckets"]["itl"]["edges"][0] < mean


def test_against_an_unreachable_server_is_one_line_and_exit_2(llama3, capsys):
    assert main(["advise", "--model", str(llama3), "--gpu", "H100", "--against", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "127.0.0.1:9" in err[0]
