"""A real SGLang 0.5.23 whose detokenizer is SIGKILLed under load. SGLang's own subprocess watchdog sees it
within about a second (SIGQUIT), then waits 5 s, tries py-spy on the scheduler, waits 60 s for CUDA
coredumps of the still-running scheduler (also on a CPU-only machine), and only then kills its own tree:
about 65 s of a server that takes connections and answers nothing. servewatch must say engine_dead at
once, then process_exit with the main process's real exit status, and never a stall."""

from __future__ import annotations

import pytest
from lab_servers import assert_no_stand_in_call, start_ready
from lab_sglang import kill_under_load

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]


def test_killed_detokenizer_is_engine_dead_then_process_exit(sglang_lab, sglang_run_dir):
    server = start_ready(sglang_lab, "sglang_detokenizer")
    try:
        record = kill_under_load(sglang_lab, server, sglang_run_dir, server.process_tree().worker, "detokenizer",
                                 exit_within_s=120)
    finally:
        server.stop()
    assert any("Subprocess detokenizer" in line for line in record["sglang_lines"]), record["sglang_lines"]
    assert_no_stand_in_call(server)
