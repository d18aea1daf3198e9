"""Values of servewatch/derive/capacity.py (issue 50: the mutation rule finds it): every figure `servewatch advise`
prints, with its formula and working, for the worked example (Llama-3-8B on an H100, weights as vLLM logs them; its
headline numbers are checked by hand in tests/test_advise.py: 128 KiB per token, 428,569 slots, 90.4 %, 4.48 ms)
and for a small deployment that takes every other branch (TP 2 over one replicated KV head, fp8 KV, tied
embeddings, a given KV budget and reserve, a pool of whole 32-token blocks below the slots, an alarm that cannot
leave nine admissions, the slot limit binding, no bandwidth); the refusals' words."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from servewatch.derive.capacity import (DEFAULT_BLOCK_SIZE, DEFAULT_HEADROOM_REQUESTS, DEFAULT_MEMORY_UTILIZATION,
                                        DEFAULT_RESERVE, KV_DTYPE_BYTES, LOGITS_BYTES_PER_ELEMENT, CapacityError,
                                        Deployment, alarm_threshold, derive, kv_element_bytes, kv_heads_per_gpu,
                                        logits_temporary_bytes)
from servewatch.derive.hardware import resolve
from servewatch.derive.model_facts import facts_from_config
from servewatch.derive.quantities import GiB, KiB, MiB, parse_bytes

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}
SMALL_MODEL = {**LLAMA3_8B, "tie_word_embeddings": True, "num_key_value_heads": 1, "max_position_embeddings": 4096}


def worked(**changes):
    settings = dict(model=facts_from_config(LLAMA3_8B), gpu=resolve("H100", None, None), max_model_len=8192,
                    weights_bytes=parse_bytes("14.96GiB"))
    settings.update(changes)
    return derive(Deployment(**settings))


def small(**changes):
    settings = dict(model=facts_from_config(SMALL_MODEL), gpu=resolve(None, Fraction(24 * GiB), None), tp=2,
                    max_num_seqs=3, kv_cache_dtype="fp8", kv_cache_memory_bytes=Fraction(128 * MiB + 40 * KiB),
                    reserve_bytes=Fraction(GiB), reserve_given=True, block_size=32, headroom_requests=9)
    settings.update(changes)
    return derive(Deployment(**settings))


WORKED_FIGURES = [{'key': 'kv_bytes_per_token',
  'label': 'KV bytes per token',
  'value': 131072,
  'shown': '128 KiB',
  'formula': '2 (K and V) × layers × KV heads per GPU × head dim × bytes per element',
  'working': '2 × 32 × 8 (8 KV heads) × 128 × 2 B (bfloat16) = 131,072 B'},
 {'key': 'weights_per_gpu',
  'label': 'Weights per GPU',
  'value': 16063177687.04,
  'shown': '14.96 GiB',
  'formula': 'checkpoint bytes ÷ TP',
  'working': '14.96 GiB (given) ÷ 1'},
 {'key': 'streamed_per_step',
  'label': 'Weight bytes streamed per decode step',
  'value': 15012504535.04,
  'shown': '15.0 GB',
  'formula': '(weights − untied input embedding table) ÷ TP',
  'working': '(16.06 GB − 1.05 GB) ÷ 1 = 15.013 GB: minus the 1.05 GB embedding table, which a step gathers a row '
             'of, not streams'},
 {'key': 'kv_budget',
  'label': 'KV budget per GPU (estimate)',
  'value': 56173516554.24,
  'shown': '52.32 GiB',
  'formula': 'GPU memory × memory utilisation − weights − non-KV reserve',
  'working': '79.65 GiB (nvidia-smi memory.total 81,559 MiB) × 0.92 − 14.96 GiB − 6 GiB (assumed: activation peak, '
             'CUDA graphs, workspaces) = 52.3157 GiB'},
 {'key': 'pool_tokens',
  'label': 'Pool (token slots)',
  'value': 428569,
  'shown': '428,569',
  'formula': '⌊KV budget ÷ KV bytes per token⌋',
  'working': '⌊52.3157 GiB ÷ 128 KiB⌋ = 428,569; vLLM allocates whole 16-token blocks: 428,560'},
 {'key': 'request_share',
  'label': 'One maximum-length request',
  'value': 0.019114774983724908,
  'shown': '1 GiB, 1.9% of the pool',
  'formula': 'max_model_len × KV bytes per token; ÷ pool',
  'working': '8,192 × 128 KiB = 1 GiB; 8,192 ÷ 428,569 = 1.91%'},
 {'key': 'kv_alarm',
  'label': 'KV alarm leaving 5 admissions',
  'value': 0.904,
  'shown': '90.4 %',
  'formula': '1 − N × max_model_len ÷ pool',
  'working': '1 − 5 × 8,192 ÷ 428,569 = 90.44%; an alarm at 90 % leaves room for 5.2 maximum-length admissions'},
 {'key': 'max_concurrency',
  'label': 'Maximum concurrency at max_model_len',
  'value': 52.3155517578125,
  'shown': '52.32x (slot limit 256)',
  'formula': 'pool ÷ max_model_len, against the slot limit',
  'working': '428,569 ÷ 8,192 = 52.32 requests; --max-num-seqs 256: the KV pool binds first at full length'},
 {'key': 'decode_floor',
  'label': 'Decode floor at batch 1',
  'value': 0.004481344637325373,
  'shown': '4.48 ms',
  'formula': 'weight bytes streamed per step ÷ memory bandwidth',
  'working': '15.0 GB ÷ 3.35 TB/s (NVIDIA H100 SXM datasheet, 3.35 TB/s HBM3) = 4.481 ms per token'},
 {'key': 'full_pool_step',
  'label': 'Decode step with the whole pool resident',
  'value': 0.021249522538220895,
  'shown': '21.25 ms',
  'formula': '(weights streamed + every KV slot read once) ÷ memory bandwidth',
  'working': '(15.0 GB + 56.2 GB) ÷ 3.35 TB/s'},
 {'key': 'logits_temporary',
  'label': 'Logits-sized temporary at the slot limit',
  'value': 131334144,
  'shown': '125.25 MiB: fits outside the budget',
  'formula': "running × vocabulary × 4 B (float32), against memory outside the engine's budget",
  'working': '256 × 128,256 × 4 B = 131,334,144 B = 125.25 MiB; outside the budget: 79.65 GiB × (1 − 0.92) = 6.37 '
             'GiB, shared with the CUDA context and other non-torch allocations'}]
WORKED = {'kv_bytes_per_token': 131072,
 'weights_per_gpu': Fraction(401579442176, 25),
 'streamed_per_step': Fraction(375312613376, 25),
 'kv_budget': Fraction(1404337913856, 25),
 'budget_estimated': True,
 'pool_tokens': 428569,
 'engine_pool_tokens': 428560,
 'max_model_len': 8192,
 'request_bytes': 1073741824,
 'request_share': Fraction(8192, 428569),
 'alarm_threshold': Fraction(387609, 428569),
 'admissions_at_90': Fraction(428569, 81920),
 'max_concurrency': Fraction(428569, 8192),
 'decode_floor_s': Fraction(366516224, 81787109375),
 'full_pool_step_s': Fraction(1737937024, 81787109375),
 'logits_temporary': 131334144,
 'outside_budget': Fraction(171041619968, 25),
 'logits_fit': True}
SMALL_FIGURES = [{'key': 'kv_bytes_per_token',
  'label': 'KV bytes per token',
  'value': 8192,
  'shown': '8 KiB',
  'formula': '2 (K and V) × layers × KV heads per GPU × head dim × bytes per element',
  'working': '2 × 32 × 1 (1 KV head ÷ TP 2) × 128 × 1 B (fp8) = 8,192 B'},
 {'key': 'weights_per_gpu',
  'label': 'Weights per GPU',
  'value': 7270043648.0,
  'shown': '6.77 GiB',
  'formula': 'checkpoint bytes ÷ TP',
  'working': '13.54 GiB (parameter count from config.json) ÷ 2'},
 {'key': 'streamed_per_step',
  'label': 'Weight bytes streamed per decode step',
  'value': 7270043648.0,
  'shown': '7.3 GB',
  'formula': '(weights − untied input embedding table) ÷ TP',
  'working': '(14.54 GB − 0 B) ÷ 2 = 7.270 GB: embedding tied to the LM head, so all of it is read'},
 {'key': 'kv_budget',
  'label': 'KV budget per GPU',
  'value': 134258688.0,
  'shown': '128.04 MiB',
  'formula': "given: the engine's own KV budget",
  'working': '134,258,688 B = 128.04 MiB'},
 {'key': 'pool_tokens',
  'label': 'Pool (token slots)',
  'value': 16389,
  'shown': '16,389',
  'formula': '⌊KV budget ÷ KV bytes per token⌋',
  'working': '⌊128.0391 MiB ÷ 8 KiB⌋ = 16,389; vLLM allocates whole 32-token blocks: 16,384'},
 {'key': 'request_share',
  'label': 'One maximum-length request',
  'value': 0.2499237293306486,
  'shown': '32 MiB, 25.0% of the pool',
  'formula': 'max_model_len × KV bytes per token; ÷ pool',
  'working': '4,096 × 8 KiB = 32 MiB; 4,096 ÷ 16,389 = 24.99%'},
 {'key': 'kv_alarm',
  'label': 'KV alarm leaving 9 admissions',
  'value': -1.25,
  'shown': 'none: the pool holds fewer than that',
  'formula': '1 − N × max_model_len ÷ pool',
  'working': '1 − 9 × 4,096 ÷ 16,389 = -124.93%; an alarm at 90 % leaves room for 0.4 maximum-length admissions'},
 {'key': 'max_concurrency',
  'label': 'Maximum concurrency at max_model_len',
  'value': 4.001220703125,
  'shown': '4.00x (slot limit 3)',
  'formula': 'pool ÷ max_model_len, against the slot limit',
  'working': '16,389 ÷ 4,096 = 4.00 requests; --max-num-seqs 3: the slot limit binds first at full length'},
 {'key': 'logits_temporary',
  'label': 'Logits-sized temporary at the slot limit',
  'value': 1539072,
  'shown': '1.468 MiB: fits outside the budget',
  'formula': "running × vocabulary × 4 B (float32), against memory outside the engine's budget",
  'working': '3 × 128,256 × 4 B = 1,539,072 B = 1.468 MiB; outside the budget: GPU memory − weights − reserve − KV '
             'budget = 16.1 GiB, shared with the CUDA context and other non-torch allocations'}]
SMALL = {'kv_bytes_per_token': 8192,
 'weights_per_gpu': Fraction(7270043648, 1),
 'streamed_per_step': Fraction(7270043648, 1),
 'kv_budget': Fraction(134258688, 1),
 'budget_estimated': False,
 'pool_tokens': 16389,
 'engine_pool_tokens': 16384,
 'max_model_len': 4096,
 'request_bytes': 33554432,
 'request_share': Fraction(4096, 16389),
 'alarm_threshold': Fraction(-2275, 1821),
 'admissions_at_90': Fraction(16389, 40960),
 'max_concurrency': Fraction(16389, 4096),
 'decode_floor_s': None,
 'full_pool_step_s': None,
 'logits_temporary': 1539072,
 'outside_budget': Fraction(17291759616, 1),
 'logits_fit': True}


def test_the_defaults():
    assert DEFAULT_RESERVE == 6 * GiB
    assert DEFAULT_MEMORY_UTILIZATION == Fraction(92, 100)
    assert (DEFAULT_BLOCK_SIZE, DEFAULT_HEADROOM_REQUESTS, LOGITS_BYTES_PER_ELEMENT) == (16, 5, 4)
    d = Deployment(facts_from_config(LLAMA3_8B), resolve("H100", None, None))
    assert (d.tp, d.max_model_len, d.max_num_seqs, d.kv_cache_dtype, d.kv_cache_memory_bytes, d.weights_bytes,
            d.reserve_given) == (1, None, 256, "auto", None, None, False)
    assert KV_DTYPE_BYTES == {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "bfloat16": 2, "float16": 2,
                              "half": 2, "float32": 4}


def test_the_worked_example_figure_by_figure():
    c = worked()
    assert [f.as_json() for f in c.figures] == WORKED_FIGURES
    assert {k: getattr(c, k) for k in c.__slots__ if k != "figures"} == WORKED
    assert c.figure("decode_floor").value == WORKED_FIGURES[8]["value"]


def test_the_worked_example_at_its_defaults_reads_max_len_from_the_model():
    c = worked(max_model_len=None)
    assert c.max_model_len == 8192
    assert c.pool_tokens == 428_569


def test_a_small_deployment_figure_by_figure():
    c = small()
    assert [f.as_json() for f in c.figures] == SMALL_FIGURES
    assert {k: getattr(c, k) for k in c.__slots__ if k != "figures"} == SMALL


def test_logits_that_do_not_fit_and_an_untied_embedding_with_a_given_budget():
    c = worked(max_num_seqs=256, memory_utilization=Fraction(999, 1000))
    assert not c.logits_fit
    assert c.figure("logits_temporary").shown == "125.25 MiB: does NOT fit outside the budget"
    assert c.figure("logits_temporary").working.endswith(
        "79.65 GiB × (1 − 0.999) = 81.56 MiB, shared with the CUDA context and other non-torch allocations")
    # a budget so large nothing is left outside: the working shows 0, never a negative size
    full = worked(kv_cache_memory_bytes=Fraction(79 * GiB))
    assert full.outside_budget < 0 and not full.logits_fit
    assert "GPU memory − weights − reserve − KV budget = 0 B," in full.figure("logits_temporary").working
    # exactly at the edge: fits
    edge = worked(kv_cache_memory_bytes=Fraction(81_559 * MiB) - parse_bytes("14.96GiB") - 6 * GiB - 131_334_144)
    assert edge.outside_budget == 131_334_144 and edge.logits_fit
    assert edge.kv_budget == Fraction(81_559 * MiB) - parse_bytes("14.96GiB") - 6 * GiB - 131_334_144


def test_one_slot_a_given_reserve_and_two_kv_heads():
    assert worked(max_num_seqs=1).logits_temporary == 128_256 * 4
    c = worked(reserve_given=True, reserve_bytes=Fraction(2 * GiB))
    assert c.figure("kv_budget").working == ("79.65 GiB (nvidia-smi memory.total 81,559 MiB) × 0.92 − 14.96 GiB − "
                                             "2 GiB (given) = 56.3157 GiB")
    two = small(model=facts_from_config({**SMALL_MODEL, "num_key_value_heads": 2}), tp=1)
    assert two.figure("kv_bytes_per_token").working == "2 × 32 × 2 (2 KV heads) × 128 × 1 B (fp8) = 16,384 B"


def test_a_budget_below_one_token_is_refused_not_divided_by_zero():
    # 131,071 B: one byte short of one token's KV; the share and the alarm would divide by a pool of 0
    with pytest.raises(CapacityError) as refused:
        worked(kv_cache_memory_bytes=Fraction(131_071))
    assert str(refused.value) == ("the KV budget (131,071 B) holds no token: one token's KV is 131,072 B; give a "
                                  "larger --kv-cache-memory-bytes or --gpu-memory-utilization")
    one = worked(kv_cache_memory_bytes=Fraction(131_072))
    assert (one.pool_tokens, one.engine_pool_tokens, one.request_share) == (1, 0, 8192)
    with pytest.raises(CapacityError) as one_byte:
        worked(kv_cache_memory_bytes=Fraction(1))            # above zero, so not the "nothing is left" refusal
    assert str(one_byte.value).startswith("the KV budget (1 B) holds no token")


def test_the_slot_limit_equal_to_the_concurrency_leaves_the_pool_binding():
    c = small(max_num_seqs=4, kv_cache_memory_bytes=Fraction(128 * MiB))
    assert c.max_concurrency == 4
    assert c.figure("max_concurrency").working.endswith("--max-num-seqs 4: the KV pool binds first at full length")


def test_an_alarm_at_exactly_zero_says_none():
    c = small(headroom_requests=4, kv_cache_memory_bytes=Fraction(128 * MiB))
    assert c.alarm_threshold == 0
    assert c.figure("kv_alarm").shown == "none: the pool holds fewer than that"
    one = small(headroom_requests=3, kv_cache_memory_bytes=Fraction(128 * MiB))
    assert one.figure("kv_alarm").shown == "25.0 %" and one.figure("kv_alarm").value == 0.25


def test_one_kv_head_is_singular_and_tp_1_is_not_shown():
    c = small(tp=1)
    assert c.figure("kv_bytes_per_token").working == "2 × 32 × 1 (1 KV head) × 128 × 1 B (fp8) = 8,192 B"
    many = worked(tp=2)
    assert many.figure("kv_bytes_per_token").working == "2 × 32 × 4 (8 KV heads ÷ TP 2) × 128 × 2 B (bfloat16) = 65,536 B"


def test_a_bandwidth_override_gives_the_floor():
    c = small(gpu=resolve(None, Fraction(24 * GiB), Fraction(10**12)))
    assert c.decode_floor_s == Fraction(7_270_043_648, 10**12)
    assert c.full_pool_step_s == Fraction(7_270_043_648 + 16_389 * 8192, 10**12)
    assert c.figure("decode_floor").shown == "7.27 ms"
    assert c.figure("decode_floor").working == "7.3 GB ÷ 1.00 TB/s (given (--bandwidth)) = 7.270 ms per token"
    assert c.figure("full_pool_step").working == "(7.3 GB + 134.3 MB) ÷ 1.00 TB/s"


@pytest.mark.parametrize("kv_heads, tp, per_gpu", [(8, 1, 8), (8, 2, 4), (8, 8, 1), (8, 16, 1), (1, 4, 1), (6, 3, 2)])
def test_kv_heads_per_gpu(kv_heads, tp, per_gpu):
    assert kv_heads_per_gpu(kv_heads, tp) == per_gpu


@pytest.mark.parametrize("kv_heads, tp, words", [
    (8, 0, "--tp must be at least 1, not 0"),
    (8, 3, "--tp 3 does not divide the model's 8 KV heads (nor do they divide it); use a TP that divides 8 or a "
           "multiple of it"),
    (8, 12, "--tp 12 does not divide the model's 8 KV heads (nor do they divide it); use a TP that divides 8 or a "
            "multiple of it"),
])
def test_kv_heads_per_gpu_refused(kv_heads, tp, words):
    with pytest.raises(CapacityError) as refused:
        kv_heads_per_gpu(kv_heads, tp)
    assert str(refused.value) == words


def test_kv_element_bytes():
    model = facts_from_config(LLAMA3_8B)
    assert [kv_element_bytes(model, d) for d in ("auto", "", None, "fp8", "float32", "half")] == [2, 2, 2, 1, 4, 2]
    with pytest.raises(CapacityError) as refused:
        kv_element_bytes(model, "int4")
    assert str(refused.value) == ("--kv-cache-dtype 'int4' is not one of auto, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, "
                                  "bfloat16, float16, half, float32")


def test_the_small_formulas():
    assert logits_temporary_bytes(193, 152_064) == 117_393_408
    assert alarm_threshold(428_569, 8192, 5) == Fraction(387_609, 428_569)
    assert alarm_threshold(100, 10, 0) == 1


@pytest.mark.parametrize("changes, words", [
    (dict(max_model_len=0), "--max-model-len must be at least 1, not 0"),
    (dict(max_num_seqs=0), "--max-num-seqs must be at least 1, not 0"),
    (dict(memory_utilization=Fraction(0)), "--gpu-memory-utilization must be in (0, 1], not 0"),
    (dict(memory_utilization=Fraction(101, 100)), "--gpu-memory-utilization must be in (0, 1], not 1.01"),
    (dict(memory_utilization=Fraction(1, 10)),
     "nothing is left for the KV cache: the budget comes to -13 GiB (weights and reserve exceed the memory share); "
     "raise --gpu-memory-utilization, use more GPUs (--tp) or give --kv-cache-memory-bytes"),
    (dict(kv_cache_memory_bytes=Fraction(0)),
     "nothing is left for the KV cache: the budget comes to 0 B (weights and reserve exceed the memory share); "
     "raise --gpu-memory-utilization, use more GPUs (--tp) or give --kv-cache-memory-bytes"),
])
def test_refusals(changes, words):
    with pytest.raises(CapacityError) as refused:
        worked(**changes)
    assert str(refused.value) == words


def test_a_model_without_positions_needs_max_model_len():
    model = replace(facts_from_config(LLAMA3_8B), max_position_embeddings=None)
    with pytest.raises(CapacityError) as refused:
        derive(Deployment(model, resolve("H100", None, None)))
    assert str(refused.value) == "the config has no max_position_embeddings; give --max-model-len"
    assert derive(Deployment(model, resolve("H100", None, None), max_model_len=1)).max_model_len == 1
    assert derive(Deployment(model, resolve("H100", None, None), memory_utilization=Fraction(1),
                             max_model_len=2)).kv_budget > 0
