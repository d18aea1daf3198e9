"""servewatch diagnose: the six recorded real-vLLM scenarios, the symptom branches, and the command."""

from __future__ import annotations

import json

import pytest

from tests.diagnose_scenarios import scenarios
from servewatch.cli import main
from servewatch.doctor.diagnose import Readings, diagnose, readings_from_window

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
    from servewatch.bundle.writer import BundleWriter

    window = stalled_worker_window()
    bundle = BundleWriter(tmp_path / "out", stderr=io.StringIO()).write(window, run_detectors(window))
    assert bundle is not None
    assert main(["diagnose", str(bundle), "--symptom", "hangs-under-load"]) == 0
    out = capsys.readouterr().out
    first = out.split("\n1. ", 1)[1].splitlines()[0]
    assert "alive but not progressing" in first and "supported" in first
    assert "a restart would destroy" in out


@pytest.mark.parametrize("target, words", [("nope", "not a URL, a bundle directory or a load directory"),
                                           ("ftp://x", "'ftp://x': not an http(s) URL: the scheme is ftp")])
def test_command_bad_target_is_one_line(target, words, capsys):
    assert main(["diagnose", target]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_command_bad_bundle_is_one_line(tmp_path, capsys):
    (tmp_path / "incident.json").write_text("{}")
    assert main(["diagnose", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable bundle" in err[0]


# --- a dead or failing server is the first finding (issue 22) --------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_command_on_a_dead_port_is_one_line_and_exit_2(capsys):
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["diagnose", url, "--window", "1", "--interval", "0.25"]) == 2
    err = capsys.readouterr()
    assert err.out == ""
    last = err.err.strip().splitlines()[-1]
    assert "did not answer" in last and "could not connect" in last, last


def test_failed_probes_rank_first_and_are_said_in_words():
    from servewatch.timeline.samples import HealthSample
    from servewatch.timeline.window import Window

    samples = [HealthSample(float(t), 200, 0.01) for t in range(0, 5)]
    samples += [HealthSample(float(t), None, None, error="timeout") for t in range(5, 8)]
    readings = readings_from_window(Window.from_samples(samples))
    top = diagnose(readings, "slow-first-token")[0]
    assert (top.name, top.verdict) == ("not_answering", "supported")
    assert "/health timed out ×3" in top.value


def test_exit_1_when_the_window_has_failed_probes(tmp_path, capsys, monkeypatch):
    from servewatch.commands import diagnose as command
    from servewatch.timeline.samples import HealthSample
    from servewatch.timeline.window import Window

    window = Window.from_samples([HealthSample(0.0, 200, 0.01), HealthSample(1.0, None, None, error="connect")])
    monkeypatch.setattr(command, "_record", lambda args: readings_from_window(window))
    assert main(["diagnose", "http://127.0.0.1:1", "--window", "1"]) == 1
    assert "1. the server does not answer" in capsys.readouterr().out


# --- words, never Python values ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["empty", *SCENARIOS])
def test_no_python_value_leaks_into_the_text(name):
    import re

    readings = Readings() if name == "empty" else SCENARIOS[name][1]
    for symptom in (None, "slow-first-token", "errors", "slow-text", "long-answers", "e2e-up"):
        for h in diagnose(readings, symptom):
            text = " ".join(str(getattr(h, k)) for k in ("title", "value", "why", "expected", "next_check",
                                                         "safe_action"))
            assert not re.search(r"\b(None|True|False)\b", text), (h.name, text)
            assert "not measured tokens" not in text and "+not measured" not in text, (h.name, text)


# --- the same window read live and from a recording gives the same quantities ----------------------------

QUANTITIES = ("tokens_in", "tokens_out", "queue_s", "ttft_s", "itl_s", "e2e_s", "max_running", "max_waiting",
              "max_kv", "slot_limit", "preemptions")


def _overload_window(engines: int):
    """An overloaded simulated vLLM (its slot limit 16) recorded in virtual time; `engines` copies of its
    engine per scrape, as a data-parallel server shows them."""
    import dataclasses

    from servewatch.sim import SimConfig
    from servewatch.timeline.samples import MetricsSample
    from servewatch.timeline.window import Window
    from tests.sim_harness import Phase, run

    recorder, _, _ = run([Phase(12.0, rate=14.0, prompt_tokens=44, max_tokens=128)], interval=0.5,
                         config=SimConfig(max_num_seqs=16), with_process=False)
    window = recorder.ring.window()
    copied = []
    for m in window.samples():
        if isinstance(m, MetricsSample) and m.engines:
            e = m.engines[0]
            m = dataclasses.replace(m, engines=tuple(
                dataclasses.replace(e, labels={**e.labels, "engine": str(i)}) for i in range(engines)))
        copied.append(m)
    return Window.from_samples(copied)


def _as_load_dir(window) -> dict:
    """The window's scrapes through `servewatch load`'s server view, as its summary.json holds them."""
    from servewatch.load.server_view import ServerSample, ServerView, aggregate
    from servewatch.load.summary import signature

    view = ServerView(None, lambda: 0.0, None, 0.5)
    for m in window.good_metrics():
        view.add(aggregate(ServerSample(m.t, m.scrape_s, dialect=m.dialect, naming=m.naming,
                                        engines=m.engines)))
    server = view.summary()
    return {"signature": signature({}, server), "server_view": server}


@pytest.mark.parametrize("engines", [1, 2])
def test_a_window_read_live_and_from_a_load_run_gives_the_same_quantities(engines):
    from servewatch.doctor.diagnose import readings_from_load

    window = _overload_window(engines)
    live = readings_from_window(window)
    stored = readings_from_load(_as_load_dir(window))
    assert live.max_waiting and live.max_waiting > 0 and live.queue_s and live.queue_s > 0   # it is an overload
    assert live.slot_limit == 16 * engines
    for name in QUANTITIES:
        assert getattr(live, name) == pytest.approx(getattr(stored, name)), name
    live_top = diagnose(live, "slow-first-token")[0]
    stored_top = diagnose(stored, "slow-first-token")[0]
    assert (live_top.name, live_top.value) == (stored_top.name, stored_top.value)


# --- a healthy run says so first; a refused connection is said after a short grace (issue 45) ----------------

def _normal_load_dir(tmp_path):
    from pathlib import Path

    signature = json.loads((Path(__file__).parent / "fixtures" / "vllm_real" / "signatures.json").read_text())
    (tmp_path / "summary.json").write_text(json.dumps({"signature": signature["normal"]}))
    return str(tmp_path)


def test_a_healthy_load_run_says_it_looks_healthy_first_with_its_figures(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    load_dir = _normal_load_dir(tmp_path)
    assert main(["diagnose", load_dir]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Diagnose") and lines[1].startswith("Looks healthy: nothing measured supports a problem")
    assert lines[1].endswith("(from the load run signature)")
    assert lines[2].startswith("   figures: TTFT 24.1 ms, time between tokens 5.2 ms") and "KV at most 6%" in lines[2]
    assert lines[3].startswith("   ruled out: 7 explanations (below); not measured here (listed last): the engine died")
    first = next(line for line in lines if line.startswith("1. "))
    assert "not measured" not in first and "the engine died" not in first, first
    assert main(["diagnose", load_dir, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["looks_healthy"].startswith("Looks healthy")


@pytest.mark.parametrize("name", [*SCENARIOS, "normal load run"])
def test_a_hypothesis_not_measured_never_leads_and_healthy_is_said_only_without_a_problem(name, tmp_path):
    from servewatch.doctor.diagnose import looks_healthy, readings_from_load

    if name == "normal load run":
        summary = json.loads((tmp_path.joinpath(_normal_load_dir(tmp_path), "summary.json")).read_text())
        truth, readings = None, readings_from_load(summary)
    else:
        truth, readings = SCENARIOS[name]
    for symptom in (None, "slow-first-token", "errors", "slow-text", "long-answers", "e2e-up"):
        hypotheses = diagnose(readings, symptom)
        if any(h.verdict != "not measured" for h in hypotheses):
            assert hypotheses[0].verdict != "not measured", (symptom, [(h.name, h.verdict) for h in hypotheses])
        problems = [h.name for h in hypotheses if h.verdict == "supported" and h.name != "idle"]
        assert (looks_healthy(readings, hypotheses) is None) == bool(problems), (symptom, problems)
    if truth not in (None, "idle"):
        assert looks_healthy(readings, diagnose(readings)) is None


def test_nothing_measured_is_not_called_healthy():
    from servewatch.doctor.diagnose import looks_healthy

    assert looks_healthy(Readings(), diagnose(Readings(), "errors")) is None


def test_a_refused_connection_is_said_after_the_grace_not_the_whole_window(capsys, monkeypatch):
    import time

    from servewatch.doctor import diagnose as diagnosis

    grace = diagnosis.CONNECT_GRACE_S
    assert 0 < grace <= 5
    url = f"http://127.0.0.1:{_free_port()}"
    argv = ["diagnose", url, "--window", "30", "--interval", "0.25"]
    # The measured allowance: the most the same command ran past a shorter grace (0, one retry step, two), each
    # the same work (the parser, refused connections, the sleeps to the deadline, the same refusal said).
    allowance = 0.0
    for short in (0.0, diagnosis.CONNECT_RETRY_S, 2 * diagnosis.CONNECT_RETRY_S):
        monkeypatch.setattr(diagnosis, "CONNECT_GRACE_S", short)
        started = time.monotonic()
        assert main(argv) == 2
        allowance = max(allowance, time.monotonic() - started - short)
        assert f"for {short:g} s" in capsys.readouterr().err
    monkeypatch.undo()
    started = time.monotonic()
    assert main(argv) == 2
    took = time.monotonic() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not connect (connection refused)" in err[0], err
    assert f"for {grace:g} s (the grace diagnose gives before its 30 s window); nothing is listening there" in err[0]
    # The last attempt may begin just before the deadline and its sleep run late on a busy machine (8.7 ms past a
    # measured 7.9 ms allowance, 2026-12-05): the bound is the measured allowance plus one retry step, the loop's own
    # granularity, still far under the window's 30 s.
    assert grace <= took <= grace + allowance + diagnosis.CONNECT_RETRY_S, (took, grace, allowance)
