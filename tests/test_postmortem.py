"""servewatch postmortem on the reconstructed overload-then-OOM log and on the real vLLM / SGLang logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servewatch.cli import main
from servewatch.doctor.log_files import read_lines
from servewatch.doctor.log_record import read_record
from servewatch.doctor.model_config import model_shape
from servewatch.doctor.postmortem import postmortem

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
OOM_LOG = FIXTURES / "postmortem" / "vllm_overload_oom_reconstructed.log"
CONFIG = FIXTURES / "postmortem" / "qwen2.5-7b-instruct-awq.config.json"
SGLANG = FIXTURES / "sglang_real"


def _pm(path: Path, **kw):
    return postmortem(read_record(read_lines([str(path)])), **kw)


def _oom():
    return _pm(OOM_LOG, shape=model_shape(json.loads(CONFIG.read_text())))


def test_reconstructed_oom_names_the_logits_sized_temporary_not_the_kv_cache():
    pm = _oom()
    assert pm.death.classification == "runtime_oom"
    assert pm.death.innermost_engine_frame == "vllm.v1.sample.sampler.apply_penalties"
    assert pm.death.exception == "torch.OutOfMemoryError"
    assert pm.requested_bytes == 112 * 2**20
    logits = pm.arithmetic[0]
    assert logits.verdict == "matches"
    assert logits.bytes == 193 * 152_064 * 4 == 117_393_408
    assert "193 running × 152,064 vocabulary × 4 bytes = 117,393,408 B = 111.95 MiB" in logits.formula
    half = next(t for t in pm.arithmetic if "half" in t.suspect)
    assert half.verdict == "does not match"           # the test discriminates: ×2 is half the request
    kv = next(t for t in pm.arithmetic if t.suspect == "KV cache")
    assert kv.verdict == "ruled out" and "15.9 %" in kv.why
    assert pm.conclusion == "not the KV cache: a logits-sized temporary"
    assert pm.partial == []


def test_reconstructed_oom_timeline_reads_the_older_stats_generation_and_the_state_at_death():
    pm = _oom()
    points = [(s.clock[-8:], s.running, s.kv_pct) for s in pm.record.stats]
    assert points == [("15:53:12", 3, 0.5), ("15:53:22", 46, 3.6), ("15:53:32", 144, 11.4), ("15:53:37", 193, 15.9)]
    assert pm.record.stats_namings == {"vLLM stats lines without an engine number"}
    assert pm.at_death.running == 193 and pm.at_death.source == "engine dump at death"


def test_the_actions_follow_from_the_evidence_with_rollbacks():
    pm = _oom()
    assert "0.9 to 0.85" in pm.actions[0].action
    assert "below 193" in pm.actions[1].action
    assert all(a.rollback for a in pm.actions)


def test_without_a_vocabulary_the_arithmetic_is_partial_and_says_why():
    pm = _pm(OOM_LOG)
    assert pm.arithmetic[0].verdict == "cannot test"
    assert pm.conclusion == "not the KV cache (the logits-sized suspect is untested)"
    assert any("vocabulary is unknown" in note for note in pm.partial)


@pytest.mark.parametrize(("path", "expected"), [
    (FIXTURES / "vllm_real" / "engine_death_by_worker_sigkill.log", "engine_death_behind_live_api"),
    (FIXTURES / "vllm_real" / "small_slots_server.log", "engine_death_behind_live_api"),
    (FIXTURES / "logs" / "vllm_engine_death_by_worker_sigkill.log", "engine_death_behind_live_api"),
    (FIXTURES / "vllm_real" / "startup_failure_undersized_kv.log", "startup_sizing_error"),
    (FIXTURES / "vllm_real" / "default_server.log", "clean_shutdown"),
    (FIXTURES / "logs" / "vllm_kv_pressure_run.log", "no_last_words"),
    (SGLANG / "server.log", "clean_shutdown"),
    (SGLANG / "server_run2.log", "clean_shutdown"),
    (SGLANG / "tp2_cpu_startup_failure.log", "startup_failure"),
], ids=lambda v: v.name if isinstance(v, Path) else v)
def test_each_real_log_is_classified(path, expected):
    assert _pm(path).death.classification == expected


def test_real_worker_sigkill_names_the_engine_core_and_the_api_outliving_it():
    pm = _pm(FIXTURES / "vllm_real" / "engine_death_by_worker_sigkill.log")
    assert pm.death.process == "EngineCore"
    assert pm.death.innermost_engine_frame.startswith("vllm.")
    assert "API server lived on" in pm.death.summary
    assert "exits 0" in pm.death.summary


def test_real_undersized_kv_rebuilds_the_engines_message_and_stages():
    pm = _pm(FIXTURES / "vllm_real" / "startup_failure_undersized_kv.log")
    assert "max seq len (2048)" in pm.death.engine_message
    assert pm.record.ready_t is None


def test_a_startup_failure_that_is_not_sizing_names_the_engines_message_and_no_memory_advice():
    """SGLang 0.5.23 with --tp-size 2 on CPU (run here): its TP group builds a NCCL communicator and torch
    refuses the CPU device. Advising more memory would send the user the wrong way."""
    pm = _pm(SGLANG / "tp2_cpu_startup_failure.log")
    assert pm.death.engine_message == "Expected a cuda device, but got: cpu"
    assert pm.death.exception == "ValueError" and pm.record.ready_t is None
    [action] = pm.actions
    assert '"Expected a cuda device, but got: cpu"' in action.action
    assert "memory" not in action.action and "mem-fraction" not in action.action


def test_real_default_server_startup_stages_and_sigterm():
    pm = _pm(FIXTURES / "vllm_real" / "default_server.log")
    stages = {s.name: s for s in pm.record.startup}
    assert stages["KV sizing"].numbers == {"tokens": 8192, "per_request": 2048, "concurrency": 4.0}
    assert stages["engine init"].seconds == 12.32
    assert stages["ready"].seconds == 48.0       # 15:45:21 → 15:46:09
    assert pm.death.signal == "SIGTERM"
    assert len(pm.record.stats) > 100 and all(s.source == "stats line" for s in pm.record.stats)


def test_sglang_stats_and_startup_timings():
    path = SGLANG / "server_run2.log"
    pm = _pm(path)
    assert pm.record.dialect == "sglang"
    assert max(s.running for s in pm.record.stats) == 20
    assert pm.record.kv_cache_tokens == 8192
    assert pm.record.settings["max_running_requests"] == 2048


def test_rotated_parts_are_read_oldest_first_and_gzip_is_read(tmp_path):
    import gzip

    lines = OOM_LOG.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "15:53:22" in line)
    with gzip.open(tmp_path / "server.log.1.gz", "wt") as f:
        f.writelines(lines[:cut])
    (tmp_path / "server.log").write_text("".join(lines[cut:]))
    whole = _oom()
    parts = postmortem(read_record(read_lines([str(tmp_path / "server.log"), str(tmp_path / "server.log.1.gz")])),
                       shape=model_shape(json.loads(CONFIG.read_text())))
    assert [s.running for s in parts.record.stats] == [s.running for s in whole.record.stats]
    assert parts.conclusion == whole.conclusion


def test_year_less_stamps_cross_the_new_year():
    from servewatch.doctor.log_grammar import StampClock

    clock = StampClock()
    assert clock.seconds("12-31 23:59:50") == 0.0
    assert clock.seconds("01-01 00:00:10") == 20.0


def test_a_log_cut_inside_a_traceback_is_partial(tmp_path):
    lines = OOM_LOG.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "OutOfMemoryError" in line)
    path = tmp_path / "cut.log"
    path.write_text("".join(lines[:cut]))
    pm = _pm(path)
    assert any("cut off after" in note and "exception is unknown" in note for note in pm.partial)
    assert pm.conclusion is None


# --- the command: outputs, privacy, bad input ------------------------------------------------------------

def test_command_json_and_html_carry_the_verdict_and_nothing_private(tmp_path, capsys):
    html = tmp_path / "pm.html"
    code = main(["postmortem", str(OOM_LOG), "--model-config", str(CONFIG), "--json", "--html", str(html)])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert doc["arithmetic"]["conclusion"] == "not the KV cache: a logits-sized temporary"
    assert doc["death"]["classification"] == "runtime_oom"
    page = html.read_text()
    assert "<svg" in page and "not the KV cache: a logits-sized temporary" in page
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for secret in ("Summarise the quarterly report", "chatcmpl-7f3e9a0c11d24b6b", "/srv/models", "/home/ops",
                   "10.0.0.7", "site-packages", "frequency_penalties.unsqueeze"):
        assert secret not in out, secret
        assert secret not in page, secret


def test_command_text_view_prints_the_match(capsys):
    code = main(["postmortem", str(OOM_LOG), "--vocab-size", "152064"])
    out = capsys.readouterr().out
    assert code == 0
    assert "111.95 MiB" in out and "not the KV cache: a logits-sized temporary" in out


def test_command_config_without_vocabulary_is_partial_with_one_line(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text('{"hidden_size": 3584}')
    code = main(["postmortem", str(OOM_LOG), "--model-config", str(config)])
    captured = capsys.readouterr()
    assert code == 1
    assert "Timeline" in captured.out                       # partial results are still printed
    assert "no vocab_size" in captured.err and "vocabulary is unknown" in captured.err


@pytest.mark.parametrize(("content", "message"), [
    (b"", "empty file"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "binary data"),
    (b"Jan 01 00:00:01 host sshd[12]: Accepted publickey for root\n" * 50, "not an engine log"),
])
def test_command_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "input.log"
    path.write_bytes(content)
    code = main(["postmortem", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and message in err[0] and err[0].startswith("servewatch postmortem:")


def test_command_missing_file_and_bad_config(tmp_path, capsys):
    assert main(["postmortem", str(tmp_path / "nope.log")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert main(["postmortem", str(OOM_LOG), "--model-config", str(bad)]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_an_sglang_runtime_oom_names_sglangs_own_flags(tmp_path):
    path = SGLANG / "server_run2.log"
    lines = path.read_text().splitlines()
    decode = max(i for i, line in enumerate(lines) if "Decode batch" in line)
    oom = ["[2026-11-30 13:53:22] Scheduler hit an exception: Traceback (most recent call last):",
           '  File "/sglang/srt/managers/scheduler.py", line 2900, in run_batch',
           "    logits = self.model_runner.forward(batch)",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of "
           "11.63 GiB of which 1.02 GiB is free."]
    log = tmp_path / "sglang.log"
    log.write_text("\n".join([*lines[:decode + 1], *oom]) + "\n")
    pm = _pm(log)
    assert pm.record.dialect == "sglang" and pm.death.classification == "runtime_oom"
    first, second = pm.actions[:2]
    assert first.action.startswith("Restart with --mem-fraction-static lowered") and "--gpu-memory" not in first.action
    assert second.action.endswith("(--max-running-requests)")
