"""`servewatch demo --fast`: the whole product in virtual time — scenarios with the seed-002 shape,
the stall and the engine death caught with their evidence, bundles that verify, a self-contained report."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from servewatch.cli import main

try:
    from tests.test_report_chromium import decode_png
except ModuleNotFoundError:
    from test_report_chromium import decode_png

from tests.tools import needs_tool, tool_path

SCENARIO_VERDICTS_ALLOWED = {"overload", "kv_pressure", "preemption", "histogram_blind"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    capture = tmp_path_factory.mktemp("capture") / "stdout.json"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["demo", "--fast", "--json", "--out", str(out)])
    capture.write_text(buffer.getvalue())
    return code, json.loads(buffer.getvalue()), out


def verdicts_in(report, phase):
    return [v for v in report["verdicts"] if v["phase"] == phase]


def test_demo_exits_zero_and_catches_the_stall_while_health_says_200(demo):
    code, report, _ = demo
    assert code == 0
    stall = {v["verdict"]: v for v in verdicts_in(report, "stall")}
    assert "alive_health_ok_no_progress" in stall
    assert stall["alive_health_ok_no_progress"]["detection_s"] <= 3.0
    assert set(report["health_during_faults"]["stall"]) == {"200"}      # health never noticed


def test_demo_catches_the_engine_death_and_the_exit_zero(demo):
    _, report, _ = demo
    names = [v["verdict"] for v in verdicts_in(report, "engine-death")]
    assert "engine_dead" in names and "process_exit" in names
    assert names.index("engine_dead") < names.index("process_exit")
    exit_why = next(v["why"] for v in verdicts_in(report, "engine-death") if v["verdict"] == "process_exit")
    assert "exit code 0" in exit_why
    assert "503" in report["health_during_faults"]["engine-death"]
    assert report["errors"]["engine-death"].get("truncated", 0) > 0     # cut-short 200s are not successes


def test_demo_catches_the_idle_wedge_with_the_probe_while_health_says_200_and_the_gauges_read_zero(demo):
    from servewatch.demo.plan import PROBE_DEADLINE_S, PROBE_INTERVAL_S

    _, report, _ = demo
    wedge = {v["verdict"]: v for v in verdicts_in(report, "idle-wedge")}
    assert set(wedge) == {"not_serving"}
    # the wedge takes hold at the first idle moment after the fault, then one interval and one deadline
    assert wedge["not_serving"]["detection_s"] <= 2.0 + PROBE_INTERVAL_S + PROBE_DEADLINE_S
    assert "running 0, waiting 0" in wedge["not_serving"]["why"]
    assert set(report["health_during_faults"]["idle-wedge"]) == {"200"}


def test_no_false_alarm_during_the_load_scenarios(demo):
    _, report, _ = demo
    for phase in ("normal", "overload", "long-prompt", "long-output"):
        names = {v["verdict"] for v in verdicts_in(report, phase)}
        assert names <= SCENARIO_VERDICTS_ALLOWED, (phase, names)
    assert verdicts_in(report, "normal") == [] and verdicts_in(report, "long-output") == []
    overload = {v["verdict"]: v for v in verdicts_in(report, "overload")}
    assert "cause slots" in overload["overload"]["why"]


def test_signature_table_has_the_seed_002_shape(demo):
    _, report, _ = demo
    sig = report["signatures"]
    assert sig["overload"]["max_running"] == 256                       # pinned at the slot limit
    assert sig["overload"]["max_kv"] < 0.5                             # ... while KV is far from full
    assert sig["overload"]["max_waiting"] > 10
    assert sig["overload"]["queue_wait_s"] > 10 * max(sig[p]["queue_wait_s"] for p in ("normal", "long-output"))
    assert max(sig, key=lambda p: sig[p]["e2e_s"]) == "long-output"    # worst E2E ...
    assert sig["long-output"]["ttft_s"] < 2 * sig["normal"]["ttft_s"]   # ... with a normal TTFT
    assert sig["long-prompt"]["tokens_in"] == 2905
    assert sig["long-output"]["tokens_out"] == 1024


def test_every_bundle_the_demo_wrote_verifies(demo, capsys):
    _, report, out = demo
    assert len(report["bundles"]) >= 3
    assert report["bundle_write_failures"] == 0
    for bundle in report["bundles"]:
        assert Path(bundle).parent == out / "bundles"
        assert main(["verify", bundle]) == 0, capsys.readouterr().err
    capsys.readouterr()
    # What the demo tells its user to run: the directory of bundles, a line each.
    assert main(["verify", str(out / "bundles")]) == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(report["bundles"]) + 1 and all(line.startswith("OK ") for line in lines[:-1])
    assert lines[-1] == f"{out / 'bundles'}: {len(report['bundles'])} of {len(report['bundles'])} bundle(s) verified"


def test_report_is_one_offline_file(demo):
    _, report, _ = demo
    html = Path(report["report_html"]).read_text()
    assert html.count("<svg") >= 12                                  # timelines and distributions
    assert "<script" not in html and not re.search(r"""(src|href)=["']https?://""", html)
    for verdict in ("alive_health_ok_no_progress", "not_serving", "engine_dead", "process_exit"):
        assert verdict in html
    assert "What a restart would destroy" in html                     # the runbook branches
    md = Path(report["report_md"]).read_text()
    assert "| TTFT (s) |" in md and "alive_health_ok_no_progress" in md


@pytest.mark.chromium
@needs_tool("chromium")
def test_report_renders_in_chromium_without_console_errors(demo, tmp_path):
    _, report, _ = demo
    shot = tmp_path / "shot.png"
    result = subprocess.run(
        [tool_path("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--window-size=1200,2400", f"--screenshot={shot}", Path(report["report_html"]).resolve().as_uri()],
        capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Failed to load" in line]
    assert console == []
    width, channels, rows = decode_png(shot.read_bytes())
    blue = sum(1 for row in rows for x in range(0, width * channels, channels)
               if row[x + 2] > row[x] + 80 and row[x + 2] > 180)       # chart bars and lines are blue
    assert blue > 2000, blue


# --- the demo never ends green on a workload it did not achieve (issue 22) ---------------------------------

def test_every_workload_has_its_announced_shape_and_the_json_says_so(demo):
    _, report, _ = demo
    assert report["slot_limit"] == 256
    assert [s["phase"] for s in report["shapes"]] == ["normal", "overload", "long-prompt", "long-output"]
    assert all(s["ok"] for s in report["shapes"]), report["shapes"]


def test_an_overload_that_did_not_queue_is_not_achieved():
    from servewatch.demo.shape import shape_of

    # what the real-time demo had with 256 slots: running max 102, waiting 0
    shape = shape_of("overload", {"max_running": 102.0, "max_waiting": 0.0, "queue_wait_s": 0.0}, 256, set())
    assert not shape.ok and "running up to 102 of 256, up to 0 waiting" in shape.achieved
    assert shape.line().startswith("overload: NOT achieved: running at the slot limit (256) with a queue")


def test_the_demo_exits_1_when_a_workload_misses_its_shape(tmp_path, monkeypatch, capsys):
    from servewatch.demo import plan

    monkeypatch.setattr(plan, "FAST_SLOTS", 512)      # announce 512 slots; the engine has 256: never filled
    assert main(["demo", "--fast", "--json", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "overload: announced running at the slot limit (512) with a queue, got running up to 256 of 512" in err


def test_the_real_time_demo_runs_the_engine_with_the_slots_its_overload_fills(tmp_path):
    """30 s of the overload preset fill REALTIME_SLOTS and queue on the built-in engine (in virtual time here);
    with 256 slots the same 30 s gave 193 running and no queue."""
    from servewatch.clock import VirtualClock
    from servewatch.demo import realtime
    from servewatch.demo.plan import REALTIME_SLOTS, demo_plan
    from servewatch.demo.shape import shape_of
    from servewatch.load.scenarios import LoadConfig
    from servewatch.load.virtual import run_load_virtual
    from servewatch.sim import SimConfig, SimEngine

    overload = next(p for p in demo_plan(fast=False) if p.name == "overload")
    for slots, achieved in ((REALTIME_SLOTS, True), (256, False)):
        engine = SimEngine(SimConfig(max_num_seqs=slots), VirtualClock())
        run = run_load_virtual(LoadConfig(url="sim://in-process", scenario="overload",
                                          duration_s=overload.duration_s, metrics_interval_s=0.5), engine)
        row = run.summary["signature"]
        shape = shape_of("overload", row, slots, {"overload"})
        assert shape.ok is achieved, (slots, shape.achieved)
    proc, _ = realtime.start_sim("vllm", 0, tmp_path / "engine.log")
    try:
        assert ["--max-num-seqs", str(REALTIME_SLOTS)] == proc.args[-2:]
    finally:
        realtime._stop(proc)
