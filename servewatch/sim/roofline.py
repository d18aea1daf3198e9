"""Step time from a roofline: max(bytes streamed / bandwidth, FLOPs / peak) + overheads.

A step streams the weights once, reads the KV of every scheduled sequence's context, and computes
every scheduled token (prefill chunks and decode tokens alike).
"""

from __future__ import annotations

from servewatch.sim.profiles import Profile


def step_seconds(profile: Profile, *, tokens: int, sequences: int, context_tokens: int,
                 slow_factor: float = 1.0) -> float:
    """Duration of one engine step computing `tokens` new tokens for `sequences` sequences whose
    contexts total `context_tokens` tokens (KV read by attention)."""
    if tokens <= 0:
        return 0.0
    memory = (profile.weight_bytes + context_tokens * profile.kv_bytes_per_token) / profile.bandwidth
    compute = tokens * profile.flops_per_token / profile.peak_flops
    seconds = max(memory, compute) + profile.step_overhead_s + sequences * profile.per_seq_overhead_s
    return seconds * slow_factor
