"""Values of servewatch/derive/model_facts.py (issue 50: the mutation rule finds it): the attention shape, dtype and
parameter count read from a config.json (Llama-3-8B's 8,030,261,248 and Qwen2-7B's 7,615,616,512 parameters, as
published), the config key aliases, the safetensors headers' exact bytes, and the refusals' words."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from servewatch.derive.model_facts import (DTYPE_BYTES, MAX_CONFIG_BYTES, MAX_SAFETENSORS_HEADER_BYTES,
                                           ModelConfigError, ModelFacts, UnsupportedArchitecture, facts_from_config,
                                           read_model, safetensors_sizes)

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
    "max_position_embeddings": 32768, "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "sliding_window": 131072, "use_sliding_window": False, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 152064,
}
GPT_STYLE = {"architectures": ["GPT2LMHeadModel"], "n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257,
             "torch_dtype": "float32", "n_head_kv": 4, "intermediate_size": 3072, "tie_word_embeddings": True,
             "max_position_embeddings": "1024"}


def test_the_tables():
    assert MAX_CONFIG_BYTES == 4 * 2**20 and MAX_SAFETENSORS_HEADER_BYTES == 100 * 2**20
    assert [DTYPE_BYTES[d] for d in ("float32", "bfloat16", "float16", "fp8", "int8")] == [4, 2, 2, 1, 1]


def test_llama3_8b_from_its_config():
    assert facts_from_config(LLAMA3_8B) == ModelFacts(
        architecture="LlamaForCausalLM", layers=32, attention_heads=32, kv_heads=8, head_dim=128, hidden_size=4096,
        intermediate_size=14336, vocab_size=128256, dtype="bfloat16", dtype_bytes=2, tied_embeddings=False,
        max_position_embeddings=8192, weight_bytes=8_030_261_248 * 2, embedding_bytes=128256 * 4096 * 2,
        weight_source="parameter count from config.json")
    assert facts_from_config(LLAMA3_8B).streamed_bytes == 8_030_261_248 * 2 - 128256 * 4096 * 2


def test_qwen2_7b_counts_its_attention_bias():
    facts = facts_from_config(QWEN2_7B)
    assert facts.weight_bytes == 7_615_616_512 * 2
    assert (facts.kv_heads, facts.head_dim, facts.embedding_bytes) == (4, 128, 152064 * 3584 * 2)
    # the same bias from the attention_bias key, on any model type
    biased = facts_from_config({**LLAMA3_8B, "attention_bias": True})
    assert biased.weight_bytes - facts_from_config(LLAMA3_8B).weight_bytes == 32 * (32 * 128 + 2 * 8 * 128) * 2


def test_gpt_style_keys_tied_float32_and_a_text_max_position():
    facts = facts_from_config(GPT_STYLE)
    assert (facts.layers, facts.attention_heads, facts.hidden_size, facts.kv_heads, facts.head_dim) == (12, 12, 768, 4, 64)
    assert facts.weight_bytes == 142_425_600 * 4     # attention 1,572,864 + MLP 7,077,888 + norms 1,536, x12, + 768 + embedding
    assert facts.tied_embeddings and facts.streamed_bytes == facts.weight_bytes
    assert facts.max_position_embeddings is None
    assert facts.dtype_bytes == 4


def test_a_multimodal_wrapper_reads_its_text_config_and_the_architecture_falls_back():
    wrapped = {"architectures": ["LlavaForConditionalGeneration"], "torch_dtype": "float16", "num_hidden_layers": 99,
               "text_config": {k: v for k, v in LLAMA3_8B.items() if k not in ("architectures", "torch_dtype")}}
    facts = facts_from_config(wrapped)
    assert (facts.architecture, facts.layers, facts.dtype, facts.dtype_bytes) == (
        "LlavaForConditionalGeneration", 32, "float16", 2)
    no_arch = {k: v for k, v in LLAMA3_8B.items() if k != "architectures"}
    assert facts_from_config(no_arch).architecture == "llama"
    assert facts_from_config({**no_arch, "model_type": ""}).architecture == "unknown"
    assert facts_from_config({**LLAMA3_8B, "torch_dtype": None, "dtype": "float32"}).dtype_bytes == 4


def test_given_weight_bytes_stand_for_the_count():
    facts = facts_from_config({**LLAMA3_8B, "quantization_config": {"bits": 4}}, weights_bytes=5_000_000_000)
    assert (facts.weight_bytes, facts.weight_source) == (5_000_000_000, "given with --weights-bytes")


def test_head_dim_given_beside_an_uneven_hidden_size():
    facts = facts_from_config({**LLAMA3_8B, "hidden_size": 4001, "head_dim": 128})
    assert facts.head_dim == 128


@pytest.mark.parametrize("changes, words", [
    ({"hidden_size": 4001}, "where: hidden_size 4001 is not a multiple of num_attention_heads 32 and there is no "
                            "head_dim key; add \"head_dim\" to the config"),
    ({"num_key_value_heads": 5}, "where: num_attention_heads 32 is not a multiple of num_key_value_heads 5"),
    ({"torch_dtype": None}, "where: no torch_dtype (or dtype) key; add e.g. \"torch_dtype\": \"bfloat16\""),
    ({"torch_dtype": "int4"}, "where: torch_dtype 'int4' is not one of bf16, bfloat16, float, float16, float32, "
                              "float8_e4m3fn, float8_e5m2, fp16, fp32, fp8, half, int8, uint8"),
    ({"num_hidden_layers": None}, "where: no num_hidden_layers key (the number of layers); add "
                                  "\"num_hidden_layers\" to the config"),
    ({"vocab_size": None}, "where: no vocab_size key (the number of vocab size); add \"vocab_size\" to the config"),
    ({"num_attention_heads": True}, "where: num_attention_heads must be a positive integer, not True"),
    ({"num_hidden_layers": 0}, "where: num_hidden_layers must be a positive integer, not 0"),
    ({"hidden_size": -1}, "where: hidden_size must be a positive integer, not -1"),
    ({"num_key_value_heads": "8"}, "where: num_key_value_heads must be a positive integer, not '8'"),
    ({"head_dim": 0}, "where: head_dim must be a positive integer, not 0"),
    ({"intermediate_size": 1.5}, "where: intermediate_size must be a positive integer, not 1.5"),
    ({"intermediate_size": None}, "where: config.json has no intermediate_size to count MLP weights from; put the "
                                  "*.safetensors files beside config.json (only their headers are read) or give "
                                  "--weights-bytes"),
    ({"quantization_config": {"bits": 4}}, "where: a quantised checkpoint's weight bytes do not follow from the "
                                           "parameter count; put the *.safetensors files beside config.json (only "
                                           "their headers are read) or give --weights-bytes"),
])
def test_a_config_refused(changes, words):
    with pytest.raises(ModelConfigError) as refused:
        facts_from_config({**LLAMA3_8B, **changes}, where="where")
    assert str(refused.value) == words


def test_not_an_object():
    with pytest.raises(ModelConfigError) as refused:
        facts_from_config([1])
    assert str(refused.value) == "config.json: not a JSON object"


@pytest.mark.parametrize("changes, reason", [
    ({"kv_lora_rank": 512, "model_type": "x"}, "x is outside what the KV formula covers: multi-head latent attention "
                                               "caches a compressed latent, not K and V per head"),
    ({"model_type": "deepseek_v2"}, "deepseek_v2 is outside what the KV formula covers: multi-head latent attention"),
    ({"num_experts": 8}, "llama is outside what the KV formula covers: mixture-of-experts: a decode step streams only "
                         "the routed experts, so the decode floor differs"),
    ({"moe_intermediate_size": 8}, "mixture-of-experts"),
    ({"n_routed_experts": 8}, "mixture-of-experts"),
    ({"layer_types": ["sliding_attention", "full_attention", "linear_attention"]},
     "llama is outside what the KV formula covers: mixed layer types (linear_attention, sliding_attention) keep "
     "less than one K and V per token in some layers"),
    ({"model_type": "qwen3_next"}, "qwen3_next is outside what the KV formula covers: linear-attention or "
                                   "state-space layers keep a fixed-size state, not a per-token cache"),
    ({"model_type": "rwkv"}, "state-space"),
    ({"model_type": "", "sliding_window": 4096},
     "this model is outside what the KV formula covers: sliding-window attention (window 4096 tokens) caps what each "
     "layer keeps; the per-token formula overstates long requests"),
])
def test_an_architecture_refused(changes, reason):
    with pytest.raises(UnsupportedArchitecture) as refused:
        facts_from_config({**LLAMA3_8B, **changes}, where="cfg")
    assert str(refused.value).startswith("cfg: ")
    assert reason in str(refused.value)


@pytest.mark.parametrize("changes", [
    {"layer_types": ["full_attention", "full_attention"]}, {"sliding_window": 8192}, {"sliding_window": 9000},
    {"sliding_window": 4096, "use_sliding_window": False}, {"sliding_window": 0}, {"kv_lora_rank": 0},
])
def test_an_architecture_accepted(changes):
    assert facts_from_config({**LLAMA3_8B, **changes}).kv_heads == 8


def test_a_sliding_window_without_max_positions_is_accepted():
    config = {k: v for k, v in LLAMA3_8B.items() if k != "max_position_embeddings"}
    assert facts_from_config({**config, "sliding_window": 4096}).max_position_embeddings is None


def _safetensors(path: Path, tensors: dict, extra: dict | None = None, trailing: bytes = b"") -> None:
    header, offset = dict(extra or {}), 0
    for name, size in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [size // 2], "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + trailing)


def test_safetensors_headers_over_several_files(tmp_path):
    _safetensors(tmp_path / "b.safetensors", {"lm_head.weight": 300, "model.norm.weight": 4},
                 extra={"__metadata__": {"format": "pt"}})
    _safetensors(tmp_path / "a.safetensors", {"transformer.wte.weight": 1000})
    assert safetensors_sizes(tmp_path) == {"transformer.wte.weight": 1000, "lm_head.weight": 300,
                                           "model.norm.weight": 4}
    assert safetensors_sizes(tmp_path / "nothing") == {}


def test_read_model_uses_the_headers(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B), encoding="utf-8")
    _safetensors(tmp_path / "m.safetensors", {"model.embed_tokens.weight": 1000, "lm_head.weight": 300})
    facts = read_model(tmp_path)
    assert (facts.weight_bytes, facts.embedding_bytes, facts.weight_source) == (1300, 1000, "safetensors headers")
    assert read_model(tmp_path / "config.json").weight_bytes == 1300
    given = read_model(tmp_path, weights_bytes=77)
    assert (given.weight_bytes, given.embedding_bytes, given.weight_source) == (
        77, 128256 * 4096 * 2, "given with --weights-bytes")


def test_headers_without_an_embedding_keep_the_config_s(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B), encoding="utf-8")
    _safetensors(tmp_path / "m.safetensors", {"model.layers.0.weight": 10})
    facts = read_model(tmp_path)
    assert (facts.weight_bytes, facts.embedding_bytes) == (10, 128256 * 4096 * 2)


def test_a_config_read_from_another_name_skips_the_headers(tmp_path):
    (tmp_path / "llama.json").write_text(json.dumps(LLAMA3_8B), encoding="utf-8")
    _safetensors(tmp_path / "m.safetensors", {"model.embed_tokens.weight": 1000})
    assert read_model(tmp_path / "llama.json").weight_source == "parameter count from config.json"


def test_bad_safetensors(tmp_path):
    short = tmp_path / "short"
    short.mkdir()
    (short / "x.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(ModelConfigError) as refused:
        safetensors_sizes(short)
    assert str(refused.value) == f"{short / 'x.safetensors'}: shorter than a safetensors header"
    huge = tmp_path / "huge"
    huge.mkdir()
    (huge / "x.safetensors").write_bytes(struct.pack("<Q", 100 * 2**20 + 1))
    with pytest.raises(ModelConfigError) as refused:
        safetensors_sizes(huge)
    assert str(refused.value) == (f"{huge / 'x.safetensors'}: header of 104,857,601 bytes exceeds the "
                                  "104,857,600-byte bound")
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "x.safetensors").write_bytes(struct.pack("<Q", 3) + b"{x}")
    with pytest.raises(ModelConfigError) as refused:
        safetensors_sizes(garbled)
    assert str(refused.value) == f"{garbled / 'x.safetensors'}: the safetensors header is not valid JSON"
    no_offsets = tmp_path / "no_offsets"
    no_offsets.mkdir()
    blob = json.dumps({"w": {"dtype": "BF16"}}).encode()
    (no_offsets / "x.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(ModelConfigError) as refused:
        safetensors_sizes(no_offsets)
    assert str(refused.value) == f"{no_offsets / 'x.safetensors'}: tensor 'w' has no data_offsets in its header"


def test_a_header_at_the_bound_is_read(tmp_path):
    blob = json.dumps({"w": {"data_offsets": [0, 8]}}).encode()
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob)
    assert safetensors_sizes(tmp_path) == {"w": 8}


def test_bad_config_files(tmp_path):
    with pytest.raises(ModelConfigError) as refused:
        read_model(tmp_path / "absent")
    assert str(refused.value) == (f"{tmp_path / 'absent'}: no such file; give a model directory holding config.json, "
                                  "or the config.json itself")
    (tmp_path / "config.json").write_text("{", encoding="utf-8")
    with pytest.raises(ModelConfigError) as refused:
        read_model(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path / 'config.json'}: not valid JSON (")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (4 * 2**20 + 1))
    with pytest.raises(ModelConfigError) as refused:
        read_model(big)
    assert str(refused.value) == f"{big}: 4,194,305 bytes is too large for a config.json"
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "dir.json" / "config.json").mkdir()
    with pytest.raises(ModelConfigError) as refused:
        read_model(tmp_path / "dir.json")
    assert str(refused.value) == f"{tmp_path / 'dir.json' / 'config.json'}: Is a directory"
    (tmp_path / "ok.json").write_text(json.dumps(LLAMA3_8B), encoding="utf-8")
    with pytest.raises(ModelConfigError) as refused:
        read_model(tmp_path / "ok.json" / "x")
    assert "Not a directory" in str(refused.value)


def test_a_config_of_exactly_the_bound_is_read(tmp_path):
    text = json.dumps({k: v for k, v in LLAMA3_8B.items() if k != "num_hidden_layers"})
    path = tmp_path / "config.json"
    path.write_text(text + " " * (MAX_CONFIG_BYTES - len(text)), encoding="utf-8")
    with pytest.raises(ModelConfigError) as refused:
        read_model(tmp_path)
    assert str(refused.value) == (f"{path}: no num_hidden_layers key (the number of layers); add "
                                  "\"num_hidden_layers\" to the config")


def test_defaults_of_keys_left_out():
    config = {k: v for k, v in LLAMA3_8B.items() if k not in ("num_key_value_heads", "tie_word_embeddings")}
    facts = facts_from_config(config)
    assert (facts.kv_heads, facts.tied_embeddings) == (32, False)


@pytest.mark.parametrize("model_type", ["mamba2", "jamba", "rwkv7", "recurrent_gemma", "qwen3_next", "falcon_h1",
                                        "lfm2"])
def test_each_state_space_family_is_refused(model_type):
    with pytest.raises(UnsupportedArchitecture) as refused:
        facts_from_config({**LLAMA3_8B, "model_type": model_type}, where="cfg")
    assert str(refused.value) == (f"cfg: {model_type} is outside what the KV formula covers: linear-attention or "
                                  "state-space layers keep a fixed-size state, not a per-token cache")


def test_a_config_without_a_model_type_is_this_model():
    config = {k: v for k, v in LLAMA3_8B.items() if k != "model_type"}
    with pytest.raises(UnsupportedArchitecture) as refused:
        facts_from_config({**config, "sliding_window": 4096}, where="cfg")
    assert str(refused.value).startswith("cfg: this model is outside what the KV formula covers: sliding-window")
    assert facts_from_config(config).architecture == "LlamaForCausalLM"


def test_header_lengths_at_and_beyond_the_bound(tmp_path):
    blob = json.dumps({"w": {"data_offsets": [0, 8]}}).encode()
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", MAX_SAFETENSORS_HEADER_BYTES) + blob)
    assert safetensors_sizes(tmp_path) == {"w": 8}          # the bound itself is allowed (the file is shorter)
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", 2**64 - 1) + blob)
    with pytest.raises(ModelConfigError) as refused:
        safetensors_sizes(tmp_path)
    assert str(refused.value) == (f"{tmp_path / 'x.safetensors'}: header of 18,446,744,073,709,551,615 bytes "
                                  "exceeds the 104,857,600-byte bound")


def test_an_unreadable_safetensors_file(tmp_path):
    (tmp_path / "x.safetensors").mkdir()
    with pytest.raises(ModelConfigError) as refused:
        safetensors_sizes(tmp_path)
    assert str(refused.value) == f"{tmp_path / 'x.safetensors'}: Is a directory"
