"""The lab's server lifecycle against a stand-in vLLM (tests/lab/fake_vllm): fast, no real engine."""

from __future__ import annotations

import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from servewatch.lab.server import (
    ServerConfig,
    StartupFailed,
    VllmServer,
    vllm_command,
    vllm_environment,
    vllm_error_message,
)

FAKE = Path(__file__).parent / "fake_vllm"
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_real"


@pytest.fixture
def fake_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKE))


def _server(tmp_path: Path, **overrides) -> VllmServer:
    config = ServerConfig(model_dir=tmp_path / "model", **{"kv_cache_memory_bytes": 4 * 2**20, **overrides})
    return VllmServer(Path(sys.executable), config, tmp_path / "vllm.log")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_ready_process_tree_and_teardown_of_a_stopped_worker(fake_env, tmp_path):
    server = _server(tmp_path).start()
    try:
        assert server.wait_ready(timeout_s=30) < 30
        tree = server.process_tree(timeout_s=15)
        assert tree.api_server == server.pid
        assert tree.engine_core and tree.worker
        assert psutil.Process(tree.worker).ppid() == tree.engine_core
        assert psutil.Process(tree.engine_core).ppid() == tree.api_server
        psutil.Process(tree.worker).send_signal(signal.SIGSTOP)  # a stopped process cannot act on SIGTERM
    finally:
        server.stop(grace_s=3)
    # The fake leaves its children behind on SIGTERM: the lab must have swept the whole tree.
    assert all(_gone(pid) for pid in (tree.api_server, tree.engine_core, tree.worker))
    assert server.returncode is not None


def test_context_manager_tears_down_when_the_body_fails(fake_env, tmp_path):
    with pytest.raises(RuntimeError, match="test body failed"), _server(tmp_path) as server:
        server.wait_ready(timeout_s=30)
        tree = server.process_tree(timeout_s=15)
        raise RuntimeError("test body failed")
    assert all(_gone(pid) for pid in (tree.api_server, tree.engine_core, tree.worker))


def test_startup_failure_carries_vllms_root_cause(fake_env, tmp_path):
    server = _server(tmp_path, kv_cache_memory_bytes=1048576).start()
    try:
        with pytest.raises(StartupFailed) as failure:
            server.wait_ready(timeout_s=30)
    finally:
        server.stop()
    assert failure.value.returncode == 1
    assert failure.value.vllm_message.startswith("ValueError: To serve at least one request")
    assert "max seq len (2048)" in str(failure.value)
    assert str(tmp_path / "vllm.log") in str(failure.value)


def test_exit_code_is_known_while_the_zombie_stays_visible(fake_env, tmp_path):
    server = _server(tmp_path).start()
    try:
        server.wait_ready(timeout_s=30)
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"{server.url}/_exit/3", timeout=5)
        assert server.wait_exit_keep_zombie(timeout_s=15) == 3
        assert psutil.Process(server.pid).status() == psutil.STATUS_ZOMBIE  # not reaped yet
        assert server.wait_exit(timeout_s=5) == 3                           # now reaped, same code
    finally:
        server.stop(grace_s=3)


def test_an_exit_without_vllm_message_still_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nothing"))  # no vllm module at all: exits at once
    server = _server(tmp_path).start()
    with pytest.raises(StartupFailed) as failure:
        server.wait_ready(timeout_s=30)
    server.stop()
    assert failure.value.returncode == 1
    assert str(failure.value).startswith("vLLM exited with code 1 before becoming ready")


def test_command_and_environment():
    config = ServerConfig(model_dir=Path("/models/tiny"), max_model_len=1024, max_num_seqs=4,
                          kv_cache_memory_bytes=2**22, log_stats_interval_s=0.5, cache_root=Path("/c"))
    cmd = vllm_command(Path("/opt/venv/bin/python"), config, 18001)
    assert cmd[:3] == ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags == {"--model": "/models/tiny", "--served-model-name": "tiny", "--host": "127.0.0.1",
                     "--port": "18001", "--dtype": "bfloat16", "--max-model-len": "1024",
                     "--max-num-seqs": "4", "--kv-cache-memory-bytes": str(2**22)}
    env = vllm_environment(config)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_LOG_STATS_INTERVAL"] == "0.5"
    assert env["VLLM_CACHE_ROOT"] == "/c"


def test_error_message_from_the_real_startup_failure_log():
    text = (REAL / "startup_failure_undersized_kv.log").read_text(encoding="utf-8")
    message = vllm_error_message(text)
    assert message.startswith("ValueError: To serve at least one request with the model's max seq len (2048)")


def test_error_message_ignores_warnings_and_prefers_the_first_error():
    text = ("UserWarning: resource_tracker: leaked\n"
            "(EngineCore pid=7) ValueError: first cause\n"
            "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert vllm_error_message(text) == "ValueError: first cause"
    assert vllm_error_message("INFO all good\n") is None


def test_stop_before_start_and_twice_is_harmless(fake_env, tmp_path):
    server = _server(tmp_path)
    assert server.stop() is None
    server.start()
    server.wait_ready(timeout_s=30)
    first = server.stop(grace_s=3)
    assert server.stop(grace_s=3) == first
