"""The simulator's log lines follow the real engines' formats: servewatch's own dialect grammar (the
recorder's log tail) parses them, and the literals match the real captures."""

from __future__ import annotations

import io
import re
from pathlib import Path

from servewatch.clock import VirtualClock
from servewatch.dialects import sglang as sglang_dialect
from servewatch.dialects import vllm as vllm_dialect
from servewatch.sim import SimConfig, SimEngine

REAL_LOG = Path(__file__).resolve().parent / "fixtures" / "logs" / "vllm_kv_pressure_run.log"


def _run(dialect: str, **kw) -> tuple[SimEngine, list[str]]:
    clock = VirtualClock()
    log = io.StringIO()
    engine = SimEngine(SimConfig(dialect=dialect, profile="tiny-cpu", max_num_seqs=16, seed=2, **kw), clock,
                       log_stream=log)
    for _ in range(16):
        engine.submit(prompt_tokens=5, max_tokens=1500, ignore_eos=True)
    engine.run_until(clock.now() + 12)
    engine.run_until(clock.now() + 60)       # idle afterwards
    return engine, log.getvalue().splitlines()


def test_vllm_startup_kv_line_matches_the_real_server():
    _, lines = _run("vllm", log_stats_interval=2.0)
    kv_line = next(line for line in lines if "KV cache size" in line)
    assert kv_line.endswith("[kv_cache_utils.py:2327] CPU KV cache size: 8,192 tokens, Maximum concurrency for "
                            "2,048 tokens per request: 4.00x")
    real = next(line for line in REAL_LOG.read_text().splitlines() if "KV cache size" in line)
    assert kv_line.split("] ", 1)[1] == real.split("] ", 1)[1]


def test_vllm_stats_lines_parse_and_preemptions_appear_only_when_non_zero():
    _, lines = _run("vllm", log_stats_interval=2.0)
    stats = []
    for line in lines:
        prefix = vllm_dialect.LOG_PREFIX.match(line)
        if prefix and "Engine 000:" in line:
            assert prefix.group("process") == "APIServer" and prefix.group("where") == "loggers.py:335"
            match = vllm_dialect.STATS_LINE.search(prefix.group("msg"))
            assert match, line
            stats.append(match)
    assert stats
    with_preemptions = [m for m in stats if m.group("preemptions")]
    assert with_preemptions and all(int(m.group("preemptions")) > 0 for m in with_preemptions)
    assert any(m.group("preemptions") is None for m in stats)
    assert max(float(m.group("kv_pct")) for m in stats) > 90
    assert all(m.group("device") == "CPU" for m in stats)
    # idle intervals print one all-zero line, then go quiet (DEBUG in vLLM)
    tail = [m for m in stats if float(m.group("gen_tps")) == 0 and float(m.group("prompt_tps")) == 0]
    assert len(tail) == 1


def test_sglang_decode_prefill_and_retraction_lines_parse():
    _, lines = _run("sglang", kv_tokens=4096)
    messages = []
    for line in lines:
        prefix = sglang_dialect.LOG_PREFIX.match(line)
        if prefix:
            messages.append(prefix.group("msg"))
    decode = [m for m in messages if sglang_dialect.DECODE_LINE.search(m)]
    prefill = [m for m in messages if sglang_dialect.PREFILL_LINE.search(m)]
    retract = [m for m in messages if sglang_dialect.RETRACTION_LINE.search(m)]
    assert decode and prefill and retract
    assert all(m.startswith("Decode batch, #running-req: ") for m in decode)


def test_engine_death_lines_are_the_ones_the_dialect_knows():
    for dialect, module in (("vllm", vllm_dialect), ("sglang", sglang_dialect)):
        clock = VirtualClock()
        log = io.StringIO()
        engine = SimEngine(SimConfig(dialect=dialect, profile="tiny-cpu"), clock, log_stream=log)
        engine.submit(prompt_tokens=5, max_tokens=100)
        engine.run_until(clock.now() + 0.01)
        engine.inject({"kind": "engine-death"})
        text = log.getvalue()
        assert any(literal in text for literal in module.ENGINE_DEAD_LINES), dialect
        if dialect == "vllm":
            assert module.WORKER_DIED_LINE.search(text)


def test_log_times_follow_the_virtual_clock():
    clock = VirtualClock(start=1_800_000_000.0)
    log = io.StringIO()
    SimEngine(SimConfig(profile="tiny-cpu"), clock, log_stream=log)
    stamp = re.search(r" (\d\d-\d\d \d\d:\d\d:\d\d) ", log.getvalue()).group(1)
    import time
    assert stamp == time.strftime("%m-%d %H:%M:%S", time.localtime(1_800_000_000.0))
