"""Hardware/model profiles for the simulator's roofline step model.

A profile says how many bytes a decode step streams (weights, plus KV per token of context), how many
FLOPs a token costs, and what the device sustains. Where each figure comes from:

* ``h100-8b``: Llama-3-8B bf16 on an H100 SXM, derived from the datasheet (not measured). 15.0 GB of
  weights streamed per step (embedding table excluded) over 3.35 TB/s = 4.48 ms/token at batch 1;
  989 TFLOP/s dense bf16, so the ridge is ~295 tokens per step; 128 KiB of KV per token; 428,569 KV
  token slots (an 80 GB card's KV budget at 128 KiB per token).
* ``rtx3060-7b``: Qwen2.5-7B-Instruct-AWQ on an RTX 3060 12 GB at gpu_memory_utilization 0.85:
  ~4.5 GB streamed per step over 360 GB/s, an effective 35 TFLOP/s for AWQ kernels, 56 KiB KV/token,
  152,064-entry vocabulary, 102,400 KV token slots (a real vLLM on that card had 28% of its KV in use
  with 256 short requests running); gives ITL ~16 ms at 12 running and ~0.14 s at 256, as that server
  measured 0.016 s and 0.147 s.
* ``tiny-cpu``: the random-weight tiny Llama served by a real vLLM 0.32 CPU build on this project's
  test machines: 64 output tokens in ~0.1 s at batch 1; 512 bytes KV/token; 8,192 KV tokens
  in 128-token blocks; max_model_len 2048. Python overhead dominates, so the fixed overhead does too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    model_name: str
    weight_bytes: float          # bytes streamed once per step, whatever the batch
    kv_bytes_per_token: float    # bytes of KV read per token of context per step (attention)
    flops_per_token: float       # ~2 x parameters
    bandwidth: float             # bytes/s
    peak_flops: float            # FLOP/s actually reachable by the kernels
    step_overhead_s: float       # scheduler + launch + sampling, per step
    per_seq_overhead_s: float    # per running sequence per step (sampling, bookkeeping)
    vocab_size: int
    kv_tokens: int               # KV pool size in tokens (default for --kv-tokens)
    block_size: int
    max_model_len: int
    device: str                  # "GPU" or "CPU", as vLLM prints it
    device_total_gib: float      # for the OOM message
    oom_budget_mib: float        # free memory left for logits-sized temporaries (crash-oom)


PROFILES: dict[str, Profile] = {
    "h100-8b": Profile(
        name="h100-8b", model_name="meta-llama/Meta-Llama-3-8B-Instruct",
        weight_bytes=15.0e9, kv_bytes_per_token=131072, flops_per_token=16.0e9,
        bandwidth=3.35e12, peak_flops=989e12, step_overhead_s=0.0001, per_seq_overhead_s=0.000004,
        vocab_size=128256, kv_tokens=428569, block_size=16, max_model_len=8192,
        device="GPU", device_total_gib=79.19, oom_budget_mib=512.0,
    ),
    "rtx3060-7b": Profile(
        name="rtx3060-7b", model_name="Qwen/Qwen2.5-7B-Instruct-AWQ",
        weight_bytes=4.5e9, kv_bytes_per_token=57344, flops_per_token=15.2e9,
        bandwidth=360e9, peak_flops=35e12, step_overhead_s=0.0035, per_seq_overhead_s=0.0001,
        vocab_size=152064, kv_tokens=102400, block_size=16, max_model_len=4096,
        device="GPU", device_total_gib=11.63, oom_budget_mib=84.88,
    ),
    "tiny-cpu": Profile(
        name="tiny-cpu", model_name="tiny",
        weight_bytes=1.2e6, kv_bytes_per_token=512, flops_per_token=1.2e6,
        bandwidth=10e9, peak_flops=50e9, step_overhead_s=0.0014, per_seq_overhead_s=0.00005,
        vocab_size=2048, kv_tokens=8192, block_size=128, max_model_len=2048,
        device="CPU", device_total_gib=16.21, oom_budget_mib=64.0,
    ),
}

DEFAULT_PROFILE = "rtx3060-7b"


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r} (known: {', '.join(sorted(PROFILES))})") from None
