"""The SGLang lab without SGLang: its command line and environment, and the test-only sgl_kernel stand-in
(what it implements, how a call to anything else shows in a log, and how the lab finds that)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from servewatch.lab.sgl_kernel_stand_in import DIR_NAME, STAND_IN_CALLED, stand_in_calls, write_stand_in
from servewatch.lab.sglang_server import (SglangConfig, sglang_command, sglang_environment, sglang_supervised_command,
                                         sglang_tmp_dir)
from servewatch.lab.sglang_venv import SGLANG_RECIPE, sglang_venv_dir


def _config(tmp_path: Path, **overrides) -> SglangConfig:
    return SglangConfig(model_dir=tmp_path / "model", stand_in_dir=tmp_path / "stand-in",
                        files_dir=tmp_path / "files", **overrides)


def _run_in_stand_in(stand_in: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(stand_in)})


def test_command_serves_on_loopback_with_metrics_and_an_idle_scheduler_that_sleeps(tmp_path):
    command = sglang_command(Path("/venv/bin/python"), _config(tmp_path), 30001)
    text = " ".join(command)
    assert command[:3] == ["/venv/bin/python", "-m", "sglang.launch_server"]
    for flag in ("--device cpu", "--host 127.0.0.1", "--port 30001", "--enable-metrics", "--sleep-on-idle",
                 "--attention-backend torch_native", "--cuda-graph-backend-decode disabled",
                 "--cuda-graph-backend-prefill disabled", "--max-total-tokens 8192", "--context-length 2048"):
        assert flag in text, flag
    assert "--disable-cuda-graph" not in text            # deprecated in 0.5.23
    assert "--served-model-name" not in text              # served by its path, as a user's model would be
    assert "--max-running-requests" not in text
    limited = sglang_command(Path("/p"), _config(tmp_path, max_running_requests=4), 1)
    assert limited[limited.index("--max-running-requests") + 1] == "4"


def test_environment_keeps_sglangs_files_in_the_lab_and_puts_only_the_stand_in_on_the_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    config = _config(tmp_path)
    env = sglang_environment(config, 30001)
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["PYTHONPATH"] == str(config.stand_in_dir)
    assert Path(env["SGLANG_CACHE_DIR"]).is_dir() and Path(env["SGLANG_CACHE_DIR"]).is_relative_to(config.files_dir)
    assert Path(env["TMPDIR"]) == sglang_tmp_dir(config, 30001) and Path(env["TMPDIR"]).is_dir()
    assert env["HF_HUB_OFFLINE"] == "1"


def test_supervised_command_gives_sglang_the_lab_environment_through_env(tmp_path, monkeypatch):
    # A supervisor (`servewatch guard -- COMMAND`) keeps its own environment; env(1) sets SGLang's and
    # execs it in the same process. Run for real, with a python that prints what it got.
    monkeypatch.setenv("VIRTUAL_ENV", "/supervisors/venv")
    config = _config(tmp_path, extra_env=(("SGLANG_HEALTH_CHECK_TIMEOUT", "2"),))
    command = sglang_supervised_command(Path(sys.executable), config, 30001)
    assert command[0] == "env" and command[command.index(sys.executable):] == sglang_command(
        Path(sys.executable), config, 30001)
    probe = command[:command.index(sys.executable) + 1] + [
        "-c", "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}))",
        "PYTHONPATH", "SGLANG_HEALTH_CHECK_TIMEOUT", "TMPDIR", "VIRTUAL_ENV"]
    seen = json.loads(subprocess.run(probe, capture_output=True, text=True, timeout=60, check=True).stdout)
    assert seen == {"PYTHONPATH": str(config.stand_in_dir), "SGLANG_HEALTH_CHECK_TIMEOUT": "2",
                    "TMPDIR": str(sglang_tmp_dir(config, 30001)), "VIRTUAL_ENV": None}


def test_venv_recipe_is_pinned_beside_the_vllm_one(tmp_path):
    assert (SGLANG_RECIPE.package, SGLANG_RECIPE.version) == ("sglang", "0.5.23")
    assert sglang_venv_dir(tmp_path) == tmp_path / "sglang-0.5.23"


def test_stand_in_is_a_clearly_named_test_only_package(tmp_path):
    root = write_stand_in(tmp_path)
    assert root == tmp_path / DIR_NAME and "test-only" in root.name
    source = (root / "sgl_kernel" / "__init__.py").read_text()
    assert source.startswith('"""TEST-ONLY stand-in')
    assert write_stand_in(tmp_path) == root                 # idempotent
    done = _run_in_stand_in(root, "import sgl_kernel; print(sgl_kernel.SERVEWATCH_TEST_ONLY)")
    assert done.returncode == 0 and done.stdout.strip() == "True"


def test_the_one_implemented_op_copies_kv_slots_in_every_buffer(tmp_path):
    root = write_stand_in(tmp_path)
    code = (
        "import sgl_kernel\n"
        "class Buf(list):\n"          # a tensor's fancy indexing, over plain lists
        "    def __getitem__(self, idx): return [list.__getitem__(self, i) for i in idx]\n"
        "    def __setitem__(self, idx, values):\n"
        "        for i, v in zip(idx, values): list.__setitem__(self, i, v)\n"
        "k, v = Buf([0, 1, 2, 3]), Buf([10, 11, 12, 13])\n"
        "sgl_kernel.copy_all_layer_kv_cache_cpu([k], [v], [2, 3], [0, 1])\n"
        "print(list(k), list(v))\n"
    )
    done = _run_in_stand_in(root, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1, 0, 1] [10, 11, 10, 11]"
    assert STAND_IN_CALLED not in done.stderr


def test_any_other_op_says_so_on_stderr_and_raises(tmp_path):
    root = write_stand_in(tmp_path)
    done = _run_in_stand_in(root, "import sgl_kernel\nfrom sgl_kernel import fused_add_rmsnorm_cpu\n"
                                  "fused_add_rmsnorm_cpu(1, 2)\n")
    assert done.returncode != 0 and "NotImplementedError" in done.stderr
    assert stand_in_calls(done.stderr) == ["fused_add_rmsnorm_cpu"]
    # Importing a name is not calling it: only a call leaves the marker.
    quiet = _run_in_stand_in(root, "from sgl_kernel import rotary_embedding_cpu\n")
    assert quiet.returncode == 0 and stand_in_calls(quiet.stderr) == []


def test_stand_in_calls_reads_a_log_in_order_of_first_call():
    log = (f"[2026-11-30 13:51:40] Load weight end.\n{STAND_IN_CALLED}: sgl_kernel.b_op\n"
           f"noise\n{STAND_IN_CALLED}: sgl_kernel.a_op\n{STAND_IN_CALLED}: sgl_kernel.b_op\n")
    assert stand_in_calls(log) == ["b_op", "a_op"]
    assert stand_in_calls("Prefill batch, #new-seq: 1, cpu graph: False\n") == []


# -- `servewatch lab sglang` against a stand-in SGLang (tests/lab/fake_sglang) -------------------------

FAKE_SGLANG = Path(__file__).parent / "fake_sglang" / "sglang"


def _fake_lab(tmp_path: Path) -> Path:
    """A lab cache whose venv and model are 'installed' and whose path carries a fake sglang."""
    import json
    import shutil

    from servewatch.lab import tiny_model
    from servewatch.lab.model_dir import model_path
    from servewatch.lab.venv import MARKER_NAME

    cache = tmp_path / "cache"
    venv = sglang_venv_dir(cache)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / MARKER_NAME).write_text(json.dumps(SGLANG_RECIPE.marker()))
    model = model_path(cache)
    model.mkdir(parents=True)
    (model / tiny_model.DONE_MARKER).write_text("{}")
    shutil.copytree(FAKE_SGLANG, write_stand_in(cache) / "sglang")   # found where the stand-in is
    return cache


def _lab(cache: Path, *extra: str) -> subprocess.Popen:
    from servewatch.lab.server import free_port

    return subprocess.Popen([sys.executable, "-m", "servewatch", "lab", "sglang", "--cache-dir", str(cache),
                             "--port", str(free_port()), "--ready-timeout", "30", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


def test_lab_fails_the_run_when_sglang_calls_a_stubbed_op(tmp_path):
    lab = _lab(_fake_lab(tmp_path), "--context-length", "1")
    out, err = lab.communicate(timeout=60)
    assert lab.returncode != 0
    assert "called silu_and_mul_cpu of the test-only sgl_kernel stand-in" in err
    assert "pids: main=" in out


def test_lab_serves_until_sigterm_then_stops_the_tree(tmp_path):
    import psutil

    lab = _lab(_fake_lab(tmp_path))
    line = lab.stdout.readline()
    assert line.startswith("url: http://127.0.0.1:"), line + lab.stderr.read()
    pids = lab.stdout.readline()
    assert "scheduler=" in pids and "detokenizer=" in pids and "None" not in pids, pids
    members = [int(part.split("=")[1]) for part in pids.split()[1:]]
    lab.send_signal(subprocess.signal.SIGTERM)
    lab.communicate(timeout=60)
    assert lab.returncode == 0
    assert not [pid for pid in members if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
