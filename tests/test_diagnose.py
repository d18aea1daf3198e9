"""servewatch diagnose: the six recorded real-vLLM scenarios, the symptom branches, and the command."""

from __future__ import annotations

import json

import pytest

from tests.diagnose_scenarios import scenarios
from servewatch.cli import main
from servewatch.doctor.diagnose import Readings, diagnose

SCENARIOS = scenarios()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_top_hypothesis_agrees_with_the_labelled_truth(name):
    truth, readings = SCENARIOS[name]
    top = diagnose(readings)[0]
    assert top.name == truth and top.verdict == "supported", (top.name, top.why)


def test_recorder_verdicts_confirm_the_stall_and_the_death():
    assert diagnose(SCENARIOS["stalled worker"][1])[0].confirmed_by == "alive_health_ok_no_progress"
    assert diagnose(SCENARIOS["dead engine"][1])[0].confirmed_by == "engine_dead"


def test_idle_server_raises_nothing():
    hypotheses = diagnose(SCENARIOS["idle"][1])
    assert [h.name for h in hypotheses if h.verdict == "supported"] == ["idle"]


def test_slot_overload_names_slots_not_memory():
    top = diagnose(SCENARIOS["slot overload"][1], "slow-first-token")[0]
    assert top.name == "overload" and "slots" in top.title and "out of slots, not memory" in top.why


def test_safe_action_and_rollback_come_from_the_runbook():
    from servewatch.detectors.registry import runbook_for

    top = diagnose(SCENARIOS["dead engine"][1], "errors")[0]
    branch = runbook_for("engine_dead")
    assert (top.safe_action, top.rollback, top.restart_destroys) == (branch.safe_action, branch.rollback,
                                                                     branch.restart_destroys)


# --- E2E up while TTFT and the queue are normal: the three branches -----------------------------------------

NORMAL = dict(tokens_in=44.0, tokens_out=128.0, queue_s=0.0, ttft_s=0.05, itl_s=0.016, e2e_s=2.07, max_running=12.0,
              max_waiting=0.0, max_kv=0.014)


@pytest.mark.parametrize(("change", "expected"), [
    ({"tokens_out": 1024.0, "e2e_s": 26.6, "itl_s": 0.026}, "long_output"),
    ({"itl_s": 0.147, "e2e_s": 19.0, "max_running": 256.0}, "contention"),
    ({"tokens_in": 2905.0, "e2e_s": 4.0}, "long_prompt"),
])
def test_e2e_up_branches(change, expected):
    readings = Readings(**{**NORMAL, **change})
    hypotheses = diagnose(readings, "e2e-up")
    assert hypotheses[0].name == expected
    assert [h.verdict for h in hypotheses].count("supported") == 1


def test_e2e_up_on_a_normal_day_supports_nothing():
    assert all(h.verdict == "ruled out" for h in diagnose(Readings(**NORMAL), "e2e-up"))


def test_unknown_symptom_is_refused():
    with pytest.raises(ValueError):
        diagnose(Readings(), "sad")


# --- the command -------------------------------------------------------------------------------------------

def test_command_reads_a_load_dir(tmp_path, capsys):
    from pathlib import Path

    signature = json.loads((Path(__file__).parent / "fixtures" / "vllm_real" / "signatures.json").read_text())
    (tmp_path / "summary.json").write_text(json.dumps({"signature": signature["long-output"],
                                                       "output_tokens_requested": 1024}))
    assert main(["diagnose", str(tmp_path), "--symptom", "long-answers", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hypotheses"][0]["name"] == "long_output"
    assert doc["hypotheses"][0]["verdict"] == "supported"


def test_command_reads_a_bundle(tmp_path, capsys):
    import io

    from tests.diagnose_scenarios import stalled_worker_window
    from servewatch.detectors import run_detectors
    from servewatch.sinks.bundle import BundleWriter

    window = stalled_worker_window()
    bundle = BundleWriter(tmp_path / "out", stderr=io.StringIO()).write(window, run_detectors(window))
    assert bundle is not None
    assert main(["diagnose", str(bundle), "--symptom", "hangs-under-load"]) == 0
    out = capsys.readouterr().out
    first = out.split("\n1. ", 1)[1].splitlines()[0]
    assert "alive but not progressing" in first and "supported" in first
    assert "a restart would destroy" in out


@pytest.mark.parametrize("target", ["nope", "ftp://x"])
def test_command_bad_target_is_one_line(target, capsys):
    assert main(["diagnose", target]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a URL, a bundle directory or a load directory" in err[0]


def test_command_bad_bundle_is_one_line(tmp_path, capsys):
    (tmp_path / "incident.json").write_text("{}")
    assert main(["diagnose", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable bundle" in err[0]
