"""Values of servewatch/doctor/postmortem.py (issue 50: the mutation rule finds it): each class of death read from a
log record (runtime OOM with every conclusion of the arithmetic, startup sizing and other startup failures, a
watchdog, an engine death behind a live API, a signal, a forced stop, a clean shutdown, last words, none), the
state at death (an engine's dump preferred), the exit words, the partial findings and the actions with their
rollbacks. A runbook's own text is named here as "RUNBOOK branch field" and read from the registry."""

from __future__ import annotations

import dataclasses

import pytest

from servewatch.detectors.registry import runbook_for
from servewatch.doctor.log_record import Event, LogRecord, StatsPoint, Traceback
from servewatch.doctor.model_config import ModelShape
from servewatch.doctor.postmortem import CLASSES, arithmetic_signal, classify, postmortem

MIB = 2**20
FRAME = "vllm.v1.sample.sampler.apply_penalties"


def oom_traceback(requested=17_825_792.0, process="EngineCore_0", t=12.0, complete=True):
    return Traceback(process, t, "09-10 15:53:37", "torch.OutOfMemoryError", ["vllm.v1.engine.core.step", FRAME], 5,
                     complete, {"requested_bytes": requested} if requested else {})


def stats(t, running, kv, source="stats line", waiting=0):
    return StatsPoint(t, f"clock {t:g}", source, running=running, waiting=waiting, kv_pct=kv)


SCENARIOS = {
    "runtime_oom": lambda: LogRecord(dialect="vllm", ready_t=1.0, stats=[stats(5, 10, 20.0), stats(10, 28, 42.25)],
                                     tracebacks=[oom_traceback()], kv_cache_tokens=10_000),
    "runtime_oom_sglang_set_budget": lambda: LogRecord(
        dialect="sglang", ready_t=1.0, stats=[stats(10, 64, 50.0)], settings={"mem_fraction_static": 0.52},
        tracebacks=[oom_traceback(requested=400 * MIB, process="scheduler_TP0")]),
    "runtime_oom_kv_full": lambda: LogRecord(dialect="vllm", ready_t=1.0, stats=[stats(10, 28, 95.0)],
                                             settings={"gpu_memory_utilization": 0.52}, tracebacks=[oom_traceback()]),
    "runtime_oom_no_vocab": lambda: LogRecord(dialect="vllm", ready_t=1.0, stats=[stats(10, 28, 42.25)],
                                              tracebacks=[oom_traceback()]),
    "runtime_oom_no_stats": lambda: LogRecord(dialect="vllm", ready_t=1.0, tracebacks=[oom_traceback()]),
    "runtime_oom_dump_at_death": lambda: LogRecord(dialect="vllm", ready_t=1.0, stats=[
        stats(10, 20, 30.0), stats(12.5, 28, 42.25, source="engine dump at death"), stats(12.8, 5, 1.0),
        stats(14, 1, 1.0, source="engine dump at death")], tracebacks=[oom_traceback()]),
    "runtime_oom_unknown_engine": lambda: LogRecord(dialect=None, ready_t=1.0, stats=[stats(10, 28, 42.25)],
                                                    tracebacks=[oom_traceback()]),
    "runtime_oom_no_size": lambda: LogRecord(dialect="vllm", ready_t=1.0, stats=[stats(10, 28, 42.25)],
                                             tracebacks=[oom_traceback(requested=None)]),
    "runtime_oom_event_only": lambda: LogRecord(dialect=None, ready_t=1.0,
                                                events=[Event(7.0, "c7", "oom", "EngineCore", {})]),
    "startup_sizing": lambda: LogRecord(dialect="vllm", events=[
        Event(3.0, "c3", "startup_failure", "EngineCore", {"max_model_len": 2048, "reason": "too long"})],
        tracebacks=[Traceback("EngineCore", 4.0, "c4", "ValueError", [], 3, True, {}, "the engine's own words")]),
    "startup_sizing_by_reason": lambda: LogRecord(dialect="sglang", events=[
        Event(3.0, "c3", "startup_failure", None, {"reason": "Not enough memory for the KV pool"})]),
    "startup_sizing_by_oom": lambda: LogRecord(dialect=None, tracebacks=[oom_traceback(t=2.0)]),
    "startup_sizing_by_desired": lambda: LogRecord(dialect="vllm", events=[
        Event(3.0, "c3", "startup_failure", None, {"desired_gib": 3.2})]),
    "startup_sizing_by_memory_word": lambda: LogRecord(dialect="vllm", events=[
        Event(3.0, "c3", "startup_failure", None, {"reason": "Memory pool too small"})]),
    "startup_failure_unsaid": lambda: LogRecord(dialect=None, events=[Event(3.0, "c3", "startup_failure", None, {})]),
    "startup_failure": lambda: LogRecord(dialect="vllm", events=[
        Event(3.0, "c3", "startup_failure", "EngineCore", {"reason": "no such flag"})],
        tracebacks=[Traceback("APIServer", 4.0, "c4", "RuntimeError", [], 2, True)]),
    "startup_failure_traceback_only": lambda: LogRecord(dialect=None, tracebacks=[
        Traceback("EngineCore", 4.0, "c4", "ImportError", ["vllm.x.y"], 2, True)]),
    "watchdog": lambda: LogRecord(dialect="vllm", ready_t=1.0, events=[
        Event(30.0, "c30", "timeout", "APIServer", {"literal": "RPC call to x timed out"}),
        Event(31.0, "c31", "watchdog", "APIServer", {"reason": "later"})]),
    "timeout_only": lambda: LogRecord(dialect="vllm", ready_t=1.0, events=[
        Event(30.0, "c30", "timeout", "APIServer", {"literal": "RPC call to x timed out"}),
        Event(32.0, "c32", "exit_code", "EngineCore", {"exit_code": 1})]),
    "engine_death_api_exit_only": lambda: LogRecord(dialect="vllm", ready_t=1.0, events=[
        Event(None, None, "engine_dead", "APIServer", {"reason": "EngineDeadError"}),
        Event(26.0, "c26", "api_exit", "APIServer", {})]),
    "engine_death_unstamped": lambda: LogRecord(dialect=None, ready_t=1.0, stats=[stats(0.5, 1, 1.0)], events=[
        Event(None, None, "engine_dead", None, {"reason": "EngineDeadError"}),
        Event(2.0, "c2", "exit_code", None, {"exit_code": -6})]),
    "engine_death": lambda: LogRecord(dialect="vllm", ready_t=1.0, stats=[stats(25, 3, 10.0)], events=[
        Event(20.0, "c20", "engine_dead", "APIServer", {"reason": "EngineDeadError"}),
        Event(21.0, "c21", "engine_dead", "APIServer", {"reason": "Worker died", "exit_code": -9}),
        Event(22.0, "c22", "exit_code", "APIServer", {"exit_code": 1}),
        Event(23.0, "c23", "force_kill", "APIServer", {"target": "EngineCore_0"}),
        Event(23.5, "c23", "force_kill", "APIServer", {"target": "EngineCore_0"}),
        Event(23.6, "c23", "force_kill", "APIServer", {"target": "Worker_1"}),
        Event(26.0, "c26", "api_exit", "APIServer", {})]),
    "engine_death_quiet": lambda: LogRecord(dialect="sglang", ready_t=1.0, stats=[stats(20, 3, 10.0)], events=[
        Event(20.0, "c20", "engine_dead", "scheduler", {"reason": "crashed"})]),
    "signal": lambda: LogRecord(dialect="vllm", ready_t=1.0, events=[
        Event(9.0, "c9", "exit_code", "EngineCore", {"exit_code": 1}),
        Event(10.0, "c10", "exit_code", "EngineCore", {"exit_code": -15})]),
    "forced_stop": lambda: LogRecord(dialect="llamacpp", ready_t=1.0, events=[
        Event(40.0, "0.40.000.000", "signal", None, {"signal": "SIGINT"}),
        Event(41.0, "0.41.000.000", "shutdown", None, {}),
        Event(45.0, None, "forced_stop", None, {"exit_code": 1})]),
    "forced_stop_bare": lambda: LogRecord(dialect="llamacpp", ready_t=1.0, events=[
        Event(45.0, "c45", "forced_stop", None, {"exit_code": 1})]),
    "clean_shutdown": lambda: LogRecord(dialect="vllm", ready_t=1.0, events=[
        Event(50.0, "c50", "shutdown", "APIServer", {}), Event(51.0, "c51", "signal", "EngineCore", {"signal": "SIGTERM"}),
        Event(52.0, "c52", "exit_code", "EngineCore", {"exit_code": -15})]),
    "clean_shutdown_no_signal": lambda: LogRecord(dialect="vllm", ready_t=1.0, events=[
        Event(50.0, "c50", "shutdown", "APIServer", {})]),
    "engine_exception": lambda: LogRecord(dialect="vllm", ready_t=1.0, tracebacks=[
        Traceback("APIServer", 5.0, "c5", None, [], 0, False),
        Traceback("APIServer", 6.0, "c6", "KeyError", [], 1, True),
        Traceback("EngineCore_0", 7.0, "c7", "RuntimeError", ["vllm.a.b"], 3, True)]),
    "api_exception": lambda: LogRecord(dialect="vllm", ready_t=1.0, tracebacks=[
        Traceback(None, 6.0, "c6", "KeyError", [], 1, True)]),
    "no_last_words": lambda: LogRecord(dialect="vllm", stats=[stats(10, 5, 30.0)], duration_s=99.5,
                                       last_clock="c99", events=[Event(90.0, "c90", "force_kill", None, {"target": "W"})]),
    "cut_unnamed": lambda: LogRecord(dialect="vllm", ready_t=1.0, tracebacks=[Traceback(None, 5.0, None, None, [], 2)]),
    "still_running": lambda: LogRecord(dialect=None),
    "still_running_with_exit": lambda: LogRecord(dialect=None, events=[Event(3.0, "c3", "api_exit", None, {})]),
}
SHAPE = ModelShape(151_936, 131_072)
NO_SHAPE = {"runtime_oom_no_size", "runtime_oom_no_vocab"}


EXPECTED = {'runtime_oom': {'death': {'classification': 'runtime_oom',
                           'summary': 'the engine ran out of device memory while serving asking for 17.00 MiB in '
                                      'vllm.v1.sample.sampler.apply_penalties',
                           't': 12.0,
                           'clock': '09-10 15:53:37',
                           'process': 'EngineCore_0',
                           'exception': 'torch.OutOfMemoryError',
                           'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                           'engine_message': 'out of memory',
                           'signal': None,
                           'exit': None},
                 'at_death': {'t': 10,
                              'clock': 'clock 10',
                              'source': 'stats line',
                              'running': 28,
                              'waiting': 0,
                              'kv_pct': 42.25,
                              'prompt_tps': None,
                              'gen_tps': None,
                              'preemptions': None,
                              'prefix_hit_pct': None},
                 'requested': 17825792.0,
                 'tests': [{'suspect': 'logits-sized temporary',
                            'formula': '28 running × 151,936 vocabulary × 4 bytes = 17,016,832 B = 16.22 MiB',
                            'bytes': 17016832.0,
                            'verdict': 'matches',
                            'why': '16.22 MiB against 17.00 MiB requested: 0.77 MiB apart (4.54%)',
                            'difference_bytes': 808960.0},
                           {'suspect': 'logits-sized temporary in half precision',
                            'formula': '28 running × 151,936 vocabulary × 2 bytes = 8,508,416 B = 8.11 MiB',
                            'bytes': 8508416.0,
                            'verdict': 'does not match',
                            'why': '8.11 MiB is 0.48× the 17.00 MiB requested',
                            'difference_bytes': 9317376.0},
                           {'suspect': 'KV cache',
                            'formula': 'KV usage at death 42.2 % of 10,000 tokens',
                            'bytes': None,
                            'verdict': 'ruled out',
                            'why': 'the KV cache is allocated once at startup and was 42.2 % used at death (57.8 % '
                                   'free): the failed allocation is outside it; 17.00 MiB would be the KV of 136 '
                                   'tokens',
                            'difference_bytes': None}],
                 'conclusion': 'not the KV cache: a logits-sized temporary',
                 'actions': [('Restart with --gpu-memory-utilization lowered from 0.9 (the default) to 0.85',
                              "leaves more device memory outside the engine's budget for activations such as the "
                              'logits-sized temporaries (measured on a 7B model on one 12 GiB GPU: at 0.85 the same '
                              'overload queued, running 256 and 44 waiting, instead of dying at 0.9)',
                              'RUNBOOK engine_dead rollback'),
                             ('Or cap concurrent sequences below 28 (--max-num-seqs)',
                              'the temporary grows with the running count (594 KiB per sequence for each such '
                              'temporary); the arithmetic ties the failed allocation to it',
                              'Raise the cap again when waiting grows at peak while no death recurs; the cap is a '
                              'flag, reversible at the next restart.')],
                 'partial': []},
 'runtime_oom_sglang_set_budget': {'death': {'classification': 'runtime_oom',
                                             'summary': 'the engine ran out of device memory while serving asking '
                                                        'for 400.00 MiB in vllm.v1.sample.sampler.apply_penalties',
                                             't': 12.0,
                                             'clock': '09-10 15:53:37',
                                             'process': 'scheduler_TP0',
                                             'exception': 'torch.OutOfMemoryError',
                                             'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                                             'engine_message': 'out of memory',
                                             'signal': None,
                                             'exit': None},
                                   'at_death': {'t': 10,
                                                'clock': 'clock 10',
                                                'source': 'stats line',
                                                'running': 64,
                                                'waiting': 0,
                                                'kv_pct': 50.0,
                                                'prompt_tps': None,
                                                'gen_tps': None,
                                                'preemptions': None,
                                                'prefix_hit_pct': None},
                                   'requested': 419430400,
                                   'tests': [{'suspect': 'logits-sized temporary',
                                              'formula': '64 running × 151,936 vocabulary × 4 bytes = 38,895,616 B = '
                                                         '37.09 MiB',
                                              'bytes': 38895616.0,
                                              'verdict': 'does not match',
                                              'why': '37.09 MiB is 0.09× the 400.00 MiB requested',
                                              'difference_bytes': 380534784.0},
                                             {'suspect': 'logits-sized temporary in half precision',
                                              'formula': '64 running × 151,936 vocabulary × 2 bytes = 19,447,808 B = '
                                                         '18.54 MiB',
                                              'bytes': 19447808.0,
                                              'verdict': 'does not match',
                                              'why': '18.54 MiB is 0.05× the 400.00 MiB requested',
                                              'difference_bytes': 399982592.0},
                                             {'suspect': 'KV cache',
                                              'formula': 'KV usage at death 50.0 %',
                                              'bytes': None,
                                              'verdict': 'ruled out',
                                              'why': 'the KV cache is allocated once at startup and was 50.0 % used '
                                                     'at death (50.0 % free): the failed allocation is outside it; '
                                                     '400.00 MiB would be the KV of 3,200 tokens',
                                              'difference_bytes': None}],
                                   'conclusion': 'not the KV cache; no known suspect matches the bytes requested',
                                   'actions': [('Restart with --mem-fraction-static lowered from 0.52 to 0.50',
                                                "leaves more device memory outside the engine's budget for "
                                                'activations such as the logits-sized temporaries (measured on a 7B '
                                                'model on one 12 GiB GPU: at 0.85 the same overload queued, running '
                                                '256 and 44 waiting, instead of dying at 0.9)',
                                                'RUNBOOK engine_dead rollback'),
                                               ('Or cap concurrent sequences below 64 (--max-running-requests)',
                                                'the temporary grows with the running count (594 KiB per sequence '
                                                'for each such temporary)',
                                                'Raise the cap again when waiting grows at peak while no death '
                                                'recurs; the cap is a flag, reversible at the next restart.')],
                                   'partial': []},
 'runtime_oom_kv_full': {'death': {'classification': 'runtime_oom',
                                   'summary': 'the engine ran out of device memory while serving asking for 17.00 '
                                              'MiB in vllm.v1.sample.sampler.apply_penalties',
                                   't': 12.0,
                                   'clock': '09-10 15:53:37',
                                   'process': 'EngineCore_0',
                                   'exception': 'torch.OutOfMemoryError',
                                   'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                                   'engine_message': 'out of memory',
                                   'signal': None,
                                   'exit': None},
                         'at_death': {'t': 10,
                                      'clock': 'clock 10',
                                      'source': 'stats line',
                                      'running': 28,
                                      'waiting': 0,
                                      'kv_pct': 95.0,
                                      'prompt_tps': None,
                                      'gen_tps': None,
                                      'preemptions': None,
                                      'prefix_hit_pct': None},
                         'requested': 17825792.0,
                         'tests': [{'suspect': 'logits-sized temporary',
                                    'formula': '28 running × 151,936 vocabulary × 4 bytes = 17,016,832 B = 16.22 MiB',
                                    'bytes': 17016832.0,
                                    'verdict': 'matches',
                                    'why': '16.22 MiB against 17.00 MiB requested: 0.77 MiB apart (4.54%)',
                                    'difference_bytes': 808960.0},
                                   {'suspect': 'logits-sized temporary in half precision',
                                    'formula': '28 running × 151,936 vocabulary × 2 bytes = 8,508,416 B = 8.11 MiB',
                                    'bytes': 8508416.0,
                                    'verdict': 'does not match',
                                    'why': '8.11 MiB is 0.48× the 17.00 MiB requested',
                                    'difference_bytes': 9317376.0},
                                   {'suspect': 'KV cache',
                                    'formula': 'KV usage at death 95.0 %',
                                    'bytes': None,
                                    'verdict': 'possible',
                                    'why': 'KV was 95.0 % used (≥ 90 %): a full cache preempts requests rather than '
                                           'allocating, but the cache cannot be ruled out; 17.00 MiB would be the KV '
                                           'of 136 tokens',
                                    'difference_bytes': None}],
                         'conclusion': 'a logits-sized temporary (the KV cache was also nearly full)',
                         'actions': [('Restart with --gpu-memory-utilization lowered from 0.52 to 0.50',
                                      "leaves more device memory outside the engine's budget for activations such as "
                                      'the logits-sized temporaries (measured on a 7B model on one 12 GiB GPU: at '
                                      '0.85 the same overload queued, running 256 and 44 waiting, instead of dying '
                                      'at 0.9)',
                                      'RUNBOOK engine_dead rollback'),
                                     ('Or cap concurrent sequences below 28 (--max-num-seqs)',
                                      'the temporary grows with the running count (594 KiB per sequence for each '
                                      'such temporary); the arithmetic ties the failed allocation to it',
                                      'Raise the cap again when waiting grows at peak while no death recurs; the cap '
                                      'is a flag, reversible at the next restart.')],
                         'partial': []},
 'runtime_oom_no_vocab': {'death': {'classification': 'runtime_oom',
                                    'summary': 'the engine ran out of device memory while serving asking for 17.00 '
                                               'MiB in vllm.v1.sample.sampler.apply_penalties',
                                    't': 12.0,
                                    'clock': '09-10 15:53:37',
                                    'process': 'EngineCore_0',
                                    'exception': 'torch.OutOfMemoryError',
                                    'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                                    'engine_message': 'out of memory',
                                    'signal': None,
                                    'exit': None},
                          'at_death': {'t': 10,
                                       'clock': 'clock 10',
                                       'source': 'stats line',
                                       'running': 28,
                                       'waiting': 0,
                                       'kv_pct': 42.25,
                                       'prompt_tps': None,
                                       'gen_tps': None,
                                       'preemptions': None,
                                       'prefix_hit_pct': None},
                          'requested': 17825792.0,
                          'tests': [{'suspect': 'logits-sized temporary',
                                     'formula': 'running × vocabulary × 4 bytes',
                                     'bytes': None,
                                     'verdict': 'cannot test',
                                     'why': 'needs the vocabulary (pass --model-config config.json or --vocab-size '
                                            'N)',
                                     'difference_bytes': None},
                                    {'suspect': 'KV cache',
                                     'formula': 'KV usage at death 42.2 %',
                                     'bytes': None,
                                     'verdict': 'ruled out',
                                     'why': 'the KV cache is allocated once at startup and was 42.2 % used at death '
                                            '(57.8 % free): the failed allocation is outside it',
                                     'difference_bytes': None}],
                          'conclusion': 'not the KV cache (the logits-sized suspect is untested)',
                          'actions': [('Restart with --gpu-memory-utilization lowered from 0.9 (the default) to 0.85',
                                       "leaves more device memory outside the engine's budget for activations such "
                                       'as the logits-sized temporaries (measured on a 7B model on one 12 GiB GPU: '
                                       'at 0.85 the same overload queued, running 256 and 44 waiting, instead of '
                                       'dying at 0.9)',
                                       'RUNBOOK engine_dead rollback'),
                                      ('Or cap concurrent sequences below 28 (--max-num-seqs)',
                                       'the temporary grows with the running count',
                                       'Raise the cap again when waiting grows at peak while no death recurs; the '
                                       'cap is a flag, reversible at the next restart.')],
                          'partial': ['the vocabulary is unknown (no --model-config with vocab_size, no '
                                      '--vocab-size): the logits-sized suspect is untested']},
 'runtime_oom_no_stats': {'death': {'classification': 'runtime_oom',
                                    'summary': 'the engine ran out of device memory while serving asking for 17.00 '
                                               'MiB in vllm.v1.sample.sampler.apply_penalties',
                                    't': 12.0,
                                    'clock': '09-10 15:53:37',
                                    'process': 'EngineCore_0',
                                    'exception': 'torch.OutOfMemoryError',
                                    'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                                    'engine_message': 'out of memory',
                                    'signal': None,
                                    'exit': None},
                          'at_death': None,
                          'requested': 17825792.0,
                          'tests': [{'suspect': 'logits-sized temporary',
                                     'formula': 'running × vocabulary × 4 bytes',
                                     'bytes': None,
                                     'verdict': 'cannot test',
                                     'why': 'needs the running count at death',
                                     'difference_bytes': None},
                                    {'suspect': 'KV cache',
                                     'formula': 'KV usage at death',
                                     'bytes': None,
                                     'verdict': 'cannot test',
                                     'why': 'no KV usage before the death; 17.00 MiB would be the KV of 136 tokens',
                                     'difference_bytes': None}],
                          'conclusion': None,
                          'actions': [('Restart with --gpu-memory-utilization lowered from 0.9 (the default) to 0.85',
                                       "leaves more device memory outside the engine's budget for activations such "
                                       'as the logits-sized temporaries (measured on a 7B model on one 12 GiB GPU: '
                                       'at 0.85 the same overload queued, running 256 and 44 waiting, instead of '
                                       'dying at 0.9)',
                                       'RUNBOOK engine_dead rollback')],
                          'partial': ['no stats line before the death: the running count at death is unknown']},
 'runtime_oom_dump_at_death': {'death': {'classification': 'runtime_oom',
                                         'summary': 'the engine ran out of device memory while serving asking for '
                                                    '17.00 MiB in vllm.v1.sample.sampler.apply_penalties',
                                         't': 12.0,
                                         'clock': '09-10 15:53:37',
                                         'process': 'EngineCore_0',
                                         'exception': 'torch.OutOfMemoryError',
                                         'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                                         'engine_message': 'out of memory',
                                         'signal': None,
                                         'exit': None},
                               'at_death': {'t': 12.5,
                                            'clock': 'clock 12.5',
                                            'source': 'engine dump at death',
                                            'running': 28,
                                            'waiting': 0,
                                            'kv_pct': 42.25,
                                            'prompt_tps': None,
                                            'gen_tps': None,
                                            'preemptions': None,
                                            'prefix_hit_pct': None},
                               'requested': 17825792.0,
                               'tests': [{'suspect': 'logits-sized temporary',
                                          'formula': '28 running × 151,936 vocabulary × 4 bytes = 17,016,832 B = '
                                                     '16.22 MiB',
                                          'bytes': 17016832.0,
                                          'verdict': 'matches',
                                          'why': '16.22 MiB against 17.00 MiB requested: 0.77 MiB apart (4.54%)',
                                          'difference_bytes': 808960.0},
                                         {'suspect': 'logits-sized temporary in half precision',
                                          'formula': '28 running × 151,936 vocabulary × 2 bytes = 8,508,416 B = 8.11 '
                                                     'MiB',
                                          'bytes': 8508416.0,
                                          'verdict': 'does not match',
                                          'why': '8.11 MiB is 0.48× the 17.00 MiB requested',
                                          'difference_bytes': 9317376.0},
                                         {'suspect': 'KV cache',
                                          'formula': 'KV usage at death 42.2 %',
                                          'bytes': None,
                                          'verdict': 'ruled out',
                                          'why': 'the KV cache is allocated once at startup and was 42.2 % used at '
                                                 'death (57.8 % free): the failed allocation is outside it; 17.00 '
                                                 'MiB would be the KV of 136 tokens',
                                          'difference_bytes': None}],
                               'conclusion': 'not the KV cache: a logits-sized temporary',
                               'actions': [('Restart with --gpu-memory-utilization lowered from 0.9 (the default) to '
                                            '0.85',
                                            "leaves more device memory outside the engine's budget for activations "
                                            'such as the logits-sized temporaries (measured on a 7B model on one 12 '
                                            'GiB GPU: at 0.85 the same overload queued, running 256 and 44 waiting, '
                                            'instead of dying at 0.9)',
                                            'RUNBOOK engine_dead rollback'),
                                           ('Or cap concurrent sequences below 28 (--max-num-seqs)',
                                            'the temporary grows with the running count (594 KiB per sequence for '
                                            'each such temporary); the arithmetic ties the failed allocation to it',
                                            'Raise the cap again when waiting grows at peak while no death recurs; '
                                            'the cap is a flag, reversible at the next restart.')],
                               'partial': []},
 'runtime_oom_unknown_engine': {'death': {'classification': 'runtime_oom',
                                          'summary': 'the engine ran out of device memory while serving asking for '
                                                     '17.00 MiB in vllm.v1.sample.sampler.apply_penalties',
                                          't': 12.0,
                                          'clock': '09-10 15:53:37',
                                          'process': 'EngineCore_0',
                                          'exception': 'torch.OutOfMemoryError',
                                          'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                                          'engine_message': 'out of memory',
                                          'signal': None,
                                          'exit': None},
                                'at_death': {'t': 10,
                                             'clock': 'clock 10',
                                             'source': 'stats line',
                                             'running': 28,
                                             'waiting': 0,
                                             'kv_pct': 42.25,
                                             'prompt_tps': None,
                                             'gen_tps': None,
                                             'preemptions': None,
                                             'prefix_hit_pct': None},
                                'requested': 17825792.0,
                                'tests': [{'suspect': 'logits-sized temporary',
                                           'formula': '28 running × 151,936 vocabulary × 4 bytes = 17,016,832 B = '
                                                      '16.22 MiB',
                                           'bytes': 17016832.0,
                                           'verdict': 'matches',
                                           'why': '16.22 MiB against 17.00 MiB requested: 0.77 MiB apart (4.54%)',
                                           'difference_bytes': 808960.0},
                                          {'suspect': 'logits-sized temporary in half precision',
                                           'formula': '28 running × 151,936 vocabulary × 2 bytes = 8,508,416 B = '
                                                      '8.11 MiB',
                                           'bytes': 8508416.0,
                                           'verdict': 'does not match',
                                           'why': '8.11 MiB is 0.48× the 17.00 MiB requested',
                                           'difference_bytes': 9317376.0},
                                          {'suspect': 'KV cache',
                                           'formula': 'KV usage at death 42.2 %',
                                           'bytes': None,
                                           'verdict': 'ruled out',
                                           'why': 'the KV cache is allocated once at startup and was 42.2 % used at '
                                                  'death (57.8 % free): the failed allocation is outside it; 17.00 '
                                                  'MiB would be the KV of 136 tokens',
                                           'difference_bytes': None}],
                                'conclusion': 'not the KV cache: a logits-sized temporary',
                                'actions': [("Restart with the engine's memory-budget flag lowered from its current "
                                             'value to 5 points lower',
                                             "leaves more device memory outside the engine's budget for activations "
                                             'such as the logits-sized temporaries (measured on a 7B model on one 12 '
                                             'GiB GPU: at 0.85 the same overload queued, running 256 and 44 waiting, '
                                             'instead of dying at 0.9)',
                                             'RUNBOOK engine_dead rollback'),
                                            ("Or cap concurrent sequences below 28 (the engine's slot limit)",
                                             'the temporary grows with the running count (594 KiB per sequence for '
                                             'each such temporary); the arithmetic ties the failed allocation to it',
                                             'Raise the cap again when waiting grows at peak while no death recurs; '
                                             'the cap is a flag, reversible at the next restart.')],
                                'partial': []},
 'runtime_oom_no_size': {'death': {'classification': 'runtime_oom',
                                   'summary': 'the engine ran out of device memory while serving in '
                                              'vllm.v1.sample.sampler.apply_penalties',
                                   't': 12.0,
                                   'clock': '09-10 15:53:37',
                                   'process': 'EngineCore_0',
                                   'exception': 'torch.OutOfMemoryError',
                                   'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                                   'engine_message': 'out of memory',
                                   'signal': None,
                                   'exit': None},
                         'at_death': {'t': 10,
                                      'clock': 'clock 10',
                                      'source': 'stats line',
                                      'running': 28,
                                      'waiting': 0,
                                      'kv_pct': 42.25,
                                      'prompt_tps': None,
                                      'gen_tps': None,
                                      'preemptions': None,
                                      'prefix_hit_pct': None},
                         'requested': None,
                         'tests': [],
                         'conclusion': None,
                         'actions': [('Restart with --gpu-memory-utilization lowered from 0.9 (the default) to 0.85',
                                      "leaves more device memory outside the engine's budget for activations such as "
                                      'the logits-sized temporaries (measured on a 7B model on one 12 GiB GPU: at '
                                      '0.85 the same overload queued, running 256 and 44 waiting, instead of dying '
                                      'at 0.9)',
                                      'RUNBOOK engine_dead rollback'),
                                     ('Or cap concurrent sequences below 28 (--max-num-seqs)',
                                      'the temporary grows with the running count',
                                      'Raise the cap again when waiting grows at peak while no death recurs; the cap '
                                      'is a flag, reversible at the next restart.')],
                         'partial': ['the out-of-memory message states no size: the suspects cannot be tested']},
 'runtime_oom_event_only': {'death': {'classification': 'runtime_oom',
                                      'summary': 'the engine ran out of device memory while serving',
                                      't': 7.0,
                                      'clock': 'c7',
                                      'process': None,
                                      'exception': None,
                                      'innermost_engine_frame': None,
                                      'engine_message': 'out of memory',
                                      'signal': None,
                                      'exit': None},
                            'at_death': None,
                            'requested': None,
                            'tests': [],
                            'conclusion': None,
                            'actions': [("Restart with the engine's memory-budget flag lowered from its current "
                                         'value to 5 points lower',
                                         "leaves more device memory outside the engine's budget for activations such "
                                         'as the logits-sized temporaries (measured on a 7B model on one 12 GiB GPU: '
                                         'at 0.85 the same overload queued, running 256 and 44 waiting, instead of '
                                         'dying at 0.9)',
                                         'RUNBOOK engine_dead rollback')],
                            'partial': ['the out-of-memory message states no size: the suspects cannot be tested']},
 'startup_sizing': {'death': {'classification': 'startup_sizing_error',
                              'summary': 'the engine could not size its memory at startup and never served: the '
                                         "engine's own words",
                              't': 3.0,
                              'clock': 'c3',
                              'process': 'EngineCore',
                              'exception': 'ValueError',
                              'innermost_engine_frame': None,
                              'engine_message': "the engine's own words",
                              'signal': None,
                              'exit': None},
                    'at_death': None,
                    'requested': None,
                    'tests': [],
                    'conclusion': None,
                    'actions': [("Follow the engine's own message: raise the memory budget "
                                 '(--gpu-memory-utilization) or lower --max-model-len until one request of the '
                                 'maximum length fits',
                                 "the engine's own words",
                                 'Nothing served yet, so nothing to roll back; keep the failing flags in the deploy '
                                 'record.')],
                    'partial': []},
 'startup_sizing_by_reason': {'death': {'classification': 'startup_sizing_error',
                                        'summary': 'the engine could not size its memory at startup and never '
                                                   'served: Not enough memory for the KV pool',
                                        't': 3.0,
                                        'clock': 'c3',
                                        'process': None,
                                        'exception': None,
                                        'innermost_engine_frame': None,
                                        'engine_message': 'Not enough memory for the KV pool',
                                        'signal': None,
                                        'exit': None},
                              'at_death': None,
                              'requested': None,
                              'tests': [],
                              'conclusion': None,
                              'actions': [("Follow the engine's own message: raise the memory budget "
                                           '(--mem-fraction-static) or lower --context-length until one request of '
                                           'the maximum length fits',
                                           'Not enough memory for the KV pool',
                                           'Nothing served yet, so nothing to roll back; keep the failing flags in '
                                           'the deploy record.')],
                              'partial': []},
 'startup_sizing_by_oom': {'death': {'classification': 'startup_sizing_error',
                                     'summary': 'the engine could not size its memory at startup and never served',
                                     't': 2.0,
                                     'clock': '09-10 15:53:37',
                                     'process': 'EngineCore_0',
                                     'exception': 'torch.OutOfMemoryError',
                                     'innermost_engine_frame': 'vllm.v1.sample.sampler.apply_penalties',
                                     'engine_message': None,
                                     'signal': None,
                                     'exit': None},
                           'at_death': None,
                           'requested': 17825792.0,
                           'tests': [],
                           'conclusion': None,
                           'actions': [("Follow the engine's own message: raise the memory budget (the engine's "
                                        'memory-budget flag) or lower the maximum length until one request of the '
                                        'maximum length fits',
                                        'the engine stopped before it was ready',
                                        'Nothing served yet, so nothing to roll back; keep the failing flags in the '
                                        'deploy record.')],
                           'partial': []},
 'startup_sizing_by_desired': {'death': {'classification': 'startup_sizing_error',
                                         'summary': 'the engine could not size its memory at startup and never '
                                                    'served',
                                         't': 3.0,
                                         'clock': 'c3',
                                         'process': None,
                                         'exception': None,
                                         'innermost_engine_frame': None,
                                         'engine_message': None,
                                         'signal': None,
                                         'exit': None},
                               'at_death': None,
                               'requested': None,
                               'tests': [],
                               'conclusion': None,
                               'actions': [("Follow the engine's own message: raise the memory budget "
                                            '(--gpu-memory-utilization) or lower --max-model-len until one request '
                                            'of the maximum length fits',
                                            'the engine stopped before it was ready',
                                            'Nothing served yet, so nothing to roll back; keep the failing flags in '
                                            'the deploy record.')],
                               'partial': []},
 'startup_sizing_by_memory_word': {'death': {'classification': 'startup_sizing_error',
                                             'summary': 'the engine could not size its memory at startup and never '
                                                        'served: Memory pool too small',
                                             't': 3.0,
                                             'clock': 'c3',
                                             'process': None,
                                             'exception': None,
                                             'innermost_engine_frame': None,
                                             'engine_message': 'Memory pool too small',
                                             'signal': None,
                                             'exit': None},
                                   'at_death': None,
                                   'requested': None,
                                   'tests': [],
                                   'conclusion': None,
                                   'actions': [("Follow the engine's own message: raise the memory budget "
                                                '(--gpu-memory-utilization) or lower --max-model-len until one '
                                                'request of the maximum length fits',
                                                'Memory pool too small',
                                                'Nothing served yet, so nothing to roll back; keep the failing flags '
                                                'in the deploy record.')],
                                   'partial': []},
 'startup_failure_unsaid': {'death': {'classification': 'startup_failure',
                                      'summary': 'the engine failed before it was ready',
                                      't': 3.0,
                                      'clock': 'c3',
                                      'process': None,
                                      'exception': None,
                                      'innermost_engine_frame': None,
                                      'engine_message': None,
                                      'signal': None,
                                      'exit': None},
                            'at_death': None,
                            'requested': None,
                            'tests': [],
                            'conclusion': None,
                            'actions': [("Read the engine's error in its log, and change the flag, build or "
                                         'environment it points to before starting again: a restart with the same '
                                         'flags fails the same way',
                                         'the engine stopped before it was ready, for a reason other than memory '
                                         'sizing',
                                         'Nothing served yet, so nothing to roll back; keep the failing flags in the '
                                         'deploy record.')],
                            'partial': []},
 'startup_failure': {'death': {'classification': 'startup_failure',
                               'summary': 'the engine failed before it was ready',
                               't': 3.0,
                               'clock': 'c3',
                               'process': 'APIServer',
                               'exception': 'RuntimeError',
                               'innermost_engine_frame': None,
                               'engine_message': 'no such flag',
                               'signal': None,
                               'exit': None},
                     'at_death': None,
                     'requested': None,
                     'tests': [],
                     'conclusion': None,
                     'actions': [('Read the engine\'s own message: "no such flag", and change the flag, build or '
                                  'environment it points to before starting again: a restart with the same flags '
                                  'fails the same way',
                                  'the engine stopped before it was ready, for a reason other than memory sizing',
                                  'Nothing served yet, so nothing to roll back; keep the failing flags in the deploy '
                                  'record.')],
                     'partial': []},
 'startup_failure_traceback_only': {'death': {'classification': 'startup_failure',
                                              'summary': 'the engine failed before it was ready',
                                              't': 4.0,
                                              'clock': 'c4',
                                              'process': 'EngineCore',
                                              'exception': 'ImportError',
                                              'innermost_engine_frame': 'vllm.x.y',
                                              'engine_message': None,
                                              'signal': None,
                                              'exit': None},
                                    'at_death': None,
                                    'requested': None,
                                    'tests': [],
                                    'conclusion': None,
                                    'actions': [("Read the engine's error in its log (ImportError), and change the "
                                                 'flag, build or environment it points to before starting again: a '
                                                 'restart with the same flags fails the same way',
                                                 'the engine stopped before it was ready, for a reason other than '
                                                 'memory sizing',
                                                 'Nothing served yet, so nothing to roll back; keep the failing '
                                                 'flags in the deploy record.')],
                                    'partial': []},
 'watchdog': {'death': {'classification': 'watchdog_timeout',
                        'summary': 'a watchdog or timeout ended the engine (later)',
                        't': 31.0,
                        'clock': 'c31',
                        'process': None,
                        'exception': None,
                        'innermost_engine_frame': None,
                        'engine_message': None,
                        'signal': None,
                        'exit': None},
              'at_death': None,
              'requested': None,
              'tests': [],
              'conclusion': None,
              'actions': [('RUNBOOK alive_health_ok_no_progress safe_action',
                           'RUNBOOK alive_health_ok_no_progress meaning',
                           'RUNBOOK alive_health_ok_no_progress rollback')],
              'partial': []},
 'timeout_only': {'death': {'classification': 'watchdog_timeout',
                            'summary': 'a watchdog or timeout ended the engine (RPC call to x timed out)',
                            't': 30.0,
                            'clock': 'c30',
                            'process': None,
                            'exception': None,
                            'innermost_engine_frame': None,
                            'engine_message': None,
                            'signal': None,
                            'exit': 'a process exited with code 1'},
                  'at_death': None,
                  'requested': None,
                  'tests': [],
                  'conclusion': None,
                  'actions': [('RUNBOOK alive_health_ok_no_progress safe_action',
                               'RUNBOOK alive_health_ok_no_progress meaning',
                               'RUNBOOK alive_health_ok_no_progress rollback')],
                  'partial': []},
 'engine_death_api_exit_only': {'death': {'classification': 'engine_death_behind_live_api',
                                          'summary': 'the engine died while the API server lived on '
                                                     '(EngineDeadError); the API server exits 0 after an engine '
                                                     'death (vLLM #48966), which Restart=on-failure does not restart',
                                          't': None,
                                          'clock': None,
                                          'process': 'APIServer',
                                          'exception': None,
                                          'innermost_engine_frame': None,
                                          'engine_message': None,
                                          'signal': None,
                                          'exit': 'the API server finished its process (the exit code is not in the '
                                                  'log)'},
                                'at_death': None,
                                'requested': None,
                                'tests': [],
                                'conclusion': None,
                                'actions': [('RUNBOOK engine_dead safe_action',
                                             'RUNBOOK engine_dead meaning',
                                             'RUNBOOK engine_dead rollback'),
                                            ('RUNBOOK process_exit safe_action',
                                             'the API server exits 0 after an engine death (vLLM #48966), which '
                                             'Restart=on-failure does not restart',
                                             'RUNBOOK process_exit rollback')],
                                'partial': []},
 'engine_death_unstamped': {'death': {'classification': 'engine_death_behind_live_api',
                                      'summary': 'the engine died while the API server lived on (EngineDeadError); a '
                                                 'child was killed by SIGABRT',
                                      't': None,
                                      'clock': None,
                                      'process': None,
                                      'exception': None,
                                      'innermost_engine_frame': None,
                                      'engine_message': None,
                                      'signal': 'SIGABRT',
                                      'exit': 'a process exited with code -6 (SIGABRT)'},
                            'at_death': {'t': 0.5,
                                         'clock': 'clock 0.5',
                                         'source': 'stats line',
                                         'running': 1,
                                         'waiting': 0,
                                         'kv_pct': 1.0,
                                         'prompt_tps': None,
                                         'gen_tps': None,
                                         'preemptions': None,
                                         'prefix_hit_pct': None},
                            'requested': None,
                            'tests': [],
                            'conclusion': None,
                            'actions': [('RUNBOOK engine_dead safe_action',
                                         'RUNBOOK engine_dead meaning',
                                         'RUNBOOK engine_dead rollback'),
                                        ('RUNBOOK process_exit safe_action',
                                         'the API server exited after the engine died; check its exit status reaches '
                                         'the restart policy',
                                         'RUNBOOK process_exit rollback')],
                            'partial': []},
 'engine_death': {'death': {'classification': 'engine_death_behind_live_api',
                            'summary': 'the engine died while the API server lived on (EngineDeadError; Worker '
                                       'died); a child was killed by SIGKILL; the API server exits 0 after an engine '
                                       'death (vLLM #48966), which Restart=on-failure does not restart',
                            't': 20.0,
                            'clock': 'c20',
                            'process': 'APIServer',
                            'exception': None,
                            'innermost_engine_frame': None,
                            'engine_message': None,
                            'signal': 'SIGKILL',
                            'exit': 'a process exited with code 1; the API server force-killed EngineCore_0, '
                                    'Worker_1; the API server finished its process (the exit code is not in the '
                                    'log)'},
                  'at_death': None,
                  'requested': None,
                  'tests': [],
                  'conclusion': None,
                  'actions': [('RUNBOOK engine_dead safe_action',
                               'RUNBOOK engine_dead meaning',
                               'RUNBOOK engine_dead rollback'),
                              ('RUNBOOK process_exit safe_action',
                               'the API server exits 0 after an engine death (vLLM #48966), which Restart=on-failure '
                               'does not restart',
                               'RUNBOOK process_exit rollback')],
                  'partial': []},
 'engine_death_quiet': {'death': {'classification': 'engine_death_behind_live_api',
                                  'summary': 'the engine died (crashed)',
                                  't': 20.0,
                                  'clock': 'c20',
                                  'process': 'scheduler',
                                  'exception': None,
                                  'innermost_engine_frame': None,
                                  'engine_message': None,
                                  'signal': None,
                                  'exit': None},
                        'at_death': {'t': 20,
                                     'clock': 'clock 20',
                                     'source': 'stats line',
                                     'running': 3,
                                     'waiting': 0,
                                     'kv_pct': 10.0,
                                     'prompt_tps': None,
                                     'gen_tps': None,
                                     'preemptions': None,
                                     'prefix_hit_pct': None},
                        'requested': None,
                        'tests': [],
                        'conclusion': None,
                        'actions': [('RUNBOOK engine_dead safe_action',
                                     'RUNBOOK engine_dead meaning',
                                     'RUNBOOK engine_dead rollback'),
                                    ('RUNBOOK process_exit safe_action',
                                     'the API server exited after the engine died; check its exit status reaches the '
                                     'restart policy',
                                     'RUNBOOK process_exit rollback')],
                        'partial': []},
 'signal': {'death': {'classification': 'signal',
                      'summary': 'a process was killed by SIGTERM without an orderly shutdown',
                      't': None,
                      'clock': None,
                      'process': None,
                      'exception': None,
                      'innermost_engine_frame': None,
                      'engine_message': None,
                      'signal': 'SIGTERM',
                      'exit': 'a process exited with code 1; a process exited with code -15 (SIGTERM)'},
            'at_death': None,
            'requested': None,
            'tests': [],
            'conclusion': None,
            'actions': [('RUNBOOK process_exit safe_action',
                         'RUNBOOK process_exit meaning',
                         'RUNBOOK process_exit rollback')],
            'partial': []},
 'forced_stop': {'death': {'classification': 'forced_stop',
                           'summary': 'a second stop signal forced the exit (its stop began at 0.40.000.000): the '
                                      'server had not exited on the first, and requests still waiting then got no '
                                      'answer; exit status 1, which a supervisor counts as a failure',
                           't': 40.0,
                           'clock': '0.40.000.000',
                           'process': None,
                           'exception': None,
                           'innermost_engine_frame': None,
                           'engine_message': None,
                           'signal': 'SIGINT',
                           'exit': 'the server exited with code 1 on a second stop signal'},
                 'at_death': None,
                 'requested': None,
                 'tests': [],
                 'conclusion': None,
                 'actions': [('No repair on the server: it was stopped on purpose, with no error before the stop; '
                              'check that its supervisor did not restart it for the failure status of the forced '
                              'exit (Restart=on-failure does)',
                              'a second stop signal ended a stop that was waiting on requests still in flight',
                              'Nothing changed on the server: read-only.'),
                             ('Next time, stop sending it requests and let them finish (or their clients hang up) '
                              'before the stop signal: the first one then exits 0',
                              'the server exits by itself on the first signal once no request is waiting',
                              'Nothing to roll back: it is an order of steps, not a setting.')],
                 'partial': []},
 'forced_stop_bare': {'death': {'classification': 'forced_stop',
                                'summary': 'a second stop signal forced the exit: the server had not exited on the '
                                           'first, and requests still waiting then got no answer; exit status 1, '
                                           'which a supervisor counts as a failure',
                                't': 45.0,
                                'clock': 'c45',
                                'process': None,
                                'exception': None,
                                'innermost_engine_frame': None,
                                'engine_message': None,
                                'signal': None,
                                'exit': 'the server exited with code 1 on a second stop signal'},
                      'at_death': None,
                      'requested': None,
                      'tests': [],
                      'conclusion': None,
                      'actions': [('No repair on the server: it was stopped on purpose, with no error before the '
                                   'stop; check that its supervisor did not restart it for the failure status of the '
                                   'forced exit (Restart=on-failure does)',
                                   'a second stop signal ended a stop that was waiting on requests still in flight',
                                   'Nothing changed on the server: read-only.'),
                                  ('Next time, stop sending it requests and let them finish (or their clients hang '
                                   'up) before the stop signal: the first one then exits 0',
                                   'the server exits by itself on the first signal once no request is waiting',
                                   'Nothing to roll back: it is an order of steps, not a setting.')],
                      'partial': []},
 'clean_shutdown': {'death': {'classification': 'clean_shutdown',
                              'summary': 'an orderly shutdown on SIGTERM: no error before it',
                              't': 51.0,
                              'clock': 'c51',
                              'process': None,
                              'exception': None,
                              'innermost_engine_frame': None,
                              'engine_message': None,
                              'signal': 'SIGTERM',
                              'exit': 'a process exited with code -15 (SIGTERM)'},
                    'at_death': None,
                    'requested': None,
                    'tests': [],
                    'conclusion': None,
                    'actions': [('No action on the server: it was stopped on purpose',
                                 'an orderly shutdown with no error before it',
                                 'Nothing to roll back.')],
                    'partial': []},
 'clean_shutdown_no_signal': {'death': {'classification': 'clean_shutdown',
                                        'summary': 'an orderly shutdown: no error before it',
                                        't': 50.0,
                                        'clock': 'c50',
                                        'process': None,
                                        'exception': None,
                                        'innermost_engine_frame': None,
                                        'engine_message': None,
                                        'signal': None,
                                        'exit': None},
                              'at_death': None,
                              'requested': None,
                              'tests': [],
                              'conclusion': None,
                              'actions': [('No action on the server: it was stopped on purpose',
                                           'an orderly shutdown with no error before it',
                                           'Nothing to roll back.')],
                              'partial': []},
 'engine_exception': {'death': {'classification': 'engine_death_behind_live_api',
                                'summary': 'the last words are a RuntimeError in EngineCore_0',
                                't': 7.0,
                                'clock': 'c7',
                                'process': 'EngineCore_0',
                                'exception': 'RuntimeError',
                                'innermost_engine_frame': 'vllm.a.b',
                                'engine_message': None,
                                'signal': None,
                                'exit': None},
                      'at_death': None,
                      'requested': None,
                      'tests': [],
                      'conclusion': None,
                      'actions': [('RUNBOOK engine_dead safe_action',
                                   'RUNBOOK engine_dead meaning',
                                   'RUNBOOK engine_dead rollback'),
                                  ('RUNBOOK process_exit safe_action',
                                   'the API server exits 0 after an engine death (vLLM #48966), which '
                                   'Restart=on-failure does not restart',
                                   'RUNBOOK process_exit rollback')],
                      'partial': ['a traceback of APIServer at c5 is cut off after 0 frame(s): its exception is '
                                  'unknown']},
 'api_exception': {'death': {'classification': 'no_last_words',
                             'summary': 'the last words are a KeyError in an unnamed process',
                             't': 6.0,
                             'clock': 'c6',
                             'process': None,
                             'exception': 'KeyError',
                             'innermost_engine_frame': None,
                             'engine_message': None,
                             'signal': None,
                             'exit': None},
                   'at_death': None,
                   'requested': None,
                   'tests': [],
                   'conclusion': None,
                   'actions': [('Read the kernel log for the OOM killer (dmesg -T | grep -i oom) and the '
                                "supervisor's record of the exit before restarting; persist the server's log outside "
                                'the container',
                                'a death without last words in the log is usually a SIGKILL from outside',
                                'Nothing changed on the server: read-only.')],
                   'partial': []},
 'no_last_words': {'death': {'classification': 'no_last_words',
                             'summary': 'the log ends while the server was serving, without an error, a shutdown or '
                                        "an exit: SIGKILL and the kernel's OOM killer leave no last words (or the "
                                        'log was cut)',
                             't': 99.5,
                             'clock': 'c99',
                             'process': None,
                             'exception': None,
                             'innermost_engine_frame': None,
                             'engine_message': None,
                             'signal': None,
                             'exit': 'the API server force-killed W'},
                   'at_death': {'t': 10,
                                'clock': 'clock 10',
                                'source': 'stats line',
                                'running': 5,
                                'waiting': 0,
                                'kv_pct': 30.0,
                                'prompt_tps': None,
                                'gen_tps': None,
                                'preemptions': None,
                                'prefix_hit_pct': None},
                   'requested': None,
                   'tests': [],
                   'conclusion': None,
                   'actions': [('Read the kernel log for the OOM killer (dmesg -T | grep -i oom) and the '
                                "supervisor's record of the exit before restarting; persist the server's log outside "
                                'the container',
                                'a death without last words in the log is usually a SIGKILL from outside',
                                'Nothing changed on the server: read-only.')],
                   'partial': []},
 'cut_unnamed': {'death': {'classification': 'no_last_words',
                           'summary': 'the log ends while the server was serving, without an error, a shutdown or an '
                                      "exit: SIGKILL and the kernel's OOM killer leave no last words (or the log was "
                                      'cut)',
                           't': None,
                           'clock': None,
                           'process': None,
                           'exception': None,
                           'innermost_engine_frame': None,
                           'engine_message': None,
                           'signal': None,
                           'exit': None},
                 'at_death': None,
                 'requested': None,
                 'tests': [],
                 'conclusion': None,
                 'actions': [("Read the kernel log for the OOM killer (dmesg -T | grep -i oom) and the supervisor's "
                              "record of the exit before restarting; persist the server's log outside the container",
                              'a death without last words in the log is usually a SIGKILL from outside',
                              'Nothing changed on the server: read-only.')],
                 'partial': ['a traceback of an unnamed process at an unknown time is cut off after 2 frame(s): its '
                             'exception is unknown']},
 'still_running': {'death': {'classification': 'still_running',
                             'summary': 'no death and no serving in the log',
                             't': None,
                             'clock': None,
                             'process': None,
                             'exception': None,
                             'innermost_engine_frame': None,
                             'engine_message': None,
                             'signal': None,
                             'exit': None},
                   'at_death': None,
                   'requested': None,
                   'tests': [],
                   'conclusion': None,
                   'actions': [],
                   'partial': []},
 'still_running_with_exit': {'death': {'classification': 'still_running',
                                       'summary': 'no death and no serving in the log',
                                       't': None,
                                       'clock': None,
                                       'process': None,
                                       'exception': None,
                                       'innermost_engine_frame': None,
                                       'engine_message': None,
                                       'signal': None,
                                       'exit': 'the API server finished its process (the exit code is not in the '
                                               'log)'},
                             'at_death': None,
                             'requested': None,
                             'tests': [],
                             'conclusion': None,
                             'actions': [],
                             'partial': []}}

def _resolve(text: str) -> str:
    if text.startswith("RUNBOOK "):
        _, branch, name = text.split(" ")
        return getattr(runbook_for(branch), name)
    return text


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_death_read(name):
    pm = postmortem(SCENARIOS[name](), SHAPE if name not in NO_SHAPE else None)
    expected = EXPECTED[name]
    assert dataclasses.asdict(pm.death) == expected["death"]
    assert (dataclasses.asdict(pm.at_death) if pm.at_death else None) == expected["at_death"]
    assert pm.requested_bytes == expected["requested"]
    assert [t.to_dict() for t in pm.arithmetic] == expected["tests"]
    assert pm.conclusion == expected["conclusion"]
    assert [dataclasses.astuple(a) for a in pm.actions] == [tuple(_resolve(x) for x in a) for a in expected["actions"]]
    assert pm.partial == expected["partial"]
    assert pm.death.label == CLASSES[expected["death"]["classification"]]


def test_the_vocabulary_given_wins_over_the_config_s():
    pm = postmortem(SCENARIOS["runtime_oom"](), SHAPE, vocab_size=100, vocab_source="--vocab-size")
    assert (pm.vocab_size, pm.vocab_source) == (100, "--vocab-size")
    assert pm.arithmetic[0].formula.startswith("28 running × 100 vocabulary")
    assert postmortem(SCENARIOS["runtime_oom"](), SHAPE).vocab_size == 151_936
    assert postmortem(SCENARIOS["runtime_oom"]()).vocab_size is None


def test_the_kv_high_mark_is_the_detectors():
    from servewatch.detectors.config import DetectorConfig

    pm = postmortem(SCENARIOS["runtime_oom"](), SHAPE, config=DetectorConfig(kv_high=0.4))
    assert pm.arithmetic[-1].verdict == "possible"
    assert pm.conclusion == "a logits-sized temporary (the KV cache was also nearly full)"


def test_an_engine_dump_stamped_a_second_after_the_death_is_the_state_at_death():
    record = LogRecord(dialect="vllm", ready_t=1.0, stats=[stats(10, 20, 30.0), stats(13.0, 28, 42.25,
                       source="engine dump at death")], tracebacks=[oom_traceback(t=12.0)])
    assert postmortem(record, SHAPE).at_death.t == 13.0
    later = LogRecord(dialect="vllm", ready_t=1.0, stats=[stats(10, 20, 30.0), stats(13.01, 28, 42.25,
                      source="engine dump at death")], tracebacks=[oom_traceback(t=12.0)])
    assert postmortem(later, SHAPE).at_death.t == 10


def test_a_signal_number_from_a_negative_exit_code():
    assert [arithmetic_signal(c) for c in (-9, -15, -2, -6, -11, -3, 9, 0, -99)] == [
        "SIGKILL", "SIGTERM", "SIGINT", "SIGABRT", "SIGSEGV", "SIGQUIT", None, None, None]


def test_the_classes_in_words():
    assert CLASSES["runtime_oom"] == "runtime out of memory"
    assert CLASSES["engine_death_behind_live_api"] == "engine death behind a live API"
    assert classify(LogRecord()).label == "no death in the log"
