"""Capacity arithmetic: KV bytes per token, the pool, per-request share, the alarm threshold that leaves
room for N admissions, the decode floor and the logits-sized temporaries — each with its working.

All byte arithmetic is exact (fractions), so a count such as the pool's token slots is the floor of an
exact quotient, never of a float that happened to round down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from servewatch.derive import quantities as q
from servewatch.derive.hardware import Accelerator
from servewatch.derive.model_facts import ModelFacts
from servewatch.errors import ServewatchError

KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "bfloat16": 2, "float16": 2, "half": 2,
                  "float32": 4}
LOGITS_BYTES_PER_ELEMENT = 4      # samplers upcast logits to float32
# Non-KV memory inside the engine's share besides weights: activation peak of the profiling run, CUDA
# graphs, allocator and library workspaces. An assumption unless measured (--reserve, or --against).
DEFAULT_RESERVE = Fraction(6 * q.GiB)
DEFAULT_MEMORY_UTILIZATION = Fraction(92, 100)   # vLLM 0.32's gpu_memory_utilization default
DEFAULT_BLOCK_SIZE = 16                          # vLLM's GPU block size in tokens
DEFAULT_HEADROOM_REQUESTS = 5


class CapacityError(ServewatchError):
    """Inputs the arithmetic cannot use (a TP that splits no KV head evenly, a budget below zero...)."""


@dataclass(frozen=True, slots=True)
class Deployment:
    model: ModelFacts
    gpu: Accelerator
    tp: int = 1
    max_model_len: int | None = None               # None: the model's max_position_embeddings
    max_num_seqs: int = 256
    memory_utilization: Fraction = DEFAULT_MEMORY_UTILIZATION
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: Fraction | None = None  # the engine's KV budget when known; else estimated
    weights_bytes: Fraction | None = None          # checkpoint bytes as the engine loaded them, when given
    reserve_bytes: Fraction = DEFAULT_RESERVE
    reserve_given: bool = False
    block_size: int = DEFAULT_BLOCK_SIZE
    headroom_requests: int = DEFAULT_HEADROOM_REQUESTS


@dataclass(frozen=True, slots=True)
class Figure:
    key: str
    label: str
    value: float | int | bool | None
    shown: str          # the value as people read it, with its unit
    formula: str        # in words
    working: str        # the same with the numbers substituted

    def as_json(self) -> dict:
        return {"key": self.key, "label": self.label, "value": self.value, "shown": self.shown,
                "formula": self.formula, "working": self.working}


@dataclass(frozen=True, slots=True)
class Capacity:
    kv_bytes_per_token: int
    weights_per_gpu: Fraction
    streamed_per_step: Fraction
    kv_budget: Fraction
    budget_estimated: bool
    pool_tokens: int
    engine_pool_tokens: int          # whole blocks, as vLLM allocates
    max_model_len: int
    request_bytes: int
    request_share: Fraction
    alarm_threshold: Fraction        # KV usage fraction that still leaves headroom_requests admissions
    admissions_at_90: Fraction
    max_concurrency: Fraction        # pool / max_model_len (vLLM's "Maximum concurrency" figure)
    decode_floor_s: Fraction | None
    full_pool_step_s: Fraction | None
    logits_temporary: int
    outside_budget: Fraction
    logits_fit: bool
    figures: tuple[Figure, ...]

    def figure(self, key: str) -> Figure:
        return next(f for f in self.figures if f.key == key)


def kv_heads_per_gpu(kv_heads: int, tp: int) -> int:
    """KV heads one tensor-parallel rank holds: an even split, or one replicated head when TP exceeds
    the KV heads by a whole multiple."""
    if tp < 1:
        raise CapacityError(f"--tp must be at least 1, not {tp}")
    if kv_heads % tp == 0:
        return kv_heads // tp
    if tp % kv_heads == 0:
        return 1
    raise CapacityError(f"--tp {tp} does not divide the model's {kv_heads} KV heads (nor do they divide it); "
                        f"use a TP that divides {kv_heads} or a multiple of it")


def kv_element_bytes(model: ModelFacts, kv_cache_dtype: str) -> int:
    if kv_cache_dtype in ("auto", "", None):
        return model.dtype_bytes
    if kv_cache_dtype not in KV_DTYPE_BYTES:
        raise CapacityError(f"--kv-cache-dtype {kv_cache_dtype!r} is not one of auto, {', '.join(KV_DTYPE_BYTES)}")
    return KV_DTYPE_BYTES[kv_cache_dtype]


def logits_temporary_bytes(running: int, vocab_size: int) -> int:
    """One logits-sized float32 tensor for `running` sequences (the sampler's penalty step makes one)."""
    return running * vocab_size * LOGITS_BYTES_PER_ELEMENT


def alarm_threshold(pool_tokens: int, request_tokens: int, admissions: int) -> Fraction:
    """The KV usage fraction at which `admissions` more maximum-length requests still fit."""
    return 1 - Fraction(admissions * request_tokens, pool_tokens)


def derive(d: Deployment) -> Capacity:
    m, gpu = d.model, d.gpu
    if d.max_model_len is not None and d.max_model_len < 1:
        raise CapacityError(f"--max-model-len must be at least 1, not {d.max_model_len}")
    max_len = d.max_model_len or m.max_position_embeddings
    if not max_len:
        raise CapacityError("the config has no max_position_embeddings; give --max-model-len")
    if d.max_num_seqs < 1:
        raise CapacityError(f"--max-num-seqs must be at least 1, not {d.max_num_seqs}")
    if not 0 < d.memory_utilization <= 1:
        raise CapacityError(f"--gpu-memory-utilization must be in (0, 1], not {float(d.memory_utilization):g}")
    heads = kv_heads_per_gpu(m.kv_heads, d.tp)
    element = kv_element_bytes(m, d.kv_cache_dtype)
    figures: list[Figure] = []

    kv_per_token = 2 * m.layers * heads * m.head_dim * element
    heads_text = f"{m.kv_heads} KV head{'s' if m.kv_heads > 1 else ''}" + (f" ÷ TP {d.tp}" if d.tp > 1 else "")
    figures.append(Figure(
        "kv_bytes_per_token", "KV bytes per token", kv_per_token, q.binary(kv_per_token),
        "2 (K and V) × layers × KV heads per GPU × head dim × bytes per element",
        f"2 × {m.layers} × {heads} ({heads_text}) × {m.head_dim} × {element} B "
        f"({d.kv_cache_dtype if d.kv_cache_dtype != 'auto' else m.dtype}) = {kv_per_token:,} B"))

    checkpoint = d.weights_bytes if d.weights_bytes is not None else Fraction(m.weight_bytes)
    weights = checkpoint / d.tp
    source = "given" if d.weights_bytes is not None else m.weight_source
    figures.append(Figure(
        "weights_per_gpu", "Weights per GPU", float(weights), q.binary(weights),
        "checkpoint bytes ÷ TP", f"{q.binary(checkpoint)} ({source}) ÷ {d.tp}"))

    gathered = 0 if m.tied_embeddings else m.embedding_bytes
    streamed = (checkpoint - gathered) / d.tp
    why = ("embedding tied to the LM head, so all of it is read" if m.tied_embeddings
           else f"minus the {q.decimal(gathered)} embedding table, which a step gathers a row of, not streams")
    figures.append(Figure(
        "streamed_per_step", "Weight bytes streamed per decode step", float(streamed), q.decimal(streamed, 1),
        "(weights − untied input embedding table) ÷ TP",
        f"({q.decimal(checkpoint)} − {q.decimal(gathered)}) ÷ {d.tp} = {q.decimal(streamed, 3)}: {why}"))

    if d.kv_cache_memory_bytes is not None:
        budget = d.kv_cache_memory_bytes
        outside = gpu.memory_bytes - weights - d.reserve_bytes - budget
        figures.append(Figure("kv_budget", "KV budget per GPU", float(budget), q.binary(budget),
                              "given: the engine's own KV budget", f"{float(budget):,.0f} B = {q.binary(budget)}"))
    else:
        budget = gpu.memory_bytes * d.memory_utilization - weights - d.reserve_bytes
        outside = gpu.memory_bytes * (1 - d.memory_utilization)
        reserve_note = "given" if d.reserve_given else "assumed: activation peak, CUDA graphs, workspaces"
        figures.append(Figure(
            "kv_budget", "KV budget per GPU (estimate)", float(budget), q.binary(budget),
            "GPU memory × memory utilisation − weights − non-KV reserve",
            f"{q.binary(gpu.memory_bytes)} ({gpu.memory_source}) × {float(d.memory_utilization):g} − "
            f"{q.binary(weights)} − {q.binary(d.reserve_bytes)} ({reserve_note}) = {q.binary(budget, 4)}"))
    if budget <= 0:
        raise CapacityError(f"nothing is left for the KV cache: the budget comes to {q.binary(budget)} "
                            "(weights and reserve exceed the memory share); raise --gpu-memory-utilization, "
                            "use more GPUs (--tp) or give --kv-cache-memory-bytes")

    pool = math.floor(budget / kv_per_token)
    if pool < 1:
        raise CapacityError(f"the KV budget ({float(budget):,.0f} B) holds no token: one token's KV is "
                            f"{kv_per_token:,} B; give a larger --kv-cache-memory-bytes or --gpu-memory-utilization")
    engine_pool = pool // d.block_size * d.block_size
    figures.append(Figure(
        "pool_tokens", "Pool (token slots)", pool, f"{pool:,}",
        "⌊KV budget ÷ KV bytes per token⌋",
        f"⌊{q.binary(budget, 4)} ÷ {q.binary(kv_per_token)}⌋ = {pool:,}; vLLM allocates whole "
        f"{d.block_size}-token blocks: {engine_pool:,}"))

    request_bytes = max_len * kv_per_token
    share = Fraction(max_len, pool)
    figures.append(Figure(
        "request_share", "One maximum-length request", float(share), f"{q.binary(request_bytes)}, {float(share):.1%} of the pool",
        "max_model_len × KV bytes per token; ÷ pool", f"{max_len:,} × {q.binary(kv_per_token)} = "
        f"{q.binary(request_bytes)}; {max_len:,} ÷ {pool:,} = {float(share):.2%}"))

    threshold = alarm_threshold(pool, max_len, d.headroom_requests)
    at_90 = Fraction(1, 10) * pool / max_len
    shown_threshold = math.floor(threshold * 1000) / 10
    figures.append(Figure(
        "kv_alarm", f"KV alarm leaving {d.headroom_requests} admissions", shown_threshold / 100,
        f"{shown_threshold:.1f} %" if threshold > 0 else "none: the pool holds fewer than that",
        "1 − N × max_model_len ÷ pool",
        f"1 − {d.headroom_requests} × {max_len:,} ÷ {pool:,} = {float(threshold):.2%}; an alarm at 90 % leaves "
        f"room for {float(at_90):.1f} maximum-length admissions"))

    concurrency = Fraction(pool, max_len)
    binding = "the slot limit" if d.max_num_seqs < concurrency else "the KV pool"
    figures.append(Figure(
        "max_concurrency", "Maximum concurrency at max_model_len", float(concurrency),
        f"{float(concurrency):.2f}x (slot limit {d.max_num_seqs})",
        "pool ÷ max_model_len, against the slot limit",
        f"{pool:,} ÷ {max_len:,} = {float(concurrency):.2f} requests; --max-num-seqs {d.max_num_seqs}: "
        f"{binding} binds first at full length"))

    floor_s = full_step_s = None
    if gpu.bandwidth_bytes_per_s:
        floor_s = streamed / gpu.bandwidth_bytes_per_s
        full_step_s = (streamed + Fraction(pool * kv_per_token)) / gpu.bandwidth_bytes_per_s
        figures.append(Figure(
            "decode_floor", "Decode floor at batch 1", float(floor_s), q.duration(floor_s),
            "weight bytes streamed per step ÷ memory bandwidth",
            f"{q.decimal(streamed, 1)} ÷ {q.rate(gpu.bandwidth_bytes_per_s)} ({gpu.bandwidth_source}) "
            f"= {float(floor_s) * 1e3:.3f} ms per token"))
        figures.append(Figure(
            "full_pool_step", "Decode step with the whole pool resident", float(full_step_s), q.duration(full_step_s),
            "(weights streamed + every KV slot read once) ÷ memory bandwidth",
            f"({q.decimal(streamed, 1)} + {q.decimal(pool * kv_per_token, 1)}) ÷ {q.rate(gpu.bandwidth_bytes_per_s)}"))

    logits = logits_temporary_bytes(d.max_num_seqs, m.vocab_size)
    fits = logits <= outside
    figures.append(Figure(
        "logits_temporary", "Logits-sized temporary at the slot limit", logits,
        f"{q.binary(logits, 3)}: {'fits' if fits else 'does NOT fit'} outside the budget",
        "running × vocabulary × 4 B (float32), against memory outside the engine's budget",
        f"{d.max_num_seqs} × {m.vocab_size:,} × 4 B = {logits:,} B = {q.binary(logits, 3)}; outside the budget: "
        + (f"{q.binary(gpu.memory_bytes)} × (1 − {float(d.memory_utilization):g})" if d.kv_cache_memory_bytes is None
           else "GPU memory − weights − reserve − KV budget")
        + f" = {q.binary(max(outside, 0))}, shared with the CUDA context and other non-torch allocations"))

    return Capacity(
        kv_bytes_per_token=kv_per_token, weights_per_gpu=weights, streamed_per_step=streamed, kv_budget=budget,
        budget_estimated=d.kv_cache_memory_bytes is None, pool_tokens=pool, engine_pool_tokens=engine_pool,
        max_model_len=max_len, request_bytes=request_bytes, request_share=share, alarm_threshold=threshold,
        admissions_at_90=at_90, max_concurrency=concurrency, decode_floor_s=floor_s, full_pool_step_s=full_step_s,
        logits_temporary=logits, outside_budget=outside, logits_fit=fits, figures=tuple(figures))
