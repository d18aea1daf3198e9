"""Generate a tiny random-weight Llama and its tokenizer, locally and deterministically.

This file runs as a script INSIDE the lab venv's interpreter (which has torch, transformers and
tokenizers); it must not import servewatch. Usage:

    <lab-python> tiny_model.py --out DIR [--seed 0] [--weights-seed N]

--seed makes the tokenizer and the weights; --weights-seed (default: --seed) the weights alone, so two
models can share a tokenizer and differ only in their weights (the output canary's proof).

The shape is the smallest one vLLM's CPU attention accepts: head_dim must be 64 (with 16 the first
request kills the engine). KV per token = layers x kv_heads x head_dim x 2 (K,V) x 2 bytes = 512 B.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SHAPE = {
    "hidden_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "max_position_embeddings": 4096,
}
VOCAB_SIZE = 2048
CORPUS_WORDS = 40_000
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
DONE_MARKER = "servewatch-tiny-model.json"


def generated_corpus(seed: int) -> list[str]:
    """Pseudo-words from a fixed syllable set: enough structure for BPE to learn merges."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["the", "and", "ing", "ion", "er"]
    lines, line = [], []
    for _ in range(CORPUS_WORDS):
        line.append("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))))
        if len(line) >= 12:
            lines.append(" ".join(line) + ".")
            line = []
    return lines


def build_tokenizer(seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any byte encodes: no unknown text
        show_progress=False,
    )
    tokenizer.train_from_iterator(generated_corpus(seed), trainer=trainer)
    return tokenizer


def generate(out: Path, seed: int, weights_seed: int | None = None) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(seed), bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = SHAPE["max_position_embeddings"]
    fast.save_pretrained(out)

    weights_seed = seed if weights_seed is None else weights_seed
    torch.manual_seed(weights_seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
        **SHAPE,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    info = {
        "seed": seed,
        "weights_seed": weights_seed,
        "vocab_size": len(fast),
        "head_dim": SHAPE["hidden_size"] // SHAPE["num_attention_heads"],
        "kv_bytes_per_token": SHAPE["num_hidden_layers"] * SHAPE["num_key_value_heads"]
        * (SHAPE["hidden_size"] // SHAPE["num_attention_heads"]) * 2 * 2,
        "parameters": sum(p.numel() for p in model.parameters()),
        **SHAPE,
    }
    (out / DONE_MARKER).write_text(json.dumps(info, indent=1), encoding="utf-8")
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--weights-seed", type=int, default=None)
    args = parser.parse_args(argv)
    info = generate(args.out, args.seed, args.weights_seed)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
