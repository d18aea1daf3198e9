"""A real SGLang 0.5.23 whose detokenizer is SIGKILLed under load: SGLang's own subprocess watchdog sees it
within about a second and takes the whole server down (SIGQUIT, then the tree killed), so servewatch must
say engine_dead, then process_exit with the main process's real exit status, and never a stall."""

from __future__ import annotations

import pytest
from lab_servers import assert_no_stand_in_call, start_sglang_ready
from lab_sglang import kill_under_load

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]


def test_killed_detokenizer_is_engine_dead_then_process_exit(sglang_lab, sglang_run_dir):
    server = start_sglang_ready(sglang_lab, "sglang_detokenizer")
    try:
        record = kill_under_load(sglang_lab, server, sglang_run_dir, server.process_tree().worker, "detokenizer")
    finally:
        server.stop()
    assert any("Subprocess detokenizer" in line for line in record["sglang_lines"]), record["sglang_lines"]
    assert_no_stand_in_call(server)
