"""What the postmortem's arithmetic needs from a model's config.json: the vocabulary and the KV bytes per token."""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8": 1, "fp8": 1}
# Multimodal and wrapper configs keep the language model's numbers one level down.
_NESTED = ("text_config", "llm_config", "language_config", "thinker_config")


@dataclass(frozen=True, slots=True)
class ModelShape:
    vocab_size: int | None
    kv_bytes_per_token: int | None
    missing: tuple[str, ...] = ()      # what the config did not say


def _lookup(config: dict, key: str):
    if key in config:
        return config[key]
    for nested in _NESTED:
        inner = config.get(nested)
        if isinstance(inner, dict) and key in inner:
            return inner[key]
    return None


def _positive_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def model_shape(config: dict) -> ModelShape:
    vocab = _positive_int(_lookup(config, "vocab_size"))
    layers = _positive_int(_lookup(config, "num_hidden_layers"))
    heads = _positive_int(_lookup(config, "num_attention_heads"))
    kv_heads = _positive_int(_lookup(config, "num_key_value_heads")) or heads
    head_dim = _positive_int(_lookup(config, "head_dim"))
    hidden = _positive_int(_lookup(config, "hidden_size"))
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    dtype = _lookup(config, "torch_dtype") or _lookup(config, "dtype")
    width = DTYPE_BYTES.get(str(dtype)) if dtype is not None else None
    kv = 2 * layers * kv_heads * head_dim * width if layers and kv_heads and head_dim and width else None
    missing = tuple(name for name, value in (("vocab_size", vocab), ("KV shape (layers, KV heads, head size, dtype)",
                                                                      kv)) if value is None)
    return ModelShape(vocab, kv, missing)
