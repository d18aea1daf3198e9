"""Values of the drill's report, servewatch/drill/report.py (issue 50): drill.json's document (its counts, the
failed and inconclusive faults, the duration), the exit status, and each cell of a fault's row in drill.md and
drill.html — what was injected, what detected it and when, /health meanwhile and its slowest answer, the kubelet
columns, the policy, client impact, recovery and the expectations — with the summary line and the sections. The
fault rows start from a real short drill (tests/fixtures/drill/short-sim.drill.json) and change one thing each."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from servewatch.drill import report as R

DOC = json.loads((Path(__file__).parent / "fixtures" / "drill" / "short-sim.drill.json").read_text())
FAULT = DOC["faults"][0]


def _fault(**changes):
    f = copy.deepcopy(FAULT)
    f.update(changes)
    return f


def _doc(*faults, **changes):
    d = copy.deepcopy(DOC)
    d["faults"] = list(faults) or d["faults"]
    d.update(changes)
    return d


MD = """# Drill: short

short on built-in simulator (vllm): 0 of 1 faults met their expectations in 17 s; no leaks

| # | fault | injected on | detected by (s after injection) | /health meanwhile | kubelet restart: /health | kubelet restart: livez | demanded, and what acted | client impact | recovery | expectations |
|---|---|---|---|---|---|---|---|---|---|---|
| 1 | frozen | SIGSTOP api 0 (pid 24012) | histogram_blind 7.04 | 200 after the fault x8, 200 x2, no answer x2 | – | – | restart: nothing acted | 0/57 failed; TTFT x638.11 | good request after 0.17 s | FAILED: health_loss within 9 s (not fired) |

## Checks

- 1. frozen: health_loss within 9 s: NOT MET (not fired)
- 1. frozen: /health fails while the fault holds: met (200 after the fault x8, no answer x2, 200 x2)
- 1. frozen: a good request within 5 s after the fault: met (after 0.17 s)
- 1. frozen: every bundle written verifies: met (2 of 2 verified)

## Bundles

- 1. frozen: 2 written, 2 verified, 0 could not be written

## Columns

"""


def test_the_markdown_of_a_real_drill():
    md = R.markdown(DOC)
    assert md.startswith(MD)
    assert md.endswith("\n".join(f"- **{k}**: {v}" for k, v in R.COLUMN_MEANINGS) + "\n")
    assert len(R.COLUMN_MEANINGS) == 9 and R.COLUMN_MEANINGS[1][0] == "detected by"
    assert R.COLUMNS[0] == "#" and R.COLUMNS[-1] == "expectations" and len(R.COLUMNS) == 11


def test_the_columns_with_several_targets():
    doc = _doc(targets={"b": {"description": "other one"}})
    assert R.columns(doc) == ("#", "fault", "target", *R.COLUMNS[2:])
    assert R.meanings(doc) == (R.TARGET_MEANING, *R.COLUMN_MEANINGS)
    assert R.rows(doc)[0][:4] == ["1", "frozen", "main", "SIGSTOP api 0 (pid 24012)"]
    assert R.columns(DOC) == R.COLUMNS and R.meanings(DOC) == R.COLUMN_MEANINGS
    md = R.markdown(doc)
    assert "short on built-in simulator (vllm) and b, other one: 0 of 1" in md
    assert "| # | fault | target | injected on |" in md and "\n|" + "---|" * 12 + "\n" in md
    assert "- **target**: the plan's target the fault ran on" in md


def test_the_reports_are_utf8_under_a_c_locale(tmp_path):
    """drill.md says "–" for a cell with nothing: written as UTF-8 whatever the locale's encoding (ASCII here)."""
    import os
    import subprocess
    import sys

    assert R.write(DOC, tmp_path / "here")[1].read_text(encoding="utf-8") == R.markdown(DOC)   # (and in this process)
    code = ("import json, sys; from pathlib import Path; from servewatch.drill import report as R; "
            "R.write(json.loads(Path(sys.argv[1]).read_text(encoding='utf-8')), Path(sys.argv[2]))")
    src = tmp_path / "doc.json"
    src.write_text(json.dumps(DOC), encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    done = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    assert done.returncode == 0, done.stderr
    for name, text in (("drill.md", R.markdown(DOC)), ("drill.html", R.html(DOC))):
        assert (tmp_path / "out" / name).read_bytes() == text.encode("utf-8")
    doc = {**DOC, "plan": {**DOC["plan"], "name": "short–é"}}
    src.write_text(json.dumps(doc), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "out2")], env=env,
                          capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out2" / "drill.json").read_bytes().decode("utf-8") == \
        json.dumps(doc, indent=2, sort_keys=True) + "\n"


def test_injected_on():
    touched = [{"signal": "SIGKILL", "role": "worker", "rank": "TP1", "pid": 7},
               {"signal": "SIGCONT", "role": "api", "rank": 0, "pid": 8}]
    facts = {"size_mb": 1.5, "count": 3, "delay_s": 2.0, "answers": {"200": 3, "timeout": 5}}
    assert R._injected(_fault(touched=touched, facts=facts)) == (
        "SIGKILL worker TP1 (pid 7); SIGCONT api 0 (pid 8); count 3; delay s 2; size mb 1.5; answers: timeout x5, "
        "200 x3")
    assert R._injected(_fault(touched=[], facts={"ports_held": 1234567, "mode": "slow",
                                                 "probe_answers": {"200": 1}})) == \
        "mode slow; ports held 1234567; probe answers: 200 x1"
    assert R._injected(_fault(touched=[], facts=None)) == "–"
    assert R._injected(_fault(touched=[])) == "–"


def test_detected_by():
    assert R._detected(_fault(detected={})) == "nothing"
    assert R._detected(_fault(detected={"b": 3.5, "a": 10.0, "c": 0.25})) == "c 0.25, b 3.5, a 10"


def test_seconds():
    assert R._s(None) == "–" and R._s(12.0) == "12 s" and R._s(0.125) == "0.125 s"


def test_client_impact():
    assert R._impact(_fault(impact=None)) == "no requests"
    assert R._impact(_fault(impact={"requests": 0})) == "no requests"
    impact = {"requests": 10, "failed": 4, "errors": {"timeout": 3, "http_5xx": 1}, "ttft_inflation": None}
    assert R._impact(_fault(impact=impact)) == "4/10 failed (timeout 3, http_5xx 1)"
    assert R._impact(_fault(impact={**impact, "errors": {}, "ttft_inflation": 2.5})) == "4/10 failed; TTFT x2.5"


def test_recovery():
    assert R._recovery(_fault(recovery_s=None)) == "–"
    guard = {"kill": {"killed": 1, "after_verdict_s": 0.5, "after_s": 9.0}, "acted_on": "engine_dead"}
    full = _fault(guard=guard, server_exit={"status": -9}, cleared={"x": 4.0, "y": 1.5}, recovery_s=2.0,
                  restarted_by_drill_s=30.0)
    assert R._recovery(full) == ("guard killed the tree (1 process) 0.5 s after engine_dead; the server exited "
                                 "(killed by SIGKILL); cleared y 1.5 s, x 4 s after the fault; good request after 2 s; "
                                 "restarted by the drill in 30 s")
    guard = {"kill": {"killed": 3, "after_verdict_s": None, "after_s": 9.0}, "acted_on": "engine_dead"}
    assert R._recovery(_fault(guard=guard, recovery_s=None, server_exit={"status": 0})) == \
        "guard killed the tree (3 processes) 9 s after the injection; the server exited (exit code 0)"
    assert R._recovery(_fault(guard={"kill": None}, server_exit={"status": None}, recovery_s=None)) == "–"


def test_the_expectations_cell():
    assert R._verdict(_fault(not_run="no GPU")) == "NOT RUN: no GPU"
    met = [{"expectation": "a", "met": True, "observed": "x"}, {"expectation": "b", "met": True, "observed": "y"}]
    assert R._verdict(_fault(checks=met)) == "met (2)"
    missed = [*met, {"expectation": "c", "met": False, "observed": "z"}, {"expectation": "d", "met": False,
                                                                         "observed": "w"}]
    assert R._verdict(_fault(checks=missed)) == "FAILED: c (z); d (w)"
    assert R._verdict(_fault(checks=missed, inconclusive="recorder starved 7 s")) == \
        "inconclusive: recorder starved 7 s; not met meanwhile: c (z); d (w)"


def test_the_policy_cell():
    assert R._policy(_fault(policy=None)) == "–"
    assert R._policy(_fault(policy={"demands": "restart", "acted_on": "engine_dead", "acted_s": 3.0,
                                    "kubelet_by_s": 33.0})) == \
        "restart: guard and livez act on engine_dead after 3 s; a kubelet on livez restarts by 33 s"


def test_the_slowest_health_answer():
    f = _fault(health={"200": 3, "503": 1}, health_slowest_s=2.5)
    assert R._slow(f) == " (slowest 2.5 s, over a kubelet's 1 s timeout)"
    assert R._slow(_fault(health={"200": 3}, health_slowest_s=1.0)) == ""            # at the timeout: not over
    assert R._slow(_fault(health={"200": 3}, health_slowest_s=1.01)) != ""
    assert R._slow(_fault(health={"200": 3}, health_slowest_s=None)) == ""
    assert R._slow(_fault(health={}, health_slowest_s=5.0)) == ""
    assert R._slow(_fault(health={"200": 3, "no answer": 1}, health_slowest_s=5.0)) == ""


def test_the_health_cell_with_livez_and_readyz():
    f = _fault(health={"200": 3}, health_slowest_s=2.0, livez={"503": 2}, readyz={"200": 1})
    assert R.rows(_doc(f))[0][4] == ("200 x3 (slowest 2 s, over a kubelet's 1 s timeout); serve's livez 503 x2, "
                                     "readyz 200 x1")
    f = _fault(health={"200": 3}, health_slowest_s=None, kubelet_health_s=31.0, kubelet_livez_s=None)
    row = R.rows(_doc(f))[0]
    assert row[4] == "200 x3" and row[5] == "31 s" and row[6] == "–"
    assert R.rows(_doc(_fault(kubelet_health_s=None, kubelet_livez_s=42.5)))[0][5:7] == ["–", "42.5 s"]


def test_the_summary_line():
    met = _fault(met=True, index=2, name="second")
    doc = _doc(FAULT, met, inconclusive_faults=[1], duration_s=12.5,
               leaks={"ok": False, "processes_left": 2, "ports_held": 1})
    assert R._summary_line(doc) == (
        "short on built-in simulator (vllm): 1 of 2 faults met their expectations, 1 inconclusive (the recorder was "
        "starved: not scored a miss, not a pass) in 12.5 s; leaks: 2 process(es) left, 1 port(s) held")
    assert R._summary_line(_doc(leaks={"ok": False})).endswith("leaks: 0 process(es) left, 0 port(s) held")
    two = _doc(targets={"b": {"description": "sim b"}, "c": {"description": "sim c"}})
    assert R._summary_line(two).startswith("short on built-in simulator (vllm) and b, sim b and c, sim c: 0 of 1")


def test_existing_server_notes_and_bundles_in_markdown():
    f = _fault(notes=["the engine restarted"], bundles={})
    md = R.markdown(_doc(f, target={**DOC["target"], "existing": True, "consent": True}))
    assert "\nExisting server, drilled with the operator's consent: yes.\n\n| # |" in md
    assert "- 1. frozen: note: the engine restarted\n" in md
    assert "## Bundles\n\n\n## Columns" in md                       # no bundle: no line
    md = R.markdown(_doc(target={**DOC["target"], "existing": True, "consent": None}))
    assert "consent: no." in md
    assert "Existing server" not in R.markdown(DOC)
    piped = _fault(checks=[{"expectation": "a|b", "met": False, "observed": "c"}])
    assert "| FAILED: a/b (c) |" in R.markdown(_doc(piped))


def _run(results, leaks=None, started=100.0, ended=160.04, targets=None):
    spec = SimpleNamespace(describe=lambda: "built-in simulator (vllm)", existing=True)
    other = SimpleNamespace(describe=lambda: "second sim", existing=False)
    plan = SimpleNamespace(to_json=lambda: {"name": "standard", "target": {"engine": "sim"}, "faults": []},
                           target=spec, targets={"b": other})
    return SimpleNamespace(plan=plan, targets=targets or {}, consent=True, started=started, ended=ended,
                           results=results, leaks={"processes_left": 0, "ports_held": 0, "ok": True}
                           if leaks is None else leaks)


def _result(index, met, inconclusive=None):
    return SimpleNamespace(index=index, met=met, inconclusive=inconclusive, to_json=lambda: {"index": index})


def test_the_document():
    started = SimpleNamespace(dialect="vllm", restarts=[1, 2], ready_s=(3.5, 4.0))
    doc = R.document(_run([_result(1, True), _result(2, False), _result(3, False, "starved"), _result(4, True, "x")],
                          targets={"main": started}))
    assert doc["schema"] == "servewatch.drill/1"
    assert doc["plan"] == {"name": "standard", "target": {"engine": "sim"}, "faults": []}
    assert doc["target"] == {"description": "built-in simulator (vllm)", "dialect": "vllm", "restarts_by_drill": 2,
                             "ready_s": [3.5, 4.0], "existing": True, "consent": True}
    assert doc["targets"] == {"b": {"description": "second sim", "dialect": None, "restarts_by_drill": 0,
                                    "ready_s": []}}
    assert doc["started"] == 100.0 and doc["ended"] == 160.04 and doc["duration_s"] == 60.0
    other = SimpleNamespace(dialect="sglang", restarts=[1], ready_s=[2.5])
    both = R.document(_run([], targets={"main": started, "b": other}))
    assert both["targets"]["b"] == {"description": "second sim", "dialect": "sglang", "restarts_by_drill": 1,
                                    "ready_s": [2.5]}
    assert R.document(_run([], ended=160.25))["duration_s"] == 60.2            # to a tenth
    assert doc["faults"] == [{"index": i} for i in (1, 2, 3, 4)]
    assert doc["failed_faults"] == [2] and doc["inconclusive_faults"] == [3, 4]
    assert doc["expectations_met"] is False
    assert R.exit_status(doc) == 1
    clean = R.document(_run([_result(1, True)]))
    assert clean["expectations_met"] is True and R.exit_status(clean) == 0
    assert R.document(_run([_result(1, True)], leaks={"ok": False}))["expectations_met"] is False
    assert R.document(_run([_result(1, True)], leaks={}))["expectations_met"] is False
    assert R.exit_status(R.document(_run([_result(1, True)], leaks={}))) == 1
    unsure = R.document(_run([_result(1, False, "starved")]))
    assert unsure["expectations_met"] is False and R.exit_status(unsure) == 4 == R.INCONCLUSIVE_EXIT
    assert R.document(_run([], started=None, ended=None))["duration_s"] == 0
    assert R.document(_run([], started=None, ended=5.0))["duration_s"] == 5.0
    assert R.exit_status({"failed_faults": [], "leaks": {"ok": True}}) == 0


def test_the_html_report():
    f = _fault(bundles={"written": 2, "verified": 1, "write_failures": 1})
    page = R.html(_doc(f, _fault(index=2, name="second", bundles={})))
    assert "<title>servewatch drill: short</title>" in page
    assert "short on built-in simulator (vllm): 0 of 2 faults met their expectations in 17 s; no leaks" in page
    for title, anchor in (("Faults", "faults"), ("Checks", "checks"), ("Leaks and bundles", "leaks"),
                          ("What the columns mean", "columns")):
        assert f'<section id="{anchor}"><h2>{title}</h2>' in page
    assert ("<thead><tr><th>#</th><th>fault</th><th>expectation</th><th>met</th><th>observed</th></tr></thead>"
            in page)
    assert "<td>health_loss within 9 s</td><td>NOT MET</td><td>not fired</td>" in page
    assert "<td>every bundle written verifies</td><td>met</td><td>2 of 2 verified</td>" in page
    assert "<tr><th>processes left</th><td>0</td></tr><tr><th>ports held</th><td>0</td></tr>" in page
    for key, meaning in R.COLUMN_MEANINGS:
        assert f"<tr><th>{key}</th><td>" in page
    assert "<tr><th>expectations</th><td>met when every expectation of the plan held; inconclusive" in page
    assert "2 bundle(s) written, 1 verified, 1 not written" in page
    assert "NOT MET" in page and "health_loss within 9 s" in page and "not fired" in page
    assert page.count("2. second") == 0                       # no bundles: no line
    assert "histogram_blind 7.04" in page
    partial = _fault(bundles={"written": 1})
    assert "1 bundle(s) written, 0 verified, 0 not written" in R.html(_doc(partial))
    assert "0 bundle(s) written, 3 verified, 0 not written" in R.html(_doc(_fault(bundles={"verified": 3})))
    leaky = R.html(_doc(leaks={"ok": False, "processes_left": 2, "ports_held": 5}))
    assert "<tr><th>processes left</th><td>2</td></tr><tr><th>ports held</th><td>5</td></tr>" in leaky


def test_write_validates_and_writes_the_three_files(tmp_path):
    unsorted = {k: DOC[k] for k in reversed(list(DOC))}
    paths = R.write(unsorted, tmp_path / "a" / "out")              # parents made
    assert R.write(unsorted, tmp_path / "a" / "out") == paths       # again into the same folder
    assert [p.name for p in paths] == ["drill.json", "drill.md", "drill.html"]
    assert json.loads(paths[0].read_text()) == DOC
    assert paths[0].read_text() == json.dumps(DOC, indent=2, sort_keys=True) + "\n"
    assert paths[1].read_text() == R.markdown(DOC) and paths[2].read_text() == R.html(DOC)
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        R.validate({**DOC, "schema": 7})
