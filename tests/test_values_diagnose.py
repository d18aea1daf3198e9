"""Values of servewatch/doctor/diagnose.py (issue 50: the mutation rule finds it): each explanation the doctor
ranks for a complaint, read from the quantities of a window (supported, ruled out, not measured; its figures, the
score that orders it, the words), the "looks healthy" line, a load run's signature as readings, and the doctor's own
ranges. A runbook's own text is named here as "RUNBOOK branch field" and read from the registry."""

from __future__ import annotations

import pytest

from servewatch.detectors.registry import runbook_for
from servewatch.detectors.verdict import Verdict
from servewatch.doctor.diagnose import (CANDIDATES, CONNECT_GRACE_S, CONNECT_RETRY_S, CONTENTION_ITL_S,
                                        LONG_OUTPUT_TOKENS, LONG_PROMPT_TOKENS, SYMPTOMS, Readings, _fmt, diagnose,
                                        looks_healthy, readings_from_load)


def verdict(name, why, **details):
    return Verdict(name=name, t=30.0, onset=10.0, why=why, details=details)


SCENARIOS = {
    "nothing": lambda: Readings(),
    "healthy": lambda: Readings(seconds=60.0, scrapes=12, max_running=4, max_waiting=0, max_kv=0.3, slot_limit=256,
                                tokens_moved=True, health_last=200, health_answers=12, tokens_in=44, tokens_out=128,
                                queue_s=0.002, ttft_s=0.08, itl_s=0.012, e2e_s=1.6, preemptions=0,
                                sources=["recorded samples"]),
    "idle_lifetime": lambda: Readings(seconds=30.0, scrapes=1, max_running=0, max_waiting=0, max_kv=0.0,
                                      health_last=200, health_answers=3, ttft_s=1.5, lifetime_means=True,
                                      sources=["recorded samples"]),
    "overload_slots": lambda: Readings(seconds=60.0, scrapes=12, max_running=256, max_waiting=44, max_kv=0.5,
                                       slot_limit=256, tokens_moved=True, queue_s=3.5, ttft_s=3.6, itl_s=0.03,
                                       slot_limit_flag="--max-num-seqs"),
    "overload_no_limit": lambda: Readings(max_running=8, max_waiting=0, max_kv=0.2, queue_s=0.5,
                                          slot_limit_flag="--max-running-requests"),
    "kv_pressure": lambda: Readings(max_running=30, max_waiting=5, max_kv=0.97, preemptions=12, tokens_moved=True),
    "kv_high_alone": lambda: Readings(max_running=30, max_waiting=0, max_kv=0.95, preemptions=0),
    "stall": lambda: Readings(seconds=45.0, scrapes=9, max_running=3, tokens_moved=False, health_last=200,
                              health_answers=9),
    "stall_short": lambda: Readings(seconds=5.0, scrapes=2, max_running=3, tokens_moved=False, health_last=200),
    "stall_idle": lambda: Readings(seconds=45.0, scrapes=9, max_running=0, tokens_moved=False),
    "long_output": lambda: Readings(tokens_out=1024, tokens_in=44, queue_s=0.01, ttft_s=0.05, length_share=0.9),
    "long_output_queued": lambda: Readings(tokens_out=600, queue_s=0.2),
    "long_prompt": lambda: Readings(tokens_in=2905, ttft_s=0.9),
    "contention": lambda: Readings(itl_s=0.05, max_running=200, slot_limit_flag="--max-num-seqs"),
    "engine_dead_status": lambda: Readings(health_last=503, health_dead_status=503, engine_dead_lines=2,
                                           health_answers=4),
    "engine_dead_lines_only": lambda: Readings(engine_dead_lines=1),
    "refused": lambda: Readings(health_failures={"connect": 7}, metrics_failures={"connect": 7, "http_500": 1}),
    "http_errors": lambda: Readings(scrapes=3, health_last=500, health_answers=5, health_failures={"http_500": 5}),
    "process_gone": lambda: Readings(health_last=200, health_answers=3, health_failures={"connect": 4},
                                     engine="llama.cpp", engine_in_api_process=True),
    "process_stopped": lambda: Readings(health_last=200, health_answers=3, health_failures={"connect": 4},
                                        engine="llama.cpp", engine_in_api_process=True, shutdown_lines=2),
    "loop_hung_known": lambda: Readings(health_last=200, health_answers=6, metrics_failures={"timeout": 5},
                                        engine="llama.cpp", metrics_wait_on_engine=True, slots_path="/slots"),
    "loop_hung_unknown": lambda: Readings(health_last=200, health_answers=6, metrics_failures={"timeout": 5}),
    "confirmed": lambda: Readings(max_running=8, max_waiting=3, max_kv=0.5, tokens_moved=True, health_last=503,
                                  verdicts=[verdict("engine_dead", "/health 503 ×3"),
                                            verdict("alive_health_ok_no_progress", "no token for 30 s"),
                                            verdict("overload", "3 waiting", cause="kv"),
                                            verdict("preemption", "12 preempted")]),
    "kv_confirmed": lambda: Readings(max_kv=0.5, verdicts=[verdict("kv_pressure", "KV 99 %")]),
    "edges": lambda: Readings(tokens_out=512, queue_s=0.0999, tokens_in=1000, itl_s=0.049, max_running=0,
                              max_waiting=3, health_last=300, preemptions=4, max_kv=0.9,
                              health_failures={"connect": 2, "http_503": 5}),
    "edges_below": lambda: Readings(tokens_out=600, queue_s=0.1, tokens_in=999, max_running=0, max_waiting=0,
                                    health_last=299, preemptions=3, max_kv=0.8999),
    "never_answered": lambda: Readings(health_failures={"connect": 2, "http_503": 5}),
    "kv_edge": lambda: Readings(max_kv=0.9, max_waiting=0, preemptions=1),
    "stall_at_floor": lambda: Readings(seconds=2.0, max_running=1, tokens_moved=False, health_last=None),
    "overload_at_limit_kv_high": lambda: Readings(max_running=256, slot_limit=256, max_waiting=4, max_kv=0.95,
                                                  tokens_moved=True),
    "loop_not_waiting": lambda: Readings(health_last=200, health_answers=6, metrics_failures={"timeout": 5},
                                         metrics_wait_on_engine=False),
}
SYMPTOM_OF = {"overload_slots": "hangs-under-load", "long_output": "long-answers", "contention": "slow-text",
              "long_prompt": "slow-first-token", "refused": "errors", "kv_pressure": "slow-text",
              "stall": "hangs-under-load", "healthy": "e2e-up", "overload_no_limit": "slow-first-token",
              "kv_high_alone": "hangs-under-load", "stall_short": "errors", "stall_idle": "slow-text",
              "long_output_queued": "e2e-up", "engine_dead_status": "errors", "http_errors": "errors",
              "process_gone": "errors", "process_stopped": "errors", "loop_hung_known": "slow-text",
              "loop_hung_unknown": "long-answers", "loop_not_waiting": "long-answers", "kv_edge": "slow-text",
              "stall_at_floor": "errors", "overload_at_limit_kv_high": "hangs-under-load", "kv_confirmed": "slow-text",
              "never_answered": "errors"}


EXPECTED = {'nothing': {'hypotheses': [{'name': 'not_answering',
                             'title': 'the server does not answer (or answers with errors)',
                             'verdict': 'not measured',
                             'quantity': 'failed /health probes and /metrics scrapes by kind',
                             'value': 'none',
                             'expected': 'every /health and /metrics answered 2xx',
                             'why': 'no probe was made',
                             'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                           "log's last lines, and the router or firewall in between",
                             'safe_action': 'Take the replica out of routing until /health answers 200 again; keep '
                                            'its log.',
                             'rollback': 'Return it to routing once /health and /metrics answer for a full window.',
                             'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                 'in-flight requests and the KV / prefix cache.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'engine_dead',
                             'title': 'the engine died',
                             'verdict': 'not measured',
                             'quantity': '/health status and engine-death log lines',
                             'value': '/health not probed, 0 death line(s)',
                             'expected': '/health 200, no engine-death line in its log',
                             'why': '/health not probed and the log has no engine-death line',
                             'next_check': 'RUNBOOK engine_dead check_next',
                             'safe_action': 'RUNBOOK engine_dead safe_action',
                             'rollback': 'RUNBOOK engine_dead rollback',
                             'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'stall',
                             'title': 'alive but not progressing (a stalled engine or worker)',
                             'verdict': 'not measured',
                             'quantity': 'generation tokens across the window, running',
                             'value': 'token movement not measured (one scrape), running not measured',
                             'expected': 'tokens advance at every scrape while running > 0',
                             'why': 'no admitted work',
                             'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                             'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                             'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                             'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'kv_pressure',
                             'title': 'KV cache pressure (preemptions)',
                             'verdict': 'not measured',
                             'quantity': 'KV usage, preemption delta, waiting',
                             'value': 'KV not measured, preemptions not measured',
                             'expected': 'KV below 90%, no preemption in the window',
                             'why': 'KV usage not measured',
                             'next_check': 'RUNBOOK kv_pressure check_next',
                             'safe_action': 'RUNBOOK kv_pressure safe_action',
                             'rollback': 'RUNBOOK kv_pressure rollback',
                             'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'overload',
                             'title': 'overload: demand above capacity',
                             'verdict': 'not measured',
                             'quantity': 'waiting, queue wait, running against the slot limit, KV',
                             'value': 'waiting not measured, queue wait not measured, running not measured (its slot '
                                      'limit is not in /metrics), KV not measured',
                             'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a queue)',
                             'why': 'no queue: waiting not measured, queue wait not measured',
                             'next_check': 'RUNBOOK overload check_next',
                             'safe_action': 'RUNBOOK overload safe_action',
                             'rollback': 'RUNBOOK overload rollback',
                             'restart_destroys': 'RUNBOOK overload restart_destroys',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'long_output',
                             'title': 'long answers (a long-output workload)',
                             'verdict': 'not measured',
                             'quantity': 'output tokens per request, stop reason',
                             'value': 'output tokens per request not measured (no request finished in the window)',
                             'expected': 'below 512 tokens for chat-sized answers',
                             'why': 'output tokens per request not measured (no request finished in the window)',
                             'next_check': 'the stop reason (finished_reason=length means cut at max_tokens), '
                                           'max_tokens and the prompt or model version that changed',
                             'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for long '
                                            'answers; do not add GPUs for a workload change.',
                             'rollback': 'Restore the previous max_tokens cap.',
                             'restart_destroys': 'Nothing that helps: a restart does not shorten answers; it loses '
                                                 'in-flight requests and the prefix cache.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'long_prompt',
                             'title': 'long prompts',
                             'verdict': 'not measured',
                             'quantity': 'input tokens per request, prefix-cache hits',
                             'value': 'input tokens per request not measured (no request finished in the window)',
                             'expected': 'below 1000 tokens',
                             'why': 'input tokens per request not measured (no request finished in the window)',
                             'next_check': 'prefix-cache hit rate and the prompt template version: different long '
                                           'prompts cost far more prefill than a repeated one',
                             'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix cache serves '
                                            'it.',
                             'rollback': 'Restore the previous prompt template.',
                             'restart_destroys': 'The prefix cache: a restart makes every long prompt pay full '
                                                 'prefill again.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'contention',
                             'title': 'contention in generation (a batch too large)',
                             'verdict': 'not measured',
                             'quantity': 'time between tokens against the running count',
                             'value': 'ITL not measured, running not measured',
                             'expected': 'below 50 ms between tokens',
                             'why': 'time between tokens not measured',
                             'next_check': 'ITL over time against running: if they rise together the batch is the '
                                           'cause',
                             'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add replicas.',
                             'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                             'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'idle',
                             'title': 'nothing wrong on the server: idle',
                             'verdict': 'not measured',
                             'quantity': 'running, waiting, health',
                             'value': 'running not measured, waiting not measured',
                             'expected': 'running > 0 whenever users are served',
                             'why': 'requests ran or waited',
                             'next_check': "whether the complaint's requests reach this server at all (router, DNS, "
                                           'client timeouts)',
                             'safe_action': 'No action on the server.',
                             'rollback': 'Nothing to roll back.',
                             'restart_destroys': 'Nothing to gain: an idle server has nothing to fix.',
                             'score': 0,
                             'confirmed_by': None}],
             'healthy': None},
 'healthy': {'hypotheses': [{'name': 'not_answering',
                             'title': 'the server does not answer (or answers with errors)',
                             'verdict': 'ruled out',
                             'quantity': 'failed /health probes and /metrics scrapes by kind',
                             'value': 'none',
                             'expected': 'every /health and /metrics answered 2xx',
                             'why': 'every probe got an answer',
                             'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                           "log's last lines, and the router or firewall in between",
                             'safe_action': 'Take the replica out of routing until /health answers 200 again; keep '
                                            'its log.',
                             'rollback': 'Return it to routing once /health and /metrics answer for a full window.',
                             'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                 'in-flight requests and the KV / prefix cache.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'long_output',
                             'title': 'long answers (a long-output workload)',
                             'verdict': 'ruled out',
                             'quantity': 'output tokens per request, stop reason',
                             'value': '128 output tokens per request',
                             'expected': 'below 512 tokens for chat-sized answers',
                             'why': '128 output tokens per request',
                             'next_check': 'the stop reason (finished_reason=length means cut at max_tokens), '
                                           'max_tokens and the prompt or model version that changed',
                             'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for long '
                                            'answers; do not add GPUs for a workload change.',
                             'rollback': 'Restore the previous max_tokens cap.',
                             'restart_destroys': 'Nothing that helps: a restart does not shorten answers; it loses '
                                                 'in-flight requests and the prefix cache.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'contention',
                             'title': 'contention in generation (a batch too large)',
                             'verdict': 'ruled out',
                             'quantity': 'time between tokens against the running count',
                             'value': 'ITL 12.0 ms, running 4',
                             'expected': 'below 50 ms between tokens',
                             'why': '12.0 ms between tokens',
                             'next_check': 'ITL over time against running: if they rise together the batch is the '
                                           'cause',
                             'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add replicas.',
                             'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                             'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'long_prompt',
                             'title': 'long prompts',
                             'verdict': 'ruled out',
                             'quantity': 'input tokens per request, prefix-cache hits',
                             'value': '44 input tokens per request',
                             'expected': 'below 1000 tokens',
                             'why': '44 input tokens per request',
                             'next_check': 'prefix-cache hit rate and the prompt template version: different long '
                                           'prompts cost far more prefill than a repeated one',
                             'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix cache serves '
                                            'it.',
                             'rollback': 'Restore the previous prompt template.',
                             'restart_destroys': 'The prefix cache: a restart makes every long prompt pay full '
                                                 'prefill again.',
                             'score': 0,
                             'confirmed_by': None}],
             'healthy': 'Looks healthy: nothing measured supports a problem (from the recorded samples)\n'
                        '   figures: TTFT 80.0 ms, time between tokens 12.0 ms, E2E 1.60 s, queue wait 2.0 ms '
                        '(means); running at most 4 of 256 slots, waiting at most 0, KV at most 30%; tokens moved; '
                        '/health answered 200\n'
                        '   ruled out: 4 explanations (below)'},
 'idle_lifetime': {'hypotheses': [{'name': 'idle',
                                   'title': 'nothing wrong on the server: idle',
                                   'verdict': 'supported',
                                   'quantity': 'running, waiting, health',
                                   'value': 'running 0, waiting 0',
                                   'expected': 'running > 0 whenever users are served',
                                   'why': 'no request ran or waited in the window',
                                   'next_check': "whether the complaint's requests reach this server at all (router, "
                                                 'DNS, client timeouts)',
                                   'safe_action': 'No action on the server.',
                                   'rollback': 'Nothing to roll back.',
                                   'restart_destroys': 'Nothing to gain: an idle server has nothing to fix.',
                                   'score': 10,
                                   'confirmed_by': None},
                                  {'name': 'not_answering',
                                   'title': 'the server does not answer (or answers with errors)',
                                   'verdict': 'ruled out',
                                   'quantity': 'failed /health probes and /metrics scrapes by kind',
                                   'value': 'none',
                                   'expected': 'every /health and /metrics answered 2xx',
                                   'why': 'every probe got an answer',
                                   'next_check': 'whether the process is up and listening on that port (ss -ltnp), '
                                                 "its log's last lines, and the router or firewall in between",
                                   'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                  'keep its log.',
                                   'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                               'window.',
                                   'restart_destroys': 'Nothing the server still holds if it is not running; if it '
                                                       'is, in-flight requests and the KV / prefix cache.',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'engine_dead',
                                   'title': 'the engine died',
                                   'verdict': 'ruled out',
                                   'quantity': '/health status and engine-death log lines',
                                   'value': '/health answered 200, 0 death line(s)',
                                   'expected': '/health 200, no engine-death line in its log',
                                   'why': '/health answered 200 and the log has no engine-death line',
                                   'next_check': 'RUNBOOK engine_dead check_next',
                                   'safe_action': 'RUNBOOK engine_dead safe_action',
                                   'rollback': 'RUNBOOK engine_dead rollback',
                                   'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'kv_pressure',
                                   'title': 'KV cache pressure (preemptions)',
                                   'verdict': 'ruled out',
                                   'quantity': 'KV usage, preemption delta, waiting',
                                   'value': 'KV 0%, preemptions not measured',
                                   'expected': 'KV below 90%, no preemption in the window',
                                   'why': 'KV peaked at 0% (< 90%)',
                                   'next_check': 'RUNBOOK kv_pressure check_next',
                                   'safe_action': 'RUNBOOK kv_pressure safe_action',
                                   'rollback': 'RUNBOOK kv_pressure rollback',
                                   'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'overload',
                                   'title': 'overload: demand above capacity',
                                   'verdict': 'ruled out',
                                   'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                   'value': 'waiting 0, queue wait not measured, running 0 (its slot limit is not in '
                                            '/metrics), KV 0%',
                                   'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                               'queue)',
                                   'why': 'no queue: waiting 0, queue wait not measured',
                                   'next_check': 'RUNBOOK overload check_next',
                                   'safe_action': 'RUNBOOK overload safe_action',
                                   'rollback': 'RUNBOOK overload rollback',
                                   'restart_destroys': 'RUNBOOK overload restart_destroys',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'stall',
                                   'title': 'alive but not progressing (a stalled engine or worker)',
                                   'verdict': 'not measured',
                                   'quantity': 'generation tokens across the window, running',
                                   'value': 'token movement not measured (one scrape), running 0',
                                   'expected': 'tokens advance at every scrape while running > 0',
                                   'why': 'no admitted work',
                                   'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                   'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                   'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                   'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'long_output',
                                   'title': 'long answers (a long-output workload)',
                                   'verdict': 'not measured',
                                   'quantity': 'output tokens per request, stop reason',
                                   'value': 'output tokens per request not measured (no request finished in the '
                                            'window)',
                                   'expected': 'below 512 tokens for chat-sized answers',
                                   'why': 'output tokens per request not measured (no request finished in the '
                                          'window)',
                                   'next_check': 'the stop reason (finished_reason=length means cut at max_tokens), '
                                                 'max_tokens and the prompt or model version that changed',
                                   'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for '
                                                  'long answers; do not add GPUs for a workload change.',
                                   'rollback': 'Restore the previous max_tokens cap.',
                                   'restart_destroys': 'Nothing that helps: a restart does not shorten answers; it '
                                                       'loses in-flight requests and the prefix cache.',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'long_prompt',
                                   'title': 'long prompts',
                                   'verdict': 'not measured',
                                   'quantity': 'input tokens per request, prefix-cache hits',
                                   'value': 'input tokens per request not measured (no request finished in the '
                                            'window)',
                                   'expected': 'below 1000 tokens',
                                   'why': 'input tokens per request not measured (no request finished in the window)',
                                   'next_check': 'prefix-cache hit rate and the prompt template version: different '
                                                 'long prompts cost far more prefill than a repeated one',
                                   'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix cache '
                                                  'serves it.',
                                   'rollback': 'Restore the previous prompt template.',
                                   'restart_destroys': 'The prefix cache: a restart makes every long prompt pay full '
                                                       'prefill again.',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'contention',
                                   'title': 'contention in generation (a batch too large)',
                                   'verdict': 'not measured',
                                   'quantity': 'time between tokens against the running count',
                                   'value': 'ITL not measured, running 0',
                                   'expected': 'below 50 ms between tokens',
                                   'why': 'time between tokens not measured',
                                   'next_check': 'ITL over time against running: if they rise together the batch is '
                                                 'the cause',
                                   'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                  'replicas.',
                                   'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                                   'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                   'score': 0,
                                   'confirmed_by': None}],
                   'healthy': 'Looks healthy: nothing measured supports a problem (from the recorded samples)\n'
                              "   figures: TTFT 1.50 s (the server's lifetime means); running at most 0, waiting at "
                              'most 0, KV at most 0%; /health answered 200\n'
                              '   ruled out: 4 explanations (below); not measured here (listed last): alive but not '
                              'progressing (a stalled engine or worker); long answers (a long-output workload); long '
                              'prompts; contention in generation (a batch too large)'},
 'overload_slots': {'hypotheses': [{'name': 'overload',
                                    'title': 'overload: demand above capacity (cause slots)',
                                    'verdict': 'supported',
                                    'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                    'value': 'waiting 44, queue wait 3.50 s, running 256 of the slot limit 256, KV '
                                             '50%',
                                    'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                                'queue)',
                                    'why': '44 waiting while running 256 = slot limit 256 and KV 50%: out of slots, '
                                           'not memory',
                                    'next_check': 'RUNBOOK overload check_next',
                                    'safe_action': 'RUNBOOK overload safe_action',
                                    'rollback': 'RUNBOOK overload rollback',
                                    'restart_destroys': 'RUNBOOK overload restart_destroys',
                                    'score': 70,
                                    'confirmed_by': None},
                                   {'name': 'not_answering',
                                    'title': 'the server does not answer (or answers with errors)',
                                    'verdict': 'ruled out',
                                    'quantity': 'failed /health probes and /metrics scrapes by kind',
                                    'value': 'none',
                                    'expected': 'every /health and /metrics answered 2xx',
                                    'why': 'every probe got an answer',
                                    'next_check': 'whether the process is up and listening on that port (ss -ltnp), '
                                                  "its log's last lines, and the router or firewall in between",
                                    'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                   'keep its log.',
                                    'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                                'window.',
                                    'restart_destroys': 'Nothing the server still holds if it is not running; if it '
                                                        'is, in-flight requests and the KV / prefix cache.',
                                    'score': 0,
                                    'confirmed_by': None},
                                   {'name': 'kv_pressure',
                                    'title': 'KV cache pressure (preemptions)',
                                    'verdict': 'ruled out',
                                    'quantity': 'KV usage, preemption delta, waiting',
                                    'value': 'KV 50%, preemptions not measured',
                                    'expected': 'KV below 90%, no preemption in the window',
                                    'why': 'KV peaked at 50% (< 90%)',
                                    'next_check': 'RUNBOOK kv_pressure check_next',
                                    'safe_action': 'RUNBOOK kv_pressure safe_action',
                                    'rollback': 'RUNBOOK kv_pressure rollback',
                                    'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                    'score': 0,
                                    'confirmed_by': None},
                                   {'name': 'stall',
                                    'title': 'alive but not progressing (a stalled engine or worker)',
                                    'verdict': 'ruled out',
                                    'quantity': 'generation tokens across the window, running',
                                    'value': 'tokens moved, running 256',
                                    'expected': 'tokens advance at every scrape while running > 0',
                                    'why': 'tokens kept moving',
                                    'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                    'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                    'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                    'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                    'score': 0,
                                    'confirmed_by': None},
                                   {'name': 'engine_dead',
                                    'title': 'the engine died',
                                    'verdict': 'not measured',
                                    'quantity': '/health status and engine-death log lines',
                                    'value': '/health not probed, 0 death line(s)',
                                    'expected': '/health 200, no engine-death line in its log',
                                    'why': '/health not probed and the log has no engine-death line',
                                    'next_check': 'RUNBOOK engine_dead check_next',
                                    'safe_action': 'RUNBOOK engine_dead safe_action',
                                    'rollback': 'RUNBOOK engine_dead rollback',
                                    'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                    'score': 0,
                                    'confirmed_by': None}],
                    'healthy': None},
 'overload_no_limit': {'hypotheses': [{'name': 'overload',
                                       'title': 'overload: demand above capacity (cause unknown)',
                                       'verdict': 'supported',
                                       'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                       'value': 'waiting 0, queue wait 500.0 ms, running 8 (its slot limit '
                                                '(--max-running-requests) is not in /metrics), KV 20%',
                                       'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with '
                                                   'a queue)',
                                       'why': '0 waiting, queue wait 500.0 ms',
                                       'next_check': 'RUNBOOK overload check_next',
                                       'safe_action': 'RUNBOOK overload safe_action',
                                       'rollback': 'RUNBOOK overload rollback',
                                       'restart_destroys': 'RUNBOOK overload restart_destroys',
                                       'score': 70,
                                       'confirmed_by': None},
                                      {'name': 'not_answering',
                                       'title': 'the server does not answer (or answers with errors)',
                                       'verdict': 'ruled out',
                                       'quantity': 'failed /health probes and /metrics scrapes by kind',
                                       'value': 'none',
                                       'expected': 'every /health and /metrics answered 2xx',
                                       'why': 'no probe was made',
                                       'next_check': 'whether the process is up and listening on that port (ss '
                                                     "-ltnp), its log's last lines, and the router or firewall in "
                                                     'between',
                                       'safe_action': 'Take the replica out of routing until /health answers 200 '
                                                      'again; keep its log.',
                                       'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                                   'window.',
                                       'restart_destroys': 'Nothing the server still holds if it is not running; if '
                                                           'it is, in-flight requests and the KV / prefix cache.',
                                       'score': 0,
                                       'confirmed_by': None},
                                      {'name': 'long_prompt',
                                       'title': 'long prompts',
                                       'verdict': 'not measured',
                                       'quantity': 'input tokens per request, prefix-cache hits',
                                       'value': 'input tokens per request not measured (no request finished in the '
                                                'window)',
                                       'expected': 'below 1000 tokens',
                                       'why': 'input tokens per request not measured (no request finished in the '
                                              'window)',
                                       'next_check': 'prefix-cache hit rate and the prompt template version: '
                                                     'different long prompts cost far more prefill than a repeated '
                                                     'one',
                                       'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix '
                                                      'cache serves it.',
                                       'rollback': 'Restore the previous prompt template.',
                                       'restart_destroys': 'The prefix cache: a restart makes every long prompt pay '
                                                           'full prefill again.',
                                       'score': 0,
                                       'confirmed_by': None},
                                      {'name': 'stall',
                                       'title': 'alive but not progressing (a stalled engine or worker)',
                                       'verdict': 'not measured',
                                       'quantity': 'generation tokens across the window, running',
                                       'value': 'token movement not measured (one scrape), running 8',
                                       'expected': 'tokens advance at every scrape while running > 0',
                                       'why': 'progress not measured (one scrape)',
                                       'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                       'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                       'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                       'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                       'score': 0,
                                       'confirmed_by': None},
                                      {'name': 'engine_dead',
                                       'title': 'the engine died',
                                       'verdict': 'not measured',
                                       'quantity': '/health status and engine-death log lines',
                                       'value': '/health not probed, 0 death line(s)',
                                       'expected': '/health 200, no engine-death line in its log',
                                       'why': '/health not probed and the log has no engine-death line',
                                       'next_check': 'RUNBOOK engine_dead check_next',
                                       'safe_action': 'RUNBOOK engine_dead safe_action',
                                       'rollback': 'RUNBOOK engine_dead rollback',
                                       'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                       'score': 0,
                                       'confirmed_by': None}],
                       'healthy': None},
 'kv_pressure': {'hypotheses': [{'name': 'kv_pressure',
                                 'title': 'KV cache pressure (preemptions)',
                                 'verdict': 'supported',
                                 'quantity': 'KV usage, preemption delta, waiting',
                                 'value': 'KV 97%, preemptions +12',
                                 'expected': 'KV below 90%, no preemption in the window',
                                 'why': 'KV peaked at 97% with 5 waiting and 12 preemption(s)',
                                 'next_check': 'RUNBOOK kv_pressure check_next',
                                 'safe_action': 'RUNBOOK kv_pressure safe_action',
                                 'rollback': 'RUNBOOK kv_pressure rollback',
                                 'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                 'score': 75,
                                 'confirmed_by': None},
                                {'name': 'not_answering',
                                 'title': 'the server does not answer (or answers with errors)',
                                 'verdict': 'ruled out',
                                 'quantity': 'failed /health probes and /metrics scrapes by kind',
                                 'value': 'none',
                                 'expected': 'every /health and /metrics answered 2xx',
                                 'why': 'no probe was made',
                                 'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                               "log's last lines, and the router or firewall in between",
                                 'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                'keep its log.',
                                 'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                             'window.',
                                 'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                     'in-flight requests and the KV / prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'stall',
                                 'title': 'alive but not progressing (a stalled engine or worker)',
                                 'verdict': 'ruled out',
                                 'quantity': 'generation tokens across the window, running',
                                 'value': 'tokens moved, running 30',
                                 'expected': 'tokens advance at every scrape while running > 0',
                                 'why': 'tokens kept moving',
                                 'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                 'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                 'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                 'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'contention',
                                 'title': 'contention in generation (a batch too large)',
                                 'verdict': 'not measured',
                                 'quantity': 'time between tokens against the running count',
                                 'value': 'ITL not measured, running 30',
                                 'expected': 'below 50 ms between tokens',
                                 'why': 'time between tokens not measured',
                                 'next_check': 'ITL over time against running: if they rise together the batch is '
                                               'the cause',
                                 'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                'replicas.',
                                 'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                                 'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None}],
                 'healthy': None},
 'kv_high_alone': {'hypotheses': [{'name': 'not_answering',
                                   'title': 'the server does not answer (or answers with errors)',
                                   'verdict': 'ruled out',
                                   'quantity': 'failed /health probes and /metrics scrapes by kind',
                                   'value': 'none',
                                   'expected': 'every /health and /metrics answered 2xx',
                                   'why': 'no probe was made',
                                   'next_check': 'whether the process is up and listening on that port (ss -ltnp), '
                                                 "its log's last lines, and the router or firewall in between",
                                   'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                  'keep its log.',
                                   'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                               'window.',
                                   'restart_destroys': 'Nothing the server still holds if it is not running; if it '
                                                       'is, in-flight requests and the KV / prefix cache.',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'overload',
                                   'title': 'overload: demand above capacity',
                                   'verdict': 'ruled out',
                                   'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                   'value': 'waiting 0, queue wait not measured, running 30 (its slot limit is not '
                                            'in /metrics), KV 95%',
                                   'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                               'queue)',
                                   'why': 'no queue: waiting 0, queue wait not measured',
                                   'next_check': 'RUNBOOK overload check_next',
                                   'safe_action': 'RUNBOOK overload safe_action',
                                   'rollback': 'RUNBOOK overload rollback',
                                   'restart_destroys': 'RUNBOOK overload restart_destroys',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'kv_pressure',
                                   'title': 'KV cache pressure (preemptions)',
                                   'verdict': 'ruled out',
                                   'quantity': 'KV usage, preemption delta, waiting',
                                   'value': 'KV 95%, preemptions +0',
                                   'expected': 'KV below 90%, no preemption in the window',
                                   'why': 'KV peaked at 95% (< 90%)',
                                   'next_check': 'RUNBOOK kv_pressure check_next',
                                   'safe_action': 'RUNBOOK kv_pressure safe_action',
                                   'rollback': 'RUNBOOK kv_pressure rollback',
                                   'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'stall',
                                   'title': 'alive but not progressing (a stalled engine or worker)',
                                   'verdict': 'not measured',
                                   'quantity': 'generation tokens across the window, running',
                                   'value': 'token movement not measured (one scrape), running 30',
                                   'expected': 'tokens advance at every scrape while running > 0',
                                   'why': 'progress not measured (one scrape)',
                                   'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                   'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                   'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                   'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                   'score': 0,
                                   'confirmed_by': None},
                                  {'name': 'engine_dead',
                                   'title': 'the engine died',
                                   'verdict': 'not measured',
                                   'quantity': '/health status and engine-death log lines',
                                   'value': '/health not probed, 0 death line(s)',
                                   'expected': '/health 200, no engine-death line in its log',
                                   'why': '/health not probed and the log has no engine-death line',
                                   'next_check': 'RUNBOOK engine_dead check_next',
                                   'safe_action': 'RUNBOOK engine_dead safe_action',
                                   'rollback': 'RUNBOOK engine_dead rollback',
                                   'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                   'score': 0,
                                   'confirmed_by': None}],
                   'healthy': 'Looks healthy: nothing measured supports a problem (from what was recorded)\n'
                              '   figures: running at most 30, waiting at most 0, KV at most 95%\n'
                              '   ruled out: 3 explanations (below); not measured here (listed last): alive but not '
                              'progressing (a stalled engine or worker); the engine died'},
 'stall': {'hypotheses': [{'name': 'stall',
                           'title': 'alive but not progressing (a stalled engine or worker)',
                           'verdict': 'supported',
                           'quantity': 'generation tokens across the window, running',
                           'value': 'tokens did not move, running 3',
                           'expected': 'tokens advance at every scrape while running > 0',
                           'why': '3 running and the generation counter did not move in 45.0 s',
                           'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                           'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                           'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                           'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                           'score': 90,
                           'confirmed_by': None},
                          {'name': 'not_answering',
                           'title': 'the server does not answer (or answers with errors)',
                           'verdict': 'ruled out',
                           'quantity': 'failed /health probes and /metrics scrapes by kind',
                           'value': 'none',
                           'expected': 'every /health and /metrics answered 2xx',
                           'why': 'every probe got an answer',
                           'next_check': "whether the process is up and listening on that port (ss -ltnp), its log's "
                                         'last lines, and the router or firewall in between',
                           'safe_action': 'Take the replica out of routing until /health answers 200 again; keep its '
                                          'log.',
                           'rollback': 'Return it to routing once /health and /metrics answer for a full window.',
                           'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                               'in-flight requests and the KV / prefix cache.',
                           'score': 0,
                           'confirmed_by': None},
                          {'name': 'engine_dead',
                           'title': 'the engine died',
                           'verdict': 'ruled out',
                           'quantity': '/health status and engine-death log lines',
                           'value': '/health answered 200, 0 death line(s)',
                           'expected': '/health 200, no engine-death line in its log',
                           'why': '/health answered 200 and the log has no engine-death line',
                           'next_check': 'RUNBOOK engine_dead check_next',
                           'safe_action': 'RUNBOOK engine_dead safe_action',
                           'rollback': 'RUNBOOK engine_dead rollback',
                           'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                           'score': 0,
                           'confirmed_by': None},
                          {'name': 'overload',
                           'title': 'overload: demand above capacity',
                           'verdict': 'not measured',
                           'quantity': 'waiting, queue wait, running against the slot limit, KV',
                           'value': 'waiting not measured, queue wait not measured, running 3 (its slot limit is not '
                                    'in /metrics), KV not measured',
                           'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a queue)',
                           'why': 'no queue: waiting not measured, queue wait not measured',
                           'next_check': 'RUNBOOK overload check_next',
                           'safe_action': 'RUNBOOK overload safe_action',
                           'rollback': 'RUNBOOK overload rollback',
                           'restart_destroys': 'RUNBOOK overload restart_destroys',
                           'score': 0,
                           'confirmed_by': None},
                          {'name': 'kv_pressure',
                           'title': 'KV cache pressure (preemptions)',
                           'verdict': 'not measured',
                           'quantity': 'KV usage, preemption delta, waiting',
                           'value': 'KV not measured, preemptions not measured',
                           'expected': 'KV below 90%, no preemption in the window',
                           'why': 'KV usage not measured',
                           'next_check': 'RUNBOOK kv_pressure check_next',
                           'safe_action': 'RUNBOOK kv_pressure safe_action',
                           'rollback': 'RUNBOOK kv_pressure rollback',
                           'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                           'score': 0,
                           'confirmed_by': None}],
           'healthy': None},
 'stall_short': {'hypotheses': [{'name': 'stall',
                                 'title': 'alive but not progressing (a stalled engine or worker)',
                                 'verdict': 'supported',
                                 'quantity': 'generation tokens across the window, running',
                                 'value': 'tokens did not move, running 3',
                                 'expected': 'tokens advance at every scrape while running > 0',
                                 'why': '3 running and the generation counter did not move in 5.0 s',
                                 'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                 'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                 'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                 'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                 'score': 90,
                                 'confirmed_by': None},
                                {'name': 'not_answering',
                                 'title': 'the server does not answer (or answers with errors)',
                                 'verdict': 'ruled out',
                                 'quantity': 'failed /health probes and /metrics scrapes by kind',
                                 'value': 'none',
                                 'expected': 'every /health and /metrics answered 2xx',
                                 'why': 'every probe got an answer',
                                 'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                               "log's last lines, and the router or firewall in between",
                                 'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                'keep its log.',
                                 'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                             'window.',
                                 'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                     'in-flight requests and the KV / prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'engine_dead',
                                 'title': 'the engine died',
                                 'verdict': 'ruled out',
                                 'quantity': '/health status and engine-death log lines',
                                 'value': '/health answered 200, 0 death line(s)',
                                 'expected': '/health 200, no engine-death line in its log',
                                 'why': '/health answered 200 and the log has no engine-death line',
                                 'next_check': 'RUNBOOK engine_dead check_next',
                                 'safe_action': 'RUNBOOK engine_dead safe_action',
                                 'rollback': 'RUNBOOK engine_dead rollback',
                                 'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'overload',
                                 'title': 'overload: demand above capacity',
                                 'verdict': 'not measured',
                                 'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                 'value': 'waiting not measured, queue wait not measured, running 3 (its slot limit '
                                          'is not in /metrics), KV not measured',
                                 'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                             'queue)',
                                 'why': 'no queue: waiting not measured, queue wait not measured',
                                 'next_check': 'RUNBOOK overload check_next',
                                 'safe_action': 'RUNBOOK overload safe_action',
                                 'rollback': 'RUNBOOK overload rollback',
                                 'restart_destroys': 'RUNBOOK overload restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None}],
                 'healthy': None},
 'stall_idle': {'hypotheses': [{'name': 'not_answering',
                                'title': 'the server does not answer (or answers with errors)',
                                'verdict': 'ruled out',
                                'quantity': 'failed /health probes and /metrics scrapes by kind',
                                'value': 'none',
                                'expected': 'every /health and /metrics answered 2xx',
                                'why': 'every probe got an answer',
                                'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                              "log's last lines, and the router or firewall in between",
                                'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                               'keep its log.',
                                'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                            'window.',
                                'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                    'in-flight requests and the KV / prefix cache.',
                                'score': 0,
                                'confirmed_by': None},
                               {'name': 'stall',
                                'title': 'alive but not progressing (a stalled engine or worker)',
                                'verdict': 'ruled out',
                                'quantity': 'generation tokens across the window, running',
                                'value': 'tokens did not move, running 0',
                                'expected': 'tokens advance at every scrape while running > 0',
                                'why': 'no admitted work',
                                'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                'score': 0,
                                'confirmed_by': None},
                               {'name': 'contention',
                                'title': 'contention in generation (a batch too large)',
                                'verdict': 'not measured',
                                'quantity': 'time between tokens against the running count',
                                'value': 'ITL not measured, running 0',
                                'expected': 'below 50 ms between tokens',
                                'why': 'time between tokens not measured',
                                'next_check': 'ITL over time against running: if they rise together the batch is the '
                                              'cause',
                                'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                               'replicas.',
                                'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                                'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                'score': 0,
                                'confirmed_by': None},
                               {'name': 'kv_pressure',
                                'title': 'KV cache pressure (preemptions)',
                                'verdict': 'not measured',
                                'quantity': 'KV usage, preemption delta, waiting',
                                'value': 'KV not measured, preemptions not measured',
                                'expected': 'KV below 90%, no preemption in the window',
                                'why': 'KV usage not measured',
                                'next_check': 'RUNBOOK kv_pressure check_next',
                                'safe_action': 'RUNBOOK kv_pressure safe_action',
                                'rollback': 'RUNBOOK kv_pressure rollback',
                                'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                'score': 0,
                                'confirmed_by': None}],
                'healthy': 'Looks healthy: nothing measured supports a problem (from what was recorded)\n'
                           '   figures: running at most 0\n'
                           '   ruled out: 2 explanations (below); not measured here (listed last): contention in '
                           'generation (a batch too large); KV cache pressure (preemptions)'},
 'long_output': {'hypotheses': [{'name': 'long_output',
                                 'title': 'long answers (a long-output workload)',
                                 'verdict': 'supported',
                                 'quantity': 'output tokens per request, stop reason',
                                 'value': '1,024 output tokens per request',
                                 'expected': 'below 512 tokens for chat-sized answers',
                                 'why': '1,024 output tokens per request with queue wait 10.0 ms and TTFT 50.0 ms: '
                                        'the system does what it is asked, the job is long; 90% stopped at '
                                        'max_tokens',
                                 'next_check': 'the stop reason (finished_reason=length means cut at max_tokens), '
                                               'max_tokens and the prompt or model version that changed',
                                 'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for long '
                                                'answers; do not add GPUs for a workload change.',
                                 'rollback': 'Restore the previous max_tokens cap.',
                                 'restart_destroys': 'Nothing that helps: a restart does not shorten answers; it '
                                                     'loses in-flight requests and the prefix cache.',
                                 'score': 60,
                                 'confirmed_by': None},
                                {'name': 'not_answering',
                                 'title': 'the server does not answer (or answers with errors)',
                                 'verdict': 'not measured',
                                 'quantity': 'failed /health probes and /metrics scrapes by kind',
                                 'value': 'none',
                                 'expected': 'every /health and /metrics answered 2xx',
                                 'why': 'no probe was made',
                                 'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                               "log's last lines, and the router or firewall in between",
                                 'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                'keep its log.',
                                 'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                             'window.',
                                 'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                     'in-flight requests and the KV / prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'contention',
                                 'title': 'contention in generation (a batch too large)',
                                 'verdict': 'not measured',
                                 'quantity': 'time between tokens against the running count',
                                 'value': 'ITL not measured, running not measured',
                                 'expected': 'below 50 ms between tokens',
                                 'why': 'time between tokens not measured',
                                 'next_check': 'ITL over time against running: if they rise together the batch is '
                                               'the cause',
                                 'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                'replicas.',
                                 'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                                 'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None}],
                 'healthy': None},
 'long_output_queued': {'hypotheses': [{'name': 'long_output',
                                        'title': 'long answers (a long-output workload)',
                                        'verdict': 'ruled out',
                                        'quantity': 'output tokens per request, stop reason',
                                        'value': '600 output tokens per request',
                                        'expected': 'below 512 tokens for chat-sized answers',
                                        'why': '600 output tokens per request',
                                        'next_check': 'the stop reason (finished_reason=length means cut at '
                                                      'max_tokens), max_tokens and the prompt or model version that '
                                                      'changed',
                                        'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks '
                                                       'for long answers; do not add GPUs for a workload change.',
                                        'rollback': 'Restore the previous max_tokens cap.',
                                        'restart_destroys': 'Nothing that helps: a restart does not shorten answers; '
                                                            'it loses in-flight requests and the prefix cache.',
                                        'score': 0,
                                        'confirmed_by': None},
                                       {'name': 'not_answering',
                                        'title': 'the server does not answer (or answers with errors)',
                                        'verdict': 'not measured',
                                        'quantity': 'failed /health probes and /metrics scrapes by kind',
                                        'value': 'none',
                                        'expected': 'every /health and /metrics answered 2xx',
                                        'why': 'no probe was made',
                                        'next_check': 'whether the process is up and listening on that port (ss '
                                                      "-ltnp), its log's last lines, and the router or firewall in "
                                                      'between',
                                        'safe_action': 'Take the replica out of routing until /health answers 200 '
                                                       'again; keep its log.',
                                        'rollback': 'Return it to routing once /health and /metrics answer for a '
                                                    'full window.',
                                        'restart_destroys': 'Nothing the server still holds if it is not running; if '
                                                            'it is, in-flight requests and the KV / prefix cache.',
                                        'score': 0,
                                        'confirmed_by': None},
                                       {'name': 'contention',
                                        'title': 'contention in generation (a batch too large)',
                                        'verdict': 'not measured',
                                        'quantity': 'time between tokens against the running count',
                                        'value': 'ITL not measured, running not measured',
                                        'expected': 'below 50 ms between tokens',
                                        'why': 'time between tokens not measured',
                                        'next_check': 'ITL over time against running: if they rise together the '
                                                      'batch is the cause',
                                        'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                       'replicas.',
                                        'rollback': 'Raise the limit again when waiting grows while ITL stays in '
                                                    'range.',
                                        'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                        'score': 0,
                                        'confirmed_by': None},
                                       {'name': 'long_prompt',
                                        'title': 'long prompts',
                                        'verdict': 'not measured',
                                        'quantity': 'input tokens per request, prefix-cache hits',
                                        'value': 'input tokens per request not measured (no request finished in the '
                                                 'window)',
                                        'expected': 'below 1000 tokens',
                                        'why': 'input tokens per request not measured (no request finished in the '
                                               'window)',
                                        'next_check': 'prefix-cache hit rate and the prompt template version: '
                                                      'different long prompts cost far more prefill than a repeated '
                                                      'one',
                                        'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix '
                                                       'cache serves it.',
                                        'rollback': 'Restore the previous prompt template.',
                                        'restart_destroys': 'The prefix cache: a restart makes every long prompt pay '
                                                            'full prefill again.',
                                        'score': 0,
                                        'confirmed_by': None}],
                        'healthy': 'Looks healthy: nothing measured supports a problem (from what was recorded)\n'
                                   '   figures: queue wait 200.0 ms (means)\n'
                                   '   ruled out: 1 explanation (below); not measured here (listed last): the server '
                                   'does not answer (or answers with errors); contention in generation (a batch too '
                                   'large); long prompts'},
 'long_prompt': {'hypotheses': [{'name': 'long_prompt',
                                 'title': 'long prompts',
                                 'verdict': 'supported',
                                 'quantity': 'input tokens per request, prefix-cache hits',
                                 'value': '2,905 input tokens per request',
                                 'expected': 'below 1000 tokens',
                                 'why': '2,905 input tokens per request (prefill 900.0 ms TTFT; a repeated prompt '
                                        'hides its cost in the prefix cache)',
                                 'next_check': 'prefix-cache hit rate and the prompt template version: different '
                                               'long prompts cost far more prefill than a repeated one',
                                 'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix cache '
                                                'serves it.',
                                 'rollback': 'Restore the previous prompt template.',
                                 'restart_destroys': 'The prefix cache: a restart makes every long prompt pay full '
                                                     'prefill again.',
                                 'score': 50,
                                 'confirmed_by': None},
                                {'name': 'not_answering',
                                 'title': 'the server does not answer (or answers with errors)',
                                 'verdict': 'not measured',
                                 'quantity': 'failed /health probes and /metrics scrapes by kind',
                                 'value': 'none',
                                 'expected': 'every /health and /metrics answered 2xx',
                                 'why': 'no probe was made',
                                 'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                               "log's last lines, and the router or firewall in between",
                                 'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                'keep its log.',
                                 'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                             'window.',
                                 'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                     'in-flight requests and the KV / prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'overload',
                                 'title': 'overload: demand above capacity',
                                 'verdict': 'not measured',
                                 'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                 'value': 'waiting not measured, queue wait not measured, running not measured (its '
                                          'slot limit is not in /metrics), KV not measured',
                                 'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                             'queue)',
                                 'why': 'no queue: waiting not measured, queue wait not measured',
                                 'next_check': 'RUNBOOK overload check_next',
                                 'safe_action': 'RUNBOOK overload safe_action',
                                 'rollback': 'RUNBOOK overload rollback',
                                 'restart_destroys': 'RUNBOOK overload restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'stall',
                                 'title': 'alive but not progressing (a stalled engine or worker)',
                                 'verdict': 'not measured',
                                 'quantity': 'generation tokens across the window, running',
                                 'value': 'token movement not measured (one scrape), running not measured',
                                 'expected': 'tokens advance at every scrape while running > 0',
                                 'why': 'no admitted work',
                                 'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                 'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                 'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                 'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'engine_dead',
                                 'title': 'the engine died',
                                 'verdict': 'not measured',
                                 'quantity': '/health status and engine-death log lines',
                                 'value': '/health not probed, 0 death line(s)',
                                 'expected': '/health 200, no engine-death line in its log',
                                 'why': '/health not probed and the log has no engine-death line',
                                 'next_check': 'RUNBOOK engine_dead check_next',
                                 'safe_action': 'RUNBOOK engine_dead safe_action',
                                 'rollback': 'RUNBOOK engine_dead rollback',
                                 'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None}],
                 'healthy': None},
 'contention': {'hypotheses': [{'name': 'contention',
                                'title': 'contention in generation (a batch too large)',
                                'verdict': 'supported',
                                'quantity': 'time between tokens against the running count',
                                'value': 'ITL 50.0 ms, running 200',
                                'expected': 'below 50 ms between tokens',
                                'why': '50.0 ms between tokens with up to 200 running: a large batch slows every '
                                       'stream',
                                'next_check': 'ITL over time against running: if they rise together the batch is the '
                                              'cause',
                                'safe_action': 'Lower the concurrent-sequence limit (--max-num-seqs) or add '
                                               'replicas.',
                                'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                                'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                'score': 55,
                                'confirmed_by': None},
                               {'name': 'not_answering',
                                'title': 'the server does not answer (or answers with errors)',
                                'verdict': 'ruled out',
                                'quantity': 'failed /health probes and /metrics scrapes by kind',
                                'value': 'none',
                                'expected': 'every /health and /metrics answered 2xx',
                                'why': 'no probe was made',
                                'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                              "log's last lines, and the router or firewall in between",
                                'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                               'keep its log.',
                                'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                            'window.',
                                'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                    'in-flight requests and the KV / prefix cache.',
                                'score': 0,
                                'confirmed_by': None},
                               {'name': 'kv_pressure',
                                'title': 'KV cache pressure (preemptions)',
                                'verdict': 'not measured',
                                'quantity': 'KV usage, preemption delta, waiting',
                                'value': 'KV not measured, preemptions not measured',
                                'expected': 'KV below 90%, no preemption in the window',
                                'why': 'KV usage not measured',
                                'next_check': 'RUNBOOK kv_pressure check_next',
                                'safe_action': 'RUNBOOK kv_pressure safe_action',
                                'rollback': 'RUNBOOK kv_pressure rollback',
                                'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                'score': 0,
                                'confirmed_by': None},
                               {'name': 'stall',
                                'title': 'alive but not progressing (a stalled engine or worker)',
                                'verdict': 'not measured',
                                'quantity': 'generation tokens across the window, running',
                                'value': 'token movement not measured (one scrape), running 200',
                                'expected': 'tokens advance at every scrape while running > 0',
                                'why': 'progress not measured (one scrape)',
                                'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                'score': 0,
                                'confirmed_by': None}],
                'healthy': None},
 'engine_dead_status': {'hypotheses': [{'name': 'engine_dead',
                                        'title': 'the engine died',
                                        'verdict': 'supported',
                                        'quantity': '/health status and engine-death log lines',
                                        'value': '/health answered 503, 2 death line(s)',
                                        'expected': '/health 200, no engine-death line in its log',
                                        'why': '/health answered 503 and the log has 2 engine-death line(s)',
                                        'next_check': 'RUNBOOK engine_dead check_next',
                                        'safe_action': 'RUNBOOK engine_dead safe_action',
                                        'rollback': 'RUNBOOK engine_dead rollback',
                                        'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                        'score': 100,
                                        'confirmed_by': None},
                                       {'name': 'not_answering',
                                        'title': 'the server does not answer (or answers with errors)',
                                        'verdict': 'ruled out',
                                        'quantity': 'failed /health probes and /metrics scrapes by kind',
                                        'value': 'none',
                                        'expected': 'every /health and /metrics answered 2xx',
                                        'why': 'every probe got an answer',
                                        'next_check': 'whether the process is up and listening on that port (ss '
                                                      "-ltnp), its log's last lines, and the router or firewall in "
                                                      'between',
                                        'safe_action': 'Take the replica out of routing until /health answers 200 '
                                                       'again; keep its log.',
                                        'rollback': 'Return it to routing once /health and /metrics answer for a '
                                                    'full window.',
                                        'restart_destroys': 'Nothing the server still holds if it is not running; if '
                                                            'it is, in-flight requests and the KV / prefix cache.',
                                        'score': 0,
                                        'confirmed_by': None},
                                       {'name': 'stall',
                                        'title': 'alive but not progressing (a stalled engine or worker)',
                                        'verdict': 'not measured',
                                        'quantity': 'generation tokens across the window, running',
                                        'value': 'token movement not measured (one scrape), running not measured',
                                        'expected': 'tokens advance at every scrape while running > 0',
                                        'why': 'no admitted work',
                                        'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                        'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                        'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                        'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                        'score': 0,
                                        'confirmed_by': None},
                                       {'name': 'overload',
                                        'title': 'overload: demand above capacity',
                                        'verdict': 'not measured',
                                        'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                        'value': 'waiting not measured, queue wait not measured, running not '
                                                 'measured (its slot limit is not in /metrics), KV not measured',
                                        'expected': 'waiting 0 and queue wait ~0 (overload is the only signature '
                                                    'with a queue)',
                                        'why': 'no queue: waiting not measured, queue wait not measured',
                                        'next_check': 'RUNBOOK overload check_next',
                                        'safe_action': 'RUNBOOK overload safe_action',
                                        'rollback': 'RUNBOOK overload rollback',
                                        'restart_destroys': 'RUNBOOK overload restart_destroys',
                                        'score': 0,
                                        'confirmed_by': None}],
                        'healthy': None},
 'engine_dead_lines_only': {'hypotheses': [{'name': 'engine_dead',
                                            'title': 'the engine died',
                                            'verdict': 'supported',
                                            'quantity': '/health status and engine-death log lines',
                                            'value': '/health not probed, 1 death line(s)',
                                            'expected': '/health 200, no engine-death line in its log',
                                            'why': '/health not probed and the log has 1 engine-death line(s)',
                                            'next_check': 'RUNBOOK engine_dead check_next',
                                            'safe_action': 'RUNBOOK engine_dead safe_action',
                                            'rollback': 'RUNBOOK engine_dead rollback',
                                            'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                            'score': 100,
                                            'confirmed_by': None},
                                           {'name': 'not_answering',
                                            'title': 'the server does not answer (or answers with errors)',
                                            'verdict': 'not measured',
                                            'quantity': 'failed /health probes and /metrics scrapes by kind',
                                            'value': 'none',
                                            'expected': 'every /health and /metrics answered 2xx',
                                            'why': 'no probe was made',
                                            'next_check': 'whether the process is up and listening on that port (ss '
                                                          "-ltnp), its log's last lines, and the router or firewall "
                                                          'in between',
                                            'safe_action': 'Take the replica out of routing until /health answers '
                                                           '200 again; keep its log.',
                                            'rollback': 'Return it to routing once /health and /metrics answer for a '
                                                        'full window.',
                                            'restart_destroys': 'Nothing the server still holds if it is not '
                                                                'running; if it is, in-flight requests and the KV / '
                                                                'prefix cache.',
                                            'score': 0,
                                            'confirmed_by': None},
                                           {'name': 'stall',
                                            'title': 'alive but not progressing (a stalled engine or worker)',
                                            'verdict': 'not measured',
                                            'quantity': 'generation tokens across the window, running',
                                            'value': 'token movement not measured (one scrape), running not measured',
                                            'expected': 'tokens advance at every scrape while running > 0',
                                            'why': 'no admitted work',
                                            'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                            'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                            'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                            'restart_destroys': 'RUNBOOK alive_health_ok_no_progress '
                                                                'restart_destroys',
                                            'score': 0,
                                            'confirmed_by': None},
                                           {'name': 'kv_pressure',
                                            'title': 'KV cache pressure (preemptions)',
                                            'verdict': 'not measured',
                                            'quantity': 'KV usage, preemption delta, waiting',
                                            'value': 'KV not measured, preemptions not measured',
                                            'expected': 'KV below 90%, no preemption in the window',
                                            'why': 'KV usage not measured',
                                            'next_check': 'RUNBOOK kv_pressure check_next',
                                            'safe_action': 'RUNBOOK kv_pressure safe_action',
                                            'rollback': 'RUNBOOK kv_pressure rollback',
                                            'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                            'score': 0,
                                            'confirmed_by': None},
                                           {'name': 'overload',
                                            'title': 'overload: demand above capacity',
                                            'verdict': 'not measured',
                                            'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                            'value': 'waiting not measured, queue wait not measured, running not '
                                                     'measured (its slot limit is not in /metrics), KV not measured',
                                            'expected': 'waiting 0 and queue wait ~0 (overload is the only signature '
                                                        'with a queue)',
                                            'why': 'no queue: waiting not measured, queue wait not measured',
                                            'next_check': 'RUNBOOK overload check_next',
                                            'safe_action': 'RUNBOOK overload safe_action',
                                            'rollback': 'RUNBOOK overload rollback',
                                            'restart_destroys': 'RUNBOOK overload restart_destroys',
                                            'score': 0,
                                            'confirmed_by': None},
                                           {'name': 'long_output',
                                            'title': 'long answers (a long-output workload)',
                                            'verdict': 'not measured',
                                            'quantity': 'output tokens per request, stop reason',
                                            'value': 'output tokens per request not measured (no request finished in '
                                                     'the window)',
                                            'expected': 'below 512 tokens for chat-sized answers',
                                            'why': 'output tokens per request not measured (no request finished in '
                                                   'the window)',
                                            'next_check': 'the stop reason (finished_reason=length means cut at '
                                                          'max_tokens), max_tokens and the prompt or model version '
                                                          'that changed',
                                            'safe_action': 'Cap max_tokens at the gateway or fix the prompt that '
                                                           'asks for long answers; do not add GPUs for a workload '
                                                           'change.',
                                            'rollback': 'Restore the previous max_tokens cap.',
                                            'restart_destroys': 'Nothing that helps: a restart does not shorten '
                                                                'answers; it loses in-flight requests and the prefix '
                                                                'cache.',
                                            'score': 0,
                                            'confirmed_by': None},
                                           {'name': 'long_prompt',
                                            'title': 'long prompts',
                                            'verdict': 'not measured',
                                            'quantity': 'input tokens per request, prefix-cache hits',
                                            'value': 'input tokens per request not measured (no request finished in '
                                                     'the window)',
                                            'expected': 'below 1000 tokens',
                                            'why': 'input tokens per request not measured (no request finished in '
                                                   'the window)',
                                            'next_check': 'prefix-cache hit rate and the prompt template version: '
                                                          'different long prompts cost far more prefill than a '
                                                          'repeated one',
                                            'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix '
                                                           'cache serves it.',
                                            'rollback': 'Restore the previous prompt template.',
                                            'restart_destroys': 'The prefix cache: a restart makes every long prompt '
                                                                'pay full prefill again.',
                                            'score': 0,
                                            'confirmed_by': None},
                                           {'name': 'contention',
                                            'title': 'contention in generation (a batch too large)',
                                            'verdict': 'not measured',
                                            'quantity': 'time between tokens against the running count',
                                            'value': 'ITL not measured, running not measured',
                                            'expected': 'below 50 ms between tokens',
                                            'why': 'time between tokens not measured',
                                            'next_check': 'ITL over time against running: if they rise together the '
                                                          'batch is the cause',
                                            'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or '
                                                           'add replicas.',
                                            'rollback': 'Raise the limit again when waiting grows while ITL stays in '
                                                        'range.',
                                            'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                            'score': 0,
                                            'confirmed_by': None},
                                           {'name': 'idle',
                                            'title': 'nothing wrong on the server: idle',
                                            'verdict': 'not measured',
                                            'quantity': 'running, waiting, health',
                                            'value': 'running not measured, waiting not measured',
                                            'expected': 'running > 0 whenever users are served',
                                            'why': 'requests ran or waited',
                                            'next_check': "whether the complaint's requests reach this server at all "
                                                          '(router, DNS, client timeouts)',
                                            'safe_action': 'No action on the server.',
                                            'rollback': 'Nothing to roll back.',
                                            'restart_destroys': 'Nothing to gain: an idle server has nothing to fix.',
                                            'score': 0,
                                            'confirmed_by': None}],
                            'healthy': None},
 'refused': {'hypotheses': [{'name': 'not_answering',
                             'title': 'the server does not answer (or answers with errors)',
                             'verdict': 'supported',
                             'quantity': 'failed /health probes and /metrics scrapes by kind',
                             'value': '/health could not connect ×7, /metrics could not connect ×7, /metrics HTTP '
                                      '500 ×1',
                             'expected': 'every /health and /metrics answered 2xx',
                             'why': '/health could not connect ×7, /metrics could not connect ×7, /metrics HTTP 500 '
                                    '×1: the server did not answer every probe in the window',
                             'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                           "log's last lines, and the router or firewall in between",
                             'safe_action': 'Take the replica out of routing until /health answers 200 again; keep '
                                            'its log.',
                             'rollback': 'Return it to routing once /health and /metrics answer for a full window.',
                             'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                 'in-flight requests and the KV / prefix cache.',
                             'score': 120,
                             'confirmed_by': None},
                            {'name': 'engine_dead',
                             'title': 'the engine died',
                             'verdict': 'not measured',
                             'quantity': '/health status and engine-death log lines',
                             'value': '/health never answered (could not connect ×7), 0 death line(s)',
                             'expected': '/health 200, no engine-death line in its log',
                             'why': '/health never answered (could not connect ×7) and the log has no engine-death '
                                    'line',
                             'next_check': 'RUNBOOK engine_dead check_next',
                             'safe_action': 'RUNBOOK engine_dead safe_action',
                             'rollback': 'RUNBOOK engine_dead rollback',
                             'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'stall',
                             'title': 'alive but not progressing (a stalled engine or worker)',
                             'verdict': 'not measured',
                             'quantity': 'generation tokens across the window, running',
                             'value': 'token movement not measured (one scrape), running not measured',
                             'expected': 'tokens advance at every scrape while running > 0',
                             'why': 'no admitted work',
                             'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                             'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                             'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                             'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'overload',
                             'title': 'overload: demand above capacity',
                             'verdict': 'not measured',
                             'quantity': 'waiting, queue wait, running against the slot limit, KV',
                             'value': 'waiting not measured, queue wait not measured, running not measured (its slot '
                                      'limit is not in /metrics), KV not measured',
                             'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a queue)',
                             'why': 'no queue: waiting not measured, queue wait not measured',
                             'next_check': 'RUNBOOK overload check_next',
                             'safe_action': 'RUNBOOK overload safe_action',
                             'rollback': 'RUNBOOK overload rollback',
                             'restart_destroys': 'RUNBOOK overload restart_destroys',
                             'score': 0,
                             'confirmed_by': None}],
             'healthy': None},
 'http_errors': {'hypotheses': [{'name': 'not_answering',
                                 'title': 'the server does not answer (or answers with errors)',
                                 'verdict': 'supported',
                                 'quantity': 'failed /health probes and /metrics scrapes by kind',
                                 'value': '/health HTTP 500 ×5',
                                 'expected': 'every /health and /metrics answered 2xx',
                                 'why': '/health HTTP 500 ×5: the server did not answer every probe in the window',
                                 'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                               "log's last lines, and the router or firewall in between",
                                 'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                'keep its log.',
                                 'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                             'window.',
                                 'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                     'in-flight requests and the KV / prefix cache.',
                                 'score': 95,
                                 'confirmed_by': None},
                                {'name': 'engine_dead',
                                 'title': 'the engine died',
                                 'verdict': 'ruled out',
                                 'quantity': '/health status and engine-death log lines',
                                 'value': '/health answered 500, 0 death line(s)',
                                 'expected': '/health 200, no engine-death line in its log',
                                 'why': '/health answered 500 and the log has no engine-death line',
                                 'next_check': 'RUNBOOK engine_dead check_next',
                                 'safe_action': 'RUNBOOK engine_dead safe_action',
                                 'rollback': 'RUNBOOK engine_dead rollback',
                                 'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'stall',
                                 'title': 'alive but not progressing (a stalled engine or worker)',
                                 'verdict': 'not measured',
                                 'quantity': 'generation tokens across the window, running',
                                 'value': 'token movement not measured (one scrape), running not measured',
                                 'expected': 'tokens advance at every scrape while running > 0',
                                 'why': 'no admitted work',
                                 'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                 'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                 'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                 'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'overload',
                                 'title': 'overload: demand above capacity',
                                 'verdict': 'not measured',
                                 'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                 'value': 'waiting not measured, queue wait not measured, running not measured (its '
                                          'slot limit is not in /metrics), KV not measured',
                                 'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                             'queue)',
                                 'why': 'no queue: waiting not measured, queue wait not measured',
                                 'next_check': 'RUNBOOK overload check_next',
                                 'safe_action': 'RUNBOOK overload safe_action',
                                 'rollback': 'RUNBOOK overload rollback',
                                 'restart_destroys': 'RUNBOOK overload restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None}],
                 'healthy': None},
 'process_gone': {'hypotheses': [{'name': 'not_answering',
                                  'title': 'the server does not answer (or answers with errors)',
                                  'verdict': 'supported',
                                  'quantity': 'failed /health probes and /metrics scrapes by kind',
                                  'value': '/health could not connect ×4',
                                  'expected': 'every /health and /metrics answered 2xx',
                                  'why': '/health could not connect ×4: the server did not answer every probe in the '
                                         'window',
                                  'next_check': 'whether the process is up and listening on that port (ss -ltnp), '
                                                "its log's last lines, and the router or firewall in between",
                                  'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                 'keep its log.',
                                  'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                              'window.',
                                  'restart_destroys': 'Nothing the server still holds if it is not running; if it '
                                                      'is, in-flight requests and the KV / prefix cache.',
                                  'score': 120,
                                  'confirmed_by': None},
                                 {'name': 'engine_dead',
                                  'title': 'the engine died',
                                  'verdict': 'supported',
                                  'quantity': '/health status and engine-death log lines',
                                  'value': '/health answered 200, 0 death line(s)',
                                  'expected': '/health 200, no engine-death line in its log',
                                  'why': "/health answered 200, then could not connect ×4: llama.cpp's engine runs "
                                         "in the server's one process, so the process and its engine are gone",
                                  'next_check': 'RUNBOOK engine_dead check_next',
                                  'safe_action': 'RUNBOOK engine_dead safe_action',
                                  'rollback': 'RUNBOOK engine_dead rollback',
                                  'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                  'score': 100,
                                  'confirmed_by': None},
                                 {'name': 'stall',
                                  'title': 'alive but not progressing (a stalled engine or worker)',
                                  'verdict': 'not measured',
                                  'quantity': 'generation tokens across the window, running',
                                  'value': 'token movement not measured (one scrape), running not measured',
                                  'expected': 'tokens advance at every scrape while running > 0',
                                  'why': 'no admitted work',
                                  'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                  'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                  'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                  'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                  'score': 0,
                                  'confirmed_by': None},
                                 {'name': 'overload',
                                  'title': 'overload: demand above capacity',
                                  'verdict': 'not measured',
                                  'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                  'value': 'waiting not measured, queue wait not measured, running not measured (its '
                                           'slot limit is not in /metrics), KV not measured',
                                  'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                              'queue)',
                                  'why': 'no queue: waiting not measured, queue wait not measured',
                                  'next_check': 'RUNBOOK overload check_next',
                                  'safe_action': 'RUNBOOK overload safe_action',
                                  'rollback': 'RUNBOOK overload rollback',
                                  'restart_destroys': 'RUNBOOK overload restart_destroys',
                                  'score': 0,
                                  'confirmed_by': None}],
                  'healthy': None},
 'process_stopped': {'hypotheses': [{'name': 'not_answering',
                                     'title': 'the server does not answer (or answers with errors)',
                                     'verdict': 'supported',
                                     'quantity': 'failed /health probes and /metrics scrapes by kind',
                                     'value': '/health could not connect ×4',
                                     'expected': 'every /health and /metrics answered 2xx',
                                     'why': '/health could not connect ×4: the server did not answer every probe in '
                                            'the window',
                                     'next_check': 'whether the process is up and listening on that port (ss -ltnp), '
                                                   "its log's last lines, and the router or firewall in between",
                                     'safe_action': 'Take the replica out of routing until /health answers 200 '
                                                    'again; keep its log.',
                                     'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                                 'window.',
                                     'restart_destroys': 'Nothing the server still holds if it is not running; if it '
                                                         'is, in-flight requests and the KV / prefix cache.',
                                     'score': 120,
                                     'confirmed_by': None},
                                    {'name': 'engine_dead',
                                     'title': 'the engine died',
                                     'verdict': 'ruled out',
                                     'quantity': '/health status and engine-death log lines',
                                     'value': '/health answered 200, 0 death line(s)',
                                     'expected': '/health 200, no engine-death line in its log',
                                     'why': '/health answered 200, then could not connect ×4 after 2 line(s) of a '
                                            'requested stop in its log: stopped, not dead',
                                     'next_check': 'RUNBOOK engine_dead check_next',
                                     'safe_action': 'RUNBOOK engine_dead safe_action',
                                     'rollback': 'RUNBOOK engine_dead rollback',
                                     'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                     'score': 0,
                                     'confirmed_by': None},
                                    {'name': 'stall',
                                     'title': 'alive but not progressing (a stalled engine or worker)',
                                     'verdict': 'not measured',
                                     'quantity': 'generation tokens across the window, running',
                                     'value': 'token movement not measured (one scrape), running not measured',
                                     'expected': 'tokens advance at every scrape while running > 0',
                                     'why': 'no admitted work',
                                     'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                     'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                     'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                     'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                     'score': 0,
                                     'confirmed_by': None},
                                    {'name': 'overload',
                                     'title': 'overload: demand above capacity',
                                     'verdict': 'not measured',
                                     'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                     'value': 'waiting not measured, queue wait not measured, running not measured '
                                              '(its slot limit is not in /metrics), KV not measured',
                                     'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                                 'queue)',
                                     'why': 'no queue: waiting not measured, queue wait not measured',
                                     'next_check': 'RUNBOOK overload check_next',
                                     'safe_action': 'RUNBOOK overload safe_action',
                                     'rollback': 'RUNBOOK overload rollback',
                                     'restart_destroys': 'RUNBOOK overload restart_destroys',
                                     'score': 0,
                                     'confirmed_by': None}],
                     'healthy': None},
 'loop_hung_known': {'hypotheses': [{'name': 'not_answering',
                                     'title': "the engine's loop does not answer (/health does)",
                                     'verdict': 'supported',
                                     'quantity': 'failed /health probes and /metrics scrapes by kind',
                                     'value': '/metrics timed out ×5',
                                     'expected': 'every /health and /metrics answered 2xx',
                                     'why': '/metrics timed out ×5 while /health answered 200: llama.cpp answers '
                                            '/health without its engine loop and /metrics waits on that loop, so the '
                                            'loop is hung (or in one step longer than the scrape timeout)',
                                     'next_check': 'send one request yourself with a deadline (curl -m 20 '
                                                   'URL/v1/completions with max_tokens 1) or watch with --probe: no '
                                                   'token while /health answers 200 is the hang (not_serving); its '
                                                   'slot listing (/slots) waits on the same loop: a busy slot whose '
                                                   'tokens move between listings is a long prompt, not a hang',
                                     'safe_action': 'RUNBOOK not_serving safe_action',
                                     'rollback': 'RUNBOOK not_serving rollback',
                                     'restart_destroys': 'RUNBOOK not_serving restart_destroys',
                                     'score': 110,
                                     'confirmed_by': None},
                                    {'name': 'contention',
                                     'title': 'contention in generation (a batch too large)',
                                     'verdict': 'not measured',
                                     'quantity': 'time between tokens against the running count',
                                     'value': 'ITL not measured, running not measured',
                                     'expected': 'below 50 ms between tokens',
                                     'why': 'time between tokens not measured',
                                     'next_check': 'ITL over time against running: if they rise together the batch '
                                                   'is the cause',
                                     'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                    'replicas.',
                                     'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                                     'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                     'score': 0,
                                     'confirmed_by': None},
                                    {'name': 'kv_pressure',
                                     'title': 'KV cache pressure (preemptions)',
                                     'verdict': 'not measured',
                                     'quantity': 'KV usage, preemption delta, waiting',
                                     'value': 'KV not measured, preemptions not measured',
                                     'expected': 'KV below 90%, no preemption in the window',
                                     'why': 'KV usage not measured',
                                     'next_check': 'RUNBOOK kv_pressure check_next',
                                     'safe_action': 'RUNBOOK kv_pressure safe_action',
                                     'rollback': 'RUNBOOK kv_pressure rollback',
                                     'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                     'score': 0,
                                     'confirmed_by': None},
                                    {'name': 'stall',
                                     'title': 'alive but not progressing (a stalled engine or worker)',
                                     'verdict': 'not measured',
                                     'quantity': 'generation tokens across the window, running',
                                     'value': 'token movement not measured (one scrape), running not measured',
                                     'expected': 'tokens advance at every scrape while running > 0',
                                     'why': 'no admitted work',
                                     'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                     'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                     'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                     'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                     'score': 0,
                                     'confirmed_by': None}],
                     'healthy': None},
 'loop_hung_unknown': {'hypotheses': [{'name': 'not_answering',
                                       'title': "the engine's loop does not answer (/health does)",
                                       'verdict': 'supported',
                                       'quantity': 'failed /health probes and /metrics scrapes by kind',
                                       'value': '/metrics timed out ×5',
                                       'expected': 'every /health and /metrics answered 2xx',
                                       'why': '/metrics timed out ×5 while /health answered 200: where /metrics '
                                              "waits on the engine's loop (llama.cpp), that loop is hung; elsewhere "
                                              '/metrics itself is slow',
                                       'next_check': 'send one request yourself with a deadline (curl -m 20 '
                                                     'URL/v1/completions with max_tokens 1) or watch with --probe: '
                                                     'no token while /health answers 200 is the hang (not_serving)',
                                       'safe_action': 'RUNBOOK not_serving safe_action',
                                       'rollback': 'RUNBOOK not_serving rollback',
                                       'restart_destroys': 'RUNBOOK not_serving restart_destroys',
                                       'score': 110,
                                       'confirmed_by': None},
                                      {'name': 'long_output',
                                       'title': 'long answers (a long-output workload)',
                                       'verdict': 'not measured',
                                       'quantity': 'output tokens per request, stop reason',
                                       'value': 'output tokens per request not measured (no request finished in the '
                                                'window)',
                                       'expected': 'below 512 tokens for chat-sized answers',
                                       'why': 'output tokens per request not measured (no request finished in the '
                                              'window)',
                                       'next_check': 'the stop reason (finished_reason=length means cut at '
                                                     'max_tokens), max_tokens and the prompt or model version that '
                                                     'changed',
                                       'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for '
                                                      'long answers; do not add GPUs for a workload change.',
                                       'rollback': 'Restore the previous max_tokens cap.',
                                       'restart_destroys': 'Nothing that helps: a restart does not shorten answers; '
                                                           'it loses in-flight requests and the prefix cache.',
                                       'score': 0,
                                       'confirmed_by': None},
                                      {'name': 'contention',
                                       'title': 'contention in generation (a batch too large)',
                                       'verdict': 'not measured',
                                       'quantity': 'time between tokens against the running count',
                                       'value': 'ITL not measured, running not measured',
                                       'expected': 'below 50 ms between tokens',
                                       'why': 'time between tokens not measured',
                                       'next_check': 'ITL over time against running: if they rise together the batch '
                                                     'is the cause',
                                       'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                      'replicas.',
                                       'rollback': 'Raise the limit again when waiting grows while ITL stays in '
                                                   'range.',
                                       'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                       'score': 0,
                                       'confirmed_by': None}],
                       'healthy': None},
 'confirmed': {'hypotheses': [{'name': 'engine_dead',
                               'title': 'the engine died',
                               'verdict': 'supported',
                               'quantity': '/health status and engine-death log lines',
                               'value': '/health answered 503, 0 death line(s)',
                               'expected': '/health 200, no engine-death line in its log',
                               'why': '/health 503 ×3',
                               'next_check': 'RUNBOOK engine_dead check_next',
                               'safe_action': 'RUNBOOK engine_dead safe_action',
                               'rollback': 'RUNBOOK engine_dead rollback',
                               'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                               'score': 100,
                               'confirmed_by': 'engine_dead'},
                              {'name': 'stall',
                               'title': 'alive but not progressing (a stalled engine or worker)',
                               'verdict': 'supported',
                               'quantity': 'generation tokens across the window, running',
                               'value': 'tokens moved, running 8',
                               'expected': 'tokens advance at every scrape while running > 0',
                               'why': 'no token for 30 s',
                               'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                               'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                               'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                               'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                               'score': 90,
                               'confirmed_by': 'alive_health_ok_no_progress'},
                              {'name': 'kv_pressure',
                               'title': 'KV cache pressure (preemptions)',
                               'verdict': 'supported',
                               'quantity': 'KV usage, preemption delta, waiting',
                               'value': 'KV 50%, preemptions not measured',
                               'expected': 'KV below 90%, no preemption in the window',
                               'why': '12 preempted',
                               'next_check': 'RUNBOOK kv_pressure check_next',
                               'safe_action': 'RUNBOOK kv_pressure safe_action',
                               'rollback': 'RUNBOOK kv_pressure rollback',
                               'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                               'score': 85,
                               'confirmed_by': 'preemption'},
                              {'name': 'overload',
                               'title': 'overload: demand above capacity (cause kv)',
                               'verdict': 'supported',
                               'quantity': 'waiting, queue wait, running against the slot limit, KV',
                               'value': 'waiting 3, queue wait not measured, running 8 (its slot limit is not in '
                                        '/metrics), KV 50%',
                               'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                           'queue)',
                               'why': '3 waiting',
                               'next_check': 'RUNBOOK overload check_next',
                               'safe_action': 'RUNBOOK overload safe_action',
                               'rollback': 'RUNBOOK overload rollback',
                               'restart_destroys': 'RUNBOOK overload restart_destroys',
                               'score': 80,
                               'confirmed_by': 'overload'},
                              {'name': 'not_answering',
                               'title': 'the server does not answer (or answers with errors)',
                               'verdict': 'ruled out',
                               'quantity': 'failed /health probes and /metrics scrapes by kind',
                               'value': 'none',
                               'expected': 'every /health and /metrics answered 2xx',
                               'why': 'no probe was made',
                               'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                             "log's last lines, and the router or firewall in between",
                               'safe_action': 'Take the replica out of routing until /health answers 200 again; keep '
                                              'its log.',
                               'rollback': 'Return it to routing once /health and /metrics answer for a full window.',
                               'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                   'in-flight requests and the KV / prefix cache.',
                               'score': 0,
                               'confirmed_by': None},
                              {'name': 'idle',
                               'title': 'nothing wrong on the server: idle',
                               'verdict': 'ruled out',
                               'quantity': 'running, waiting, health',
                               'value': 'running 8, waiting 3',
                               'expected': 'running > 0 whenever users are served',
                               'why': 'requests ran or waited',
                               'next_check': "whether the complaint's requests reach this server at all (router, "
                                             'DNS, client timeouts)',
                               'safe_action': 'No action on the server.',
                               'rollback': 'Nothing to roll back.',
                               'restart_destroys': 'Nothing to gain: an idle server has nothing to fix.',
                               'score': 0,
                               'confirmed_by': None},
                              {'name': 'long_output',
                               'title': 'long answers (a long-output workload)',
                               'verdict': 'not measured',
                               'quantity': 'output tokens per request, stop reason',
                               'value': 'output tokens per request not measured (no request finished in the window)',
                               'expected': 'below 512 tokens for chat-sized answers',
                               'why': 'output tokens per request not measured (no request finished in the window)',
                               'next_check': 'the stop reason (finished_reason=length means cut at max_tokens), '
                                             'max_tokens and the prompt or model version that changed',
                               'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for long '
                                              'answers; do not add GPUs for a workload change.',
                               'rollback': 'Restore the previous max_tokens cap.',
                               'restart_destroys': 'Nothing that helps: a restart does not shorten answers; it loses '
                                                   'in-flight requests and the prefix cache.',
                               'score': 0,
                               'confirmed_by': None},
                              {'name': 'long_prompt',
                               'title': 'long prompts',
                               'verdict': 'not measured',
                               'quantity': 'input tokens per request, prefix-cache hits',
                               'value': 'input tokens per request not measured (no request finished in the window)',
                               'expected': 'below 1000 tokens',
                               'why': 'input tokens per request not measured (no request finished in the window)',
                               'next_check': 'prefix-cache hit rate and the prompt template version: different long '
                                             'prompts cost far more prefill than a repeated one',
                               'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix cache serves '
                                              'it.',
                               'rollback': 'Restore the previous prompt template.',
                               'restart_destroys': 'The prefix cache: a restart makes every long prompt pay full '
                                                   'prefill again.',
                               'score': 0,
                               'confirmed_by': None},
                              {'name': 'contention',
                               'title': 'contention in generation (a batch too large)',
                               'verdict': 'not measured',
                               'quantity': 'time between tokens against the running count',
                               'value': 'ITL not measured, running 8',
                               'expected': 'below 50 ms between tokens',
                               'why': 'time between tokens not measured',
                               'next_check': 'ITL over time against running: if they rise together the batch is the '
                                             'cause',
                               'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add replicas.',
                               'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                               'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                               'score': 0,
                               'confirmed_by': None}],
               'healthy': None},
 'kv_confirmed': {'hypotheses': [{'name': 'kv_pressure',
                                  'title': 'KV cache pressure (preemptions)',
                                  'verdict': 'supported',
                                  'quantity': 'KV usage, preemption delta, waiting',
                                  'value': 'KV 50%, preemptions not measured',
                                  'expected': 'KV below 90%, no preemption in the window',
                                  'why': 'KV 99 %',
                                  'next_check': 'RUNBOOK kv_pressure check_next',
                                  'safe_action': 'RUNBOOK kv_pressure safe_action',
                                  'rollback': 'RUNBOOK kv_pressure rollback',
                                  'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                  'score': 85,
                                  'confirmed_by': 'kv_pressure'},
                                 {'name': 'not_answering',
                                  'title': 'the server does not answer (or answers with errors)',
                                  'verdict': 'not measured',
                                  'quantity': 'failed /health probes and /metrics scrapes by kind',
                                  'value': 'none',
                                  'expected': 'every /health and /metrics answered 2xx',
                                  'why': 'no probe was made',
                                  'next_check': 'whether the process is up and listening on that port (ss -ltnp), '
                                                "its log's last lines, and the router or firewall in between",
                                  'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                 'keep its log.',
                                  'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                              'window.',
                                  'restart_destroys': 'Nothing the server still holds if it is not running; if it '
                                                      'is, in-flight requests and the KV / prefix cache.',
                                  'score': 0,
                                  'confirmed_by': None},
                                 {'name': 'contention',
                                  'title': 'contention in generation (a batch too large)',
                                  'verdict': 'not measured',
                                  'quantity': 'time between tokens against the running count',
                                  'value': 'ITL not measured, running not measured',
                                  'expected': 'below 50 ms between tokens',
                                  'why': 'time between tokens not measured',
                                  'next_check': 'ITL over time against running: if they rise together the batch is '
                                                'the cause',
                                  'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                 'replicas.',
                                  'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                                  'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                  'score': 0,
                                  'confirmed_by': None},
                                 {'name': 'stall',
                                  'title': 'alive but not progressing (a stalled engine or worker)',
                                  'verdict': 'not measured',
                                  'quantity': 'generation tokens across the window, running',
                                  'value': 'token movement not measured (one scrape), running not measured',
                                  'expected': 'tokens advance at every scrape while running > 0',
                                  'why': 'no admitted work',
                                  'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                  'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                  'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                  'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                  'score': 0,
                                  'confirmed_by': None}],
                  'healthy': None},
 'edges': {'hypotheses': [{'name': 'not_answering',
                           'title': 'the server does not answer (or answers with errors)',
                           'verdict': 'supported',
                           'quantity': 'failed /health probes and /metrics scrapes by kind',
                           'value': '/health could not connect ×2, /health HTTP 503 ×5',
                           'expected': 'every /health and /metrics answered 2xx',
                           'why': '/health could not connect ×2, /health HTTP 503 ×5: the server did not answer '
                                  'every probe in the window',
                           'next_check': "whether the process is up and listening on that port (ss -ltnp), its log's "
                                         'last lines, and the router or firewall in between',
                           'safe_action': 'Take the replica out of routing until /health answers 200 again; keep its '
                                          'log.',
                           'rollback': 'Return it to routing once /health and /metrics answer for a full window.',
                           'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                               'in-flight requests and the KV / prefix cache.',
                           'score': 120,
                           'confirmed_by': None},
                          {'name': 'kv_pressure',
                           'title': 'KV cache pressure (preemptions)',
                           'verdict': 'supported',
                           'quantity': 'KV usage, preemption delta, waiting',
                           'value': 'KV 90%, preemptions +4',
                           'expected': 'KV below 90%, no preemption in the window',
                           'why': 'KV peaked at 90% with 3 waiting and 4 preemption(s)',
                           'next_check': 'RUNBOOK kv_pressure check_next',
                           'safe_action': 'RUNBOOK kv_pressure safe_action',
                           'rollback': 'RUNBOOK kv_pressure rollback',
                           'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                           'score': 75,
                           'confirmed_by': None},
                          {'name': 'long_output',
                           'title': 'long answers (a long-output workload)',
                           'verdict': 'supported',
                           'quantity': 'output tokens per request, stop reason',
                           'value': '512 output tokens per request',
                           'expected': 'below 512 tokens for chat-sized answers',
                           'why': '512 output tokens per request with queue wait 99.9 ms and TTFT not measured: the '
                                  'system does what it is asked, the job is long',
                           'next_check': 'the stop reason (finished_reason=length means cut at max_tokens), '
                                         'max_tokens and the prompt or model version that changed',
                           'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for long '
                                          'answers; do not add GPUs for a workload change.',
                           'rollback': 'Restore the previous max_tokens cap.',
                           'restart_destroys': 'Nothing that helps: a restart does not shorten answers; it loses '
                                               'in-flight requests and the prefix cache.',
                           'score': 60,
                           'confirmed_by': None},
                          {'name': 'long_prompt',
                           'title': 'long prompts',
                           'verdict': 'supported',
                           'quantity': 'input tokens per request, prefix-cache hits',
                           'value': '1,000 input tokens per request',
                           'expected': 'below 1000 tokens',
                           'why': '1,000 input tokens per request (prefill not measured TTFT; a repeated prompt '
                                  'hides its cost in the prefix cache)',
                           'next_check': 'prefix-cache hit rate and the prompt template version: different long '
                                         'prompts cost far more prefill than a repeated one',
                           'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix cache serves it.',
                           'rollback': 'Restore the previous prompt template.',
                           'restart_destroys': 'The prefix cache: a restart makes every long prompt pay full prefill '
                                               'again.',
                           'score': 50,
                           'confirmed_by': None},
                          {'name': 'engine_dead',
                           'title': 'the engine died',
                           'verdict': 'ruled out',
                           'quantity': '/health status and engine-death log lines',
                           'value': '/health answered 300, 0 death line(s)',
                           'expected': '/health 200, no engine-death line in its log',
                           'why': '/health answered 300 and the log has no engine-death line',
                           'next_check': 'RUNBOOK engine_dead check_next',
                           'safe_action': 'RUNBOOK engine_dead safe_action',
                           'rollback': 'RUNBOOK engine_dead rollback',
                           'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                           'score': 0,
                           'confirmed_by': None},
                          {'name': 'overload',
                           'title': 'overload: demand above capacity',
                           'verdict': 'ruled out',
                           'quantity': 'waiting, queue wait, running against the slot limit, KV',
                           'value': 'waiting 3, queue wait 99.9 ms, running 0 (its slot limit is not in /metrics), '
                                    'KV 90%',
                           'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a queue)',
                           'why': 'no queue: waiting 3, queue wait 99.9 ms',
                           'next_check': 'RUNBOOK overload check_next',
                           'safe_action': 'RUNBOOK overload safe_action',
                           'rollback': 'RUNBOOK overload rollback',
                           'restart_destroys': 'RUNBOOK overload restart_destroys',
                           'score': 0,
                           'confirmed_by': None},
                          {'name': 'contention',
                           'title': 'contention in generation (a batch too large)',
                           'verdict': 'ruled out',
                           'quantity': 'time between tokens against the running count',
                           'value': 'ITL 49.0 ms, running 0',
                           'expected': 'below 50 ms between tokens',
                           'why': '49.0 ms between tokens',
                           'next_check': 'ITL over time against running: if they rise together the batch is the '
                                         'cause',
                           'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add replicas.',
                           'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                           'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                           'score': 0,
                           'confirmed_by': None},
                          {'name': 'idle',
                           'title': 'nothing wrong on the server: idle',
                           'verdict': 'ruled out',
                           'quantity': 'running, waiting, health',
                           'value': 'running 0, waiting 3',
                           'expected': 'running > 0 whenever users are served',
                           'why': 'requests ran or waited',
                           'next_check': "whether the complaint's requests reach this server at all (router, DNS, "
                                         'client timeouts)',
                           'safe_action': 'No action on the server.',
                           'rollback': 'Nothing to roll back.',
                           'restart_destroys': 'Nothing to gain: an idle server has nothing to fix.',
                           'score': 0,
                           'confirmed_by': None},
                          {'name': 'stall',
                           'title': 'alive but not progressing (a stalled engine or worker)',
                           'verdict': 'not measured',
                           'quantity': 'generation tokens across the window, running',
                           'value': 'token movement not measured (one scrape), running 0',
                           'expected': 'tokens advance at every scrape while running > 0',
                           'why': 'no admitted work',
                           'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                           'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                           'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                           'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                           'score': 0,
                           'confirmed_by': None}],
           'healthy': None},
 'edges_below': {'hypotheses': [{'name': 'idle',
                                 'title': 'nothing wrong on the server: idle',
                                 'verdict': 'supported',
                                 'quantity': 'running, waiting, health',
                                 'value': 'running 0, waiting 0',
                                 'expected': 'running > 0 whenever users are served',
                                 'why': 'no request ran or waited in the window',
                                 'next_check': "whether the complaint's requests reach this server at all (router, "
                                               'DNS, client timeouts)',
                                 'safe_action': 'No action on the server.',
                                 'rollback': 'Nothing to roll back.',
                                 'restart_destroys': 'Nothing to gain: an idle server has nothing to fix.',
                                 'score': 10,
                                 'confirmed_by': None},
                                {'name': 'not_answering',
                                 'title': 'the server does not answer (or answers with errors)',
                                 'verdict': 'ruled out',
                                 'quantity': 'failed /health probes and /metrics scrapes by kind',
                                 'value': 'none',
                                 'expected': 'every /health and /metrics answered 2xx',
                                 'why': 'no probe was made',
                                 'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                               "log's last lines, and the router or firewall in between",
                                 'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                'keep its log.',
                                 'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                             'window.',
                                 'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                     'in-flight requests and the KV / prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'engine_dead',
                                 'title': 'the engine died',
                                 'verdict': 'ruled out',
                                 'quantity': '/health status and engine-death log lines',
                                 'value': '/health answered 299, 0 death line(s)',
                                 'expected': '/health 200, no engine-death line in its log',
                                 'why': '/health answered 299 and the log has no engine-death line',
                                 'next_check': 'RUNBOOK engine_dead check_next',
                                 'safe_action': 'RUNBOOK engine_dead safe_action',
                                 'rollback': 'RUNBOOK engine_dead rollback',
                                 'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'kv_pressure',
                                 'title': 'KV cache pressure (preemptions)',
                                 'verdict': 'ruled out',
                                 'quantity': 'KV usage, preemption delta, waiting',
                                 'value': 'KV 90%, preemptions +3',
                                 'expected': 'KV below 90%, no preemption in the window',
                                 'why': 'KV peaked at 90% (< 90%)',
                                 'next_check': 'RUNBOOK kv_pressure check_next',
                                 'safe_action': 'RUNBOOK kv_pressure safe_action',
                                 'rollback': 'RUNBOOK kv_pressure rollback',
                                 'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'overload',
                                 'title': 'overload: demand above capacity',
                                 'verdict': 'ruled out',
                                 'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                 'value': 'waiting 0, queue wait 100.0 ms, running 0 (its slot limit is not in '
                                          '/metrics), KV 90%',
                                 'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                             'queue)',
                                 'why': 'no queue: waiting 0, queue wait 100.0 ms',
                                 'next_check': 'RUNBOOK overload check_next',
                                 'safe_action': 'RUNBOOK overload safe_action',
                                 'rollback': 'RUNBOOK overload rollback',
                                 'restart_destroys': 'RUNBOOK overload restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'long_output',
                                 'title': 'long answers (a long-output workload)',
                                 'verdict': 'ruled out',
                                 'quantity': 'output tokens per request, stop reason',
                                 'value': '600 output tokens per request',
                                 'expected': 'below 512 tokens for chat-sized answers',
                                 'why': '600 output tokens per request',
                                 'next_check': 'the stop reason (finished_reason=length means cut at max_tokens), '
                                               'max_tokens and the prompt or model version that changed',
                                 'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for long '
                                                'answers; do not add GPUs for a workload change.',
                                 'rollback': 'Restore the previous max_tokens cap.',
                                 'restart_destroys': 'Nothing that helps: a restart does not shorten answers; it '
                                                     'loses in-flight requests and the prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'long_prompt',
                                 'title': 'long prompts',
                                 'verdict': 'ruled out',
                                 'quantity': 'input tokens per request, prefix-cache hits',
                                 'value': '999 input tokens per request',
                                 'expected': 'below 1000 tokens',
                                 'why': '999 input tokens per request',
                                 'next_check': 'prefix-cache hit rate and the prompt template version: different '
                                               'long prompts cost far more prefill than a repeated one',
                                 'safe_action': 'Shorten the prompt or reuse a fixed prefix so the prefix cache '
                                                'serves it.',
                                 'rollback': 'Restore the previous prompt template.',
                                 'restart_destroys': 'The prefix cache: a restart makes every long prompt pay full '
                                                     'prefill again.',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'stall',
                                 'title': 'alive but not progressing (a stalled engine or worker)',
                                 'verdict': 'not measured',
                                 'quantity': 'generation tokens across the window, running',
                                 'value': 'token movement not measured (one scrape), running 0',
                                 'expected': 'tokens advance at every scrape while running > 0',
                                 'why': 'no admitted work',
                                 'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                 'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                 'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                 'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                 'score': 0,
                                 'confirmed_by': None},
                                {'name': 'contention',
                                 'title': 'contention in generation (a batch too large)',
                                 'verdict': 'not measured',
                                 'quantity': 'time between tokens against the running count',
                                 'value': 'ITL not measured, running 0',
                                 'expected': 'below 50 ms between tokens',
                                 'why': 'time between tokens not measured',
                                 'next_check': 'ITL over time against running: if they rise together the batch is '
                                               'the cause',
                                 'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                'replicas.',
                                 'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                                 'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                 'score': 0,
                                 'confirmed_by': None}],
                 'healthy': 'Looks healthy: nothing measured supports a problem (from what was recorded)\n'
                            '   figures: queue wait 100.0 ms (means); running at most 0, waiting at most 0, KV at '
                            'most 90%; /health answered 299\n'
                            '   ruled out: 6 explanations (below); not measured here (listed last): alive but not '
                            'progressing (a stalled engine or worker); contention in generation (a batch too large)'},
 'never_answered': {'hypotheses': [{'name': 'not_answering',
                                    'title': 'the server does not answer (or answers with errors)',
                                    'verdict': 'supported',
                                    'quantity': 'failed /health probes and /metrics scrapes by kind',
                                    'value': '/health could not connect ×2, /health HTTP 503 ×5',
                                    'expected': 'every /health and /metrics answered 2xx',
                                    'why': '/health could not connect ×2, /health HTTP 503 ×5: the server did not '
                                           'answer every probe in the window',
                                    'next_check': 'whether the process is up and listening on that port (ss -ltnp), '
                                                  "its log's last lines, and the router or firewall in between",
                                    'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                   'keep its log.',
                                    'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                                'window.',
                                    'restart_destroys': 'Nothing the server still holds if it is not running; if it '
                                                        'is, in-flight requests and the KV / prefix cache.',
                                    'score': 120,
                                    'confirmed_by': None},
                                   {'name': 'engine_dead',
                                    'title': 'the engine died',
                                    'verdict': 'not measured',
                                    'quantity': '/health status and engine-death log lines',
                                    'value': '/health never answered (HTTP 503 ×5, could not connect ×2), 0 death '
                                             'line(s)',
                                    'expected': '/health 200, no engine-death line in its log',
                                    'why': '/health never answered (HTTP 503 ×5, could not connect ×2) and the log '
                                           'has no engine-death line',
                                    'next_check': 'RUNBOOK engine_dead check_next',
                                    'safe_action': 'RUNBOOK engine_dead safe_action',
                                    'rollback': 'RUNBOOK engine_dead rollback',
                                    'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                    'score': 0,
                                    'confirmed_by': None},
                                   {'name': 'stall',
                                    'title': 'alive but not progressing (a stalled engine or worker)',
                                    'verdict': 'not measured',
                                    'quantity': 'generation tokens across the window, running',
                                    'value': 'token movement not measured (one scrape), running not measured',
                                    'expected': 'tokens advance at every scrape while running > 0',
                                    'why': 'no admitted work',
                                    'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                    'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                    'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                    'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                    'score': 0,
                                    'confirmed_by': None},
                                   {'name': 'overload',
                                    'title': 'overload: demand above capacity',
                                    'verdict': 'not measured',
                                    'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                    'value': 'waiting not measured, queue wait not measured, running not measured '
                                             '(its slot limit is not in /metrics), KV not measured',
                                    'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                                'queue)',
                                    'why': 'no queue: waiting not measured, queue wait not measured',
                                    'next_check': 'RUNBOOK overload check_next',
                                    'safe_action': 'RUNBOOK overload safe_action',
                                    'rollback': 'RUNBOOK overload rollback',
                                    'restart_destroys': 'RUNBOOK overload restart_destroys',
                                    'score': 0,
                                    'confirmed_by': None}],
                    'healthy': None},
 'kv_edge': {'hypotheses': [{'name': 'kv_pressure',
                             'title': 'KV cache pressure (preemptions)',
                             'verdict': 'supported',
                             'quantity': 'KV usage, preemption delta, waiting',
                             'value': 'KV 90%, preemptions +1',
                             'expected': 'KV below 90%, no preemption in the window',
                             'why': 'KV peaked at 90% with 0 waiting and 1 preemption(s)',
                             'next_check': 'RUNBOOK kv_pressure check_next',
                             'safe_action': 'RUNBOOK kv_pressure safe_action',
                             'rollback': 'RUNBOOK kv_pressure rollback',
                             'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                             'score': 75,
                             'confirmed_by': None},
                            {'name': 'not_answering',
                             'title': 'the server does not answer (or answers with errors)',
                             'verdict': 'not measured',
                             'quantity': 'failed /health probes and /metrics scrapes by kind',
                             'value': 'none',
                             'expected': 'every /health and /metrics answered 2xx',
                             'why': 'no probe was made',
                             'next_check': 'whether the process is up and listening on that port (ss -ltnp), its '
                                           "log's last lines, and the router or firewall in between",
                             'safe_action': 'Take the replica out of routing until /health answers 200 again; keep '
                                            'its log.',
                             'rollback': 'Return it to routing once /health and /metrics answer for a full window.',
                             'restart_destroys': 'Nothing the server still holds if it is not running; if it is, '
                                                 'in-flight requests and the KV / prefix cache.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'contention',
                             'title': 'contention in generation (a batch too large)',
                             'verdict': 'not measured',
                             'quantity': 'time between tokens against the running count',
                             'value': 'ITL not measured, running not measured',
                             'expected': 'below 50 ms between tokens',
                             'why': 'time between tokens not measured',
                             'next_check': 'ITL over time against running: if they rise together the batch is the '
                                           'cause',
                             'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add replicas.',
                             'rollback': 'Raise the limit again when waiting grows while ITL stays in range.',
                             'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                             'score': 0,
                             'confirmed_by': None},
                            {'name': 'stall',
                             'title': 'alive but not progressing (a stalled engine or worker)',
                             'verdict': 'not measured',
                             'quantity': 'generation tokens across the window, running',
                             'value': 'token movement not measured (one scrape), running not measured',
                             'expected': 'tokens advance at every scrape while running > 0',
                             'why': 'no admitted work',
                             'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                             'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                             'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                             'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                             'score': 0,
                             'confirmed_by': None}],
             'healthy': None},
 'stall_at_floor': {'hypotheses': [{'name': 'stall',
                                    'title': 'alive but not progressing (a stalled engine or worker)',
                                    'verdict': 'supported',
                                    'quantity': 'generation tokens across the window, running',
                                    'value': 'tokens did not move, running 1',
                                    'expected': 'tokens advance at every scrape while running > 0',
                                    'why': '1 running and the generation counter did not move in 2.0 s',
                                    'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                    'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                    'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                    'restart_destroys': 'RUNBOOK alive_health_ok_no_progress restart_destroys',
                                    'score': 90,
                                    'confirmed_by': None},
                                   {'name': 'not_answering',
                                    'title': 'the server does not answer (or answers with errors)',
                                    'verdict': 'ruled out',
                                    'quantity': 'failed /health probes and /metrics scrapes by kind',
                                    'value': 'none',
                                    'expected': 'every /health and /metrics answered 2xx',
                                    'why': 'no probe was made',
                                    'next_check': 'whether the process is up and listening on that port (ss -ltnp), '
                                                  "its log's last lines, and the router or firewall in between",
                                    'safe_action': 'Take the replica out of routing until /health answers 200 again; '
                                                   'keep its log.',
                                    'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                                'window.',
                                    'restart_destroys': 'Nothing the server still holds if it is not running; if it '
                                                        'is, in-flight requests and the KV / prefix cache.',
                                    'score': 0,
                                    'confirmed_by': None},
                                   {'name': 'engine_dead',
                                    'title': 'the engine died',
                                    'verdict': 'not measured',
                                    'quantity': '/health status and engine-death log lines',
                                    'value': '/health not probed, 0 death line(s)',
                                    'expected': '/health 200, no engine-death line in its log',
                                    'why': '/health not probed and the log has no engine-death line',
                                    'next_check': 'RUNBOOK engine_dead check_next',
                                    'safe_action': 'RUNBOOK engine_dead safe_action',
                                    'rollback': 'RUNBOOK engine_dead rollback',
                                    'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                    'score': 0,
                                    'confirmed_by': None},
                                   {'name': 'overload',
                                    'title': 'overload: demand above capacity',
                                    'verdict': 'not measured',
                                    'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                    'value': 'waiting not measured, queue wait not measured, running 1 (its slot '
                                             'limit is not in /metrics), KV not measured',
                                    'expected': 'waiting 0 and queue wait ~0 (overload is the only signature with a '
                                                'queue)',
                                    'why': 'no queue: waiting not measured, queue wait not measured',
                                    'next_check': 'RUNBOOK overload check_next',
                                    'safe_action': 'RUNBOOK overload safe_action',
                                    'rollback': 'RUNBOOK overload rollback',
                                    'restart_destroys': 'RUNBOOK overload restart_destroys',
                                    'score': 0,
                                    'confirmed_by': None}],
                    'healthy': None},
 'overload_at_limit_kv_high': {'hypotheses': [{'name': 'kv_pressure',
                                               'title': 'KV cache pressure (preemptions)',
                                               'verdict': 'supported',
                                               'quantity': 'KV usage, preemption delta, waiting',
                                               'value': 'KV 95%, preemptions not measured',
                                               'expected': 'KV below 90%, no preemption in the window',
                                               'why': 'KV peaked at 95% with 4 waiting and not measured '
                                                      'preemption(s)',
                                               'next_check': 'RUNBOOK kv_pressure check_next',
                                               'safe_action': 'RUNBOOK kv_pressure safe_action',
                                               'rollback': 'RUNBOOK kv_pressure rollback',
                                               'restart_destroys': 'RUNBOOK kv_pressure restart_destroys',
                                               'score': 75,
                                               'confirmed_by': None},
                                              {'name': 'not_answering',
                                               'title': 'the server does not answer (or answers with errors)',
                                               'verdict': 'ruled out',
                                               'quantity': 'failed /health probes and /metrics scrapes by kind',
                                               'value': 'none',
                                               'expected': 'every /health and /metrics answered 2xx',
                                               'why': 'no probe was made',
                                               'next_check': 'whether the process is up and listening on that port '
                                                             "(ss -ltnp), its log's last lines, and the router or "
                                                             'firewall in between',
                                               'safe_action': 'Take the replica out of routing until /health answers '
                                                              '200 again; keep its log.',
                                               'rollback': 'Return it to routing once /health and /metrics answer '
                                                           'for a full window.',
                                               'restart_destroys': 'Nothing the server still holds if it is not '
                                                                   'running; if it is, in-flight requests and the KV '
                                                                   '/ prefix cache.',
                                               'score': 0,
                                               'confirmed_by': None},
                                              {'name': 'overload',
                                               'title': 'overload: demand above capacity',
                                               'verdict': 'ruled out',
                                               'quantity': 'waiting, queue wait, running against the slot limit, KV',
                                               'value': 'waiting 4, queue wait not measured, running 256 of the slot '
                                                        'limit 256, KV 95%',
                                               'expected': 'waiting 0 and queue wait ~0 (overload is the only '
                                                           'signature with a queue)',
                                               'why': 'no queue: waiting 4, queue wait not measured',
                                               'next_check': 'RUNBOOK overload check_next',
                                               'safe_action': 'RUNBOOK overload safe_action',
                                               'rollback': 'RUNBOOK overload rollback',
                                               'restart_destroys': 'RUNBOOK overload restart_destroys',
                                               'score': 0,
                                               'confirmed_by': None},
                                              {'name': 'stall',
                                               'title': 'alive but not progressing (a stalled engine or worker)',
                                               'verdict': 'ruled out',
                                               'quantity': 'generation tokens across the window, running',
                                               'value': 'tokens moved, running 256',
                                               'expected': 'tokens advance at every scrape while running > 0',
                                               'why': 'tokens kept moving',
                                               'next_check': 'RUNBOOK alive_health_ok_no_progress check_next',
                                               'safe_action': 'RUNBOOK alive_health_ok_no_progress safe_action',
                                               'rollback': 'RUNBOOK alive_health_ok_no_progress rollback',
                                               'restart_destroys': 'RUNBOOK alive_health_ok_no_progress '
                                                                   'restart_destroys',
                                               'score': 0,
                                               'confirmed_by': None},
                                              {'name': 'engine_dead',
                                               'title': 'the engine died',
                                               'verdict': 'not measured',
                                               'quantity': '/health status and engine-death log lines',
                                               'value': '/health not probed, 0 death line(s)',
                                               'expected': '/health 200, no engine-death line in its log',
                                               'why': '/health not probed and the log has no engine-death line',
                                               'next_check': 'RUNBOOK engine_dead check_next',
                                               'safe_action': 'RUNBOOK engine_dead safe_action',
                                               'rollback': 'RUNBOOK engine_dead rollback',
                                               'restart_destroys': 'RUNBOOK engine_dead restart_destroys',
                                               'score': 0,
                                               'confirmed_by': None}],
                               'healthy': None},
 'loop_not_waiting': {'hypotheses': [{'name': 'not_answering',
                                      'title': 'the server does not answer (or answers with errors)',
                                      'verdict': 'supported',
                                      'quantity': 'failed /health probes and /metrics scrapes by kind',
                                      'value': '/metrics timed out ×5',
                                      'expected': 'every /health and /metrics answered 2xx',
                                      'why': '/metrics timed out ×5: the server did not answer every probe in the '
                                             'window',
                                      'next_check': 'whether the process is up and listening on that port (ss '
                                                    "-ltnp), its log's last lines, and the router or firewall in "
                                                    'between',
                                      'safe_action': 'Take the replica out of routing until /health answers 200 '
                                                     'again; keep its log.',
                                      'rollback': 'Return it to routing once /health and /metrics answer for a full '
                                                  'window.',
                                      'restart_destroys': 'Nothing the server still holds if it is not running; if '
                                                          'it is, in-flight requests and the KV / prefix cache.',
                                      'score': 120,
                                      'confirmed_by': None},
                                     {'name': 'long_output',
                                      'title': 'long answers (a long-output workload)',
                                      'verdict': 'not measured',
                                      'quantity': 'output tokens per request, stop reason',
                                      'value': 'output tokens per request not measured (no request finished in the '
                                               'window)',
                                      'expected': 'below 512 tokens for chat-sized answers',
                                      'why': 'output tokens per request not measured (no request finished in the '
                                             'window)',
                                      'next_check': 'the stop reason (finished_reason=length means cut at '
                                                    'max_tokens), max_tokens and the prompt or model version that '
                                                    'changed',
                                      'safe_action': 'Cap max_tokens at the gateway or fix the prompt that asks for '
                                                     'long answers; do not add GPUs for a workload change.',
                                      'rollback': 'Restore the previous max_tokens cap.',
                                      'restart_destroys': 'Nothing that helps: a restart does not shorten answers; '
                                                          'it loses in-flight requests and the prefix cache.',
                                      'score': 0,
                                      'confirmed_by': None},
                                     {'name': 'contention',
                                      'title': 'contention in generation (a batch too large)',
                                      'verdict': 'not measured',
                                      'quantity': 'time between tokens against the running count',
                                      'value': 'ITL not measured, running not measured',
                                      'expected': 'below 50 ms between tokens',
                                      'why': 'time between tokens not measured',
                                      'next_check': 'ITL over time against running: if they rise together the batch '
                                                    'is the cause',
                                      'safe_action': 'Lower the concurrent-sequence limit (the slot limit) or add '
                                                     'replicas.',
                                      'rollback': 'Raise the limit again when waiting grows while ITL stays in '
                                                  'range.',
                                      'restart_destroys': 'In-flight requests and the KV / prefix cache.',
                                      'score': 0,
                                      'confirmed_by': None}],
                      'healthy': None}}


def _resolve(value):
    if isinstance(value, str) and value.startswith("RUNBOOK "):
        _, branch, name = value.split(" ")
        branch_ = runbook_for(branch)
        return branch_.check_next[0] if name == "check_next" else getattr(branch_, name)
    return value


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_explanations_ranked(name):
    hypotheses = diagnose(SCENARIOS[name](), SYMPTOM_OF.get(name))
    expected = EXPECTED[name]
    assert [h.to_dict() for h in hypotheses] == [{k: _resolve(v) for k, v in h.items()}
                                                 for h in expected["hypotheses"]]
    assert looks_healthy(SCENARIOS[name](), hypotheses) == expected["healthy"]


def test_the_doctor_s_ranges_and_symptoms():
    assert (LONG_OUTPUT_TOKENS, LONG_PROMPT_TOKENS, CONTENTION_ITL_S) == (512, 1000, 0.05)
    assert (CONNECT_GRACE_S, CONNECT_RETRY_S) == (5.0, 0.25)
    assert set(CANDIDATES) == set(SYMPTOMS) | {None}
    with pytest.raises(ValueError) as refused:
        diagnose(Readings(), "slow")
    assert str(refused.value) == "unknown symptom 'slow'"


@pytest.mark.parametrize("value, unit, pct, text", [
    (None, "", False, "not measured"), (0.305, "", True, "30%"), (0.9994, "s", False, "999.4 ms"),
    (1.0, "s", False, "1.00 s"), (12345.6, "", False, "12,346"), (3, " tokens", False, "3 tokens"),
])
def test_a_figure_in_words(value, unit, pct, text):
    assert _fmt(value, unit, pct) == text


def test_a_load_run_s_signature_as_readings():
    summary = {"signature": {"tokens_in": 44, "tokens_out": 128, "queue_wait_s": 0.01, "ttft_s": 0.2, "itl_s": 0.02,
                             "e2e_s": 2.7, "max_running": 8, "max_waiting": 2, "max_kv": 0.4},
               "server_view": {"slot_limit": 256, "preemptions": 3, "samples": 20, "errors": {"timeout": 2, "connect": 1}},
               "output_tokens_requested": 128}
    r = readings_from_load(summary)
    assert (r.tokens_in, r.tokens_out, r.queue_s, r.ttft_s, r.itl_s, r.e2e_s) == (44, 128, 0.01, 0.2, 0.02, 2.7)
    assert (r.max_running, r.max_waiting, r.max_kv, r.slot_limit, r.preemptions) == (8, 2, 0.4, 256, 3)
    assert r.scrapes == 17
    assert r.metrics_failures == {"timeout": 2, "connect": 1}
    assert r.length_share == 1.0
    assert r.sources == ["load run signature"]
    short = readings_from_load({"tokens_out": 100, "output_tokens_requested": 128})
    assert (short.tokens_out, short.length_share, short.scrapes, short.metrics_failures) == (100, None, 0, {})
    assert readings_from_load({"tokens_out": None, "output_tokens_requested": 128}).length_share is None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_port_that_refuses_for_the_whole_grace_is_said_refused():
    import time

    from servewatch.doctor.diagnose import refused_throughout

    port = _free_port()
    started = time.monotonic()
    assert refused_throughout(f"http://127.0.0.1:{port}/", 0.3, 0.05) is True
    took = time.monotonic() - started
    assert 0.3 <= took < 0.3 + 2.0                  # the grace, plus an allowance for a loaded machine
    assert refused_throughout(f"http://127.0.0.1:{port}/", 0.0) is True      # no grace: the first refusal decides


def test_a_port_that_listens_or_a_bad_url_is_not_said_refused():
    import socket
    import time

    from servewatch.doctor.diagnose import refused_throughout

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        started = time.monotonic()
        assert refused_throughout(f"http://127.0.0.1:{server.getsockname()[1]}/", 5.0) is False
        assert time.monotonic() - started < 2.0     # at the first connection, not after the grace
    assert refused_throughout("http://127.0.0.1:99999/", 5.0) is False        # no such port: not a refusal


# --- the quantities of a recorded window (the simulator's overload of tests/test_diagnose.py) -----------------

def _readings(window) -> dict:
    import dataclasses

    from servewatch.doctor.diagnose import readings_from_window

    readings = readings_from_window(window)
    out = dataclasses.asdict(readings)
    out["verdicts"] = [v.name for v in readings.verdicts]
    return out


def _same(got: dict, expected: dict) -> bool:
    """Equal key by key, floats to 1e-9 relative (the simulator's means are sums of float seconds)."""
    assert set(got) == set(expected)
    return all(got[k] == (pytest.approx(v, rel=1e-9) if isinstance(v, float) else v) for k, v in expected.items())


ENGINE_FACTS = {"health_dead_status": 503, "slot_limit_flag": "--max-num-seqs", "engine": "vLLM",
                "engine_alive_signs": "/health 200, no EngineDeadError / 'Worker proc ... died' lines",
                "engine_in_api_process": False, "metrics_wait_on_engine": False, "slots_path": None}
MEANS = {"queue_s": 2.1832180991768837, "ttft_s": 2.9476416230201723, "itl_s": 0.01938807742402998,
         "e2e_s": 4.696143489331007}


def _good(window):
    from servewatch.timeline.samples import MetricsSample

    return [m for m in window.samples() if isinstance(m, MetricsSample) and m.engines]


def test_the_quantities_of_an_overloaded_window():
    from tests.test_diagnose import _overload_window

    assert _same(_readings(_overload_window(1)), {
        "seconds": 12.0, "scrapes": 25, "max_running": 16.0, "max_waiting": 102.0, "max_kv": 0.023125,
        "slot_limit": 16.0, "tokens_moved": True, "health_last": 200, **ENGINE_FACTS, "preemptions": 0.0,
        "tokens_in": 55.0, "tokens_out": 146.453125, "length_share": 1.0, **MEANS, "engine_dead_lines": 0,
        "shutdown_lines": 0, "health_answers": 25, "health_failures": {}, "metrics_failures": {},
        "lifetime_means": False, "verdicts": ["overload"], "sources": ["recorded samples"]})


def test_one_scrape_gives_the_server_s_lifetime_means_said_as_such():
    from servewatch.timeline.window import Window
    from tests.test_diagnose import _overload_window

    last = _good(_overload_window(1))[-1]
    assert _same(_readings(Window.from_samples([last])), {
        "seconds": 0.0, "scrapes": 1, "max_running": 16.0, "max_waiting": 102.0, "max_kv": 0.01984375,
        "slot_limit": 16.0, "tokens_moved": None, "health_last": None, **ENGINE_FACTS, "preemptions": None,
        "tokens_in": None, "tokens_out": None, "length_share": 1.0, **MEANS, "engine_dead_lines": 0,
        "shutdown_lines": 0, "health_answers": 0, "health_failures": {}, "metrics_failures": {},
        "lifetime_means": True, "verdicts": [], "sources": ["recorded samples"]})


def test_two_scrapes_with_nothing_finished_between_fall_back_to_the_lifetime_means():
    import dataclasses

    from servewatch.timeline.window import Window
    from tests.test_diagnose import _overload_window

    last = _good(_overload_window(1))[-1]
    readings = _readings(Window.from_samples([last, dataclasses.replace(last, t=last.t + 0.5)]))
    assert (readings["seconds"], readings["scrapes"], readings["tokens_moved"], readings["preemptions"]) == (
        0.5, 2, False, 0.0)
    assert (readings["tokens_in"], readings["tokens_out"], readings["lifetime_means"]) == (None, None, True)
    assert {k: readings[k] for k in MEANS} == pytest.approx(MEANS, rel=1e-9)
    assert readings["length_share"] == 1.0


def _one(readings, name, config=None):
    return next(h for h in diagnose(readings, None, config) if h.name == name)


def test_each_explanation_at_the_edge_of_its_conditions():
    from servewatch.detectors.config import DetectorConfig

    assert _one(Readings(max_running=0, max_waiting=0, health_last=300), "idle").verdict == "ruled out"
    assert _one(Readings(max_running=0, max_waiting=0, health_last=None), "idle").verdict == "supported"
    assert _one(Readings(max_running=0, max_waiting=3), "idle").verdict == "ruled out"
    frozen = dict(max_running=2, tokens_moved=False, seconds=10.0)
    assert _one(Readings(**frozen, health_last=300), "stall").verdict == "ruled out"
    assert _one(Readings(max_running=2, tokens_moved=False), "stall", DetectorConfig(stall_floor_s=1.0)).verdict == \
        "ruled out"                                                # no duration: 0 s, below a 1 s floor
    instant = _one(Readings(max_running=2, tokens_moved=False), "stall", DetectorConfig(stall_floor_s=0.0))
    assert instant.why == "2 running and the generation counter did not move in 0.0 s"
    assert _one(Readings(max_kv=0.95, max_waiting=1, preemptions=0), "kv_pressure").verdict == "supported"
    assert _one(Readings(max_kv=0.5, max_waiting=1, max_running=3, tokens_moved=True), "overload").verdict == \
        "supported"
    hung = dict(health_answers=3, metrics_failures={"timeout": 2}, metrics_wait_on_engine=True, engine="llama.cpp")
    assert _one(Readings(**hung, health_last=300), "not_answering").title == \
        "the server does not answer (or answers with errors)"
    assert _one(Readings(**hung, health_last=299), "not_answering").title == \
        "the engine's loop does not answer (/health does)"
    dead = _one(Readings(health_last=503, health_dead_status=503), "engine_dead")
    assert (dead.verdict, dead.why) == ("supported", "/health answered 503")


def test_looks_healthy_from_several_sources_and_without_figures():
    readings = Readings(max_running=1, max_waiting=0, max_kv=0.1, sources=["recorded samples", "load run signature"])
    line = looks_healthy(readings, diagnose(readings))
    assert line.splitlines()[0] == ("Looks healthy: nothing measured supports a problem (from the recorded samples, "
                                    "load run signature)")
    bare = Readings(scrapes=1)
    line = looks_healthy(bare, diagnose(bare, "errors"))
    assert line.splitlines() == [
        "Looks healthy: nothing measured supports a problem (from what was recorded)",
        "   ruled out: 1 explanation (below); not measured here (listed last): the engine died; alive but not "
        "progressing (a stalled engine or worker); overload: demand above capacity"]
