"""`servewatch guard` on a real SGLang it started, with its default --act-on: one prefill step so long that
SGLang's own health check fails → guard does nothing (slow is not stalled); then SIGTERM to guard → SGLang
drains its running requests and exits 0 → guard exits 0. (Guard attached to a stalled SGLang, acting on it, is
a fault of plans/short-sglang.yaml.)
"""

from __future__ import annotations

import re
import shutil
import signal
import time

import pytest
from lab_cli import assert_bundles_verify
from lab_guard import GuardProcess, gone
from lab_observations import log_excerpt
from lab_sglang import HealthProbes, wait_steady_steps
from lab_traffic import Traffic

from servewatch.dialects.sglang import HEALTH_CHECK_FAILED_LINES
from servewatch.lab.server import free_port
from servewatch.lab.sgl_kernel_stand_in import stand_in_calls
from servewatch.lab.sglang_server import sglang_supervised_command, sglang_tmp_dir

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]

STALL = "alive_health_ok_no_progress"
DEATHS = ("engine_dead", "process_exit")


# -- started by guard: one very long prefill step, then SIGTERM ------------------------------------------

# 48 prompts of 4,000 tokens sent at once, prefill chunks up to 200,000 tokens: SGLang forms one or two
# forward steps of up to ~190,000 tokens, which the tiny model computes on 2 CPU cores in 4-19 s (by the
# machine's load), the scheduler at 95-190 % CPU. SGLang's health check is answered after every batch, so
# only a step longer than SGLANG_HEALTH_CHECK_TIMEOUT fails it: 20 s by default, 2 s here, so the tiny
# model's step is "too long" the way a huge prefill is on a GPU.
LONG_PROMPTS, LONG_PROMPT_TOKENS = 48, 4000
# Token ids inside the tiny model's 2,048-token vocabulary (SGLang 0.5.23 does not check them: an id past
# the vocabulary kills its scheduler with an IndexError).
LONG_PROMPT = [10 + (7 * j) % 2000 for j in range(LONG_PROMPT_TOKENS)]
LONG_STEP_SERVER = {
    "max_total_tokens": 200_000, "context_length": 4096, "max_running_requests": 64,
    "extra_args": ("--chunked-prefill-size", "200000", "--max-prefill-tokens", "200000",
                   "--mem-fraction-static", "0.5"),
    "extra_env": (("SGLANG_HEALTH_CHECK_TIMEOUT", "2"),),
}
_PREFILL_LINE = re.compile(r"Prefill batch, #new-seq: (?P<seqs>\d+), #new-token: (?P<tokens>\d+), .*"
                           r"input throughput \(token/s\): (?P<tps>[\d.]+)")


def test_guard_leaves_a_slow_sglang_alone_and_drains_it_on_sigterm(sglang_lab, sglang_run_dir):
    port = free_port()
    config = sglang_lab.config(port=port, **LONG_STEP_SERVER)
    url = f"http://127.0.0.1:{port}"
    model = str(sglang_lab.model.path)
    with GuardProcess(url, sglang_run_dir, "slow", "--drain-timeout", "90s",
                      "--log-file", str(sglang_run_dir / "slow.guard-stderr.txt"), "--",
                      *sglang_supervised_command(sglang_lab.venv.python, config, port)) as guard:
        try:
            ready = guard.wait_server_ready(url)
            decoding = Traffic(url, model=model, n=2, concurrency=2, max_tokens=1500, timeout_s=300).start()
            assert wait_steady_steps(url) is not None, "the decode requests never kept the scheduler stepping"
            probes = HealthProbes(url, seconds=120)
            probes.start()
            burst_at = time.monotonic()
            burst = Traffic(url, model=model, n=LONG_PROMPTS, concurrency=LONG_PROMPTS, max_tokens=4,
                            prompt=LONG_PROMPT, timeout_s=300).start()
            assert burst.wait(300), "the long prompts were not answered"
            assert decoding.wait(300), "the decode requests did not finish"
            probes.stop.set()
            probes.join(timeout=10)
            slow_lines = list(guard.lines)
            slow_verdicts = guard.verdict_names()
            log = guard.stderr_text()

            # SIGTERM with requests running: SGLang finishes them, then exits.
            draining = Traffic(url, model=model, n=4, concurrency=4, max_tokens=600, timeout_s=300).start()
            assert wait_steady_steps(url) is not None, "the drain's requests never ran"
            guard.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            code = guard.proc.wait(timeout=150)
            ended = time.monotonic()
            draining.wait(60)
            events = guard.events()
            tree = list(guard.tree)
            stderr = guard.stderr_text()
        finally:
            shutil.rmtree(sglang_tmp_dir(config, port), ignore_errors=True)

    steps = [(int(m["seqs"]), int(m["tokens"]), float(m["tps"])) for m in _PREFILL_LINE.finditer(log)]
    longest = max(steps, key=lambda s: s[1])
    health_failed = sum(log.count(line) for line in HEALTH_CHECK_FAILED_LINES)
    health_answers = [p for p in probes.points if p.path == "/health" and p.asked >= burst_at]
    slowest = max((p.answered - p.asked, p.status) for p in health_answers)
    record = {"ready_s": round(ready, 1), "verdicts_while_slow": sorted(set(slow_verdicts)),
              "longest_prefill_step": {"seqs": longest[0], "tokens": longest[1], "seconds": round(longest[1] / longest[2], 1)},
              "sglang_health_check_failed_lines": health_failed,
              "health_timeouts": sum(1 for p in health_answers if p.status == "timeout"),
              "health_probes": len(health_answers), "slowest_health_answer": [round(slowest[0], 1), str(slowest[1])],
              "drain_s": round(ended - signalled, 1), "guard_exit": code,
              "drained_requests": sorted(set(map(str, draining.result.statuses)))}
    sglang_lab.obs.record("guard_slow_then_drain", record)
    sglang_lab.obs.say(f"guard, one {longest[1]:,}-token prefill step (~{longest[1] / longest[2]:.0f} s): SGLang logged "
                       f"'Health check failed' {health_failed} times, /health timed out {record['health_timeouts']} of "
                       f"{len(health_answers)} probes; verdicts {record['verdicts_while_slow']}, no action. SIGTERM → "
                       f"drained {len(draining.result.statuses)} requests, exit {code} after {ended - signalled:.1f} s")
    assert health_failed >= 1, "the step never outlasted SGLang's own health check: the case proves nothing"
    assert burst.result.statuses == [200] * LONG_PROMPTS and burst.result.completion_tokens == [4] * LONG_PROMPTS
    assert decoding.result.completion_tokens == [1500] * 2, decoding.result.statuses
    assert not [v for v in slow_verdicts if v == STALL or v in DEATHS], f"a slow SGLang was called {slow_verdicts}"
    assert not [line for _, line in slow_lines if line.get("guard") in ("stacks", "kill")], slow_lines
    assert "drain" in events and "kill" not in events, events
    drain_at = events["drain"][0]
    said_while_draining = [line["verdict"] for at, line in guard.lines
                           if at >= drain_at and "verdict" in line and "guard" not in line]
    assert said_while_draining == [], f"the drain guard asked for was reported as {said_while_draining}"
    assert events["exit"][1]["code"] == code == 0, log_excerpt(stderr, max_lines=40)
    assert "the server exited 0 after the drain" in stderr
    assert draining.result.statuses == [200] * 4 and draining.result.completion_tokens == [600] * 4, \
        "SIGTERM cut the running requests instead of draining them"
    assert all(gone(proc) for proc in tree), [(p.pid, p.status()) for p in tree if not gone(p)]
    assert stand_in_calls(stderr) == [], "SGLang called a stubbed sgl_kernel op"
    assert_bundles_verify(guard.out)
