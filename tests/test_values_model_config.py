"""Values of servewatch/doctor/model_config.py (issue 50: the mutation rule finds it): the vocabulary and KV bytes
per token the postmortem's arithmetic takes from a config.json (Llama-3-8B: 131,072 B; Qwen2-7B: 57,344 B), one level
down in a wrapper's config, and what it says is missing."""

from __future__ import annotations

import pytest

from servewatch.doctor.model_config import DTYPE_BYTES, ModelShape, model_shape

LLAMA3_8B = {"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
             "torch_dtype": "bfloat16", "vocab_size": 128256}
QWEN2_7B = {"hidden_size": 3584, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
            "torch_dtype": "bfloat16", "vocab_size": 152064}
MISSING_KV = "KV shape (layers, KV heads, head size, dtype)"


def test_the_dtype_table():
    assert DTYPE_BYTES == {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8": 1, "fp8": 1}


def test_llama3_8b():
    assert model_shape(LLAMA3_8B) == ModelShape(128256, 2 * 32 * 8 * 128 * 2, ())


def test_qwen2_7b():
    assert model_shape(QWEN2_7B) == ModelShape(152064, 2 * 28 * 4 * 128 * 2, ())
    assert model_shape(QWEN2_7B).kv_bytes_per_token == 57_344


def test_no_kv_heads_means_one_per_attention_head_and_head_dim_is_taken_as_given():
    config = {**LLAMA3_8B, "num_key_value_heads": None, "head_dim": 96, "torch_dtype": None, "dtype": "float32"}
    assert model_shape(config) == ModelShape(128256, 2 * 32 * 32 * 96 * 4, ())


@pytest.mark.parametrize("nested", ["text_config", "llm_config", "language_config", "thinker_config"])
def test_a_wrapper_keeps_the_numbers_one_level_down(nested):
    config = {"architectures": ["X"], "torch_dtype": "float16", "vision_config": {"vocab_size": 1},
              nested: {k: v for k, v in LLAMA3_8B.items() if k != "torch_dtype"}}
    assert model_shape(config) == ModelShape(128256, 2 * 32 * 8 * 128 * 2, ())


def test_the_top_level_wins_over_the_nested_and_a_nested_non_object_is_skipped():
    config = {**LLAMA3_8B, "vocab_size": 7, "text_config": {"vocab_size": 9}, "llm_config": "x"}
    assert model_shape(config).vocab_size == 7
    assert model_shape({"text_config": [1], "llm_config": {"vocab_size": 11}}).vocab_size == 11


@pytest.mark.parametrize("changes, shape", [
    ({"vocab_size": None}, ModelShape(None, 131072, ("vocab_size",))),
    ({"vocab_size": 0}, ModelShape(None, 131072, ("vocab_size",))),
    ({"vocab_size": True}, ModelShape(None, 131072, ("vocab_size",))),
    ({"vocab_size": "128256"}, ModelShape(None, 131072, ("vocab_size",))),
    ({"num_hidden_layers": -1}, ModelShape(128256, None, (MISSING_KV,))),
    ({"torch_dtype": "int4"}, ModelShape(128256, None, (MISSING_KV,))),
    ({"torch_dtype": None}, ModelShape(128256, None, (MISSING_KV,))),
    ({"hidden_size": None}, ModelShape(128256, None, (MISSING_KV,))),
    ({"num_attention_heads": None, "num_key_value_heads": None}, ModelShape(128256, None, (MISSING_KV,))),
    ({"num_attention_heads": None}, ModelShape(128256, None, (MISSING_KV,))),
    ({"num_attention_heads": None, "head_dim": 128}, ModelShape(128256, 131072, ())),
    ({"vocab_size": None, "num_hidden_layers": None}, ModelShape(None, None, ("vocab_size", MISSING_KV))),
])
def test_what_is_missing(changes, shape):
    assert model_shape({**LLAMA3_8B, **changes}) == shape


def test_an_empty_config():
    assert model_shape({}) == ModelShape(None, None, ("vocab_size", MISSING_KV))
    assert ModelShape(1, 2).missing == ()


def test_one_kv_head_and_a_head_size_that_is_a_whole_division():
    assert model_shape({**LLAMA3_8B, "num_key_value_heads": 1}).kv_bytes_per_token == 2 * 32 * 1 * 128 * 2
    # 4,001 ÷ 32 is 125 whole (the config's own head size would be stated otherwise)
    shape = model_shape({**LLAMA3_8B, "hidden_size": 4001})
    assert shape.kv_bytes_per_token == 2 * 32 * 8 * 125 * 2
    assert isinstance(shape.kv_bytes_per_token, int)
