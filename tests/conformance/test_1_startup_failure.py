"""An undersized KV cache: vLLM refuses to start, and servewatch reports vLLM's own message.

One failing start (under `servewatch watch`) feeds both tests: the lab's report and the recorder's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from lab_cli import Watcher, assert_bundles_verify
from lab_observations import log_excerpt

from servewatch.lab.server import StartupFailed

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(420)]

# 1 MiB holds 2,048 tokens of 512 bytes, but not one 2048-token request once blocks are counted.
# --enforce-eager: the failure comes after warm-up, and compiling first would only add time.
UNDERSIZED = {"kv_cache_memory_bytes": 1048576, "max_model_len": 2048, "extra_args": ("--enforce-eager",)}
VLLM_SAYS = "To serve at least one request with the model's max seq len (2048)"


@dataclass
class FailedStart:
    failure: StartupFailed | None
    seconds: float
    watcher: Watcher
    exited_at: float
    bundles: object


@pytest.fixture(scope="module")
def failed_start(lab, tmp_path_factory) -> FailedStart:
    server = lab.server("undersized_kv", **UNDERSIZED).start()
    started = time.monotonic()
    out = tmp_path_factory.mktemp("undersized_kv") / "bundles"
    watcher = Watcher(server.url, out, pid=server.pid, interval=0.5, log_file=server.log_path,
                      extra=("--duration", "400"))
    failure = None
    try:
        with watcher:
            try:
                server.wait_ready(timeout_s=360)
            except StartupFailed as exc:
                failure = exc
            exited_at = time.monotonic()
            watcher.wait_for("process_exit", timeout_s=15)
    finally:
        server.stop()
    lab.obs.save_text("startup_failure_undersized_kv.log", log_excerpt(server.log_text()))
    return FailedStart(failure, exited_at - started, watcher, exited_at, out)


def test_lab_reports_vllm_startup_failure_message(lab, failed_start):
    failure = failed_start.failure
    assert failure is not None, "vLLM became ready with an undersized KV cache"
    lab.obs.record("undersized_kv", {"exit_code": failure.returncode, "seconds_to_exit": round(failed_start.seconds, 1),
                                     "vllm_message": failure.vllm_message})
    lab.obs.say(f"undersized KV: vLLM exited {failure.returncode} after {failed_start.seconds:.1f} s: "
                f"{(failure.vllm_message or '')[:110]}")
    assert failure.returncode == 1
    assert failure.vllm_message is not None and failure.vllm_message.startswith("ValueError: ")
    assert VLLM_SAYS in failure.vllm_message
    assert VLLM_SAYS in str(failure)


def test_watch_reports_startup_failure_with_vllm_message(lab, failed_start):
    watcher = failed_start.watcher
    seen = [v.data for v in watcher.verdicts()]
    line = next((v for v in watcher.verdicts() if v.name == "process_exit"), None)
    assert line is not None, f"no process_exit verdict; saw {seen}"
    lab.obs.say(f"undersized KV under watch: process_exit {line.arrived - failed_start.exited_at:+.1f} s "
                f"from the exit; verdicts {[v['verdict'] for v in seen]}")
    assert any(VLLM_SAYS in v.get("why", "") for v in seen), f"vLLM's message is in no verdict: {seen}"
    assert_bundles_verify(failed_start.bundles)
