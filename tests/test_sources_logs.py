"""The log tail: real vLLM log lines → typed events (numbers and grammar literals only), bounded
reads, rotation, truncation and a missing file."""

import asyncio

from servewatch.clock import VirtualClock
from servewatch.sources.logs import MAX_LINE_BYTES, LogTail, parse_line
from tests.conftest import FIXTURES

LOGS = FIXTURES / "logs"


def poll(tail):
    return asyncio.run(tail.poll())


def test_real_engine_death_log_gives_stats_and_engine_dead_events():
    events = [e for line in (LOGS / "vllm_engine_death_by_worker_sigkill.log").read_text(errors="replace").splitlines()
              for e in parse_line(line, 1.0)]
    kinds = [e.kind for e in events]
    assert kinds.count("stats") == 9
    dead = [e for e in events if e.kind == "engine_dead"]
    reasons = {e.fields["reason"] for e in dead}
    assert {"Worker proc died unexpectedly", "EngineCore encountered a fatal error.", "EngineDeadError"} <= reasons
    startup = [e.fields for e in events if e.kind == "startup"]
    assert {"dialect": "vllm", "stage": "kv_cache_size", "tokens": 4511872, "per_request": 2048,
            "concurrency": 2203.06} in startup
    assert {"dialect": "vllm", "stage": "ready"} in startup


def test_stats_line_fields_and_preemptions():
    line = ("(APIServer pid=13124) INFO 11-29 13:42:51 [loggers.py:335] Engine 000: Avg prompt throughput: 40.0 "
            "tokens/s, Avg generation throughput: 3511.2 tokens/s, Running: 8 reqs, Waiting: 11 reqs, "
            "Preemptions: 16, CPU KV cache usage: 95.2%, Prefix cache hit rate: 0.0%")
    stats, preemption = parse_line(line, 5.0)
    assert stats.fields["running"] == 8 and stats.fields["waiting"] == 11 and stats.fields["kv_pct"] == 95.2
    assert preemption.kind == "preemption" and preemption.fields["count"] == 16


def test_sglang_lines():
    decode = parse_line("[2026-01-01 12:00:00] Decode batch, #running-req: 3, #token: 38, token usage: 0.01, "
                        "cuda graph: True, gen throughput (token/s): 212.37, #queue-req: 4", 1.0)
    assert decode[0].fields["running"] == 3 and decode[0].fields["queue"] == 4
    retract = parse_line("[2026-01-01 12:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
                         "#new_tokens_gained: 640, #new_token_ratio: 0.7000 -> 0.8000", 1.0)
    assert retract[0].kind == "retraction" and retract[0].fields["retracted"] == 2
    crash = parse_line("[2026-01-01 12:00:00] Subprocess scheduler_0 (pid=77) crashed with exit code -9. "
                       "Triggering SIGQUIT for cleanup...", 1.0)
    assert crash[0].kind == "engine_dead"


def test_events_never_carry_the_line_text():
    line = ("(EngineCore pid=1) ERROR 11-29 13:43:09 [core.py:1512] EngineCore encountered a fatal error. "
            "prompt=SECRET-PROMPT /home/user/models/private")
    (event,) = parse_line(line, 1.0)
    assert "SECRET" not in repr(event) and "/home" not in repr(event)


def test_tail_follows_new_lines_rotation_truncation_and_missing_file(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("old line before watching: Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
                    "throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%\n")
    clock = VirtualClock()
    tail = LogTail(str(path), clock, 1.0)
    assert poll(tail) == []                                   # starts at the end
    with path.open("a") as f:
        f.write("INFO:     Application startup complete.\n(APIServer pid=1) ERROR 11-29 13:43:09 [x.py:1] "
                "Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting")
    events = poll(tail)
    assert [e.kind for e in events] == ["startup"]           # the partial line waits for its newline
    with path.open("a") as f:
        f.write(" down executor.\n")
    (dead,) = poll(tail)
    assert dead.kind == "engine_dead" and dead.fields["exit_code"] == -9
    path.write_text("")                                       # truncated (copytruncate rotation)
    with path.open("a") as f:
        f.write("INFO:     Application startup complete.\n")
    assert [e.kind for e in poll(tail)] == ["startup"]
    path.rename(tmp_path / "server.log.1")                    # rotated away: missing once
    assert [e.fields for e in poll(tail)] == [{"error": "no_such_file"}]
    assert poll(tail) == []
    path.write_text("INFO:     Application startup complete.\n")   # a new file appears
    assert [e.kind for e in poll(tail)] == ["startup"]


def test_oversized_lines_are_dropped_and_reads_are_bounded(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("")
    tail = LogTail(str(path), VirtualClock(), 1.0, max_bytes_per_poll=4096)
    poll(tail)
    with path.open("a") as f:
        f.write("x" * (MAX_LINE_BYTES + 10) + "\nINFO:     Application startup complete.\n")
    events = []
    for _ in range(40):                                       # 4 KiB per poll
        events += poll(tail)
    assert [e.kind for e in events] == ["startup"]
    assert tail.lines_dropped == 1


def test_a_log_file_created_after_watching_began_is_read_from_its_start(tmp_path):
    path = tmp_path / "later.log"
    tail = LogTail(str(path), VirtualClock(), 1.0)
    assert [e.kind for e in poll(tail)] == ["unavailable"]
    path.write_text("INFO:     Application startup complete.\n")
    assert [e.kind for e in poll(tail)] == ["startup"]


def test_startup_failure_keeps_vllms_numbers_not_its_text():
    line = ("(EngineCore pid=1) ERROR 11-29 13:43:09 [core.py:1] ValueError: To serve at least one request with the "
            "model's max seq len (2048), (0.0 GiB KV cache is needed, which is larger than the available KV cache "
            "memory (0.0 GiB). Based on the available memory, the estimated maximum model length is 1024. Try "
            "increasing `gpu_memory_utilization` for /models/secret-model")
    (event,) = parse_line(line, 1.0)
    assert event.kind == "startup_failure"
    assert event.fields == {"dialect": "vllm", "reason": "To serve at least one request with the model's max seq len",
                            "max_model_len": 2048, "needed_gib": 0.0, "available_gib": 0.0}
