"""The recorder knows when it is starved (issue 50, item 7): it measures the gaps in its own sampling, says each on
stderr, notes every verdict concluded across one, keeps them in its bundles (checked by verify), and a drill step
that missed while the recorder was starved is inconclusive, not a miss."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from servewatch.clock import RealClock
from servewatch.detectors.starved import GAP_DETAIL, note_gaps
from servewatch.detectors.verdict import Verdict
from servewatch.drill import report as R
from servewatch.drill.expect import inconclusive
from servewatch.drill.run import StepResult
from servewatch.timeline.gaps import ALLOWANCE_S, FLOOR_S, Gap, SamplingGaps, starved_over
from tests.tools import needs_tool


# -- the gap measure at its boundary -------------------------------------------------------------------------

def test_a_gap_counts_as_starved_only_over_twice_the_interval_plus_the_allowance():
    assert starved_over(0.5) == 2 * 0.5 + ALLOWANCE_S == 1.25
    assert starved_over(0.375) == FLOOR_S == 1.0 and starved_over(0.376) == pytest.approx(1.002)
    assert starved_over(0.01) == 1.0           # a test's or --fast's interval: a second at least
    gaps = SamplingGaps(0.5)
    assert gaps.threshold_s == 1.25
    assert gaps.beat(100.0) is None                 # the first wake: nothing to measure from
    assert gaps.beat(101.24) is None                # 1.24 s: just under
    assert gaps.beat(102.49) is None                # 1.25 s: at the threshold is not over it
    gap = gaps.beat(103.75)                         # 1.26 s: just over
    assert gap == Gap(102.49, 103.75) and round(gap.seconds, 2) == 1.26
    assert gaps.beat(104.25) is None
    assert list(gaps.gaps) == [gap] and gaps.beats == 5
    assert gaps.across(104.0, 110.0) is None        # after it
    assert gaps.across(103.75, 110.0) == gap        # touching its end: the sample it delayed
    assert gaps.across(90.0, 102.49) == gap         # touching its start
    assert gaps.across(90.0, 102.48) is None
    stored = gaps.to_dict(103.0, 104.0)
    assert stored == {"interval_s": 0.5, "threshold_s": 1.25, "gaps": [{"start_t": 102.49, "end_t": 103.75}]}
    assert gaps.to_dict(104.0, 105.0)["gaps"] == []


def test_the_sampling_record_refuses_no_interval_and_takes_its_allowance():
    for interval in (0.0, -0.5):
        with pytest.raises(ValueError, match="^the sampling interval must be positive$"):
            SamplingGaps(interval)
    assert SamplingGaps(0.5, allowance_s=0.5).threshold_s == 1.5
    gaps = SamplingGaps(0.5)
    for t in (0.0, 3.0, 3.5, 5.0, 15.0):          # gaps of 3 s, 1.5 s and 10 s; the first and last far apart
        gaps.beat(t)
    assert gaps.across(2.0, 4.0) == Gap(0.0, 3.0) and gaps.across(2.9, 4.0) == Gap(0.0, 3.0)
    assert gaps.across(3.2, 4.9) == Gap(3.5, 5.0) and gaps.across(4.0, 20.0) == Gap(5.0, 15.0)
    every = [{"start_t": 0.0, "end_t": 3.0}, {"start_t": 3.5, "end_t": 5.0}, {"start_t": 5.0, "end_t": 15.0}]
    assert gaps.to_dict(None, None)["gaps"] == every            # a window without times: all of them
    assert gaps.to_dict(16.0, None)["gaps"] == every and gaps.to_dict(None, -1.0)["gaps"] == every
    assert gaps.to_dict(16.0, 17.0)["gaps"] == []


def test_the_gap_kept_is_bounded_to_the_newest():
    gaps = SamplingGaps(0.1, keep=3)
    for i in range(6):
        gaps.beat(i * 10.0)
    assert gaps.threshold_s == 1.0
    assert [g.start for g in gaps.gaps] == [20.0, 30.0, 40.0]


# -- a verdict concluded across a gap says so ----------------------------------------------------------------

def _verdict(onset, t):
    return Verdict("health_loss", t=t, onset=onset, why="/health failed 3 times in a row", details={"failures": 3})


def test_a_verdict_across_a_gap_carries_the_note_and_one_beside_it_does_not():
    gaps = [Gap(1000.0, 1007.04), Gap(1020.0, 1021.5)]
    across, before, after, touching = note_gaps(
        [_verdict(1003.0, 1010.0), _verdict(990.0, 999.9), _verdict(1008.0, 1019.0), _verdict(1021.5, 1022.0)], gaps)
    assert across.why == ("/health failed 3 times in a row; concluded across a 7.0 s gap in the recorder's own "
                          "sampling")
    assert across.details == {"failures": 3, GAP_DETAIL: 7.04}
    assert before == _verdict(990.0, 999.9) and after == _verdict(1008.0, 1019.0)
    assert touching.details[GAP_DETAIL] == 1.5          # concluded at the wake that ended the gap
    # the longest of two gaps in its span; noted once even when noted again (verify restates noted verdicts)
    [both] = note_gaps([_verdict(995.0, 1025.0)], gaps)
    assert both.details[GAP_DETAIL] == 7.04 and note_gaps([both], gaps) == [both]
    assert note_gaps([across], []) == [across]


def test_a_starved_recorder_says_so_notes_the_verdict_and_its_bundle_verifies_with_the_gap(tmp_path, capsys):
    from servewatch.bundle.recompute import detectors_recompute, with_gaps
    from servewatch.bundle.serialize import sample_from_dict
    from servewatch.bundle.verify import verify_bundle
    from servewatch.detectors import DetectorConfig
    from servewatch.sinks.bundle_sink import bundle_sink
    from servewatch.watch.recorder import Recorder
    from servewatch.watch.targets import callable_sources

    calls = []
    blocked = []

    def health():
        calls.append(1)
        if len(calls) == 2:
            started = time.monotonic()
            time.sleep(1.6)     # the starvation measured: the loop is held, as a node under CPU pressure holds it
            blocked.append(time.monotonic() - started)
        raise ConnectionRefusedError("down")        # health_loss: 3 failed probes, the second held 1.6 s

    clock = RealClock()
    sink = bundle_sink(str(tmp_path / "bundles"), None, DetectorConfig())
    sources = callable_sources(clock, 0.1, health=health, metrics=lambda: "# no engine here\n")
    recorder = Recorder(sources, clock, sinks=[sink], stop_when=lambda fired: True)
    sink.recorder = recorder
    asyncio.run(recorder.run(duration=60))

    assert recorder.gaps.threshold_s == 1.0             # twice 0.1 s plus 0.25 s is under the floor
    [gap] = [g for g in recorder.gaps.gaps if g.seconds >= 1.6]
    assert gap.seconds <= blocked[0] + 1.0 + 1.0        # the hold, plus at most a threshold and some noise
    said = [line for line in capsys.readouterr().err.splitlines() if "recorder starved" in line]
    assert said and said[0].startswith("servewatch watch: recorder starved: ") and ", interval 0.1 s" in said[0]
    [fired] = recorder.fired
    assert fired.verdict.name == "health_loss"
    assert fired.verdict.details[GAP_DETAIL] >= 1.6
    assert "in the recorder's own sampling" in fired.verdict.why
    # the bundle carries the gaps and the noted verdict, and verify recomputes the note from them
    checked = verify_bundle(fired.bundle)
    window = checked.incident["window"]["recorder"]
    assert window["interval_s"] == 0.1 and window["threshold_s"] == 1.0
    assert {"start_t": gap.start, "end_t": gap.end} in window["gaps"]
    [stored] = [v for v in checked.incident["verdicts"] if v["name"] == "health_loss"]
    assert stored["details"][GAP_DETAIL] == fired.verdict.details[GAP_DETAIL]
    samples = [sample_from_dict(d) for d in checked.samples]
    config = checked.incident["detector_config"]
    plain = [v for v in detectors_recompute(samples, config) if v.name == "health_loss"]
    assert plain and GAP_DETAIL not in plain[0].details      # the note is the stored gaps', not the samples'
    noted = [v for v in with_gaps(detectors_recompute, window)(samples, config) if v.name == "health_loss"]
    assert noted[0].details[GAP_DETAIL] == stored["details"][GAP_DETAIL]
    from servewatch.bundle.incident import load_incident
    from servewatch.bundle.summarize import render_markdown

    summary = render_markdown(load_incident(fired.bundle))
    assert f"- recorder starved: {gap.seconds:.1f} s gap at " in summary and "own sampling" in summary


# -- the drill: a step during which the recorder was starved is inconclusive -------------------------------------

# the drill's pure parts (the gaps read back, over_s, inconclusive) are in tests/test_values_measure.py and
# tests/test_values_expect.py, where the mutation shards of drill/measure.py and drill/expect.py run them
MISSED = {"expectation": "target_restarted within 5 s", "met": False, "observed": "after 14 s", "over_s": 9.0}
MET = {"expectation": "every bundle written verifies", "met": True, "observed": "1 of 1 verified"}


def _run(results, leaks_ok=True):
    spec = SimpleNamespace(describe=lambda: "built-in simulator (vllm)", existing=False)
    plan = SimpleNamespace(to_json=lambda: {"name": "standard", "target": {"engine": "sim"}, "faults": []},
                           target=spec, targets={})
    return SimpleNamespace(plan=plan, targets={}, consent=None, started=100.0, ended=160.0, results=results,
                           leaks={"processes_left": 0, "ports_held": 0, "ok": leaks_ok})


def _step(index, checks, starved=None):
    return StepResult(index=index, kind="restart", name=f"fault {index}", target="main", checks=list(checks),
                      inconclusive=starved)


def test_the_drill_report_scores_a_starved_step_inconclusive_not_failed_and_says_how_many():
    steps = [_step(1, [MET]), _step(2, [MET, MISSED], inconclusive([MET, MISSED], 7.0)), _step(3, [MET])]
    doc = R.document(_run(steps))
    R.validate(doc)
    assert doc["failed_faults"] == [] and doc["inconclusive_faults"] == [2] and not doc["expectations_met"]
    assert R.exit_status(doc) == R.INCONCLUSIVE_EXIT == 4
    md = R.markdown(doc)
    assert ("standard on built-in simulator (vllm): 2 of 3 faults met their expectations, 1 inconclusive (the "
            "recorder was starved: not scored a miss, not a pass) in 60 s; no leaks") in md
    row = R.rows(doc)[1]
    assert row[-1] == ("inconclusive: recorder starved 7 s; not met meanwhile: target_restarted within 5 s "
                       "(after 14 s)")
    assert "FAILED" not in md
    assert json.loads(json.dumps(doc))["faults"][1]["inconclusive"] == "recorder starved 7 s"
    # a real miss beside it fails the drill (1); all met passes (0) and the summary line is as before
    failed = R.document(_run([*steps, _step(4, [MISSED])]))
    assert failed["failed_faults"] == [4] and failed["inconclusive_faults"] == [2] and R.exit_status(failed) == 1
    clean = R.document(_run([_step(1, [MET])]))
    assert R.exit_status(clean) == 0 and clean["expectations_met"]
    assert "1 of 1 faults met their expectations in 60 s; no leaks" in R.markdown(clean)
    assert R.exit_status(R.document(_run(steps, leaks_ok=False))) == 1


# -- the watcher's scheduling priority in deploy/ --------------------------------------------------------------

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def _docs(name):
    import yaml

    return [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if d]


def test_the_watcher_pods_run_at_a_priority_above_the_engines_and_every_watcher_requests_cpu():
    import kubernetes_validate   # a test dependency: missing, the test fails

    [priority] = _docs("priority-class.yaml")
    kubernetes_validate.validate(priority, "1.33.0", strict=True)
    assert priority["kind"] == "PriorityClass" and priority["value"] > 0 and priority["globalDefault"] is False
    for name in ("fleet.yaml", "node-daemonset.yaml"):        # pods of the watcher alone
        [pod] = [d["spec"]["template"]["spec"] for d in _docs(name) if d["kind"] in ("StatefulSet", "DaemonSet")]
        assert pod["priorityClassName"] == priority["metadata"]["name"], name
    for name in ("sidecar.yaml", "proxy.yaml", "fleet.yaml", "node-daemonset.yaml"):
        pods = [d["spec"]["template"]["spec"] for d in _docs(name) if d["kind"] in ("Deployment", "StatefulSet",
                                                                                     "DaemonSet")]
        [watcher] = [c for pod in pods for c in pod["containers"] if c["name"] == "servewatch"]
        cpu = watcher["resources"]["requests"]["cpu"]
        assert cpu.endswith("m") and int(cpu[:-1]) >= 100, (name, cpu)       # its weight beside the engine
        assert "cpu" not in watcher["resources"].get("limits", {}), name    # no limit: never throttled


def _unit(name):
    text = (DEPLOY / "systemd" / name).read_text()
    return text, dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_the_systemd_units_run_the_watcher_ahead_of_the_engine():
    _, serve = _unit("servewatch.service")
    assert int(serve["CPUWeight"]) > 100 and int(serve["Nice"]) < 0     # the default weight is 100, nice 0
    _, guard = _unit("servewatch-guard@.service")
    nice = int(guard["Nice"])
    assert nice < 0
    # guard starts the server in its own cgroup: back at nice 0, below guard
    assert f" -- nice -n {-nice} vllm serve " in guard["ExecStart"]


@needs_tool("systemd-analyze")
def test_the_guard_unit_verifies(tmp_path):
    import subprocess
    import sys

    text, _ = _unit("servewatch-guard@.service")
    local = tmp_path / "servewatch-guard@8000.service"
    local.write_text(text.replace("/usr/local/bin/servewatch", f"{sys.executable} -m servewatch"))
    result = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if "servewatch-guard" in line]
    assert result.returncode == 0 and not problems, result.stderr


def test_summarize_says_the_gaps_a_bundle_holds_and_that_there_were_none():
    from servewatch.bundle.summarize import _recorder

    assert _recorder({"start_t": 1.0}) == []                     # a virtual-time recorder measures none
    none = {"recorder": {"interval_s": 0.5, "threshold_s": 1.25, "gaps": []}}
    assert _recorder(none) == ["- the recorder's own sampling: every 0.5 s, no gap over 1.25 s"]
    starved = {"recorder": {"interval_s": 0.5, "threshold_s": 1.25,
                            "gaps": [{"start_t": 1_796_467_384.0, "end_t": 1_796_467_391.0}]}}
    assert _recorder(starved) == ["- recorder starved: 7.0 s gap at 2026-12-05 10:43:04.000Z, interval 0.5 s (a "
                                  "verdict concluded across a gap says so)"]
