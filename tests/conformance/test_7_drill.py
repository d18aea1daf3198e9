"""The conformance suite on the drill harness: each plan in tests/conformance/plans/ (short-vllm and short-sglang:
one start of the lab engine and its faults, and a DP=2 SGLang for the last; multirank-vllm: a TP=2 vLLM idle,
under steady load, and its rank 1 stopped and killed, then a DP=2 vLLM with its DP rank 1 worker stopped) run by `servewatch drill` exactly as a user runs it, every
expectation met — the drill's exit status and its drill.json agree, and nothing leaked. A new real-engine fault
case is an entry in such a plan, not new code: starting, injecting and measuring live in servewatch.drill.

Time: the start of the lab engine is measured (the drill says "/health 200 after X s" as soon as it is up)
and bounded by the plan's own ready_timeout_s, which the drill enforces; from then on the drill is held to
the fault windows its plan sets (warm-up, hold, and the traffic after the fault: the observation or the
recovery window, see FaultStep.traffic_after_revert_s) plus STEP_OVERHEAD_S per fault. The longest freeze
the session's meter measured during the drill is printed with the figures. When every expectation missed is
a time bound overshot by no more than the freeze measured from that fault's injection to the end of its
traffic, or belongs to a fault whose window the host spent a quarter or more of frozen (FROZEN_SHARE), those
faults alone run once more (`servewatch drill --only NAME`, on a fresh start of their target) and must then be
met; anything else fails at once.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import lab_timing
import pytest

from servewatch.drill.plan import RECOVERY_WINDOW_S, load_plan
from servewatch.drill.run import WORKLOAD_FIRST_LEAD_S

PLANS = Path(__file__).parent / "plans"
# Per fault, beyond its windows: the recorder started and proven, then stopped, the requests still in
# flight at the workload's end finished, the bundles verified; measured 3.1-4.6 s a fault on the lab vLLM
# and 7.0 s on the lab SGLang with the fast suite running alongside (2026-12-01; the test prints it):
# twice the most, and a second.
STEP_OVERHEAD_S = 15.0
FROZEN_SHARE = 0.25     # of a fault's window spent frozen: none of its expectations measured the code
START_MARGIN_S = 30.0        # before the start is timed: the lab venv and model found; after a failed start: its teardown
END_MARGIN_S = 30.0          # the last fault's engine stopped, the leak check, the report written
READY_LINE = re.compile(r"/health 200 after ([\d.]+) s")
TARGET_LINE = re.compile(r"servewatch drill: target( \S+)?: ")    # the first target up (its name when a plan names more)


def after_start_bound(plan) -> float:
    """Seconds the drill may take once its engine is up: every fault's windows plus STEP_OVERHEAD_S, a start
    again (bounded by its ready_timeout_s) after each fault that takes its server down (or whose guard is to
    kill it) before the last on that server, the start each fault at a start makes (its target's
    ready_timeout_s), and the first start of every other target."""
    from servewatch.drill.faults import FAULTS

    targets = plan.named_targets()
    windows = sum((targets[s.on].ready_timeout_s + s.hold_s + max(s.observe_s, s.expect.clear_within_s or 0.0)
                   if s.at_start else
                   s.warmup_s + s.hold_s + max(s.traffic_after_revert_s, s.watch_after_revert_s)) + STEP_OVERHEAD_S
                  + (WORKLOAD_FIRST_LEAD_S if s.workload_first else 0.0)
                  for s in plan.steps)
    down = [FAULTS[s.kind].takes_server_down or bool(s.expect.guard and s.expect.guard.kills) for s in plan.steps]
    restarts = sum(targets[s.on].ready_timeout_s for i, s in enumerate(plan.steps)
                   if down[i] and any(later.on == s.on for later in plan.steps[i + 1:]))
    others = sum(t.ready_timeout_s for t in plan.targets.values())
    return windows + restarts + others + END_MARGIN_S


def _overshoots(fault: dict, expect: dict) -> list[float] | None:
    """How far each unmet expectation of a fault overshot its time bound, or None when one of them is not a
    time bound (a verdict that never fired, a wrong /health, a fault not run...)."""
    if fault.get("not_run"):
        return None
    detected, out = fault["detected"], []
    timed = {f"{v} within {within:g} s": (detected.get(v), within) for v, within in expect.get("fire", {}).items()}
    if "fire_any" in expect:
        names, within = expect["fire_any"]["verdicts"], expect["fire_any"]["within_s"]
        took = min((detected[n] for n in names if n in detected), default=None)
        timed[f"one of {', '.join(names)} within {within:g} s"] = (took, within)
    if "recover_within_s" in expect:
        within = expect["recover_within_s"]
        timed[f"a good request within {within:g} s after the fault"] = (fault["recovery_s"], within)
    if "clear_within_s" in expect:
        within = expect["clear_within_s"]
        resumed = fault.get("resumed_s") or 0.0
        for verdict, took in fault.get("cleared", {}).items():
            timed[f"{verdict} clears within {within:g} s once the fault ends and tokens move again"] = (took - resumed, within)
    for verdict, allowance in expect.get("fire_by_threshold", {}).items():
        took, threshold = detected.get(verdict), fault.get("thresholds", {}).get(verdict)
        late = took is not None and threshold is not None and took > threshold + allowance
        timed[f"{verdict} at its own threshold \u00b1 {allowance:g} s"] = (took if late else None,
                                                                        None if threshold is None else threshold + allowance)
    if "exit_within_s" in expect:
        within = expect["exit_within_s"]
        timed[f"process_exit within {within:g} s"] = (detected.get("process_exit"), within)
    kill = (fault.get("guard") or {}).get("kill")
    if "within_s" in expect.get("guard", {}) and kill:
        within = expect["guard"]["within_s"]
        timed[f"guard kills the tree within {within:g} s of its verdict"] = (kill["after_verdict_s"], within)
    for check in fault["checks"]:
        if check["met"]:
            continue
        took, within = timed.get(check["expectation"], (None, None))
        if took is None and "over_s" in check:      # a bound derived in the run (recover_within)
            out.append(check["over_s"])
            continue
        if took is None:
            return None
        out.append(took - within)
    return out


def _freeze_explained(doc: dict) -> str:
    """Why every unmet expectation of the drill is explained by a freeze, or "" when one is not: each one
    a time bound overshot by no more than the longest freeze the meter measured from that fault's
    injection to the end of its traffic, or any expectation of a fault whose window the host spent a
    FROZEN_SHARE or more of in freezes (it ran nothing of ours for that long: 25.2 s of the 31 s window of
    the TP=2 overload, 28.7 s of 69 s of the request-path stall, in the CI of 2026-12-03 whose vLLM suite
    was frozen 526 s in all; such a fault measured the host, not the code)."""
    mono = time.monotonic() - time.time()
    reasons = []
    for fault, step in zip(doc["faults"], doc["plan"]["faults"]):
        if fault["met"]:
            continue
        if fault.get("injected_at") is None:      # never injected: nothing a freeze could have delayed
            return ""
        since = fault["injected_at"] + mono
        e = step["expect"]
        recover = RECOVERY_WINDOW_S if "recover_within" in e else e.get("recover_within_s", 0.0)
        until = since + step["hold_s"] + max(step["observe_s"], recover, e.get("clear_within_s", 0.0),
                                             e.get("exit_within_s", 0.0) - step["hold_s"]) + STEP_OVERHEAD_S
        overshoots = _overshoots(fault, e)
        if overshoots:
            freeze = lab_timing.longest_freeze(since, until)
            if max(overshoots) <= freeze:
                reasons.append(f"fault {fault['index']}: over by {max(overshoots):.2f} s, freeze {freeze:.2f} s")
                continue
        frozen = lab_timing.frozen(since, until)
        if frozen < FROZEN_SHARE * (until - since):
            return ""
        reasons.append(f"fault {fault['index']}: the host froze {frozen:.1f} s of its {until - since:.0f} s window")
    return "explained by the freezes measured meanwhile (" + "; ".join(reasons) + ")"


def _plan(name: str):
    return load_plan(PLANS / f"{name}.yaml")


def _timeout(name: str) -> float:
    """The drill's own bounds, and those of running every fault once more (the most a freeze can ask)."""
    plan = _plan(name)
    once = START_MARGIN_S + max(t.ready_timeout_s for t in plan.named_targets().values()) + after_start_bound(plan)
    return 2 * once + 60.0


def _interrupt(proc: subprocess.Popen) -> None:
    """^C for the drill (it stops its engine and writes what it has), then a kill."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class Drilled:
    """A plan's drill, and the run again of the faults it missed by no more than a measured freeze."""

    def __init__(self, doc: dict, out: Path):
        self.runs = [(doc, out)]

    def fault(self, name: str) -> tuple[dict, dict, Path]:
        """(fault, its drill.json, that drill's --out) of the last run of the fault `name`."""
        for doc, out in reversed(self.runs):
            for fault in doc["faults"]:
                if fault["name"] == name:
                    return fault, doc, out
        raise KeyError(name)


def _unmet(doc: dict) -> list[str]:
    return [f"{f['index']}. {f['name']}: " + ("not run: " + f["not_run"] if f.get("not_run") else
                                              "; ".join(f"{c['expectation']} ({c['observed']})"
                                                        for c in f["checks"] if not c["met"]))
            for f in doc["faults"] if not f["met"]]


def _drill(name: str, out: Path) -> Drilled:
    """The plan's drill, every expectation met. When every one it missed is a time bound overshot by no more
    than the freeze the meter measured meanwhile, just those faults run once more (`servewatch drill --only`,
    each on a fresh start of its target) and must then be met: the whole drill again would cost up to
    15 minutes of CI for one freeze."""
    plan = _plan(name)
    doc, _ = _run_drill(name, plan, out)
    drilled = Drilled(doc, out)
    unmet = _unmet(doc)
    if unmet:
        explained = _freeze_explained(doc)
        message = f"expectations not met: {unmet}"
        if not explained:
            raise AssertionError(message + " — not explained by a freeze")
        again = [f["name"] for f in doc["faults"] if not f["met"]]
        print(f"{message} — {explained}: those {len(again)} fault(s) run once more")
        retry_out = out.parent / f"{out.name}-again"
        redo, _ = _run_drill(name, plan.only(again), retry_out, only=again)
        drilled.runs.append((redo, retry_out))
        still = _unmet(redo)
        assert not still, f"{message} — {explained}; run once more, still not met: {still}"
    assert doc["leaks"]["ok"], f"the drill left something behind: {doc['leaks']}"
    assert len(doc["faults"]) == len(doc["plan"]["faults"]) == len(plan.steps), "a fault of the plan did not run"
    assert not unmet or drilled.runs[-1][0]["leaks"]["ok"], f"the run again left something behind: {drilled.runs[-1][0]['leaks']}"
    return drilled


def _run_drill(name: str, plan, out: Path, only: list[str] | None = None) -> tuple[dict, str]:
    """`servewatch drill` of the plan (or `--only` some of its faults), held to the start and window bounds;
    its drill.json, every leak checked, its exit status agreeing with it."""
    plan_path = PLANS / f"{name}.yaml"
    started = time.monotonic()
    extra = [arg for n in (only or ()) for arg in ("--only", n)]
    proc = subprocess.Popen([sys.executable, "-m", "servewatch", "drill", str(plan_path), "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    up = threading.Event()

    def read_err() -> None:
        for line in proc.stderr:
            err.append(line)
            if TARGET_LINE.match(line):
                up.set()

    readers = [threading.Thread(target=read_err, daemon=True)]
    out_text: list[str] = []
    readers.append(threading.Thread(target=lambda: out_text.append(proc.stdout.read()), daemon=True))
    for reader in readers:
        reader.start()
    start_bound = max(t.ready_timeout_s for t in plan.named_targets().values()) + START_MARGIN_S
    while not up.wait(0.5):      # the drill's own line, or its exit (a failed start ends it)
        if proc.poll() is not None or time.monotonic() - started > start_bound:
            break
    ready = READY_LINE.search("".join(err))
    ready_s = float(ready.group(1)) if ready else None
    up_at = time.monotonic()
    bound = after_start_bound(plan)
    if up.is_set():   # held to the bound plus the longest freeze measured meanwhile (a freeze stops it too)
        while proc.poll() is None and time.monotonic() - up_at <= bound + lab_timing.longest_freeze(up_at):
            try:
                proc.wait(1.0)
            except subprocess.TimeoutExpired:
                pass
    timed_out = proc.poll() is None
    if timed_out:
        _interrupt(proc)
    for reader in readers:
        reader.join(10)
    took = time.monotonic() - started
    freeze = lab_timing.longest_freeze(started)
    print("".join(out_text))
    what = plan_path.name + (f" --only {len(only)} fault(s)" if only else "")
    print(f"drill {what}: exit {proc.returncode} after {took:.0f} s (engine up after "
          f"{'?' if ready_s is None else f'{ready_s:.1f}'} s; bound once up {bound:.0f} s); longest freeze "
          f"measured meanwhile {freeze:.2f} s")
    stderr = "".join(err)[-2000:]
    assert up.is_set(), (f"the engine did not come up within {start_bound:.0f} s (exit {proc.returncode}): "
                         f"{stderr}")
    assert not timed_out, (f"the drill ran past its bound once up ({bound:.0f} s + {freeze:.2f} s longest freeze "
                           f"measured meanwhile) and was interrupted: {stderr}")
    report = out / "drill.json"
    assert report.is_file(), f"no drill.json (exit {proc.returncode}): {stderr}"
    doc = json.loads(report.read_text())
    windows = sum(s.warmup_s + s.hold_s + max(s.traffic_after_revert_s, s.watch_after_revert_s) for s in plan.steps)
    starts = [*doc["target"]["ready_s"], *(s for t in doc["targets"].values() for s in t["ready_s"])]
    overhead = (doc["duration_s"] - sum(starts) - windows) / max(1, len(doc["faults"]))
    print(f"figures: engine up after {starts} s; drill {doc['duration_s']} s; per fault beyond "
          f"its windows: {overhead:.1f} s (STEP_OVERHEAD_S {STEP_OVERHEAD_S:g} s); longest freeze {freeze:.2f} s")
    assert (proc.returncode == 0) == (doc["expectations_met"] is True), (
        f"exit {proc.returncode} while drill.json says expectations_met {doc['expectations_met']}: {stderr}")
    return doc, stderr


@pytest.mark.vllm
@pytest.mark.timeout(_timeout("short-vllm"))
def test_short_drill_meets_every_expectation_on_vllm(lab, run_dir):
    _keep_engine_death(lab, _drill("short-vllm", run_dir / "drill"))


def _keep_engine_death(lab, drilled: Drilled) -> None:
    """The vLLM log of the life the "worker killed" fault ended, and its figures, for the fast replay tests
    (with SERVEWATCH_RECORD_FIXTURES, as tests/fixtures/vllm_real/engine_death_by_worker_sigkill.log)."""
    from lab_observations import log_excerpt

    fault, doc, out = drilled.fault("worker killed")
    index = doc["faults"].index(fault)
    life = 1 + sum(f["restarted_by_drill_s"] is not None for f in doc["faults"][:index])
    lab.obs.save_text("engine_death_by_worker_sigkill.log",
                      log_excerpt((out / "logs" / f"vllm-{life}.log").read_text(errors="replace")))
    lab.obs.record("worker_sigkill", {"api_server_exit_code": fault["server_exit"]["status"],
                                      "engine_dead_after_s": fault["detected"].get("engine_dead"),
                                      "process_exit_after_s": fault["detected"].get("process_exit"),
                                      "health_while_killed": fault["health"],
                                      "in_flight_at_kill": fault["impact"]["in_flight_at_fault"]})


@pytest.mark.vllm
@pytest.mark.timeout(_timeout("start-vllm"))
def test_start_drill_meets_every_expectation_on_vllm(lab, run_dir):
    """A failed start, a normal one recorded from its first second, request outcomes, a start stalled while
    compiling, SIGTERM to guard: plans/start-vllm.yaml (until 2026-12-03 the hand-coded test_1_startup_failure,
    test_4_guard and test_5_outcomes_startup)."""
    from lab_observations import log_excerpt

    drilled = _drill("start-vllm", run_dir / "start-drill")
    failed, _, out = drilled.fault("a start that fails")
    lab.obs.save_text("startup_failure_undersized_kv.log",       # the replay tests' fixture, with the engine's message
                      log_excerpt((out / "logs" / "undersized" / "vllm-1.log").read_text(errors="replace")))
    stalled, _, _ = drilled.fault("worker stopped while compiling")
    lab.obs.record("start_drill", {"failed_start_exit": failed["server_exit"]["status"],
                                   "process_exit_after_start_s": failed["detected"].get("process_exit"),
                                   "startup_stalled_after_stop_s": stalled["detected"].get("startup_stalled"),
                                   "startup_stalled_bound_s": stalled["thresholds"].get("startup_stalled")})


@pytest.mark.vllm
@pytest.mark.timeout(_timeout("multirank-vllm"))
def test_multirank_drill_meets_every_expectation_on_vllm_tp2(lab, run_dir):
    _drill("multirank-vllm", run_dir / "multirank-drill")


@pytest.mark.sglang
@pytest.mark.timeout(_timeout("short-sglang"))
def test_short_drill_meets_every_expectation_on_sglang(sglang_lab, sglang_run_dir):
    from servewatch.lab.sgl_kernel_stand_in import stand_in_calls

    out = sglang_run_dir / "drill"
    try:
        _drill("short-sglang", out)
    finally:   # the run proves something only if SGLang never reached a stubbed op of the test-only stand-in
        logs = sorted((out / "logs").rglob("sglang-*.log"))     # each start of each target
        called = [name for log in logs for name in stand_in_calls(log.read_text(errors="replace"))]
        print(f"stand-in calls in {len(logs)} SGLang logs of the drill: {called or 'none'}")
    assert logs and called == [], f"SGLang called stubbed sgl_kernel ops {called}: this run did not run real code"
