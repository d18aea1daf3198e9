"""What a model's files say about its memory: attention shape, vocabulary, dtype and weight bytes.

Read from a Hugging Face `config.json` and, when present beside it, the `*.safetensors` headers (an
8-byte little-endian length, then a JSON table of every tensor's dtype and byte range), which give
the exact weight bytes and the embedding table's size without loading a tensor.

The KV formula (2 x layers x KV heads x head dim x bytes per element) holds for full-attention
decoders, with or without grouped-query attention. Architectures it does not describe (latent
attention, sliding windows, linear or state-space layers, mixture-of-experts decode) are refused
with a reason instead of being given a wrong number.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from servewatch.errors import ServewatchError

MAX_CONFIG_BYTES = 4 * 2**20
MAX_SAFETENSORS_HEADER_BYTES = 100 * 2**20

DTYPE_BYTES = {"float32": 4, "float": 4, "fp32": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp16": 2, "bf16": 2,
               "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1, "int8": 1, "uint8": 1}
SAFETENSORS_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
                           "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
# Config keys by meaning, first match wins (Llama/Mistral/Qwen names first, then GPT-style aliases).
KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "attention_heads": ("num_attention_heads", "n_head"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "vocab_size": ("vocab_size",),
}
EMBEDDING_NAMES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight")


class ModelConfigError(ServewatchError):
    """A config.json that cannot be read or lacks what the arithmetic needs."""


class UnsupportedArchitecture(ServewatchError):
    """A model the KV and decode formulas do not describe."""


@dataclass(frozen=True, slots=True)
class ModelFacts:
    architecture: str                 # e.g. "LlamaForCausalLM" (never a path)
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int | None
    vocab_size: int
    dtype: str                        # the checkpoint's torch dtype name
    dtype_bytes: int
    tied_embeddings: bool
    max_position_embeddings: int | None
    weight_bytes: int                 # all tensors of the checkpoint
    embedding_bytes: int              # the input embedding table (gathered, not streamed, when untied)
    weight_source: str                # "safetensors headers" | "parameter count from config.json" | "given ..."

    @property
    def streamed_bytes(self) -> int:
        """Bytes one decode step reads at batch 1: every weight except an untied input embedding table,
        of which a step gathers only one row per sequence."""
        return self.weight_bytes if self.tied_embeddings else self.weight_bytes - self.embedding_bytes


def read_model(location: str | Path, *, weights_bytes: int | None = None) -> ModelFacts:
    """ModelFacts from a model directory (config.json + optional safetensors) or a config.json file.
    `weights_bytes` (the user's --weights-bytes) stands for the checkpoint's size: nothing is estimated."""
    path = Path(location)
    config_path = path / "config.json" if path.is_dir() else path
    config = _load_config(config_path)
    facts = facts_from_config(config, where=str(config_path), weights_bytes=weights_bytes)
    if weights_bytes is not None:
        return facts
    tensors = safetensors_sizes(config_path.parent) if config_path.name == "config.json" else {}
    if tensors:
        embedding = next((size for name, size in tensors.items() if name.endswith(EMBEDDING_NAMES)), None)
        facts = replace(facts, weight_bytes=sum(tensors.values()),
                         embedding_bytes=embedding if embedding is not None else facts.embedding_bytes,
                         weight_source="safetensors headers")
    return facts


def facts_from_config(config: dict, *, where: str = "config.json", weights_bytes: int | None = None) -> ModelFacts:
    """The arithmetic's inputs from a parsed config.json; weight bytes as given, else estimated from the
    parameter count."""
    if not isinstance(config, dict):
        raise ModelConfigError(f"{where}: not a JSON object")
    text = config.get("text_config")
    if isinstance(text, dict):   # multimodal wrappers keep the language model's shape here
        config = {**{k: v for k, v in config.items() if k != "text_config"}, **text}
    _refuse_unsupported(config, where)
    layers = _required(config, "layers", where)
    heads = _required(config, "attention_heads", where)
    hidden = _required(config, "hidden_size", where)
    vocab = _required(config, "vocab_size", where)
    kv_heads = _positive_int(config.get("num_key_value_heads", config.get("n_head_kv", heads)), "num_key_value_heads", where)
    head_dim = config.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise ModelConfigError(f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads} "
                                   "and there is no head_dim key; add \"head_dim\" to the config")
        head_dim = hidden // heads
    head_dim = _positive_int(head_dim, "head_dim", where)
    if heads % kv_heads:
        raise ModelConfigError(f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "")
    if not dtype:
        raise ModelConfigError(f"{where}: no torch_dtype (or dtype) key; add e.g. \"torch_dtype\": \"bfloat16\"")
    if dtype not in DTYPE_BYTES:
        raise ModelConfigError(f"{where}: torch_dtype {dtype!r} is not one of {', '.join(sorted(DTYPE_BYTES))}")
    tied = bool(config.get("tie_word_embeddings", False))
    intermediate = config.get("intermediate_size")
    intermediate = _positive_int(intermediate, "intermediate_size", where) if intermediate is not None else None
    architecture = (config.get("architectures") or [config.get("model_type") or "unknown"])[0]
    dtype_bytes = DTYPE_BYTES[dtype]
    embedding_bytes = vocab * hidden * dtype_bytes
    if weights_bytes is not None:
        weight_bytes, source = int(weights_bytes), "given with --weights-bytes"
    else:
        weight_bytes = _estimate_parameters(config, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab,
                                            tied, where) * dtype_bytes
        source = "parameter count from config.json"
    max_positions = config.get("max_position_embeddings")
    return ModelFacts(
        architecture=str(architecture), layers=layers, attention_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        hidden_size=hidden, intermediate_size=intermediate, vocab_size=vocab, dtype=dtype, dtype_bytes=dtype_bytes,
        tied_embeddings=tied, max_position_embeddings=int(max_positions) if isinstance(max_positions, int) else None,
        weight_bytes=weight_bytes, embedding_bytes=embedding_bytes, weight_source=source,
    )


def _estimate_parameters(config: dict, layers: int, heads: int, kv_heads: int, head_dim: int, hidden: int,
                         intermediate: int | None, vocab: int, tied: bool, where: str) -> int:
    """A gated-MLP decoder's parameter count (Llama, Mistral, Qwen2 layout): attention projections,
    gate/up/down projections, two norms per layer, final norm, embedding and (untied) LM head."""
    if config.get("quantization_config"):
        return _needs_headers(where, "a quantised checkpoint's weight bytes do not follow from the parameter count")
    if intermediate is None:
        return _needs_headers(where, "config.json has no intermediate_size to count MLP weights from")
    attention = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    if config.get("attention_bias") or config.get("model_type") == "qwen2":
        attention += heads * head_dim + 2 * kv_heads * head_dim
    per_layer = attention + 3 * hidden * intermediate + 2 * hidden
    return layers * per_layer + hidden + vocab * hidden * (1 if tied else 2)


def _needs_headers(where: str, why: str) -> int:
    raise ModelConfigError(f"{where}: {why}; put the *.safetensors files beside config.json (only their headers "
                           "are read) or give --weights-bytes")


def _refuse_unsupported(config: dict, where: str) -> None:
    model_type = str(config.get("model_type", ""))
    reason = None
    if config.get("kv_lora_rank") or model_type.startswith("deepseek_v"):
        reason = "multi-head latent attention caches a compressed latent, not K and V per head"
    elif any(key in config for key in ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")):
        reason = "mixture-of-experts: a decode step streams only the routed experts, so the decode floor differs"
    elif config.get("layer_types") and set(config["layer_types"]) - {"full_attention"}:
        kinds = ", ".join(sorted(set(config["layer_types"]) - {"full_attention"}))
        reason = f"mixed layer types ({kinds}) keep less than one K and V per token in some layers"
    elif any(word in model_type for word in ("mamba", "jamba", "rwkv", "recurrent", "next", "falcon_h1", "lfm")):
        reason = "linear-attention or state-space layers keep a fixed-size state, not a per-token cache"
    elif config.get("sliding_window") and config.get("use_sliding_window", True) and \
            config.get("sliding_window") < (config.get("max_position_embeddings") or 0):
        reason = (f"sliding-window attention (window {config['sliding_window']} tokens) caps what each layer keeps; "
                  "the per-token formula overstates long requests")
    if reason:
        raise UnsupportedArchitecture(f"{where}: {model_type or 'this model'} is outside what the KV formula "
                                      f"covers: {reason}")


def safetensors_sizes(directory: Path) -> dict[str, int]:
    """Tensor name -> bytes, from the headers of every *.safetensors file in a directory."""
    sizes: dict[str, int] = {}
    for file in sorted(directory.glob("*.safetensors")):
        try:
            with open(file, "rb") as handle:
                prefix = handle.read(8)
                if len(prefix) < 8:
                    raise ModelConfigError(f"{file}: shorter than a safetensors header")
                (length,) = struct.unpack("<Q", prefix)
                if length > MAX_SAFETENSORS_HEADER_BYTES:
                    raise ModelConfigError(f"{file}: header of {length:,} bytes exceeds the "
                                           f"{MAX_SAFETENSORS_HEADER_BYTES:,}-byte bound")
                header = json.loads(handle.read(length))
        except OSError as exc:
            raise ModelConfigError(f"{file}: {exc.strerror or exc}") from None
        except (ValueError, UnicodeDecodeError):
            raise ModelConfigError(f"{file}: the safetensors header is not valid JSON") from None
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            try:
                start, end = entry["data_offsets"]
                sizes[name] = int(end) - int(start)
            except (KeyError, TypeError, ValueError):
                raise ModelConfigError(f"{file}: tensor {name!r} has no data_offsets in its header") from None
    return sizes


def _load_config(path: Path) -> dict:
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ModelConfigError(f"{path}: {size:,} bytes is too large for a config.json")
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelConfigError(f"{path}: no such file; give a model directory holding config.json, or the "
                               "config.json itself") from None
    except OSError as exc:
        raise ModelConfigError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ModelConfigError(f"{path}: not valid JSON ({exc})") from None


def _required(config: dict, meaning: str, where: str) -> int:
    for key in KEYS[meaning]:
        if config.get(key) is not None:
            return _positive_int(config[key], key, where)
    raise ModelConfigError(f"{where}: no {KEYS[meaning][0]} key (the number of {meaning.replace('_', ' ')}); "
                           f"add \"{KEYS[meaning][0]}\" to the config")


def _positive_int(value, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelConfigError(f"{where}: {key} must be a positive integer, not {value!r}")
    return value
