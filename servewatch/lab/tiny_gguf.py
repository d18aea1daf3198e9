"""Write a tiny random-weight Llama as one GGUF file (about 0.5 MB) for the lab llama-server, deterministically.

This file runs as a script INSIDE the lab's gguf venv (PyPI's `gguf`, with numpy); it must not import servewatch.
Usage:

    <gguf-venv-python> tiny_gguf.py --out FILE [--seed 0]

The model: 2 layers, hidden 64, 2 attention heads sharing 1 KV head (head_dim 32), FFN 128, f32 weights drawn
with a standard deviation of 0.02. The tokenizer is a SentencePiece-style vocabulary (llama.cpp's "llama" tokenizer
model): <unk>, <s>, </s>, the 256 byte tokens (any text tokenizes, through byte fallback) and a few hundred
syllables, with a plain chat template. The sibling FILE.json records the shape when the file is complete.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

SHAPE = {"embedding_length": 64, "head_count": 2, "head_count_kv": 1, "block_count": 2,
         "feed_forward_length": 128, "context_length": 4096}
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types): llama.cpp's SPM vocabulary; types 1 normal, 2 unknown, 3 control, 6 byte."""
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>")
        scores.append(0.0)
        types.append(6)
    pieces = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + list("abcdefghijklmnopqrstuvwxyz")
    pieces += ["the", "and", "ing", "ion", "er", ".", ",", ":"]
    for i, piece in enumerate(pieces):
        for text in (piece, "\u2581" + piece):
            tokens.append(text)
            scores.append(-float(i))
            types.append(1)
    return tokens, scores, types


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import gguf
    import numpy as np

    rng = np.random.default_rng(args.seed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tokens, scores, types = vocabulary()
    n_vocab, n_embd, n_ff = len(tokens), SHAPE["embedding_length"], SHAPE["feed_forward_length"]
    head_dim = n_embd // SHAPE["head_count"]
    n_kv = SHAPE["head_count_kv"] * head_dim

    partial = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_name("servewatch tiny llama")
    writer.add_context_length(SHAPE["context_length"])
    writer.add_embedding_length(n_embd)
    writer.add_block_count(SHAPE["block_count"])
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(SHAPE["head_count"])
    writer.add_head_count_kv(SHAPE["head_count_kv"])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(n_vocab, n_embd))
    for layer in range(SHAPE["block_count"]):
        blk = f"blk.{layer}"
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"{blk}.attn_q.weight", weight(n_embd, n_embd))
        writer.add_tensor(f"{blk}.attn_k.weight", weight(n_kv, n_embd))
        writer.add_tensor(f"{blk}.attn_v.weight", weight(n_kv, n_embd))
        writer.add_tensor(f"{blk}.attn_output.weight", weight(n_embd, n_embd))
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_gate.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"{blk}.ffn_up.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"{blk}.ffn_down.weight", weight(n_embd, n_ff))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, n_embd))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(partial, out)
    info = {"seed": args.seed, "vocab_size": n_vocab, **SHAPE, "bytes": out.stat().st_size,
            "gguf": getattr(gguf, "__version__", None) or _version("gguf")}
    out.with_name(out.name + ".json").write_text(json.dumps(info), encoding="utf-8")
    print(json.dumps(info))
    return 0


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
