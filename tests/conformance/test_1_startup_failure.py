"""An undersized KV cache: vLLM refuses to start, and servewatch reports vLLM's own message."""

from __future__ import annotations

import time

import pytest

from servewatch.lab.server import StartupFailed

from lab_cli import Watcher, assert_bundles_verify
from lab_observations import log_excerpt

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(420)]

# 1 MiB = 2,048 tokens of 512 bytes, but the cache is block-granular and 2048-token requests do not fit.
UNDERSIZED = {"kv_cache_memory_bytes": 1048576, "max_model_len": 2048}
VLLM_SAYS = "To serve at least one request with the model's max seq len (2048)"


def test_lab_reports_vllm_startup_failure_message(lab):
    server = lab.server("undersized_kv", **UNDERSIZED).start()
    started = time.monotonic()
    try:
        with pytest.raises(StartupFailed) as failure:
            server.wait_ready(timeout_s=300)
    finally:
        server.stop()
    elapsed = time.monotonic() - started
    lab.obs.save_text("startup_failure_undersized_kv.log", log_excerpt(server.log_text()))
    lab.obs.record("undersized_kv", {"exit_code": failure.value.returncode, "seconds_to_exit": round(elapsed, 1),
                                     "vllm_message": failure.value.vllm_message})
    lab.obs.say(f"undersized KV: vLLM exited {failure.value.returncode} after {elapsed:.1f} s: "
                f"{(failure.value.vllm_message or '')[:120]}")
    assert failure.value.returncode not in (None, 0)
    assert failure.value.vllm_message is not None and failure.value.vllm_message.startswith("ValueError: ")
    assert VLLM_SAYS in failure.value.vllm_message
    assert VLLM_SAYS in str(failure.value)


def test_watch_reports_startup_failure_with_vllm_message(lab, run_dir):
    server = lab.server("undersized_kv_watched", **UNDERSIZED).start()
    out = run_dir / "bundles"
    watcher = Watcher(server.url, out, pid=server.pid, interval=0.5, log_file=server.log_path,
                      extra=("--duration", "300"))
    try:
        with watcher:
            code = server.wait_exit(300)
            exited = time.monotonic()
            assert code not in (None, 0), f"vLLM did not fail as expected (exit {code})"
            line = watcher.wait_for("process_exit", timeout_s=15)
            assert line is not None, f"no process_exit verdict; saw {[v.data for v in watcher.verdicts()]}"
            lab.obs.say(f"undersized KV under watch: process_exit {line.arrived - exited:.1f} s after the exit")
            whys = " | ".join(v.data.get("why", "") for v in watcher.verdicts())
            assert VLLM_SAYS in whys, f"vLLM's message is in no verdict: {whys}"
    finally:
        server.stop()
    assert_bundles_verify(out)
