"""servewatch drill: plan checking, the derived figures, the PID proof and consent gate, and a short
drill against the built-in simulator end to end."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from servewatch.cli import main
from servewatch.drill import measure as M
from servewatch.drill import report as R
from servewatch.drill.faults import FAULTS
from servewatch.drill.plan import PlanError, load_plan, plan_from_dict, shipped_path
from servewatch.load.records import RequestRecord


def _plan(**over) -> dict:
    data = {"name": "t", "target": {"engine": "sim"}, "faults": [{"kind": "stop"}]}
    data.update(over)
    return data


# -- plans -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["vllm", "sglang", "sim"])
def test_shipped_standard_plans_are_valid_with_at_least_twelve_faults_within_fifteen_minutes(engine):
    plan = load_plan(shipped_path("standard", engine))
    assert len(plan.steps) >= 12
    restarts = sum(1 for s in plan.steps if FAULTS[s.kind].takes_server_down or s.kind == "restart")
    start_s = {"vllm": 50, "sglang": 60, "sim": 3}[engine]       # measured ready times, generously
    assert plan.budget_s() + (restarts + len(plan.targets)) * start_s < 15 * 60
    assert all(s.expect.to_json() for s in plan.steps), "every shipped fault states what must happen"


def test_a_plan_workload_aimed_at_a_dp_rank_sends_the_engines_routing_header():
    from servewatch.drill.plan import workload_headers

    plan = plan_from_dict(_plan(target={"engine": "vllm"}, workload={"concurrency": 2, "dp_rank": 1}))
    assert workload_headers(plan.workload, plan.target) == (("X-data-parallel-rank", "1"),)
    assert workload_headers({"concurrency": 2}, plan.target) == ()
    sglang = plan_from_dict(_plan(target={"engine": "sglang"}, workload={"concurrency": 2, "dp_rank": 0}))
    assert workload_headers(sglang.workload, sglang.target) == (("X-Data-Parallel-Rank", "0"),)


@pytest.mark.parametrize("data, words", [
    (_plan(faults=[{"kind": "nap"}]), "unknown fault kind 'nap'"),
    (_plan(faults=[{"kind": "stop", "expect": {"fire": {"stalled": 5}}}]), "unknown verdict(s) stalled"),
    (_plan(faults=[{"kind": "stop", "colour": 1}]), "unknown key(s)"),
    (_plan(target={"engine": "sim", "url": "http://127.0.0.1:1", "pid": 3}), "give either engine"),
    (_plan(faults=[{"kind": "slow_net", "params": {"delay": 5}}]), "unknown parameter 'delay'"),
    (_plan(recorder={"set": ["stall.nope=3"]}), "recorder/set"),
    (_plan(targets={"b": {"engine": "sim"}}, faults=[{"kind": "stop", "name": "lost", "target": "c"}]),
     "faults/0 (lost): target: unknown target 'c' (known: main, b)"),
    (_plan(target={"url": "http://127.0.0.1:1", "pid": 3, "env": {"A": "1"}}), "target: env: only for a lab engine"),
    (_plan(targets={"b": {"engine": "sim", "env": {"A": "1"}}}), "targets/b: env: only for a lab engine"),
    (_plan(targets={"b": {"engine": "vllm", "env": {"A": 1}}}), "targets/b/env/A: expected a string, got the number 1"),
    (_plan(target={"url": "http://127.0.0.1:1", "pid": 3}, targets={"b": {"engine": "sim"}}),
     "an existing server is drilled alone"),
    (_plan(targets={"main": {"engine": "sim"}}), "targets/main: main is the plan's own target"),
    (_plan(faults=[{"kind": "quiet", "params": {"traffic": 1}}]), "parameter 'traffic' must be true or false"),
    (_plan(faults=[{"kind": "stop", "name": "n", "expect": {"names": ["TP rank 1"]}}]),
     "faults/0 (n): expect/names: says what the verdict of fire or fire_any must name"),
    (_plan(faults=[{"kind": "stop", "name": "n", "expect": {"probe_preempted": True}}]),
     "faults/0 (n): expect/probe_preempted: says what the recorder's probe did; give the fault probe: true"),
    (_plan(faults=[{"kind": "kill", "name": "n", "workload_first": True, "at_start": True}]),
     "workload_first: a step that starts its server sends no workload"),
    (_plan(target={"url": "http://127.0.0.1:1", "pid": 3}, workload={"dp_rank": 1}),
     "dp_rank: the drill knows the engine's routing header only for a server it starts"),
])
def test_a_bad_plan_is_one_line(data, words):
    with pytest.raises(PlanError) as exc:
        plan_from_dict(data)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_the_standard_vllm_plan_ends_with_tensor_parallel_faults_on_a_tp2_server_started_last():
    plan = load_plan(shipped_path("standard", "vllm"))
    tp2 = plan.targets["tp2"]
    assert tp2.engine == "vllm" and tp2.args[-2:] == ("--tensor-parallel-size", "2")
    assert dict(tp2.env) == {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    on = [s.on for s in plan.steps]
    assert on == ["main"] * (len(on) - 2) + ["tp2", "tp2"]      # one start of each, main's faults first
    stall, kill = plan.steps[-2:]
    assert (stall.kind, stall.role, stall.rank, stall.probe) == ("stop", "worker", 1, True)
    assert set(stall.expect.fire_any[0]) == {"alive_health_ok_no_progress", "rank_stalled", "not_serving"}
    assert (kill.kind, kill.role, kill.rank, kill.expect.fire) == ("kill", "worker", 1, {"engine_dead": 5})
    assert "Fourteen faults" in plan.description and len(plan.steps) == 14


def test_an_engine_environment_goes_to_the_lab_server(tmp_path, monkeypatch):
    from servewatch.drill.plan import Target
    from servewatch.drill.target import LabTarget
    from servewatch.lab import recipe

    seen = {}

    class Lab:
        def server(self, log_path, **config):
            seen.update(config)

    lab = Lab()
    lab.recipe = recipe.VLLM
    lab.stand_in = None
    lab.model = type("TinyModel", (), {"path": tmp_path / "tiny"})()
    monkeypatch.setattr(recipe, "prepare_lab", lambda _: lab)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    target = LabTarget(Target(engine="vllm", env=(("VLLM_CPU_KVCACHE_SPACE", "1"),)), tmp_path)
    target._build()
    hook = tmp_path / "hang"     # the drill's test-only hang hook, first on the engine's path (drill.hang_hook)
    assert seen["extra_env"] == (("VLLM_CPU_KVCACHE_SPACE", "1"),
                                 ("PYTHONPATH", str(hook / "servewatch-test-only-hang-hook")),
                                 ("SERVEWATCH_TEST_ONLY_HANG_DIR", str(hook / "hang-requests")))
    assert target.model_path() == str(tmp_path / "tiny")     # what no bundle may hold


TWO_TARGETS = """
    name: two
    target: {engine: sim}
    targets:
      second: {engine: sim, sim_dialect: sglang}
    workload: {scenario: custom, rate: 4, output_tokens: 8}
    defaults: {warmup_s: 1, hold_s: 1, observe_s: 1}
    faults:
      - name: main killed
        kind: kill
        role: api
      - name: second frozen
        target: second
        kind: stop
        role: api
"""


def test_a_plan_with_two_targets_lists_both_and_the_target_of_each_fault(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    path.write_text(textwrap.dedent(TWO_TARGETS))
    plan = load_plan(path)
    assert [s.on for s in plan.steps] == ["main", "second"] and plan.targets["second"].sim_dialect == "sglang"
    assert main(["drill", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "target main: built-in simulator (vllm)" in out and "target second: built-in simulator (sglang)" in out
    assert " 1. main killed (on main):" in out and " 2. second frozen (on second):" in out


def test_a_plan_file_that_is_not_yaml_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "plan.yaml"
    bad.write_text("name: [unclosed\n")
    assert main(["drill", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid YAML" in err[0]


# -- derived figures ---------------------------------------------------------------------------------

def test_kubelet_restarts_at_the_third_failed_probe_in_a_row():
    # answers every 0.5 s; failing from t=25 on: probes at 30, 40, 50 fail -> restart at 50
    answers = [(t / 2, t / 2 < 25) for t in range(0, 140)]
    assert M.kubelet_restart(answers, 0.0, 70.0) == 50.0
    # one success between failures resets the count
    # (probes at 30 fail, 40 passes, 50, 60, 70 fail)
    flapping = [(t / 2, not (25 <= t / 2 < 35) and not (41 <= t / 2)) for t in range(0, 200)]
    assert M.kubelet_restart(flapping, 0.0, 90.0) == 70.0
    assert M.kubelet_restart(answers, 0.0, 45.0) is None        # the window ends before the third failure


def test_slow_health_answers_fail_a_kubelet_probe():
    probes = [M.HttpAnswer(t, "/health", 200, 1.5) for t in range(0, 40)]
    assert all(not ok for _, ok in M.health_answers(probes))


def test_livez_fails_only_while_a_liveness_verdict_holds():
    events = [M.VerdictEvent("fired", "health_loss", 5.0, 4.0),
              M.VerdictEvent("fired", "alive_health_ok_no_progress", 10.0, 8.0),
              M.VerdictEvent("cleared", "alive_health_ok_no_progress", 20.0, 8.0)]
    answers = dict(M.livez_answers(events, 0.0, 30.0, step_s=1.0))
    assert answers[6.0] is True and answers[10.0] is False and answers[19.0] is False and answers[20.0] is True


def _record(i, sent, *, ttft=0.1, e2e=0.5, error=None):
    return RequestRecord(id=i, scheduled=sent, prompt_tokens_target=44, max_tokens=64, sent=sent,
                         http_status=None if error else 200, ttft_s=None if error else ttft,
                         e2e_s=e2e, error=error)


def test_a_health_answer_that_came_only_after_the_fault_is_not_an_answer_while_it_held():
    # a stopped API server: its kernel queues the probes, all answered at once after SIGCONT at t=10
    probes = [M.HttpAnswer(0.0, "/health", 200, 0.01), M.HttpAnswer(4.0, "/health", None, 5.0),
              M.HttpAnswer(6.0, "/health", 200, 4.1), M.HttpAnswer(8.5, "/health", 200, 1.6),
              M.HttpAnswer(9.5, "/health", 200, 0.6), M.HttpAnswer(10.5, "/health", 200, 0.01)]
    # the probe sent in the last second and answered just after cannot tell: counted by its answer
    assert M.health_during(probes, 1.0, 10.0, stopped=True) == {"no answer": 1, "200 after the fault": 2, "200": 1}
    assert M.health_during(probes, 0.0, 0.5, stopped=True) == {"200": 1}
    # nothing stopped (an overload on a starved machine): a late answer is a slow 200, and the slowest is said
    assert M.health_during(probes, 1.0, 10.0) == {"no answer": 1, "200": 3}
    assert M.slowest(probes, 1.0, 10.0) == 5.0 and M.slowest(probes, 9.0, 10.0) == 0.6
    assert M.slowest(probes, 20.0, 30.0) is None


def test_a_slow_health_answer_is_said_beside_the_counts():
    row = {"health": {"200": 34}, "health_slowest_s": 1.42}
    assert R._slow(row) == " (slowest 1.42 s, over a kubelet's 1 s timeout)"
    assert R._slow({**row, "health_slowest_s": 0.4}) == "" and R._slow({**row, "health_slowest_s": None}) == ""
    # beside probes a stopped server left unanswered, the slowest is their timeout: not said
    assert R._slow({"health": {"no answer": 14, "200 after the fault": 8, "200": 2}, "health_slowest_s": 5.0}) == ""


def test_impact_and_recovery_from_the_load_records():
    records = [_record(0, 1.0), _record(1, 2.0, e2e=0.7), _record(8, 3.0, e2e=5.0, error="http_5xx"),
               _record(9, 9.0, e2e=12.0),           # stuck in the fault: not a request's length before it
               _record(2, 10.5, ttft=2.0, e2e=3.0),
               _record(3, 11.0, error="connect"), _record(4, 12.0, error="truncated"), _record(5, 21.0, e2e=0.4)]
    impact = M.impact(records, injected=10.0, reverted=20.0)
    assert (impact.requests, impact.failed) == (8, 3)
    assert impact.errors == {"connect": 1, "http_5xx": 1, "truncated": 1} and impact.truncated == 1
    assert impact.ttft_inflation == 20.0
    assert impact.e2e_before_s == pytest.approx(0.6)     # good requests done before the fault only
    assert M.recovery(records, 20.0) == pytest.approx(1.4)
    assert M.detections([M.VerdictEvent("fired", "health_loss", 9.0, 8.0),
                         M.VerdictEvent("fired", "health_loss", 13.5, 12.0)], 10.0) == {"health_loss": 3.5}


def test_the_simulated_full_disk_refuses_writes_below_its_directory_only(tmp_path):
    full = tmp_path / "bundles"
    full.mkdir()
    code = textwrap.dedent(f"""
        import os, errno
        from servewatch.drill.full_disk import _install
        _install({str(full)!r})
        open({str(tmp_path / 'elsewhere')!r}, 'w').close()
        for attempt in (lambda: open({str(full / 'x')!r}, 'w'),
                        lambda: os.open({str(full / 'y')!r}, os.O_WRONLY | os.O_CREAT)):
            try:
                attempt()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
            else:
                raise SystemExit('written')
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    assert not any(full.iterdir())


# -- the PID proof and consent -------------------------------------------------------------------------

@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_a_pid_that_does_not_own_the_port_is_refused_in_one_line_with_exit_2(listener, capsys):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        code = main(["drill", "--fault", "stop", "--target", listener, "--pid", str(other.pid), "--consent",
                     "--hold", "1"])
        assert other.poll() is None, "the process was not touched"
        import psutil

        assert psutil.Process(other.pid).status() != psutil.STATUS_STOPPED
    finally:
        other.kill()
        other.wait()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("servewatch drill: ") and str(other.pid) in err[0]


def test_an_existing_server_needs_consent_and_dry_run_lists_what_it_would_touch(listener, capsys):
    import os

    assert main(["drill", "--fault", "stop", "--target", listener, "--pid", str(os.getpid()), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--consent" in err[0]
    assert main(["drill", "--fault", "stop", "--target", listener, "--pid", str(os.getpid()), "--consent",
                 "--dry-run", "--role", "api"]) == 0
    out = capsys.readouterr().out
    assert f"pid {os.getpid()}" in out and "role api rank 0" in out and "SIGSTOP" in out


# -- a short drill against the simulator ----------------------------------------------------------------

def test_a_short_drill_against_the_simulator_measures_and_fails_on_an_unmet_expectation(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent("""
        name: short
        target: {engine: sim}
        workload: {scenario: custom, rate: 4, output_tokens: 32}
        defaults: {warmup_s: 3, hold_s: 9, observe_s: 3}
        faults:
          - name: killed, wrongly expected quiet
            kind: kill
            role: api
            hold_s: 3
            expect:
              not_fire: [process_exit]
          - name: frozen
            kind: stop
            role: api
            expect:
              fire: {health_loss: 9}
              health: failing
              recover_within: {requests: 2, plus_s: 5}
    """))
    out = tmp_path / "out"
    assert main(["drill", str(plan), "--out", str(out)]) == 1
    doc = json.loads((out / "drill.json").read_text())
    second, first = doc["faults"]     # the kill first: the drill starts the server again for the next fault
    assert first["met"], first["checks"]
    assert first["touched"][0]["signal"] == "SIGSTOP" and first["touched"][0]["role"] == "api"
    assert "no answer" in first["health"]
    assert first["impact"]["requests"] > 0 and first["recovery_s"] is not None
    # the traffic planned for the 90 s window of a bound counted in requests ended once the recovery was seen
    sent = [json.loads(line)["sent"] for line in (out / "logs" / "workload-02.jsonl").read_text().splitlines()]
    assert max(t for t in sent if t is not None) - first["reverted_at"] < first["recovery_s"] + 3.0
    assert any("2 x " in c["expectation"] and c["met"] for c in first["checks"]), first["checks"]
    assert not second["met"] and second["detected"].get("process_exit") is not None
    assert second["restarted_by_drill_s"] is not None
    assert first["restarted_by_drill_s"] is None      # nothing after the last fault: the drill stops the server
    assert doc["leaks"] == {"processes_left": 0, "ports_held": 0, "ok": True}
    assert doc["failed_faults"] == [1] and not doc["expectations_met"]
    html = (out / "drill.html").read_text()
    md = (out / "drill.md").read_text()
    assert "killed, wrongly expected quiet" in html and "FAILED: no process_exit" in md
    for text in (html, md, json.dumps(doc)):
        assert str(tmp_path) not in text and "None" not in text.replace("null", "")


def test_a_two_target_drill_starts_the_second_only_when_its_fault_comes_after_stopping_the_first(
        tmp_path, monkeypatch):
    import jsonschema

    from servewatch.drill import report
    from servewatch.drill.target import SimTarget

    events = []
    start, stop = SimTarget.start, SimTarget.stop

    def started(self):
        events.append(("start", self.dialect, [t.proc.poll() is None for t in live]))
        live.append(self)
        start(self)

    live = []
    monkeypatch.setattr(SimTarget, "start", started)
    monkeypatch.setattr(SimTarget, "stop", lambda self: (events.append(("stop", self.dialect)), stop(self)))
    path = tmp_path / "two.yaml"
    path.write_text(textwrap.dedent(TWO_TARGETS))
    out = tmp_path / "out"
    assert main(["drill", str(path), "--out", str(out)]) == 0
    # main started, killed by its last fault and not started again; stopped before the second one starts
    assert events[:3] == [("start", "vllm", []), ("stop", "vllm"), ("start", "sglang", [False])]
    doc = json.loads((out / "drill.json").read_text())
    first, second = doc["faults"]
    assert (first["target"], second["target"]) == ("main", "second")
    assert first["restarted_by_drill_s"] is None and second["touched"][0]["signal"] == "SIGSTOP"
    assert doc["target"]["dialect"] == "vllm" and doc["targets"]["second"]["dialect"] == "sglang"
    assert doc["leaks"]["ok"], doc["leaks"]
    report.validate(doc)
    del first["target"]
    with pytest.raises(jsonschema.ValidationError):
        report.validate(doc)
    md = (out / "drill.md").read_text()
    assert "| # | fault | target |" in md and "| 2 | second frozen | second |" in md


# -- identity across a step of the wall clock ------------------------------------------------------------

def _status_within(pid: int, wanted: bool, timeout_s: float = 10.0) -> bool:
    """Whether the process's 'stopped' state became `wanted` within timeout_s (the kernel applies a signal
    asynchronously: polled, bounded)."""
    import time

    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (psutil.Process(pid).status() == psutil.STATUS_STOPPED) == wanted:
            return True
        time.sleep(0.02)
    return False


def test_the_sigcont_that_ends_a_stop_is_sent_across_a_step_of_the_wall_clock(monkeypatch):
    # A clean-clone CI run saw psutil's create time of one SGLang process move by 2.00 s mid-drill (the
    # wall clock stepped; psutil adds the boot time as the clock puts it now): the drill took its
    # stopped scheduler for another process, withheld the SIGCONT, and the server hung until the timeout.
    import signal

    import psutil
    import psutil._pslinux as pslinux

    from servewatch.drill.target import DrillTarget, Process, pid_alive, started_since_boot

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = Process(child.pid, started_since_boot(child.pid), "python", "engine_core", 0)
        assert abs(proc.create_time - (psutil.Process(child.pid).create_time() - psutil.boot_time())) < 0.05
        target = DrillTarget(None)
        child.send_signal(signal.SIGSTOP)
        assert _status_within(child.pid, True)
        real = pslinux.boot_time
        monkeypatch.setattr(pslinux, "boot_time", lambda: real() + 2.0)     # the wall clock steps 2 s
        assert abs(psutil.Process(child.pid).create_time() - real() - proc.create_time - 2.0) < 0.05   # moved
        assert pid_alive(child.pid, proc.create_time)
        assert target.undo(proc, signal.SIGCONT) is None
        assert _status_within(child.pid, False), "the SIGCONT was not sent"
        # another process under the same pid is refused, and said so
        other = Process(child.pid, proc.create_time - 5.0, "python", "engine_core", 0)
        child.send_signal(signal.SIGSTOP)
        assert _status_within(child.pid, True)
        assert "another process" in target.undo(other, signal.SIGCONT)
        assert psutil.Process(child.pid).status() == psutil.STATUS_STOPPED
    finally:
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait()
    assert not pid_alive(child.pid, proc.create_time)


def test_the_workload_sends_through_the_recovery_window():
    plan = plan_from_dict(_plan(faults=[{"kind": "stop", "observe_s": 6, "expect": {"recover_within_s": 20}},
                                        {"kind": "stop", "observe_s": 6}]))
    assert [s.traffic_after_revert_s for s in plan.steps] == [20.0, 6.0]
    # a request caught by the fault may take the hold and the whole recovery window (+10 s) before the drill's
    # own client gives up on it (it was hold + observation + 10 s: 28 s, and 3 of 14 DP=2 requests "failed")
    assert [s.request_timeout_s for s in plan.steps] == [10 + 20 + 10.0, 10 + 6 + 10.0]
    assert plan.budget_s() == (6 + 10 + 20) + (6 + 10 + 6)


def test_a_recovery_counted_in_requests_plans_its_window_and_a_plan_may_set_the_request_timeout():
    from servewatch.drill.plan import RECOVERY_WINDOW_S

    plan = plan_from_dict(_plan(faults=[
        {"kind": "stop", "observe_s": 6, "expect": {"recover_within": {"requests": 2, "plus_s": 3}}},
        {"kind": "overload", "hold_s": 16, "observe_s": 0, "request_timeout_s": 120,
         "expect": {"fire": {"preemption": 24}, "max_error_rate": 0}}]))
    requests, overload = plan.steps
    assert (requests.expect.recover_requests, requests.expect.recover_plus_s) == (2, 3.0)
    # the bound is known only once a request's length is measured: the traffic is planned for the whole window
    # (it ends at the recovery), and the timeout follows it
    assert requests.traffic_after_revert_s == RECOVERY_WINDOW_S
    assert requests.request_timeout_s == 10 + RECOVERY_WINDOW_S + 10
    assert (overload.traffic_after_revert_s, overload.request_timeout_s) == (0.0, 120)
    assert requests.expect.to_json() == {"recover_within": {"requests": 2, "plus_s": 3.0}}
    assert overload.to_json()["request_timeout_s"] == 120
    with pytest.raises(PlanError, match="recover_within_s is a fixed bound and recover_within one counted in "
                                        "requests; give one of them"):
        plan_from_dict(_plan(faults=[{"kind": "stop", "expect": {"recover_within_s": 20,
                                                                  "recover_within": {"requests": 2}}}]))
    with pytest.raises(PlanError, match="recover_within"):      # the schema: requests is required
        plan_from_dict(_plan(faults=[{"kind": "stop", "expect": {"recover_within": {"plus_s": 2}}}]))


def test_a_fault_counts_from_its_signal_not_from_when_the_drill_began_injecting(monkeypatch):
    # On a busy 2-core machine the drill was frozen ~9 s between deciding to stop a worker and the signal:
    # stamped before, the 12 s hold was 3 s and detection counted 9 s too early.
    import signal as signals
    from types import SimpleNamespace

    from servewatch.drill import run as drill_run

    clock = [1000.0]
    monkeypatch.setattr(drill_run.time, "time", lambda: clock[0])
    proc = SimpleNamespace(pid=4242, title="VLLM::Worker", role="worker", rank=0)

    def send(p, sig):
        clock[0] += 9.0             # proving and signalling, with the drill not scheduled meanwhile

    target = SimpleNamespace(url="http://127.0.0.1:1", host="127.0.0.1", port=1, spec=SimpleNamespace(max_model_len=2048),
                             member=lambda role, rank: (proc, ""), send=send)
    result = drill_run.StepResult(index=1, kind="stop", name="worker stall")
    result.injected_at = clock[0]
    ctx = drill_run.Context(target, SimpleNamespace(), result, SimpleNamespace(model="tiny"))
    ctx.signal("worker", 0, signals.SIGSTOP)
    assert result.injected_at == 1009.0
    assert result.notes == ["the signal went out 9.0 s after the drill began injecting (the drill was not "
                            "scheduled meanwhile); times count from the signal"]
    ctx.signal("worker", 0, signals.SIGCONT)          # a second signal of the same fault moves nothing
    assert result.injected_at == 1009.0 and len(result.touched) == 2


def test_a_late_signal_extends_the_workload_so_it_still_sends_after_the_fault(monkeypatch):
    # CI, 2026-12-02: the signal went out 10.9 s late on a loaded machine; the hold and observation shifted with
    # it, the load did not, and stopped 13 s after SIGCONT: "no good request after the fault" (bound 24 s).
    started = []
    monkeypatch.setattr(M.Workload, "start", lambda self: started.append(self) or self)
    monkeypatch.setattr(M.time, "time", lambda: 100.0)
    load = M.Workload("http://127.0.0.1:1", "tiny", {"concurrency": 4}, duration_s=42.0, request_timeout_s=60.0)
    assert load.ends_at == 142.0
    assert load.extend_to(141.0) == 0.0 and load.followers == []      # it sends long enough already
    assert load.extend_to(152.9) == pytest.approx(10.9)
    assert load.followers == [] and load.ends_at == 152.9              # the same run goes on: its concurrency kept
    sending = load.load_options()["stop_sending"]
    monkeypatch.setattr(M.time, "time", lambda: 152.8)
    assert not sending()
    monkeypatch.setattr(M.time, "time", lambda: 152.9)
    assert sending()                                                     # it stops at the moved end
    monkeypatch.setattr(M.time, "time", lambda: 100.0)
    assert load.extend_to(142.0 + M.EXTEND_SLACK_S + 5.0) == pytest.approx(M.EXTEND_SLACK_S - 5.9)
    (follower,) = load.followers                                         # beyond the slack: a follow-on run
    assert (follower.after_s, follower.duration_s, follower.spec) == (
        pytest.approx(42.0 + M.EXTEND_SLACK_S), pytest.approx(5.0), {"concurrency": 4})
    assert follower.seed != load.seed and load.ends_at == 142.0 + M.EXTEND_SLACK_S + 5.0
    load._records, follower._records = ["a"], ["b", "c"]
    assert load.records == ["a", "b", "c"]
    follower._problem = "refused"
    assert load.problem == "refused"


# -- nothing injected, and the verdict naming where --------------------------------------------------------

QUIET_AND_NAMED = """
    name: quiet and named
    target: {engine: sim}
    workload: {scenario: custom, rate: 4, output_tokens: 32}
    defaults: {warmup_s: 2, hold_s: 5, observe_s: 2}
    faults:
      - name: idle
        kind: quiet
        expect: {no_verdict: true}
      - name: steady
        kind: quiet
        params: {traffic: true}
        expect: {no_incident: true, max_error_rate: 0}
      - name: frozen
        kind: stop
        role: api
        hold_s: 12
        expect:
          fire: {health_loss: 12}        # 7.5 s nominal, past 10 s under load (see GUARDED)
          names: ["{title}", "{pid}"]
"""


def test_quiet_steps_send_traffic_only_when_asked_and_names_are_read_from_the_verdict(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(QUIET_AND_NAMED))
    out = tmp_path / "out"
    main(["drill", str(path), "--out", str(out)])
    doc = json.loads((out / "drill.json").read_text())
    idle, steady, frozen = doc["faults"]
    assert idle["met"] and idle["impact"]["requests"] == 0 and idle["touched"] == []
    assert steady["met"] and steady["impact"]["requests"] > 0
    assert "nothing (idle)" in (out / "drill.md").read_text()
    assert "health_loss" in frozen["detected"] and frozen["explained"]["health_loss"]
    named = [c for c in frozen["checks"] if c["expectation"].startswith("the verdict names")][0]
    pid = frozen["touched"][0]["pid"]
    assert str(pid) in named["expectation"] and "{pid}" not in named["expectation"]
    # what the check read is the verdict's own explanation, whichever way it came out
    assert named["observed"].startswith("health_loss: ")
    assert named["met"] == all(w in frozen["explained"]["health_loss"] for w in (str(pid), frozen["touched"][0]["title"]))


def test_the_names_check_substitutes_the_signalled_process_and_fails_on_a_missing_word():
    from servewatch.drill.expect import check
    from servewatch.drill.plan import Expect
    from servewatch.drill.run import StepResult

    result = StepResult(index=1, kind="stop", name="s", detected={"rank_stalled": 4.0, "engine_dead": 9.0},
                        explained={"rank_stalled": "TP rank 1 of 2 (VLLM::Worker_TP1, pid 4242) stopped 4.0 s",
                                   "engine_dead": "gone"},
                        touched=[{"pid": 4242, "title": "VLLM::Worker_TP1", "role": "worker", "rank": 1,
                                  "signal": "SIGSTOP"}])
    ok = check(Expect(fire_any=(("engine_dead", "rank_stalled"), 5.0), names=("TP rank 1 of 2", "({title}, pid {pid})")),
               result)
    assert [c["met"] for c in ok] == [True, True]
    assert "(VLLM::Worker_TP1, pid 4242)" in ok[1]["expectation"]
    bad = check(Expect(fire={"rank_stalled": 5.0}, names=("TP rank 0 of 2",)), result)
    assert bad[1] == {"expectation": "the verdict names “TP rank 0 of 2”", "met": False,
                      "observed": "rank_stalled: TP rank 1 of 2 (VLLM::Worker_TP1, pid 4242) stopped 4.0 s"}
    result.fired_before = ["histogram_blind"]
    silent = check(Expect(no_verdict=True), result)
    assert silent == [{"expectation": "no verdict at all", "met": False,
                       "observed": "engine_dead, histogram_blind, rank_stalled"}]
    none = check(Expect(fire={"not_serving": 5.0}, names=("x",)), result)
    assert none[1]["met"] is False and none[1]["observed"] == "no such verdict fired"


def test_a_prober_interrupted_before_it_started_stops_without_an_error():
    """^C while the recorder was starting: the step's cleanup stops a prober that never started (it raised
    "cannot join thread before it is started" out of the drill, a traceback instead of its report)."""
    prober = M.Prober("http://127.0.0.1:9")
    prober.stop()
    assert prober.answers == []


GUARDED = """
    name: guarded
    target: {engine: sim}
    workload: {scenario: custom, rate: 4, output_tokens: 32}
    # health_loss: 3 failed /health probes of 2 s each at a 0.5 s cadence, 7.5 s; measured 6.4 s on a quiet
    # machine, and past 10 s once with a real engine starting beside the suite (2026-12-02): 12 s
    defaults: {warmup_s: 3, hold_s: 12, observe_s: 2}
    faults:
      - name: frozen, guard acts
        kind: stop
        role: api
        guard: {act_on: [health_loss]}
        expect:
          fire: {health_loss: 12}
          guard: {kills: true, within_s: 5, stacks_of: [api]}
      - name: frozen, guard told to leave it
        kind: stop
        role: api
        guard: {act_on: [engine_dead]}
        expect:
          fire: {health_loss: 12}
          guard: {kills: false}
      - name: quiet, guard expected to kill (it cannot)
        kind: quiet
        hold_s: 2
        guard: true
        expect:
          guard: {kills: true}
"""


def test_guard_records_a_step_and_its_stacks_kill_and_exit_are_checked(tmp_path):
    """guard in watch's place: on the simulator's frozen API server it acts on health_loss — the stacks of
    the stopped process, the tree killed, exit 3, nothing left — and the drill starts the server again; told
    to act on another verdict it does nothing; a kill expected where none came fails, with what it saw."""
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(GUARDED))
    out = tmp_path / "out"
    assert main(["drill", str(path), "--out", str(out)]) == 1
    doc = json.loads((out / "drill.json").read_text())
    acted, left_alone, wrong = doc["faults"]
    assert acted["met"], acted["checks"]
    guard = acted["guard"]
    assert guard["acted_on"] == "health_loss" and guard["exit"] == 3 and guard["tree_left"] == 0
    assert guard["kill"]["killed"] >= 1 and guard["kill"]["survivors"] == 0
    assert guard["signalled_stacks"] == [acted["touched"][0]["pid"]]
    assert {c["expectation"] for c in acted["checks"]} >= {
        "guard exits 3 (it killed the server after a verdict)", "no process of the tree is left",
        "stacks captured of api", "the stacks of the stopped process are in guard's dump"}
    assert acted["restarted_by_drill_s"] is not None and "guard killed the tree" in (out / "drill.md").read_text()
    assert left_alone["met"], left_alone["checks"]
    assert left_alone["guard"]["kill"] is None and left_alone["guard"]["stacks"] is None
    assert left_alone["guard"]["exit"] == 0 and "health_loss" in left_alone["detected"]   # seen, not acted on
    assert not wrong["met"]
    assert [c["observed"] for c in wrong["checks"] if not c["met"]][0].startswith("no kill; guard exit 0")
    assert doc["failed_faults"] == [3] and doc["leaks"]["ok"]
    for text in ((out / "drill.md").read_text(), json.dumps(doc)):
        assert str(tmp_path) not in text      # no stacks path, no bundle path


@pytest.mark.parametrize("fault, words", [
    ({"kind": "stop", "name": "g", "expect": {"guard": {"kills": True}}}, "faults/0 (g): expect/guard: says what guard did"),
    ({"kind": "stop", "name": "g", "guard": True, "expect": {"guard": {"kills": False, "within_s": 2}}},
     "with kills: false give none of them"),
    ({"kind": "stop", "guard": {"act_on": ["stuck"]}}, "unknown verdict(s) stuck"),
])
def test_a_bad_guard_entry_is_one_line(fault, words):
    with pytest.raises(PlanError) as exc:
        plan_from_dict(_plan(faults=[fault]))
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_guard_outcome_reads_the_lines_after_the_injection_and_the_dump_by_pid():
    lines = [(99.0, {"guard": "identity", "verified": True}),
             (105.2, {"guard": "stacks", "verdict": "rank_stalled", "status": "captured", "path": "/private/x",
                      "processes": {"api": "captured", "worker": "captured"}, "diverging": ["VLLM::Worker_TP1"]}),
             (105.4, {"guard": "kill", "verdict": "rank_stalled", "killed": 5, "survivors": []})]
    events = [M.VerdictEvent("fired", "rank_stalled", 104.9, 101.0)]
    text = ("divergence: VLLM::Worker_TP1 (pid 12) ...\n\n=== pid 11 (worker): captured — VLLM::Worker_TP0\n...\n"
            "=== pid 12 (worker): captured — VLLM::Worker_TP1 (stopped)\n...\n=== pid 13 (api): failed\n")
    got = M.guard_outcome(lines, events, 100.0, exit_code=3, tree_left=0, signalled=[12, 13],
                          captured=M.stacks_captured(text))
    assert got == {"acted_on": "rank_stalled", "verdict_s": 4.9, "evidence_s": 4.9, "exit": 3, "tree_left": 0, "signalled_stacks": [12],
                   "stacks": {"status": "captured", "processes": {"api": "captured", "worker": "captured"},
                              "diverging": ["VLLM::Worker_TP1"], "after_s": 5.2},
                   "kill": {"killed": 5, "survivors": 0, "after_s": 5.4, "after_verdict_s": 0.5}}
    assert "/private" not in json.dumps(got)


def test_a_bundle_holding_the_served_models_path_fails_the_privacy_check(tmp_path):
    import gzip

    from servewatch.drill.expect import check
    from servewatch.drill.plan import Expect
    from servewatch.drill.run import StepResult

    model = "/srv/models/tiny-llama"
    clean, leaky = tmp_path / "a", tmp_path / "b"
    (clean / "series").mkdir(parents=True)
    (clean / "series" / "samples.jsonl.gz").write_bytes(gzip.compress(b'{"model": "m"}'))
    (leaky / "series").mkdir(parents=True)
    (leaky / "series" / "samples.jsonl.gz").write_bytes(gzip.compress(f'{{"model_name": "{model}"}}'.encode()))
    (leaky / "incident.json").write_text(f'{{"label": "{model}"}}')
    assert M.files_holding([clean], model) == 0 and M.files_holding([clean, leaky], model) == 2
    result = StepResult(index=1, kind="stop", name="s",
                        bundles={"written": 2, "verified": 2, "write_failures": 0, "holding_model_path": 2})
    assert check(Expect(), result)[-1] == {"expectation": "no bundle holds the served model's path", "met": False,
                                           "observed": "2 file(s) hold it"}
    result.bundles["holding_model_path"] = 0
    assert check(Expect(), result)[-1]["met"] is True
    del result.bundles["holding_model_path"]        # a model named otherwise (not a path): no such check
    assert [c["expectation"] for c in check(Expect(), result)] == ["every bundle written verifies"]


def test_a_fault_aims_at_the_rank_the_rank_model_gives_including_a_dp_workers_inherited_one():
    """A DP=2 vLLM's workers are all titled VLLM::Worker: rank 1 is the one under EngineCore_DP1, whatever
    order the process list gives (listed first here); TP and SGLang's DP titles give their own rank."""
    from servewatch.drill.target import with_ranks
    from servewatch.timeline.samples import ProcessMember as PM

    members = [PM(1, 0.0, "api", "python3", "running"),
               PM(2, 0.0, "engine_core", "VLLM::EngineCore_DP0", "running", ppid=1),
               PM(3, 0.0, "engine_core", "VLLM::EngineCore_DP1", "running", ppid=1),
               PM(4, 0.0, "worker", "VLLM::Worker", "running", ppid=3),
               PM(5, 0.0, "worker", "VLLM::Worker", "running", ppid=2),
               PM(6, 0.0, "other", "python3", "running", ppid=1)]
    got = {p.pid: (p.role, p.rank) for p in with_ranks(members)}
    assert got == {1: ("api", 0), 2: ("engine_core", 0), 3: ("engine_core", 1), 4: ("worker", 1), 5: ("worker", 0),
                   6: ("other", 0)}
    tp = with_ranks([PM(1, 0.0, "api", "python3", "running"),
                     PM(2, 0.0, "engine_core", "VLLM::EngineCore", "running", ppid=1),
                     PM(3, 0.0, "worker", "VLLM::Worker_TP1", "running", ppid=2),
                     PM(4, 0.0, "worker", "VLLM::Worker_TP0", "running", ppid=2),
                     PM(5, 0.0, "engine_core", "sglang::scheduler_DP1", "running", ppid=1)])
    assert [(p.pid, p.rank) for p in tp] == [(1, 0), (2, 0), (3, 1), (4, 0), (5, 1)]


def test_a_stop_on_running_work_waits_for_a_request_on_its_engine_and_says_so(tmp_path):
    """`on_running_work`: on the simulator the engine core is stopped only once /metrics shows a request
    running (the workload starts with the step), and the figure is in the report."""
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent("""
        name: on work
        target: {engine: sim}
        workload: {scenario: custom, concurrency: 2, output_tokens: 400}
        faults:
          - name: stopped on work
            kind: stop
            params: {on_running_work: true}
            warmup_s: 0
            hold_s: 3
            observe_s: 1
    """))
    out = tmp_path / "out"
    main(["drill", str(path), "--out", str(out)])
    fault = json.loads((out / "drill.json").read_text())["faults"][0]
    assert fault["facts"]["running_at_stop"] >= 1, fault
    assert len(fault["touched"]) == 1 and "running at stop" in (out / "drill.md").read_text()


def test_the_running_work_of_one_dp_engine_is_read_from_its_label(monkeypatch):
    import servewatch.dialects as D
    import servewatch.drill.target as T
    from servewatch.drill.target import DrillTarget
    from servewatch.engine.state import EngineState
    from servewatch.transport.contract import Reply

    class Fake(DrillTarget):
        url = "http://127.0.0.1:9"

    engines = [EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=3.0),
               EngineState("vllm", "vllm-0.32", {"engine": "1"}, running=0.0)]
    monkeypatch.setattr(D, "read_scrape", lambda body: D.Scrape("vllm", "vllm-0.32", engines))
    monkeypatch.setattr(T, "get", lambda url, timeout_s, max_bytes: Reply(200, b"", 0.0))
    target = Fake(None)
    assert (target.running(1), target.running(0), target.running(None)) == (0.0, 3.0, 3.0)
    monkeypatch.setattr(T, "get", lambda url, timeout_s, max_bytes: None)      # no answer (refused, timed out...)
    assert target.running(0) is None


def test_the_model_path_a_bundle_must_not_hold_comes_from_v1_models_when_it_is_a_path(monkeypatch):
    from servewatch.drill.target import DrillTarget

    target = DrillTarget(None)
    for card, path in (({"id": "tiny", "root": "/srv/models/tiny"}, "/srv/models/tiny"),     # vLLM: root
                       ({"id": "/srv/models/tiny", "root": "/srv/models/tiny"}, "/srv/models/tiny"),
                       ({"id": "tiny", "root": "tiny"}, None),                               # SGLang: the name
                       ({}, None)):
        monkeypatch.setattr(target, "model_card", lambda card=card: card)
        assert target.model_path() == path, card


def test_a_stop_that_finds_its_engine_idle_is_undone_at_once_and_tried_again():
    """The gauges, frozen with the stop, read 0: the request ended between the read and the signal. The stop
    is undone (SIGCONT to the same process) and made again once a request runs; one process touched."""
    import signal as S
    from types import SimpleNamespace

    from servewatch.drill.run import Context, StepResult
    from servewatch.drill.target import Process

    worker = Process(42, 1.0, "VLLM::Worker", "worker", 1, dp=1)
    reads = iter([1.0, 0.0, 0.0, 2.0, 2.0])       # before, frozen (idle: undone), before x2, frozen
    sent = []
    target = SimpleNamespace(url="http://127.0.0.1:9", host="127.0.0.1", port=9,
                             spec=SimpleNamespace(max_model_len=2048),
                             member=lambda role, rank: (worker, ""), running=lambda dp: next(reads),
                             send=lambda proc, sig: sent.append((proc.pid, sig)),
                             undo=lambda proc, sig: sent.append((proc.pid, sig)))
    step = SimpleNamespace(params={"on_running_work": True})
    result = StepResult(index=1, kind="stop", name="s")
    ctx = Context(target, step, result, SimpleNamespace(model="m"))
    assert ctx.stop_on_running_work("worker", 1) is worker
    assert sent == [(42, S.SIGSTOP), (42, S.SIGCONT), (42, S.SIGSTOP)]
    assert len(result.touched) == 1 and result.facts["running_at_stop"] == 2.0
    assert any("idle (its gauges at 0) and was undone at once" in note for note in result.notes)


EXIT_AND_CLEAR = """
    name: exit and clear
    target: {engine: sim}
    workload: {scenario: custom, concurrency: 4, output_tokens: 400}
    # health_loss: 7.5 s nominal, past 10 s once with a real engine starting beside the suite (see GUARDED): 12 s
    defaults: {warmup_s: 3, hold_s: 12, observe_s: 2}
    faults:
      - name: frozen, then cleared
        kind: stop
        role: api
        expect:
          fire: {health_loss: 12}
          clear_within_s: 6
          log_shows: ["Avg prompt throughput", "a line this server never writes"]
      - name: killed under load
        kind: kill
        role: api
        hold_s: 2
        expect:
          exit_within_s: 6
          in_flight_cut: true
"""


def test_a_kill_is_checked_against_the_real_exit_status_and_a_stall_must_clear(tmp_path):
    """exit_within_s: process_exit within the bound, reporting the status the drill read as the server's parent
    (SIGKILL); in_flight_cut: the requests caught by the kill all failed; clear_within_s: the frozen server's
    health_loss cleared after SIGCONT; log_shows: a literal the log shows after the injection, and one it does not
    (the fault fails on it, saying which)."""
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(EXIT_AND_CLEAR))
    out = tmp_path / "out"
    assert main(["drill", str(path), "--out", str(out)]) == 1
    doc = json.loads((out / "drill.json").read_text())
    frozen, killed = doc["faults"]
    checks = {c["expectation"]: c for c in frozen["checks"]}
    assert checks["health_loss clears within 6 s once the fault ends and tokens move again"]["met"], frozen["cleared"]
    assert 0 <= frozen["cleared"]["health_loss"] <= 6
    assert checks["the server's log shows \u201cAvg prompt throughput\u201d after the injection"]["met"]
    missing = checks["the server's log shows \u201ca line this server never writes\u201d after the injection"]
    assert (missing["met"], missing["observed"]) == (False, "not shown")
    assert doc["failed_faults"] == [1]
    assert killed["met"], killed["checks"]
    assert killed["server_exit"] == {"status": -9, "reported": {"exit_code": None, "exit_signal": 9},
                                     "read_as_parent": True}
    said = {c["expectation"]: c["observed"] for c in killed["checks"]}
    assert said["process_exit reports the server's real exit status"] == "reported killed by SIGKILL; real killed by SIGKILL"
    caught = killed["impact"]["in_flight_at_fault"]
    assert sum(caught["errors"].values()) >= 1 and caught["ok"] == caught["whole"]


def test_the_pure_parts_of_exit_and_clear_checks(tmp_path):
    events = [M.VerdictEvent("fired", "stall", 11.0, 10.0), M.VerdictEvent("cleared", "stall", 23.5, 10.0),
              M.VerdictEvent("fired", "health_loss", 5.0, 4.0), M.VerdictEvent("cleared", "health_loss", 6.0, 4.0)]
    assert M.clearances(events, injected=10.0, reverted=20.0) == {"stall": 3.5}   # fired before: not this fault's
    records = [_record(0, 1.0, e2e=2.0),                       # done before the injection
               _record(1, 9.0, e2e=5.0, error="truncated"),    # caught, cut
               _record(2, 9.5, e2e=4.0),                        # caught, ok: its tokens were all made before
               _record(4, 10.5, e2e=0.3, error="truncated"),   # sent just after, before the server noticed
               _record(3, 12.0, error="connect")]               # sent after
    records[2].output_tokens = records[2].max_tokens
    assert M.in_flight(records, 10.0) == {"count": 3, "ok": 1, "whole": 1, "errors": {"truncated": 2}}
    records[2].output_tokens = 10                               # ok with fewer tokens than asked: a cut success
    assert M.in_flight(records, 10.0)["whole"] == 0
    assert M.exit_words(-9) == "killed by SIGKILL" and M.exit_words(exit_code=1) == "exit code 1"
    assert M.exit_words(None) == "still running"
    log = tmp_path / "server.log"
    log.write_text("before: Health check failed\n")
    offset = log.stat().st_size
    with open(log, "a") as f:
        f.write("after: Subprocess scheduler_0 crashed\n")
    assert M.log_shows(log, offset, ["Health check failed", "scheduler_0"]) == {
        "Health check failed": False, "scheduler_0": True}
    assert M.log_shows(tmp_path / "gone.log", 0, ["x"]) == {"x": False}
    from servewatch.drill.expect import check
    from servewatch.drill.plan import Expect
    from servewatch.drill.run import StepResult

    result = StepResult(index=1, kind="kill", name="k", detected={"process_exit": 4.0},
                        impact={"in_flight_at_fault": {"count": 2, "ok": 1, "whole": 0, "errors": {"truncated": 1}}},
                        server_exit={"status": 0, "reported": {"exit_code": 1, "exit_signal": None},
                                     "read_as_parent": True})
    said = {c["expectation"]: (c["met"], c["observed"]) for c in
            check(Expect(exit_within_s=3, in_flight_cut=True), result)}
    assert said["process_exit within 3 s"] == (False, "after 4 s")
    assert said["process_exit reports the server's real exit status"] == (False, "reported exit code 1; real exit code 0")
    assert said["the requests the fault cut are counted failed, none a success"] == (
        False, "2 caught: 1 truncated, 1 counted ok with fewer tokens than asked")


THROUGH_THE_PROXY = """
    name: through the proxy
    target: {engine: sim}
    workload: {scenario: custom, concurrency: 4, output_tokens: 2000}
    defaults: {warmup_s: 4, hold_s: 8, observe_s: 3}
    faults:
      - name: frozen under streams, seen on the request path
        kind: stop
        role: api
        proxy: true
        expect:
          fire_by_threshold: {requests_no_token: 1.5}
          # cleared 0.38 s after SIGCONT on a quiet machine, 3.73 s once in the fast suite at load average 5-7
          clear_within_s: 6
"""


def test_the_proxy_records_a_step_the_workload_goes_through_it_and_a_learned_threshold_is_checked(tmp_path):
    """proxy: true — servewatch proxy --watch in watch's place, in front of the server: the workload's requests
    are in its records, and requests_no_token fires at its own threshold (max(k x recent TTFT p99, floor)) within
    the allowance, then clears after SIGCONT."""
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(THROUGH_THE_PROXY))
    out = tmp_path / "out"
    assert main(["drill", str(path), "--out", str(out)]) == 0, (out / "drill.md").read_text()
    (fault,) = json.loads((out / "drill.json").read_text())["faults"]
    threshold = fault["thresholds"]["requests_no_token"]
    assert threshold >= 2.0 and abs(fault["detected"]["requests_no_token"] - threshold) <= 1.5
    assert "requests_no_token" in fault["cleared"]
    records = [json.loads(line) for line in (out / "logs" / "proxy-01.jsonl").read_text().splitlines()]
    completions = [r for r in records if r.get("api") == "completions"]
    assert len(completions) >= fault["impact"]["requests"] > 0      # every request of the workload went through it
    assert all("prompt" not in r and "text" not in r for r in records)


@pytest.mark.parametrize("fault, words", [
    ({"kind": "stop", "name": "p", "proxy": True, "guard": True}, "faults/0 (p): proxy: servewatch proxy records the step"),
    ({"kind": "stop", "name": "p", "proxy": True, "probe": True}, "with no probe"),
    ({"kind": "stop", "expect": {"fire_by_threshold": {"stuck": 1}}}, "unknown verdict(s) stuck"),
    ({"kind": "stop", "name": "c", "expect": {"clear_within_s": 2}}, "expect/clear_within_s: says when the verdict"),
])
def test_a_bad_proxy_or_threshold_entry_is_one_line(fault, words):
    with pytest.raises(PlanError) as err:
        plan_from_dict(_plan(faults=[fault]))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_verdict_is_held_to_its_own_threshold_both_ways():
    from servewatch.drill.expect import check
    from servewatch.drill.plan import Expect
    from servewatch.drill.run import StepResult

    expect = Expect(fire_by_threshold={"requests_no_token": 1.0})
    said = lambda took, threshold: [(c["met"], c["observed"]) for c in check(expect, StepResult(
        index=1, kind="stop", name="s", detected={"requests_no_token": took},
        thresholds={"requests_no_token": threshold}))][0]
    assert said(21.04, 20.9) == (True, "after 21.04 s, threshold 20.9 s")
    assert said(23.0, 20.9) == (False, "after 23 s, threshold 20.9 s")       # late
    assert said(5.0, 20.9)[0] is False                                         # before its own threshold: wrong
    assert check(expect, StepResult(index=1, kind="stop", name="s"))[0]["observed"] == "not fired"


def test_sigterm_ends_a_drill_like_ctrl_c_and_stops_the_server_it_started(tmp_path):
    """A CI timeout's SIGTERM reaches the drill, not the server it started (a session of its own): the drill
    must stop that server itself, not leave it running."""
    import psutil

    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent("""
        name: interrupted
        target: {engine: sim}
        workload: {scenario: custom, rate: 2, output_tokens: 16}
        defaults: {warmup_s: 60, hold_s: 60, observe_s: 60}
        faults:
          - {name: never reached, kind: stop, role: api}
    """))
    proc = subprocess.Popen([sys.executable, "-m", "servewatch", "drill", str(plan), "--out", str(tmp_path / "out")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:          # the drill says when its target is up (a failed start ends the stream)
            if line.startswith("servewatch drill: target: "):
                break
        started = psutil.Process(proc.pid).children(recursive=True)
        assert started, "the drill started no server"
        proc.send_signal(subprocess.signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # stopped in order, as ^C stops it, with SIGTERM's status (servewatch.stopping): 128 + 15
    assert proc.returncode == 143 and "servewatch drill: stopped by SIGTERM: 0 of 1 fault(s) run" in err, err[-2000:]
    left = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"still running after the drill ended: {[p.pid for p in left]}"


# -- faults at the start of a server ------------------------------------------------------------------

AT_START = """
    name: at start
    target: {engine: sim, args: ["--startup-seconds", "3"]}
    targets:
      # a start of 3 s before the failure: one that fails within the recorder's first log read can be judged
      # before any log line is read (process_exit then says only the exit code; noted in issue 25)
      undersized: {engine: sim, args: ["--fault", "startup-oom", "--startup-seconds", "3"], ready_timeout_s: 30}
    recorder: {interval_s: 0.5}
    faults:
      - name: a normal start
        kind: quiet
        at_start: true
        hold_s: 0
        observe_s: 2
        expect: {no_verdict: true, ready_within_s: 20}
      - name: a start that fails
        kind: quiet
        target: undersized
        at_start: true
        hold_s: 0
        observe_s: 2
        expect:
          fire: {process_exit: 20}
          exit_within_s: 20
          names: ["To serve at least one request with the model's max seq len (2048)"]
      - name: the API server stopped at its log's last startup line
        kind: stop
        role: api
        at_start: {on_log: "Starting vLLM"}
        hold_s: 2
        observe_s: 1
        expect: {ready_within_s: 20}
"""


def test_faults_at_the_start_are_recorded_from_the_servers_first_second(tmp_path):
    path = tmp_path / "start.yaml"
    path.write_text(textwrap.dedent(AT_START))
    out = tmp_path / "out"
    assert main(["drill", str(path), "--out", str(out)]) == 0
    doc = json.loads((out / "drill.json").read_text())
    normal, failed, stopped = doc["faults"]
    assert normal["met"] and 3 <= normal["ready_s"] < 20, normal
    assert normal["detected"] == {} and normal["fired_before"] == []
    assert failed["met"], failed["checks"]
    assert failed["ready_s"] is None and failed["server_exit"]["status"] == 1
    assert "exit code 1" in failed["facts"]["start"]
    assert stopped["met"] and stopped["touched"][0]["signal"] == "SIGSTOP", stopped
    assert doc["leaks"]["ok"], doc["leaks"]


@pytest.mark.parametrize("fault, words", [
    ({"kind": "stop", "at_start": True, "proxy": True}, "at_start: servewatch proxy records a server that is up"),
    ({"kind": "stop", "at_start": True, "workload": {"scenario": "normal"}}, "at_start: no workload runs"),
    ({"kind": "stop", "at_start": {"on_log": ""}}, "faults/0/at_start"),
    ({"kind": "stop", "expect": {"ready_within_s": 5}}, "give the fault at_start"),
])
def test_a_fault_at_the_start_that_cannot_be_is_one_line(fault, words):
    with pytest.raises(PlanError, match=re.escape(words)):
        plan_from_dict(_plan(faults=[fault]))


def test_a_fault_at_the_start_of_an_existing_server_is_refused():
    with pytest.raises(PlanError, match="the drill starts only a server of its own"):
        plan_from_dict(_plan(target={"url": "http://127.0.0.1:1", "pid": 3},
                             faults=[{"kind": "stop", "at_start": True}]))


SERVE = """
    name: serve records
    target: {engine: sim}
    workload: {scenario: custom, rate: 4, output_tokens: 32, tokenizer: model}
    recorder: {interval_s: 0.5}
    faults:
      - name: frozen under serve
        kind: stop
        role: api
        serve: true
        warmup_s: 3
        hold_s: 8
        observe_s: 4
        expect:
          fire: {health_loss: 8}
          clear_within_s: 4
          livez: ok
          readyz: failing
"""


def test_servewatch_serve_can_record_a_fault_its_verdicts_and_livez_read_over_its_api(tmp_path):
    """The API server frozen: serve's health_loss fired and cleared as watch's would be; its livez stays 200
    (health_loss is a person's, no liveness failure) and its readyz fails (/health fails), as serve answered."""
    path = tmp_path / "serve.yaml"
    path.write_text(textwrap.dedent(SERVE))
    out = tmp_path / "out"
    assert main(["drill", str(path), "--out", str(out)]) == 0
    fault = json.loads((out / "drill.json").read_text())["faults"][0]
    assert fault["met"], fault["checks"]
    assert 0 < fault["detected"]["health_loss"] <= 8 and fault["cleared"]["health_loss"] <= 4
    assert set(fault["livez"]) == {"200"} and fault["livez"]["200"] >= 8 / 0.5    # polled every 0.2 s at most
    # readyz: no traffic to a server whose /health fails (its reason), though nothing there says restart
    assert fault["readyz"].get("503", 0) >= 1
    assert "servewatch serve's readyz fails while the fault holds" in [c["expectation"] for c in fault["checks"]]
    assert fault["bundles"]["written"] >= 1 and fault["bundles"]["verified"] == fault["bundles"]["written"]
    # `tokenizer: model` on a server whose model directory is not known (the simulator's is a name): approximate
    assert any("prompt sizes approximate" in note for note in fault["notes"]), fault["notes"]


@pytest.mark.parametrize("fault, words", [
    ({"kind": "stop", "serve": True, "proxy": True}, "serve: servewatch serve records the step in watch's place; "
                                                     "give serve or proxy, not both"),
    ({"kind": "stop", "serve": True, "guard": True}, "give serve or guard, not both"),
    ({"kind": "stop", "expect": {"livez": "failing"}}, "expect/livez: says what servewatch serve's livez answered"),
    ({"kind": "stop", "expect": {"readyz": "ok"}}, "expect/readyz: says what servewatch serve's readyz answered"),
])
def test_a_fault_recorded_by_serve_that_cannot_be_is_one_line(fault, words):
    with pytest.raises(PlanError, match=re.escape(words)):
        plan_from_dict(_plan(faults=[fault]))


@pytest.mark.parametrize("path", sorted((Path(__file__).parent / "conformance" / "plans").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_conformance_plan_loads(path):
    """The real-engine suites' plans are valid plans: a typo in one
    is said here, in the fast suite, not an hour into CI or at the start of a hand run."""
    plan = load_plan(path)
    assert plan.steps and plan.name == path.stem


def test_a_lab_engine_gives_way_to_what_measures_it():
    """The lab engine's session (its autogroup) is set to a lower CPU priority than the drill's own processes
    (servewatch.lab.server.yield_cpu); where it cannot be, the reason is said, not raised."""
    import subprocess
    import sys
    from servewatch.lab.server import ENGINE_AUTOGROUP_NICE, yield_cpu

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             start_new_session=True)
    try:
        where = Path(f"/proc/{child.pid}/autogroup")
        if not where.exists():
            pytest.skip("this kernel has no autogroups (CONFIG_SCHED_AUTOGROUP): nothing to set")
        assert yield_cpu(child.pid) is None
        assert where.read_text().split()[-2:] == ["nice", str(ENGINE_AUTOGROUP_NICE)]
        # Not ours: a process of the kernel's root group (one whose session began before autogroups, as under a
        # CI runner) reads an empty file, and the child's new session then has a group of its own all the same.
        ours = Path("/proc/self/autogroup").read_text().split()
        assert where.read_text().split()[0].startswith("/autogroup-")
        assert not ours or ours[0] != where.read_text().split()[0]
    finally:
        child.stdin.close()
        child.wait(10)
    gone = yield_cpu(child.pid)
    assert gone.startswith("its session's CPU priority was left as it is (") and "None" not in gone


def test_a_verdicts_threshold_is_read_from_its_line_before_its_bundle(tmp_path):
    """The fired line's own details give the threshold a fault is held to; the bundle only when the line has
    none (a CI run failed "no threshold in its bundle" for a verdict whose line said it)."""
    line = json.dumps({"event": "fired", "t": "2026-12-03T15:00:02Z", "verdict": "requests_no_token",
                       "onset": "2026-12-03T15:00:00Z", "why": "w", "details": {"threshold_s": 2.0}, "bundle": None})
    event = M.parse_watch_line(line)
    injected = event.t - 2.4
    assert M.thresholds([event], injected, ["requests_no_token"]) == {"requests_no_token": 2.0}
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "incident.json").write_text(json.dumps(
        {"verdicts": [{"name": "requests_no_token", "details": {"threshold_s": 3.5}}]}))
    older = M.VerdictEvent("fired", "requests_no_token", event.t, event.onset, str(bundle))
    assert M.thresholds([older], injected, ["requests_no_token"]) == {"requests_no_token": 3.5}
    assert M.thresholds([older], event.t + 1, ["requests_no_token"]) == {}      # fired before the injection


def test_a_drill_target_says_why_its_engine_kept_its_cpu_priority():
    """Only a lab engine the drill started can give way (or fail to); the drill prints what its target says."""
    from types import SimpleNamespace
    from servewatch.drill.target import DrillTarget, LabTarget

    lab = LabTarget.__new__(LabTarget)
    lab.server = None
    assert lab.cpu_note() is None
    lab.server = SimpleNamespace(cpu_note="its session's CPU priority was left as it is (Permission denied)")
    assert lab.cpu_note() == "its session's CPU priority was left as it is (Permission denied)"
    assert DrillTarget.cpu_note(lab) is None


def test_an_extended_closed_loop_keeps_its_concurrency():
    """A late signal moves the workload's end (extend_to): a closed loop of N goes on with N, never 2N. In the
    clean-clone CI of 2026-12-07 the extension was a second run that started its 24 streams at once while the first
    run's 24 were in flight, and 3 of them timed out."""
    import subprocess
    import sys
    import time

    from tests.test_watch_command import free_port, wait_healthy

    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", str(port), "--model-name", "tiny",
                            "--profile", "tiny-cpu"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        load = M.Workload(f"http://127.0.0.1:{port}", "tiny", {"scenario": "custom", "concurrency": 3,
                                                                "prompt_tokens": 8, "output_tokens": 64},
                          duration_s=1.5, request_timeout_s=30.0).start()
        load.extend_to(load.ends_at + 1.5)
        load.join(60.0)
        assert not load.running() and load.problem is None
        records = load.records
        assert all(r.ok for r in records) and max(r.sent for r in records) <= load.ends_at + 0.05
        spans = [(r.sent, r.sent + r.e2e_s) for r in records]
        peak = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
        assert peak == 3                                        # three in flight at most, and at some moment three
        assert max(b for _, b in spans) > load.ends_at - 1.5   # it sent past the first planned end
    finally:
        sim.terminate()
        sim.wait(10)


def test_the_workload_ends_once_a_good_request_after_the_fault_has_finished():
    """The traffic after a fault is planned for the whole recovery bound (recover_within_s); the drill ends it once
    a good request sent after the fault has finished, the recovery the step measures, which stays the same. In the
    clean-clone CI of 2026-12-06 19:05 the real vLLM drill's faults recovered in 1.6-10 s and sent for 24 s each."""
    import subprocess
    import sys
    import time

    from tests.test_watch_command import free_port, wait_healthy

    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", str(port), "--model-name", "tiny"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        load = M.Workload(f"http://127.0.0.1:{port}", "tiny", {"scenario": "custom", "concurrency": 2,
                                                                "prompt_tokens": 8, "output_tokens": 8},
                          duration_s=60.0, request_timeout_s=30.0).start()
        load.extend_to(load.ends_at + 30.0)        # a late signal's follow-on run shares the early end
        reverted = time.time()
        planned_end = load.ends_at
        assert load.end_at_recovery(reverted) is True
        ended = time.time()
        load.join(60.0)
        assert not load.running()
        records = load.records
        first_good = M.recovery(records, reverted)
        assert first_good is not None and ended < planned_end - 60
        assert max(r.sent for r in records) <= ended            # nothing sent after the end
        assert all(r.ok for r in records) and len(load.finished) == len(records)
        assert load.followers == []                             # the same run went on, and ended early
        assert load.ends_at <= ended
    finally:
        sim.terminate()
        sim.wait(10)
