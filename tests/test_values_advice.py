"""Values of servewatch/derive/advice.py (issue 50: the mutation rule finds it): the bucket edges planned around the
worked example's decode floor (4.48 ms) and full-pool step (21.25 ms), around a live server's mean, and with no
floor; each check of derivation against a live server (cache size with and without the server's budget, the ITL
first bucket against the floor on every branch, the slot limit, the memory share) with its words; the flags."""

from __future__ import annotations

from fractions import Fraction

from servewatch.derive.advice import (DENSE_SPAN, QUEUE_ALLOWANCE_S, Advice, Check, LatencyTargets, checks,
                                      plan_edges)
from servewatch.derive.capacity import Deployment, derive
from servewatch.derive.hardware import resolve
from servewatch.derive.model_facts import facts_from_config
from servewatch.derive.observed import Observed
from servewatch.derive.quantities import parse_bytes
from servewatch.engine.summary import HistogramSummary

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}
KV_BUDGET = 56_173_516_554          # the worked example's estimate, to the byte (floor)


def deployment(**changes) -> Deployment:
    settings = dict(model=facts_from_config(LLAMA3_8B), gpu=resolve("H100", None, None), max_model_len=8192,
                    weights_bytes=parse_bytes("14.96GiB"))
    settings.update(changes)
    return Deployment(**settings)


def itl(count=1000.0, mean=0.01, le=0.001, fraction=0.5) -> HistogramSummary:
    return HistogramSummary("itl", count, mean, None, None, le, fraction, fraction >= 0.99)


def mean_only(kind: str, mean: float | None) -> HistogramSummary:
    return HistogramSummary(kind, 10.0, mean, None, None, 0.1, 0.1, False)


OBSERVED = {
    "nothing": dict(),
    "budget_agrees": dict(kv_total_tokens=428_560, kv_cache_memory_bytes=KV_BUDGET, block_size=16),
    "budget_agrees_other_budget": dict(kv_total_tokens=100_000, kv_cache_memory_bytes=100_000 * 131_072 + 5,
                                       block_size=1),
    "budget_disagrees": dict(kv_total_tokens=214_280, kv_cache_memory_bytes=KV_BUDGET, block_size=16),
    "pool_agrees_no_block": dict(kv_total_tokens=428_560),
    "pool_agrees_block_32": dict(kv_total_tokens=428_544, block_size=32),
    "pool_differs": dict(kv_total_tokens=300_000, block_size=16),
    "itl_empty": dict(histograms={"itl": HistogramSummary("itl", 0.0, None, None, None, None, None, False)}),
    "itl_below_floor": dict(histograms={"itl": itl(mean=0.004, le=0.005, fraction=0.995)}),
    "itl_at_95_percent_of_floor": dict(histograms={"itl": itl(mean=0.0045 * 0.95 + 1e-6, le=0.005, fraction=0.99)}),
    "itl_blind": dict(histograms={"itl": itl(mean=0.006, le=0.005, fraction=0.99)}),
    "itl_clears": dict(histograms={"itl": itl(count=2000.0, mean=0.009, le=0.005, fraction=0.25)}),
    "itl_floor_above_edge_empty": dict(histograms={"itl": itl(mean=0.006, le=0.004, fraction=0.01)}),
    "itl_floor_above_edge_full": dict(histograms={"itl": itl(mean=0.006, le=0.004, fraction=0.995)}),
    "slot_same": dict(slot_limit=256, running=3.0),
    "slot_other": dict(slot_limit=64),
    "running_over": dict(running=300.0),
    "running_at": dict(running=256.0),
    "memory_other": dict(memory_utilization=0.9),
    "memory_same": dict(memory_utilization=0.92),
    "memory_other_budget_known": dict(memory_utilization=0.9, kv_cache_memory_bytes=KV_BUDGET, kv_total_tokens=428_560,
                                      block_size=16),
}
NO_BANDWIDTH_OBSERVED = {
    "itl_blind": dict(histograms={"itl": itl(mean=0.006, le=0.005, fraction=0.99)}),
    "itl_clear": dict(histograms={"itl": itl(mean=0.006, le=0.005, fraction=0.98)}),
}


CHECKS = {'nothing': [{'name': 'KV cache size (tokens)',
              'derived': '428,560',
              'observed': 'not reported',
              'agrees': None,
              'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                             'max_total_num_tokens)'},
             {'name': 'ITL first bucket vs decode floor',
              'derived': '4.48 ms',
              'observed': 'no ITL observations',
              'agrees': None,
              'explanation': 'the ITL histogram is empty: drive some load first'},
             {'name': 'slot limit (max running)',
              'derived': '256',
              'observed': 'not exported',
              'agrees': None,
              'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to read "
                             'it'}],
 'budget_agrees': [{'name': 'KV cache size (tokens)',
                    'derived': "428,560 from the server's 56,173,516,554 B budget",
                    'observed': '428,560',
                    'agrees': True,
                    'explanation': '⌊56,173,516,554 B ÷ 131,072 B per token⌋ in whole 16-token blocks = 428,560: the '
                                   'KV bytes per token agree exactly; the estimated budget (52.32 GiB) differs from '
                                   "the server's (52.32 GiB), so rerun with --kv-cache-memory-bytes 56173516554"},
                   {'name': 'ITL first bucket vs decode floor',
                    'derived': '4.48 ms',
                    'observed': 'no ITL observations',
                    'agrees': None,
                    'explanation': 'the ITL histogram is empty: drive some load first'},
                   {'name': 'slot limit (max running)',
                    'derived': '256',
                    'observed': 'not exported',
                    'agrees': None,
                    'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to "
                                   'read it'}],
 'budget_agrees_other_budget': [{'name': 'KV cache size (tokens)',
                                 'derived': "100,000 from the server's 13,107,200,005 B budget",
                                 'observed': '100,000',
                                 'agrees': True,
                                 'explanation': '⌊13,107,200,005 B ÷ 131,072 B per token⌋ = 100,000: the KV bytes '
                                                'per token agree exactly; the estimated budget (52.32 GiB) differs '
                                                "from the server's (12.21 GiB), so rerun with "
                                                '--kv-cache-memory-bytes 13107200005'},
                                {'name': 'ITL first bucket vs decode floor',
                                 'derived': '4.48 ms',
                                 'observed': 'no ITL observations',
                                 'agrees': None,
                                 'explanation': 'the ITL histogram is empty: drive some load first'},
                                {'name': 'slot limit (max running)',
                                 'derived': '256',
                                 'observed': 'not exported',
                                 'agrees': None,
                                 'explanation': "vLLM does not export its slot limit; give --log with the server's "
                                                'startup log to read it'}],
 'budget_disagrees': [{'name': 'KV cache size (tokens)',
                       'derived': "428,560 from the server's 56,173,516,554 B budget",
                       'observed': '214,280',
                       'agrees': False,
                       'explanation': 'the server stores 262,150 B per token, the derivation 131,072 B: a different '
                                      'KV dtype (--kv-cache-dtype), TP, or model'},
                      {'name': 'ITL first bucket vs decode floor',
                       'derived': '4.48 ms',
                       'observed': 'no ITL observations',
                       'agrees': None,
                       'explanation': 'the ITL histogram is empty: drive some load first'},
                      {'name': 'slot limit (max running)',
                       'derived': '256',
                       'observed': 'not exported',
                       'agrees': None,
                       'explanation': "vLLM does not export its slot limit; give --log with the server's startup log "
                                      'to read it'}],
 'pool_agrees_no_block': [{'name': 'KV cache size (tokens)',
                           'derived': '428,560',
                           'observed': '428,560',
                           'agrees': True,
                           'explanation': 'exact'},
                          {'name': 'ITL first bucket vs decode floor',
                           'derived': '4.48 ms',
                           'observed': 'no ITL observations',
                           'agrees': None,
                           'explanation': 'the ITL histogram is empty: drive some load first'},
                          {'name': 'slot limit (max running)',
                           'derived': '256',
                           'observed': 'not exported',
                           'agrees': None,
                           'explanation': "vLLM does not export its slot limit; give --log with the server's startup "
                                          'log to read it'}],
 'pool_agrees_block_32': [{'name': 'KV cache size (tokens)',
                           'derived': '428,544',
                           'observed': '428,544',
                           'agrees': True,
                           'explanation': 'exact'},
                          {'name': 'ITL first bucket vs decode floor',
                           'derived': '4.48 ms',
                           'observed': 'no ITL observations',
                           'agrees': None,
                           'explanation': 'the ITL histogram is empty: drive some load first'},
                          {'name': 'slot limit (max running)',
                           'derived': '256',
                           'observed': 'not exported',
                           'agrees': None,
                           'explanation': "vLLM does not export its slot limit; give --log with the server's startup "
                                          'log to read it'}],
 'pool_differs': [{'name': 'KV cache size (tokens)',
                   'derived': '428,560',
                   'observed': '300,000',
                   'agrees': False,
                   'explanation': "the server's pool is 0.70× the estimate: its budget comes from its own profiling "
                                  'run (activation peak, graphs), not the assumed reserve; the figures above use the '
                                  'estimate, so give --kv-cache-memory-bytes 39321600000 (or --reserve) to match it'},
                  {'name': 'ITL first bucket vs decode floor',
                   'derived': '4.48 ms',
                   'observed': 'no ITL observations',
                   'agrees': None,
                   'explanation': 'the ITL histogram is empty: drive some load first'},
                  {'name': 'slot limit (max running)',
                   'derived': '256',
                   'observed': 'not exported',
                   'agrees': None,
                   'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to "
                                  'read it'}],
 'itl_empty': [{'name': 'KV cache size (tokens)',
                'derived': '428,560',
                'observed': 'not reported',
                'agrees': None,
                'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                               'max_total_num_tokens)'},
               {'name': 'ITL first bucket vs decode floor',
                'derived': '4.48 ms',
                'observed': 'no ITL observations',
                'agrees': None,
                'explanation': 'the ITL histogram is empty: drive some load first'},
               {'name': 'slot limit (max running)',
                'derived': '256',
                'observed': 'not exported',
                'agrees': None,
                'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to "
                               'read it'}],
 'itl_below_floor': [{'name': 'KV cache size (tokens)',
                      'derived': '428,560',
                      'observed': 'not reported',
                      'agrees': None,
                      'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                     'max_total_num_tokens)'},
                     {'name': 'ITL first bucket vs decode floor',
                      'derived': 'floor 4.48 ms; first edge 5 ms',
                      'observed': '99.5% of 1,000 ≤ 5 ms; mean 4 ms',
                      'agrees': False,
                      'explanation': 'the mean ITL is below the derived floor: the bandwidth given is too low, or '
                                     'fewer bytes are streamed per step than derived (quantised weights, speculative '
                                     'decoding)'},
                     {'name': 'slot limit (max running)',
                      'derived': '256',
                      'observed': 'not exported',
                      'agrees': None,
                      'explanation': "vLLM does not export its slot limit; give --log with the server's startup log "
                                     'to read it'}],
 'itl_at_95_percent_of_floor': [{'name': 'KV cache size (tokens)',
                                 'derived': '428,560',
                                 'observed': 'not reported',
                                 'agrees': None,
                                 'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                                'max_total_num_tokens)'},
                                {'name': 'ITL first bucket vs decode floor',
                                 'derived': 'floor 4.48 ms; first edge 5 ms',
                                 'observed': '99.0% of 1,000 ≤ 5 ms; mean 4.28 ms',
                                 'agrees': True,
                                 'explanation': 'as derived: healthy steps (4.48 ms and up) fall under the first '
                                                'edge (5 ms), so the quantile panels are blind; install the proposed '
                                                'edges'},
                                {'name': 'slot limit (max running)',
                                 'derived': '256',
                                 'observed': 'not exported',
                                 'agrees': None,
                                 'explanation': "vLLM does not export its slot limit; give --log with the server's "
                                                'startup log to read it'}],
 'itl_blind': [{'name': 'KV cache size (tokens)',
                'derived': '428,560',
                'observed': 'not reported',
                'agrees': None,
                'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                               'max_total_num_tokens)'},
               {'name': 'ITL first bucket vs decode floor',
                'derived': 'floor 4.48 ms; first edge 5 ms',
                'observed': '99.0% of 1,000 ≤ 5 ms; mean 6 ms',
                'agrees': True,
                'explanation': 'as derived: healthy steps (4.48 ms and up) fall under the first edge (5 ms), so the '
                               'quantile panels are blind; install the proposed edges'},
               {'name': 'slot limit (max running)',
                'derived': '256',
                'observed': 'not exported',
                'agrees': None,
                'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to "
                               'read it'}],
 'itl_clears': [{'name': 'KV cache size (tokens)',
                 'derived': '428,560',
                 'observed': 'not reported',
                 'agrees': None,
                 'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                'max_total_num_tokens)'},
                {'name': 'ITL first bucket vs decode floor',
                 'derived': 'floor 4.48 ms; first edge 5 ms',
                 'observed': '25.0% of 2,000 ≤ 5 ms; mean 9 ms',
                 'agrees': True,
                 'explanation': 'steps run at 2.0× the floor on average (batching, scheduling and framework '
                                'overhead), so 75.0% of them clear the first edge'},
                {'name': 'slot limit (max running)',
                 'derived': '256',
                 'observed': 'not exported',
                 'agrees': None,
                 'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to "
                                'read it'}],
 'itl_floor_above_edge_empty': [{'name': 'KV cache size (tokens)',
                                 'derived': '428,560',
                                 'observed': 'not reported',
                                 'agrees': None,
                                 'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                                'max_total_num_tokens)'},
                                {'name': 'ITL first bucket vs decode floor',
                                 'derived': 'floor 4.48 ms; first edge 4 ms',
                                 'observed': '1.0% of 1,000 ≤ 4 ms; mean 6 ms',
                                 'agrees': True,
                                 'explanation': 'the floor is above the first edge, so bucket one should stay nearly '
                                                'empty'},
                                {'name': 'slot limit (max running)',
                                 'derived': '256',
                                 'observed': 'not exported',
                                 'agrees': None,
                                 'explanation': "vLLM does not export its slot limit; give --log with the server's "
                                                'startup log to read it'}],
 'itl_floor_above_edge_full': [{'name': 'KV cache size (tokens)',
                                'derived': '428,560',
                                'observed': 'not reported',
                                'agrees': None,
                                'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                               'max_total_num_tokens)'},
                               {'name': 'ITL first bucket vs decode floor',
                                'derived': 'floor 4.48 ms; first edge 4 ms',
                                'observed': '99.5% of 1,000 ≤ 4 ms; mean 6 ms',
                                'agrees': False,
                                'explanation': 'the floor is above the first edge, so bucket one should stay nearly '
                                               'empty; it does not: the floor is overstated'},
                               {'name': 'slot limit (max running)',
                                'derived': '256',
                                'observed': 'not exported',
                                'agrees': None,
                                'explanation': "vLLM does not export its slot limit; give --log with the server's "
                                               'startup log to read it'}],
 'slot_same': [{'name': 'KV cache size (tokens)',
                'derived': '428,560',
                'observed': 'not reported',
                'agrees': None,
                'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                               'max_total_num_tokens)'},
               {'name': 'ITL first bucket vs decode floor',
                'derived': '4.48 ms',
                'observed': 'no ITL observations',
                'agrees': None,
                'explanation': 'the ITL histogram is empty: drive some load first'},
               {'name': 'slot limit (max running)',
                'derived': '256',
                'observed': '256',
                'agrees': True,
                'explanation': 'the same'}],
 'slot_other': [{'name': 'KV cache size (tokens)',
                 'derived': '428,560',
                 'observed': 'not reported',
                 'agrees': None,
                 'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                'max_total_num_tokens)'},
                {'name': 'ITL first bucket vs decode floor',
                 'derived': '4.48 ms',
                 'observed': 'no ITL observations',
                 'agrees': None,
                 'explanation': 'the ITL histogram is empty: drive some load first'},
                {'name': 'slot limit (max running)',
                 'derived': '256',
                 'observed': '64',
                 'agrees': False,
                 'explanation': 'the server runs --max-num-seqs 64; rerun advise with it (the logits temporary and '
                                'the binding limit depend on it)'}],
 'running_over': [{'name': 'KV cache size (tokens)',
                   'derived': '428,560',
                   'observed': 'not reported',
                   'agrees': None,
                   'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                  'max_total_num_tokens)'},
                  {'name': 'ITL first bucket vs decode floor',
                   'derived': '4.48 ms',
                   'observed': 'no ITL observations',
                   'agrees': None,
                   'explanation': 'the ITL histogram is empty: drive some load first'},
                  {'name': 'slot limit (max running)',
                   'derived': '256',
                   'observed': '300 running now',
                   'agrees': False,
                   'explanation': "more requests run than the assumed limit: give the server's --max-num-seqs"}],
 'running_at': [{'name': 'KV cache size (tokens)',
                 'derived': '428,560',
                 'observed': 'not reported',
                 'agrees': None,
                 'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                'max_total_num_tokens)'},
                {'name': 'ITL first bucket vs decode floor',
                 'derived': '4.48 ms',
                 'observed': 'no ITL observations',
                 'agrees': None,
                 'explanation': 'the ITL histogram is empty: drive some load first'},
                {'name': 'slot limit (max running)',
                 'derived': '256',
                 'observed': 'not exported; 256 running now',
                 'agrees': None,
                 'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to "
                                'read it'}],
 'memory_other': [{'name': 'KV cache size (tokens)',
                   'derived': '428,560',
                   'observed': 'not reported',
                   'agrees': None,
                   'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                  'max_total_num_tokens)'},
                  {'name': 'ITL first bucket vs decode floor',
                   'derived': '4.48 ms',
                   'observed': 'no ITL observations',
                   'agrees': None,
                   'explanation': 'the ITL histogram is empty: drive some load first'},
                  {'name': 'slot limit (max running)',
                   'derived': '256',
                   'observed': 'not exported',
                   'agrees': None,
                   'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to "
                                  'read it'},
                  {'name': 'memory utilisation',
                   'derived': '0.92',
                   'observed': '0.9',
                   'agrees': False,
                   'explanation': "the server runs another --gpu-memory-utilization; rerun advise with the server's "
                                  'value'}],
 'memory_same': [{'name': 'KV cache size (tokens)',
                  'derived': '428,560',
                  'observed': 'not reported',
                  'agrees': None,
                  'explanation': 'the server exports no cache size (vLLM: cache_config_info; SGLang: '
                                 'max_total_num_tokens)'},
                 {'name': 'ITL first bucket vs decode floor',
                  'derived': '4.48 ms',
                  'observed': 'no ITL observations',
                  'agrees': None,
                  'explanation': 'the ITL histogram is empty: drive some load first'},
                 {'name': 'slot limit (max running)',
                  'derived': '256',
                  'observed': 'not exported',
                  'agrees': None,
                  'explanation': "vLLM does not export its slot limit; give --log with the server's startup log to "
                                 'read it'}],
 'memory_other_budget_known': [{'name': 'KV cache size (tokens)',
                                'derived': "428,560 from the server's 56,173,516,554 B budget",
                                'observed': '428,560',
                                'agrees': True,
                                'explanation': '⌊56,173,516,554 B ÷ 131,072 B per token⌋ in whole 16-token blocks = '
                                               '428,560: the KV bytes per token agree exactly; the estimated budget '
                                               "(52.32 GiB) differs from the server's (52.32 GiB), so rerun with "
                                               '--kv-cache-memory-bytes 56173516554'},
                               {'name': 'ITL first bucket vs decode floor',
                                'derived': '4.48 ms',
                                'observed': 'no ITL observations',
                                'agrees': None,
                                'explanation': 'the ITL histogram is empty: drive some load first'},
                               {'name': 'slot limit (max running)',
                                'derived': '256',
                                'observed': 'not exported',
                                'agrees': None,
                                'explanation': "vLLM does not export its slot limit; give --log with the server's "
                                               'startup log to read it'}]}
NO_BANDWIDTH_ITL = {'itl_blind': {'name': 'ITL first bucket vs decode floor',
               'derived': 'no floor (no bandwidth)',
               'observed': '99.0% of 1,000 ≤ 5 ms; mean 6 ms',
               'agrees': None,
               'explanation': 'blind: quantiles print ≤ the first edge whatever the truth'},
 'itl_clear': {'name': 'ITL first bucket vs decode floor',
               'derived': 'no floor (no bandwidth)',
               'observed': '98.0% of 1,000 ≤ 5 ms; mean 6 ms',
               'agrees': None,
               'explanation': 'the first bucket does not swallow the distribution'}}
PLANS_WITH_SLOS = {'itl': {'kind': 'itl',
         'edges': [0.0025,
                   0.003,
                   0.004,
                   0.005,
                   0.006,
                   0.008,
                   0.01,
                   0.012,
                   0.015,
                   0.02,
                   0.025,
                   0.05,
                   0.1,
                   0.2,
                   0.5,
                   1.0],
         'dense_from_s': 0.0022406723186626865,
         'dense_to_s': 0.026561903172776118,
         'ceiling_s': 1.0,
         'slo_s': 0.05,
         'reason': 'lowest edge below the decode floor (4.48 ms); dense from half the floor to 1.25 × the decode '
                   'step with the whole pool resident (21.25 ms); up to 1 s (preemption and recompute stalls)'},
 'ttft': {'kind': 'ttft',
          'edges': [0.003,
                    0.004,
                    0.006,
                    0.008,
                    0.01,
                    0.015,
                    0.02,
                    0.03,
                    0.04,
                    0.06,
                    0.08,
                    0.1,
                    0.2,
                    0.5,
                    1.0,
                    2.0,
                    5.0,
                    10.0],
          'dense_from_s': 0.0022406723186626865,
          'dense_to_s': 0.08962689274650745,
          'ceiling_s': 10.0,
          'slo_s': 0.5,
          'reason': 'lowest edge below the decode floor (4.48 ms); dense from half a decode step (a first token '
                    'takes at least one) to twenty steps; up to 10 s'},
 'e2e': {'kind': 'e2e',
         'edges': [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 200.0],
         'dense_from_s': 0.044813446373253726,
         'dense_to_s': 0.044813446373253726,
         'ceiling_s': 174.07608863310557,
         'slo_s': 30,
         'reason': 'lowest edge below the decode floor (4.48 ms); from ten decode steps; up to the longer of a '
                   'maximum-length generation at the full-pool step (8,192 × 21.25 ms = 174.08 s) and 60 s of '
                   'queueing'}}
PLANS_OBSERVED = {'itl': {'kind': 'itl',
         'edges': [0.003, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0],
         'dense_from_s': 0.0025,
         'dense_to_s': 0.04,
         'ceiling_s': 2.0,
         'slo_s': 0.5,
         'reason': "lowest edge below the decode floor (4.48 ms); dense within 4× of the server's mean ITL (10 ms); "
                   'up to 1 s (preemption and recompute stalls)'},
 'ttft': {'kind': 'ttft',
          'edges': [0.003,
                    0.004,
                    0.006,
                    0.008,
                    0.01,
                    0.015,
                    0.02,
                    0.03,
                    0.04,
                    0.06,
                    0.08,
                    0.1,
                    0.2,
                    0.5,
                    1.0,
                    2.0,
                    5.0,
                    10.0],
          'dense_from_s': 0.0022406723186626865,
          'dense_to_s': 0.08962689274650745,
          'ceiling_s': 10.0,
          'slo_s': None,
          'reason': 'lowest edge below the decode floor (4.48 ms); dense from half a decode step (a first token '
                    'takes at least one) to twenty steps; up to 10 s'},
 'e2e': {'kind': 'e2e',
         'edges': [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0],
         'dense_from_s': 0.044813446373253726,
         'dense_to_s': 0.044813446373253726,
         'ceiling_s': 174.07608863310557,
         'slo_s': None,
         'reason': 'lowest edge below the decode floor (4.48 ms); from ten decode steps; up to the longer of a '
                   'maximum-length generation at the full-pool step (8,192 × 21.25 ms = 174.08 s) and 60 s of '
                   'queueing'}}
PLANS_NO_FLOOR = {'e2e': {'kind': 'e2e',
         'edges': [0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0],
         'dense_from_s': 0.5,
         'dense_to_s': 8.0,
         'ceiling_s': 400,
         'slo_s': 100,
         'reason': "dense within 4× of the server's mean E2E (2 s); up to 60 s of queueing"}}


def worked():
    return derive(deployment())


def no_bandwidth():
    return derive(deployment(gpu=resolve(None, Fraction(81_559 * 2**20), None)))


def test_the_constants():
    assert (DENSE_SPAN, QUEUE_ALLOWANCE_S) == (4.0, 60.0)
    assert LatencyTargets(ttft=1.0, itl=2.0, e2e=3.0).get("itl") == 2.0
    assert Check("n", "d", "o", True, "e").as_json() == {"name": "n", "derived": "d", "observed": "o", "agrees": True,
                                                         "explanation": "e"}


def test_each_check_against_a_live_server():
    c = worked()
    for name, settings in OBSERVED.items():
        assert [check.as_json() for check in checks(deployment(), c, Observed(**settings))] == CHECKS[name], name


def test_the_itl_check_without_a_floor():
    c = no_bandwidth()
    for name, settings in NO_BANDWIDTH_OBSERVED.items():
        assert checks(deployment(), c, Observed(**settings))[1].as_json() == NO_BANDWIDTH_ITL[name], name


def test_the_server_s_budget_equal_to_the_one_given_agrees_without_a_rerun():
    c = derive(deployment(kv_cache_memory_bytes=Fraction(KV_BUDGET)))
    check = checks(deployment(), c, Observed(kv_total_tokens=428_560, kv_cache_memory_bytes=KV_BUDGET,
                                             block_size=16))[0]
    assert check.agrees is True
    assert check.explanation == ("⌊56,173,516,554 B ÷ 131,072 B per token⌋ in whole 16-token blocks = 428,560: the KV "
                                 "bytes per token agree exactly")


def test_edges_planned_with_slos():
    plans, notes = plan_edges(worked(), LatencyTargets(ttft=0.5, itl=0.05, e2e=30))
    assert {kind: plan.as_json() for kind, plan in plans.items()} == PLANS_WITH_SLOS
    assert notes == []


def test_edges_planned_around_a_live_mean():
    observed = Observed(histograms={"itl": mean_only("itl", 0.01), "ttft": mean_only("ttft", None)})
    plans, notes = plan_edges(worked(), LatencyTargets(itl=0.5), observed)
    assert {kind: plan.as_json() for kind, plan in plans.items()} == PLANS_OBSERVED
    assert notes == []


def test_edges_without_a_floor():
    plans, notes = plan_edges(no_bandwidth(), LatencyTargets(e2e=100), Observed(histograms={"e2e": mean_only("e2e", 2.0)}))
    assert {kind: plan.as_json() for kind, plan in plans.items()} == PLANS_NO_FLOOR
    assert notes == []
    assert plan_edges(no_bandwidth(), LatencyTargets()) == ({}, [
        "no bucket edges: give --bandwidth (or a known --gpu) for the decode floor, or --against a live server for "
        "its observed latencies"])


def test_the_flags_install_the_planned_edges():
    c = worked()
    plans, _ = plan_edges(c, LatencyTargets())
    advice = Advice(c, plans)
    assert advice.checks == [] and advice.notes == []
    assert advice.flags("vllm") == [
        "--custom-histogram-buckets",
        '{"inter_token_latency":[0.0025,0.003,0.004,0.005,0.006,0.008,0.01,0.012,0.015,0.02,0.025,0.05,0.1,0.2,0.5,'
        '1.0],"time_to_first_token":[0.003,0.004,0.006,0.008,0.01,0.015,0.02,0.03,0.04,0.06,0.08,0.1,0.2,0.5,1.0,'
        '2.0,5.0,10.0],"request_latency":[0.005,0.01,0.02,0.05,0.1,0.2,0.5,1.0,2.0,5.0,10.0,20.0,50.0,100.0,200.0]}']
    assert advice.flags("sglang")[:3] == ["--bucket-time-to-first-token", "0.003", "0.004"]


def test_the_cache_check_in_two_token_blocks_and_a_pool_smaller_than_a_block():
    c = derive(deployment(kv_cache_memory_bytes=Fraction(KV_BUDGET)))
    check = checks(deployment(), c, Observed(kv_total_tokens=428_568, kv_cache_memory_bytes=KV_BUDGET,
                                             block_size=2))[0]
    assert check.explanation.startswith("⌊56,173,516,554 B ÷ 131,072 B per token⌋ in whole 2-token blocks = 428,568")
    tiny = derive(deployment(kv_cache_memory_bytes=Fraction(131_072)))         # one token: no whole 16-token block
    check = checks(deployment(), tiny, Observed(kv_total_tokens=16, block_size=16))[0]
    assert (check.derived, check.agrees) == ("0", False)
    assert check.explanation.startswith("the server's pool is inf× the estimate")


def test_the_itl_check_at_its_edges():
    c = worked()
    floor = float(c.decode_floor_s)

    def itl_check(mean, le, fraction):
        return checks(deployment(), c, Observed(histograms={"itl": itl(mean=mean, le=le, fraction=fraction)}))[1]

    at_95 = itl_check(floor * 0.95, 0.005, 0.5)                  # exactly 95 % of the floor: not below it
    assert at_95.agrees is True and at_95.explanation.startswith("steps run at 0.9× the floor")
    at_edge = itl_check(0.006, floor, 0.99)                      # the floor on the first edge: not under it
    assert at_edge.agrees is False
    assert at_edge.explanation == ("the floor is above the first edge, so bucket one should stay nearly empty; it "
                                   "does not: the floor is overstated")
    assert itl_check(0.006, floor, 0.5).agrees is True
    assert itl_check(0.006, 0.004, 0.99).agrees is False         # exactly the blind share: "it does not"
    assert itl_check(0.006, 0.004, 0.99).explanation.endswith("; it does not: the floor is overstated")
    empty = checks(deployment(), no_bandwidth(), Observed())[1]
    assert (empty.derived, empty.observed) == ("no floor", "no ITL observations")


def test_ceilings_from_the_slos_and_the_queueing_allowance():
    plans, _ = plan_edges(worked(), LatencyTargets(ttft=3.0))
    assert plans["ttft"].ceiling == 12.0
    plans, _ = plan_edges(no_bandwidth(), LatencyTargets(), Observed(histograms={"e2e": mean_only("e2e", 2.0)}))
    assert plans["e2e"].ceiling == 60.0
    assert plans["e2e"].reason == "dense within 4× of the server's mean E2E (2 s); up to 60 s of queueing"
