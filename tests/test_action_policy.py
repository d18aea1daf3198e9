"""One action policy (the registry's): each verdict's action class and the evidence it waits for, and every
consumer that acts reading it — guard's default --act-on and its probe, serve's livez and readyz, the latch
that says when evidence first holds, the probe's confirmation of a miss."""

from __future__ import annotations

import argparse

import pytest

from servewatch.detectors import registry
from servewatch.detectors.verdict import (ACTION_CLASSES, DRAIN, FINDING, INCIDENT, INFO, PAGE, RESTART, Verdict,
                                          VerdictSpec)
from servewatch.serve import probes
from servewatch.timeline.samples import DEADLINE
from servewatch.watch.firing import Latch
from tests.sim_harness import Phase, run

# The truth of each verdict, pinned: a change of class changes what guard kills and what a kubelet restarts.
RESTART_VERDICTS = ("alive_health_ok_no_progress", "engine_dead", "not_serving", "rank_stalled", "collective_hang",
                    "kv_transfer_stall")
INFO_VERDICTS = ("histogram_blind", "target_restarted")


def verdict(name: str, *, onset: float = 5.0, t: float = 10.0, **details) -> Verdict:
    return Verdict(name, t, onset, f"{name} why", (), details)


def test_every_verdict_declares_one_action_class_and_the_restart_class_is_exactly_the_stalls_the_dead_and_the_hung_collectives():
    assert all(s.action in ACTION_CLASSES for s in registry.specs())
    assert registry.by_action(RESTART) == RESTART_VERDICTS
    assert registry.by_action(INFO) == INFO_VERDICTS
    busy = ("overload", "kv_pressure", "preemption", "client_errors", "server_errors", "requests_aborted",
            "startup_stalled", "crash_loop", "health_loss", "process_exit", "requests_no_token", "gpu_throttled",
            "kv_expired", "pd_bypass", "kv_transfer_failures")
    assert all(registry.action_of(name) == PAGE for name in busy)
    assert registry.by_action(DRAIN) == ("gpu_fault",)      # the hardware under it: drain, never restart onto it
    assert set(registry.by_action(*ACTION_CLASSES)) == set(registry.names())
    with pytest.raises(ValueError, match="unknown action"):
        registry.by_action("reboot")


def test_a_spec_refuses_an_unknown_action_class_or_negative_evidence():
    with pytest.raises(ValueError, match="action 'reboot'"):
        VerdictSpec("x_y", lambda w, c: [], INCIDENT, "page", "s", None, ("metrics",), action="reboot")
    with pytest.raises(ValueError, match="never negative"):
        VerdictSpec("x_y", lambda w, c: [], INCIDENT, "page", "s", None, ("metrics",), action=RESTART, probes=-1)


def test_not_serving_acts_only_when_two_probes_agree_and_rank_stalled_on_its_one():
    assert registry.spec("not_serving").probes == 2 and registry.spec("rank_stalled").probes == 1
    one, two = verdict("not_serving", failed_probes=1), verdict("not_serving", failed_probes=2)
    assert not registry.acts(one, RESTART) and registry.acts(two, RESTART)
    assert not registry.acts(verdict("rank_stalled", failed_probes=0), RESTART)
    assert registry.acts(verdict("rank_stalled", failed_probes=1), RESTART)
    assert not registry.acts(verdict("not_serving"), RESTART)         # no count: no evidence
    assert registry.acts(verdict("engine_dead"), RESTART)             # the verdict is its own evidence
    assert not registry.acts(verdict("engine_dead"), DRAIN)           # the class must match
    assert registry.spec("not_serving").evidence_words() == "2 probes in a row with no token"
    assert registry.spec("rank_stalled").evidence_words() == "a probe with no token"
    assert registry.policy_lines(("not_serving", "engine_dead")) == [
        "not_serving (restart: 2 probes in a row with no token)", "engine_dead (restart)"]


def test_livez_fails_on_the_restart_class_once_its_evidence_holds_and_on_nothing_else():
    assert probes.livez([]).ok
    for name in registry.names():
        if registry.action_of(name) != RESTART:
            assert probes.livez([verdict(name, failed_probes=9)]).ok, name
    for name in RESTART_VERDICTS:
        if registry.spec(name).pair:     # a deployment's: only the livez of the side it names fails (test_pd_verdicts)
            continue
        answer = probes.livez([verdict(name, onset=-30.0, failed_probes=2)])
        assert not answer.ok and answer.status == 503 and answer.reason == f"{name} (restart): {name} why"
    assert probes.livez([verdict("not_serving", failed_probes=1)]).ok
    # collective_hang restarts only once the same rank stayed behind at the same collective for 30 s
    assert probes.livez([verdict("collective_hang", onset=5.0, t=10.0)]).ok
    # readyz fails with livez
    assert not probes.readyz([verdict("engine_dead")], True, True, None).ok
    assert probes.readyz([verdict("overload")], True, True, None).ok


@pytest.fixture
def drain_and_hold_specs():
    """Two verdicts of the kinds the GPU issue adds: a drain (hardware), and a restart that must hold 30 s."""
    detect = lambda window, config: []   # noqa: E731 - never run here
    added = [registry.register(VerdictSpec("gpu_broken", detect, INCIDENT, "page", "s", None, ("metrics",),
                                           action=DRAIN)),
             registry.register(VerdictSpec("slow_hang", detect, FINDING, "page", "s", None, ("metrics",),
                                           action=RESTART, hold_s=30.0))]
    yield added
    for spec in added:
        registry.unregister(spec.name)


def test_readyz_also_fails_on_drain_while_livez_does_not_restart_onto_the_broken_gpu(drain_and_hold_specs):
    broken = verdict("gpu_broken")
    assert probes.livez([broken]).ok
    answer = probes.readyz([broken], True, True, None)
    assert not answer.ok and answer.reason == "gpu_broken (drain): gpu_broken why"
    assert "gpu_broken" not in registry.by_action(RESTART) and registry.by_action(DRAIN) == ("gpu_fault", "gpu_broken")


def test_a_hold_waits_for_the_condition_to_have_lasted(drain_and_hold_specs):
    assert probes.livez([verdict("slow_hang", onset=0.0, t=29.9)]).ok
    assert not probes.livez([verdict("slow_hang", onset=0.0, t=30.0)]).ok
    assert registry.spec("slow_hang").evidence_words() == "held 30 s"


def test_the_latch_says_once_when_the_evidence_first_holds_and_again_only_after_a_clear():
    latch = Latch()
    first = latch.update([verdict("not_serving", failed_probes=1)])
    assert [v.name for v in first.fired] == ["not_serving"] and first.evidenced == ()
    second = latch.update([verdict("not_serving", failed_probes=2)])
    assert second.fired == () and [v.details["failed_probes"] for v in second.evidenced] == [2]
    assert latch.update([verdict("not_serving", failed_probes=3)]).evidenced == ()
    assert latch.update([]).cleared
    again = latch.update([verdict("engine_dead")])
    assert [v.name for v in again.fired] == [v.name for v in again.evidenced] == ["engine_dead"]


def test_an_idle_wedge_is_confirmed_by_a_second_probe_asked_at_once():
    """The miss that fires not_serving is asked again at once, with the same deadline (5 s here); the evidence
    holds at that second miss, and the recorder says so to its evidence listeners (what guard acts on)."""
    heard = []

    def listen(recorder):
        recorder.evidence_listeners.append(lambda v, fired_now: heard.append((v, fired_now)))

    recorder, engine, start = run([Phase(20), Phase(60)], faults=((30, {"kind": "wedge-idle"}),), probe=(10, 5),
                                  on_recorder=listen)
    fired = next(f.verdict for f in recorder.fired if f.verdict.name == "not_serving")
    assert fired.details["failed_probes"] == 1
    evidenced, fired_now = next((v, now) for v, now in heard if v.name == "not_serving")
    assert not fired_now and evidenced.details["failed_probes"] == 2
    probes_ = [p for p in recorder.ring.window().probe if p.t - start > 30]
    assert [p.outcome for p in probes_[:2]] == [DEADLINE, DEADLINE]
    assert [p.deadline_s for p in probes_[:2]] == [5.0, 5.0]
    # asked at once: the confirmation's answer comes its 5 s deadline (plus the source's 1 s look) after the first
    assert 5.0 <= probes_[1].t - probes_[0].t <= 5.0 + 1.0
    assert evidenced.t - fired.t <= 5.0 + 1.0 + 0.5
    source = next(s for s in recorder.sources if s.kind == "probe")
    assert source.confirms == 1        # one confirmation per run of misses: then the routine cadence again
    assert [p.deadline_s for p in probes_[2:]] == [5.0] * len(probes_[2:])


def test_guard_acts_by_default_on_the_restart_class_with_the_probe_on():
    from servewatch.actions.policy import GuardConfig
    from servewatch.cli import build_parser

    default = RESTART_VERDICTS[:-1] + ("gpu_fault", "kv_transfer_stall")     # and the drain class: exit 6
    assert GuardConfig().act_on == default
    args = build_parser().parse_args(["guard", "http://127.0.0.1:1", "--pid", "1"])
    assert args.act_on == ",".join(default)
    assert args.no_probe is False                     # the probe is on unless --no-probe
    off = build_parser().parse_args(["guard", "http://127.0.0.1:1", "--pid", "1", "--no-probe"])
    assert off.no_probe is True


# --- the drill judges it ------------------------------------------------------------------------------

def _event(kind, name, t, **extra):
    from servewatch.drill import measure as M

    return M.VerdictEvent(kind, name, t, t - 1.0, **extra)


def test_the_drill_times_the_restart_from_the_evidence_not_the_firing():
    from servewatch.drill import measure as M

    events = [_event("fired", "overload", 101.0),                                    # a person's: never acts
              _event("fired", "not_serving", 104.0, evidence_held=False),               # one probe: not yet
              _event("evidence_held", "not_serving", 107.5),                            # the second: acts
              _event("cleared", "not_serving", 130.0)]
    policy = M.policy("restart", events, injected=100.0, end=140.0)
    assert policy == {"demands": "restart", "acted_on": "not_serving", "acted_s": 7.5, "kubelet_by_s": 37.5}
    answers = dict(M.livez_answers(events, 100.0, 140.0, step_s=2.5))
    assert answers[105.0] and not answers[107.5] and not answers[127.5] and answers[130.0]
    busy = M.policy("none", events[:1], injected=100.0, end=140.0)
    assert busy["acted_on"] is None and busy["acted_s"] is None and busy["kubelet_by_s"] is None
    # serve's own livez as answered, where serve recorded the step
    served = M.policy("restart", events, injected=100.0, end=140.0, livez=[(101.0, 200), (108.0, 503), (109.0, None)])
    assert served == {"demands": "restart", "acted_on": "not_serving", "acted_s": 8.0, "livez_failed_s": 8.0,
                      "kubelet_by_s": 38.0}
    # serve's lines carry no evidence (they read as held at the firing): its livez answers decide
    unconfirmed = [e for e in events if e.event != "evidence_held"]
    served = M.policy("restart", unconfirmed, injected=100.0, end=140.0, livez=[(104.0, 200), (108.0, 503)])
    assert served["acted_s"] == 8.0 and served["acted_on"] == "not_serving"


def test_restart_expectations_are_met_only_within_their_bound_and_never_on_a_busy_fault():
    from types import SimpleNamespace

    from servewatch.drill.expect import check
    from servewatch.drill.plan import Expect

    def checks(expect, policy):
        result = SimpleNamespace(detected={}, thresholds={}, fired_before=[], health={}, impact={}, recovery_s=None,
                                 policy=policy, cleared={}, guard=None, livez=None, log_seen={}, server_exit=None,
                                 ready_s=None, explained={}, bundles={}, facts={}, notes=[])
        return [c for c in check(expect, result) if "restart" in c["expectation"]]

    acted = {"demands": "restart", "acted_on": "rank_stalled", "acted_s": 4.4, "kubelet_by_s": 34.4}
    [met] = checks(Expect(restart_within_s=5.0), acted)
    assert met["met"] and met["observed"] == ("guard and livez act on rank_stalled after 4.4 s; a kubelet on livez "
                                              "restarts by 34.4 s")
    [late] = checks(Expect(restart_within_s=4.0), acted)
    assert not late["met"]
    [busy] = checks(Expect(no_restart=True), {**acted, "demands": "none"})
    assert not busy["met"] and busy["expectation"] == "no restart (guard's default and livez leave it be)"
    [quiet] = checks(Expect(no_restart=True), {"demands": "none", "acted_on": None, "acted_s": None,
                                               "kubelet_by_s": None})
    assert quiet["met"] and quiet["observed"] == "nothing acted"
    # serve's livez must have failed too, where serve answered it
    [unserved] = checks(Expect(restart_within_s=5.0), {**acted, "livez_failed_s": None})
    assert not unserved["met"] and "serve's livez never failed" in unserved["observed"]


def test_plans_read_the_restart_expectation_and_refuse_a_bad_one():
    from servewatch.drill.plan import PlanError, plan_from_dict

    def plan(restart):
        return {"name": "p", "target": {"engine": "sim"}, "faults": [
            {"kind": "stop", "role": "api", "expect": {"restart": restart}}]}

    assert plan_from_dict(plan({"within_s": 5})).steps[0].expect.restart_within_s == 5
    step = plan_from_dict(plan(False)).steps[0]
    assert step.expect.no_restart and step.expect.to_json()["restart"] is False
    for bad in (True, {"within_s": 0}, {"seconds": 5}):
        with pytest.raises(PlanError, match="restart"):
            plan_from_dict(plan(bad))


def test_each_fault_says_what_its_truth_demands():
    from servewatch.drill.faults import FAULTS

    # kv_lost: decode's engine dies of the KV files removed before it read them (issue 52): decode is restarted
    assert {kind for kind, fault in FAULTS.items() if fault.demands == RESTART} == {
        "stop", "idle_wedge", "kill", "hang", "kv_lost"}
    # the router gone decode-only: answers still come, computed by decode alone; a person is paged (issue 52)
    assert {kind for kind, fault in FAULTS.items() if fault.demands == "page"} == {"decode_only"}
    assert all(fault.demands in (RESTART, "page", "none") for fault in FAULTS.values())


def test_node_drain_fails_only_on_the_drain_class_and_names_the_target(drain_and_hold_specs):
    assert probes.node_drain({}).ok
    assert probes.node_drain({"a": [verdict("engine_dead")], "b": [verdict("overload")]}).ok
    answer = probes.node_drain({"b": [verdict("gpu_broken")], "a": [verdict("engine_dead")]})
    assert not answer.ok and answer.status == 503 and answer.reason == "b: gpu_broken (drain): gpu_broken why"


def test_the_node_problem_detector_plugin_exits_as_npd_reads_it_against_a_real_serve_answer(tmp_path):
    """The plugin script from deploy/, run by sh against an HTTP server answering as /node/drain does: 0 on "ok",
    1 with the verdict's line on a 503, 2 (NPD's unknown) when nothing answers."""
    import http.server
    import json
    import shutil
    import socket
    import subprocess
    import threading
    from pathlib import Path

    import yaml

    if shutil.which("curl") is None:
        pytest.fail("curl is needed to run the node-problem-detector plugin (Debian package curl)")
    doc = yaml.safe_load((Path(__file__).parent.parent / "deploy" / "kubernetes" / "node-problem-detector.yaml")
                         .read_text())
    config = json.loads(doc["data"]["servewatch-drain.json"])
    assert config["plugin"] == "custom" and config["rules"][0]["path"] == "/config/servewatch-drain.sh"
    answers = [probes.EndpointAnswer(True, "ok"), probes.EndpointAnswer(False, "b: gpu_broken (drain): why")]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            answer = answers[0]
            body = (answer.reason + "\n").encode()
            self.send_response(answer.status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    script = tmp_path / "check.sh"
    script.write_text(doc["data"]["servewatch-drain.sh"].replace("127.0.0.1:9464", f"127.0.0.1:{port}"))

    def check():
        done = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=10)
        return done.returncode, done.stdout.strip()

    try:
        assert check() == (0, "ok")
        answers.pop(0)
        assert check() == (1, "b: gpu_broken (drain): why")
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as s:        # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    script.write_text(doc["data"]["servewatch-drain.sh"].replace("127.0.0.1:9464", f"127.0.0.1:{free}"))
    assert check()[0] == 2


def test_an_idle_wedge_of_an_engine_whose_health_is_a_generation_is_not_serving_with_its_evidence():
    """SGLang's /health runs its own one-token generation through the scheduler, so a scheduler wedged while idle
    takes /health down too (503 once its own timeout, 2 s here, has passed): recorded by URL (no process view),
    the probe's misses while /metrics still answers are the restart class's evidence, not a health loss alone."""
    from servewatch.detectors.not_serving import detect as not_serving_detect
    from servewatch.sim.config import SimConfig

    recorder, engine, start = run([Phase(20), Phase(60)], faults=((30, {"kind": "wedge-idle"}),), probe=(10, 5),
                                  config=SimConfig(dialect="sglang", seed=1, health_timeout=2.0),
                                  with_process=False)
    window = recorder.ring.window()
    wedged = [h for h in window.health if h.t - start > 40]
    assert wedged and all(h.status == 503 for h in wedged)         # /health is failing throughout
    not_serving = [f.verdict for f in recorder.fired if f.verdict.name == "not_serving"]
    assert not_serving, [f.verdict.name for f in recorder.fired]
    assert "failed too (HTTP 503) while /metrics answered" in not_serving[0].why
    held = not_serving_detect(window, recorder.config)
    assert held and registry.acts(held[0], RESTART), held            # two probes agree: restart's evidence
    assert "health_loss" in {f.verdict.name for f in recorder.fired}  # the page-class verdict says it too


def test_a_failing_health_that_runs_through_the_engine_is_no_evidence_while_the_engine_computes_or_the_api_is_down():
    """The same failed /health and missed probes are not not_serving where the engine process is visibly
    computing (one long prefill step), or where /metrics no longer answers (the API process itself is frozen)."""
    from servewatch.detectors import not_serving
    from servewatch.detectors.config import DetectorConfig
    from servewatch.engine.state import EngineState
    from servewatch.timeline.samples import HealthSample, MetricsSample, ProbeSample, ProcessMember, ProcessSample
    from servewatch.timeline.window import Window

    def window(*, cpu: float, metrics_ok: bool) -> Window:
        idle = EngineState("sglang", "sglang-0.5.23", {"model_name": "m"}, running=0.0, waiting=0.0)
        metrics = [MetricsSample(t, "sglang", "sglang-0.5.23", (idle,)) for t in (0.0, 5.0, 10.0, 24.0)]
        if not metrics_ok:       # answered after the first miss was asked (13 s), then stopped answering
            metrics[-1:] = [MetricsSample(20.0, "sglang", "sglang-0.5.23", (idle,)),
                            MetricsSample(24.0, None, None, error="timeout")]
        health = [HealthSample(0.0, 200, 0.01)] + [HealthSample(float(t), None, None, error="timeout") for t in range(12, 25, 2)]
        probe = [ProbeSample(t, DEADLINE, 5.0, 5.0, error="timeout") for t in (18.0, 23.0)]
        member = ProcessMember(2, -3600.0, "engine_core", "sglang::scheduler", "sleeping", cpu_percent=cpu)
        process = [ProcessSample(float(t), 1, -3600.0, True, (member,)) for t in range(12, 25, 2)]
        return Window(metrics=tuple(metrics), health=tuple(health), probe=tuple(probe), process=tuple(process))

    config = DetectorConfig()
    [wedged] = not_serving.detect(window(cpu=0.0, metrics_ok=True), config)
    assert wedged.details["failed_probes"] == 2 and "failed too (timeout)" in wedged.why
    assert not_serving.detect(window(cpu=config.stall_busy_cpu_percent, metrics_ok=True), config) == []
    assert not_serving.detect(window(cpu=0.0, metrics_ok=False), config) == []



def test_gpu_fault_acts_by_the_class_of_its_own_fault():
    """A gpu_fault firing carries its fault's action class (issue 50: Xid 13 said "a restart helps" and "drain"):
    drain takes the node out, restart fails livez, page acts on nothing; a firing without its own is not acted on."""
    from dataclasses import replace

    spec = registry.spec("gpu_fault")
    assert (spec.action, spec.requires) == (DRAIN, ())
    assert spec.evidence_words() == ("per fault: drain for a GPU reset or reboot, restart when a process restart "
                                     "helps, else page")
    hardware, restartable, person = (replace(verdict("gpu_fault"), action=a) for a in (DRAIN, RESTART, PAGE))
    assert [registry.action_for(v) for v in (hardware, restartable, person)] == [DRAIN, RESTART, PAGE]
    assert registry.acts(hardware, DRAIN) and not registry.acts(restartable, DRAIN) and not registry.acts(person, DRAIN)
    assert registry.acts(restartable, RESTART) and not registry.acts(person, RESTART, DRAIN)
    assert not registry.acts(verdict("gpu_fault"), DRAIN, RESTART)      # no action of its own: not proven
    assert [probes.livez([v]).ok for v in (hardware, restartable, person)] == [True, False, True]
    assert [probes.readyz([v], True, True, None).ok for v in (hardware, restartable, person)] == [False, False, True]
    assert [probes.node_drain({"a": [v]}).ok for v in (hardware, restartable, person)] == [False, True, True]
    assert probes.livez([restartable]).reason == "gpu_fault (restart): gpu_fault why"
    assert "gpu_fault" not in registry.by_action(RESTART)


def test_guard_exits_with_the_hardware_status_and_line_after_a_gpu_fault():
    from servewatch.actions.policy import (EXIT_HARDWARE, EXIT_KILLED, GuardConfig, Outcome, action_for,
                                           exit_status)

    details = {"fault": "xid", "gpu_index": 1, "gpu_uuid": "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
               "gpu_bus_id": "00000000:2A:00.0", "xid": 79, "hardware": True}
    action = action_for("gpu_fault", GuardConfig(), details)
    line = ("hardware: GPU 1 (GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, bus 00000000:2A:00.0) Xid 79 (GPU has "
            "fallen off the bus), do not restart on this GPU")
    assert (action.wait_for_exit_s, action.stacks, action.kill, action.hardware) == (0.0, True, True, line)
    assert EXIT_HARDWARE == 6 and exit_status(Outcome(killed_for="gpu_fault", hardware=line)) == (6, line)
    lost = action_for("gpu_fault", GuardConfig(), {"fault": "lost", "gpu_index": 0, "hardware": True}).hardware
    assert lost == "hardware: GPU 0 lost (fallen off the bus), do not restart on this GPU"
    assert action_for("engine_dead", GuardConfig(), {}).hardware is None          # a stall: exit 3 as before
    assert exit_status(Outcome(killed_for="engine_dead")) == (EXIT_KILLED, "killed the server after engine_dead")


def test_guard_help_and_the_systemd_unit_document_the_hardware_status():
    from pathlib import Path

    from servewatch.commands.guard import EPILOG

    assert "  6    guard killed the server after a hardware fault" in EPILOG
    unit = (Path(__file__).resolve().parent.parent / "deploy/systemd/servewatch-guard@.service").read_text()
    assert "\nRestartPreventExitStatus=6\n" in unit and "servewatch guard" in unit


def test_precedence_is_declared_in_the_registry_and_applied_in_one_place():
    """not_serving gives way to rank_stalled (the same missed probe, the rank named): declared on its spec, applied by
    run_detectors' yield_way — not_serving's own detector no longer asks rank_stalled's."""
    from servewatch.detectors import yield_way

    assert registry.spec("not_serving").yields_to == ("rank_stalled",)
    both = [verdict("not_serving", failed_probes=2), verdict("rank_stalled", failed_probes=1), verdict("overload")]
    assert [v.name for v in yield_way(both)] == ["rank_stalled", "overload"]
    alone = [verdict("not_serving", failed_probes=2), verdict("overload")]
    assert [v.name for v in yield_way(alone)] == ["not_serving", "overload"]
    import inspect

    from servewatch.detectors import capacity, not_serving

    assert "ranks.detect(" not in inspect.getsource(not_serving)
    # overload gives way to gpu_throttled (a slower GPU, not more demand), declared the same way
    assert registry.spec("overload").yields_to == ("gpu_throttled",)
    assert [v.name for v in yield_way([verdict("overload"), verdict("gpu_throttled")])] == ["gpu_throttled"]
    assert "throttle_state" not in inspect.getsource(capacity)
