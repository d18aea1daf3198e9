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
RESTART_VERDICTS = ("alive_health_ok_no_progress", "engine_dead", "not_serving", "rank_stalled")
INFO_VERDICTS = ("histogram_blind", "target_restarted")


def verdict(name: str, *, onset: float = 5.0, t: float = 10.0, **details) -> Verdict:
    return Verdict(name, t, onset, f"{name} why", (), details)


def test_every_verdict_declares_one_action_class_and_the_restart_class_is_exactly_the_stalls_and_the_dead():
    assert all(s.action in ACTION_CLASSES for s in registry.specs())
    assert registry.by_action(RESTART) == RESTART_VERDICTS
    assert registry.by_action(INFO) == INFO_VERDICTS
    busy = ("overload", "kv_pressure", "preemption", "client_errors", "server_errors", "requests_aborted",
            "startup_stalled", "crash_loop", "health_loss", "process_exit", "requests_no_token")
    assert all(registry.action_of(name) == PAGE for name in busy)
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
    assert registry.policy_lines(("not_serving", "engine_dead")) == [
        "not_serving (restart: 2 probes in a row with no token)", "engine_dead (restart)"]


def test_livez_fails_on_the_restart_class_once_its_evidence_holds_and_on_nothing_else():
    assert probes.livez([]).ok
    for name in registry.names():
        if registry.action_of(name) != RESTART:
            assert probes.livez([verdict(name, failed_probes=9)]).ok, name
    for name in RESTART_VERDICTS:
        answer = probes.livez([verdict(name, failed_probes=2)])
        assert not answer.ok and answer.status == 503 and answer.reason == f"{name} (restart): {name} why"
    assert probes.livez([verdict("not_serving", failed_probes=1)]).ok
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
    assert "gpu_broken" not in registry.by_action(RESTART) and registry.by_action(DRAIN) == ("gpu_broken",)


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
    """The miss that fires not_serving is asked again at once with the urgent deadline (3 s); the evidence
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
    assert [p.deadline_s for p in probes_[:2]] == [5.0, 3.0]
    # asked at once: the confirmation's answer comes its 3 s deadline (plus the source's 1 s look) after the first
    assert 3.0 <= probes_[1].t - probes_[0].t <= 3.0 + 1.0
    assert evidenced.t - fired.t <= 3.0 + 1.0 + 0.5
    source = next(s for s in recorder.sources if s.kind == "probe")
    assert source.confirms == 1        # one confirmation per run of misses: then the routine cadence again
    assert [p.deadline_s for p in probes_[2:]] == [5.0] * len(probes_[2:])


def test_guard_acts_by_default_on_the_restart_class_with_the_probe_on():
    from servewatch.actions.policy import GuardConfig
    from servewatch.cli import build_parser

    assert GuardConfig().act_on == RESTART_VERDICTS
    args = build_parser().parse_args(["guard", "http://127.0.0.1:1", "--pid", "1"])
    assert args.act_on == ",".join(RESTART_VERDICTS)
    assert args.no_probe is False                     # the probe is on unless --no-probe
    off = build_parser().parse_args(["guard", "http://127.0.0.1:1", "--pid", "1", "--no-probe"])
    assert off.no_probe is True
