"""Run with the lab vLLM's python: read a Mooncake JSONL file with `vllm bench serve`'s own timed-trace reader
(vllm.benchmarks.datasets.datasets.TimedTrace: `--dataset-name timed_trace`, timestamps in ms so a multiplier of
0.001, chunks of BLOCK tokens) and print, as one JSON line, what it made of each row: prompt length, output length,
arrival in seconds, the prompt's first three token ids, and its token ids hashed (which rows share a prompt, not
the text).

Usage: python vllm_trace_reader.py TRACE BLOCK [TOKENIZER_DIR]   (without one, a stand-in vocabulary of 4,096 ids)"""

from __future__ import annotations

import hashlib
import json
import sys

from vllm.benchmarks.datasets.datasets import TimedTrace


class StandInTokenizer:
    """What TimedTrace asks of a tokenizer: a vocabulary and the special ids."""

    all_special_ids = [0]

    def get_vocab(self):
        return {f"t{i}": i for i in range(4096)}


def main() -> None:
    path, block = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(sys.argv[3])
    else:
        tokenizer = StandInTokenizer()
    dataset = TimedTrace(dataset_path=path, random_seed=0, timed_trace_chunk_hash_size=block,
                         timed_trace_sec_multiplier=0.001, timed_trace_label_timestamp="timestamp",
                         timed_trace_label_input_length="input_length",
                         timed_trace_label_output_length="output_length", timed_trace_label_hash_ids="hash_ids")
    with open(path, encoding="utf-8") as f:
        rows = sum(1 for line in f if line.strip())
    samples = dataset.sample(tokenizer, num_requests=rows)
    print(json.dumps([{"prompt_len": s.prompt_len, "output_len": s.expected_output_len, "at_s": s.timestamp,
                       "head": list(s.prompt[:3]),
                       "prompt": hashlib.sha256(json.dumps(s.prompt).encode()).hexdigest()[:16]}
                      for s in samples]))


if __name__ == "__main__":
    main()
