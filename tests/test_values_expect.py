"""The drill's judgement of a fault (servewatch/drill/expect.py): each expectation met or not at its boundary
(just under, at, just over the plan's number: "fires within N s" is met at N and not at N + 0.01), with the
exact words a reader checks (issue 40: an expectation judged met at N + 1 s passed 1,530 tests)."""

import pytest

from servewatch.drill import expect as E
from servewatch.drill.plan import Expect, GuardExpect
from servewatch.drill.run import StepResult


def result(**kw) -> StepResult:
    return StepResult(index=0, kind="stop", name="n", **kw)


def checks(expect, res):
    return [(c["expectation"], c["met"], c["observed"]) for c in E.check(expect, res)]


def test_fire_within_at_the_boundary():
    ex = Expect(fire={"engine_dead": 5.0})
    assert checks(ex, result(detected={"engine_dead": 5.0})) == [("engine_dead within 5 s", True, "after 5 s")]
    assert checks(ex, result(detected={"engine_dead": 5.01})) == [("engine_dead within 5 s", False, "after 5.01 s")]
    assert checks(ex, result(detected={"engine_dead": 4.99}))[0][1] is True
    assert checks(ex, result()) == [("engine_dead within 5 s", False, "not fired")]


def test_fire_any_the_first_that_fired():
    ex = Expect(fire_any=(("a", "b", "c"), 3.0))
    assert checks(ex, result(detected={"b": 3.0, "c": 2.5, "x": 0.1})) == [("one of a, b, c within 3 s", True,
                                                                           "c after 2.5 s")]
    assert checks(ex, result(detected={"b": 3.01})) == [("one of a, b, c within 3 s", False, "b after 3.01 s")]
    assert checks(ex, result(detected={"x": 1.0})) == [("one of a, b, c within 3 s", False, "none fired")]


def test_fire_by_threshold_inside_the_allowance_both_ways():
    ex = Expect(fire_by_threshold={"slow_hang": 1.5})
    what = "slow_hang at its own threshold \u00b1 1.5 s"
    # threshold 30: met from 28.5 to 31.5 inclusive
    for took, met in ((28.49, False), (28.5, True), (30.0, True), (31.5, True), (31.51, False)):
        assert checks(ex, result(detected={"slow_hang": took}, thresholds={"slow_hang": 30.0})) == \
            [(what, met, f"after {took:g} s, threshold 30 s")]
    assert checks(ex, result()) == [(what, False, "not fired")]
    assert checks(ex, result(detected={"slow_hang": 2.0})) == [(what, False, "after 2 s; no threshold in its bundle")]


def test_not_fire_no_incident_no_verdict():
    ex = Expect(not_fire=("overload",), no_incident=True, no_verdict=True)
    assert checks(ex, result()) == [("no overload", True, "not fired"), ("no incident verdict", True, "none"),
                                    ("no verdict at all", True, "none")]
    got = checks(ex, result(detected={"overload": 1.5, "not_serving": 2.0, "histogram_blind": 0.5},
                            fired_before=["kv_pressure"]))
    assert got == [("no overload", False, "fired after 1.5 s"),
                   ("no incident verdict", False, "not_serving, overload"),
                   ("no verdict at all", False, "histogram_blind, kv_pressure, not_serving, overload")]


def test_names_in_the_explanation():
    ex = Expect(fire={"rank_stalled": 10.0, "engine_dead": 10.0}, names=("pid {pid}", "{title}"))
    touched = [{"pid": 42, "title": "VLLM::Worker_TP1", "signal": "SIGCONT"}]
    res = result(detected={"rank_stalled": 3.0, "engine_dead": 2.0}, touched=touched,
                 explained={"engine_dead": "the engine (pid 42) exited", "rank_stalled": "VLLM::Worker_TP1 pid 42"})
    what = "the verdict names \u201cpid 42\u201d; \u201cVLLM::Worker_TP1\u201d"
    # the first of the candidates to fire (engine_dead at 2 s) must say both
    assert checks(ex, res)[2] == (what, False, "engine_dead: the engine (pid 42) exited")
    res.detected["engine_dead"] = 4.0
    assert checks(ex, res)[2] == (what, True, "rank_stalled: VLLM::Worker_TP1 pid 42")
    res.explained["rank_stalled"] = ""
    assert checks(ex, res)[2] == (what, False, "rank_stalled: no explanation recorded")
    res.explained["rank_stalled"] = "x" * 601
    assert checks(ex, res)[2][2] == "rank_stalled: " + "x" * 597 + "..."
    res.explained["rank_stalled"] = "y" * 600
    assert checks(ex, res)[2][2] == "rank_stalled: " + "y" * 600
    assert checks(Expect(fire={"a": 1.0}, names=("z",)), result())[1] == \
        ("the verdict names \u201cz\u201d", False, "no such verdict fired")
    assert E._fill("{pid}/{title}", result()) == "?/?"
    assert E.met_candidates(Expect(fire={"a": 1}, fire_any=(("b", "c"), 2), fire_by_threshold={"d": 1})) == \
        ["a", "b", "c", "d"]


def test_health_and_serve_answers():
    ok, failing = Expect(health="ok"), Expect(health="failing")
    assert checks(ok, result(health={"200": 4})) == [("/health stays 200 while the fault holds", True, "200 x4")]
    assert checks(ok, result(health={})) == [("/health stays 200 while the fault holds", False,
                                              "no probe in the window")]
    assert checks(ok, result(health={"200": 3, "no answer": 5, "503": 1})) == [
        ("/health stays 200 while the fault holds", False, "no answer x5, 200 x3, 503 x1")]
    assert checks(failing, result(health={"503": 1})) == [("/health fails while the fault holds", True, "503 x1")]
    assert checks(failing, result(health={"200": 2})) == [("/health fails while the fault holds", False, "200 x2")]
    serve = Expect(livez="failing", readyz="ok")
    assert checks(serve, result(livez={"503": 2}, readyz={"200": 2})) == [
        ("servewatch serve's livez fails while the fault holds", True, "503 x2"),
        ("servewatch serve's readyz stays 200 while the fault holds", True, "200 x2")]
    assert checks(serve, result())[0] == ("servewatch serve's livez fails while the fault holds", False,
                                          "no probe in the window")


def test_error_rate_and_recovery_at_their_bounds():
    ex = Expect(max_error_rate=0.25, recover_within_s=5.0)
    got = checks(ex, result(impact={"error_rate": 0.25, "failed": 1, "requests": 4}, recovery_s=5.0))
    assert got == [("at most 25% of requests fail", True, "1 of 4 (25%)"),
                   ("a good request within 5 s after the fault", True, "after 5 s")]
    got = checks(ex, result(impact={"error_rate": 0.26, "failed": 13, "requests": 50}, recovery_s=5.01))
    assert got == [("at most 25% of requests fail", False, "13 of 50 (26%)"),
                   ("a good request within 5 s after the fault", False, "after 5.01 s")]
    assert checks(ex, result()) == [("at most 25% of requests fail", True, "0 of 0 (0%)"),
                                    ("a good request within 5 s after the fault", False,
                                     "no good request after the fault")]


def test_recovery_counted_in_requests_at_its_bound():
    ex = Expect(recover_requests=2, recover_plus_s=3.0)
    what = "a good request within 2 x 6.5 s (a request's length outside the fault) + 3 s = 16 s after the fault"
    for took, met in ((15.99, True), (16.0, True), (16.01, False)):
        got = E.check(ex, result(impact={"e2e_outside_s": 6.5}, recovery_s=took))
        assert [(c["expectation"], c["met"], c["observed"]) for c in got] == [(what, met, f"after {took:g} s")]
        assert got[0].get("over_s") == (None if met else 0.01)
    assert checks(ex, result(impact={"e2e_outside_s": 6.5})) == [(what, False, "no good request after the fault")]
    # the bound to two decimals, as the words say it: 2 x 5.074 + 6 = 16.148 -> 16.15 s
    real = "a good request within 2 x 5.074 s (a request's length outside the fault) + 6 s = 16.15 s after the fault"
    six = Expect(recover_requests=2, recover_plus_s=6.0)
    assert checks(six, result(impact={"e2e_outside_s": 5.074}, recovery_s=16.149)) == [(real, True, "after 16.149 s")]
    # the bound follows the engine's speed: the same recovery met on a machine twice as slow
    slow = "a good request within 2 x 13 s (a request's length outside the fault) + 3 s = 29 s after the fault"
    assert checks(ex, result(impact={"e2e_outside_s": 13.0}, recovery_s=24.0)) == [(slow, True, "after 24 s")]
    assert checks(ex, result(recovery_s=4.0)) == [
        ("a good request within 2 requests' length + 3 s after the fault", False,
         "no good request outside the fault to measure a request's length by")]


def test_restart_within_and_no_restart():
    ex = Expect(restart_within_s=10.0)
    what = "restarted: guard's default and livez act within 10 s"
    policy = {"acted_on": "not_serving", "acted_s": 10.0, "kubelet_by_s": 40.0}
    assert checks(ex, result(policy=policy)) == [
        (what, True, "guard and livez act on not_serving after 10 s; a kubelet on livez restarts by 40 s")]
    assert checks(ex, result(policy={**policy, "acted_s": 10.01}))[0][1] is False
    serve = {"acted_on": "engine_dead", "acted_s": 3.0, "livez_failed_s": 10.01, "kubelet_by_s": 40.01}
    assert checks(ex, result(policy=serve)) == [
        (what, False, "serve's livez failed on engine_dead after 10.01 s; a kubelet on livez restarts by 40.01 s")]
    assert checks(ex, result(policy={**serve, "livez_failed_s": 10.0}))[0][1] is True
    assert checks(ex, result(policy={"acted_s": 3.0, "livez_failed_s": None}))[0] == \
        (what, False, "serve's livez never failed")
    assert checks(ex, result()) == [(what, False, "nothing acted")]
    quiet = Expect(no_restart=True)
    assert checks(quiet, result(policy={"acted_s": None})) == \
        [("no restart (guard's default and livez leave it be)", True, "nothing acted")]
    assert checks(quiet, result(policy={"acted_on": "x", "acted_s": 0.0}))[0][1] is False
    assert checks(quiet, result(policy={"acted_s": None, "livez_failed_s": 2.0, "acted_on": "y"}))[0] == \
        ("no restart (guard's default and livez leave it be)", False, "serve's livez failed on y after 2 s")
    assert E.policy_words({"acted_s": 1.5, "acted_on": "z"}) == "guard and livez act on z after 1.5 s"


def test_clear_within():
    ex = Expect(fire={"a": 5.0, "b": 5.0}, clear_within_s=2.0)
    what = "{} clears within 2 s once the fault ends and tokens move again"
    got = checks(ex, result(detected={"a": 1.0, "b": 1.0}, cleared={"a": 2.0, "b": 2.01}))
    assert got[2:] == [(what.format("a"), True, "after 2 s"), (what.format("b"), False, "after 2.01 s")]
    assert checks(ex, result(detected={"a": 1.0}))[2:] == [(what.format("a"), False, "not cleared")]
    assert checks(ex, result())[2:] == [(what.format("the verdict"), False, "no such verdict fired")]


def test_clear_within_counts_from_the_first_token_after_the_fault():
    """An engine that resumes late (vLLM 0.32's worker parked 5.0 s after its engine core's SIGCONT, CI of
    2026-12-07) rightly holds a no-progress verdict: the bound counts from the first token the held requests got."""
    ex = Expect(fire={"a": 5.0}, clear_within_s=2.0)
    what = "a clears within 2 s once the fault ends and tokens move again"
    late = E.check(ex, result(detected={"a": 1.0}, cleared={"a": 5.4}, resumed_s=5.0))[1]
    assert (late["expectation"], late["met"], late["observed"]) == \
        (what, True, "after 5.4 s, 0.4 s after tokens moved again (5 s after the fault)")
    stuck = E.check(ex, result(detected={"a": 1.0}, cleared={"a": 7.01}, resumed_s=5.0))[1]
    assert (stuck["met"], stuck["over_s"]) == (False, 0.01)
    assert checks(ex, result(detected={"a": 1.0}, cleared={"a": 2.01}, resumed_s=0.0))[1][1] is False


def test_ready_within_and_exit():
    ex = Expect(ready_within_s=60.0)
    assert checks(ex, result(ready_s=60.0)) == [("/health 200 within 60 s of the start", True, "after 60 s")]
    assert checks(ex, result(ready_s=60.5))[0][1] is False
    assert checks(ex, result(facts={"start": "exited 1"})) == [("/health 200 within 60 s of the start", False,
                                                                "exited 1")]
    assert checks(ex, result()) == [("/health 200 within 60 s of the start", False, "not up")]
    ex = Expect(exit_within_s=2.0)
    res = result(detected={"process_exit": 2.0}, server_exit={"status": -9,
                                                              "reported": {"exit_code": None, "exit_signal": 9}})
    assert checks(ex, res) == [("process_exit within 2 s", True, "after 2 s"),
                               ("process_exit reports the server's real exit status", True,
                                "reported killed by SIGKILL; real killed by SIGKILL")]
    res = result(detected={"process_exit": 2.01}, server_exit={"status": 1, "reported": None})
    assert checks(ex, res) == [("process_exit within 2 s", False, "after 2.01 s"),
                               ("process_exit reports the server's real exit status", False,
                                "reported no process_exit bundle to read; real exit code 1")]
    assert checks(ex, result(server_exit={"status": None, "read_as_parent": False})) == [
        ("process_exit within 2 s", False, "not fired")]
    assert checks(ex, result()) == [("process_exit within 2 s", False, "not fired"),
                                    ("the server's main process has exited", False,
                                     "still running at the end of the step, or not the drill's child (its status is "
                                     "unknown)")]


def test_in_flight_cut():
    what = "the requests the fault cut are counted failed, none a success"
    ex = Expect(in_flight_cut=True)

    def cut(caught):
        return checks(ex, result(impact={"in_flight_at_fault": caught}))[-1]
    assert cut({"count": 3, "ok": 1, "whole": 1, "errors": {"stream_cut": 2}}) == \
        (what, True, "3 caught: 2 stream_cut, 1 whole (their tokens made before the fault)")
    assert cut({"count": 3, "ok": 2, "whole": 1, "errors": {"stream_cut": 1}}) == \
        (what, False, "3 caught: 1 stream_cut, 1 whole (their tokens made before the fault), 1 counted ok with fewer "
                      "tokens than asked")
    assert cut({"count": 1, "ok": 1, "errors": {}}) == (what, False, "1 caught: ")
    assert cut(None) == (what, False, "no request caught by the fault")


def test_probe_preempted_reads_the_recorders_probe_cost_line():
    from servewatch.sources.probe import PREEMPTED_WORDS
    what = "a routine probe in flight gave way to an urgent one"
    ex = Expect(probe_preempted=True)
    said = f"3 one-token request(s) (1 asked at once: a rank looked stalled) (1 {PREEMPTED_WORDS}: asked before ..."
    assert checks(ex, result(facts={"probe": said}))[-1] == (what, True, said)
    unmoved = "2 one-token request(s) (1 asked at once: a rank looked stalled) in 20 s; 0 skipped"
    assert checks(ex, result(facts={"probe": unmoved}))[-1] == (what, False, unmoved)
    assert checks(ex, result())[-1] == (what, False, "the recorder said nothing of its probes")
    assert checks(Expect(), result(facts={"probe": said})) == []


def test_log_and_bundles():
    res = result(log_seen={"died": True, "oom": False}, bundles={"written": 2, "verified": 1, "holding_model_path": 0})
    assert checks(Expect(), res) == [
        ("the server's log shows \u201cdied\u201d after the injection", True, "shown"),
        ("the server's log shows \u201coom\u201d after the injection", False, "not shown"),
        ("every bundle written verifies", False, "1 of 2 verified"),
        ("no bundle holds the served model's path", True, "in none of the 2 bundle(s)")]
    res = result(bundles={"written": 2, "verified": 2, "holding_model_path": 3, "write_failures": 1})
    assert checks(Expect(bundle_write_fails=True), res) == [
        ("no bundle holds the served model's path", False, "3 file(s) hold it"),
        ("the recorder reports bundles it could not write", True, "1 write failure(s), 2 written")]
    assert checks(Expect(bundle_write_fails=False), result(bundles={"written": 1})) == [
        ("every bundle is written", True, "0 write failure(s), 1 written")]
    assert checks(Expect(), result(bundles={"written": 0})) == []


def guard_result(**g):
    return result(guard={"acted_on": "not_serving", "verdict_s": 4.0, "exit": 3, "tree_left": 0,
                         "stacks": None, "kill": None, "signalled_stacks": [], **g})


def test_guard_kills_within_its_bound():
    ex = Expect(guard=GuardExpect(kills=True, within_s=2.0))
    kill = {"killed": 3, "survivors": 0, "after_s": 6.0, "after_verdict_s": 2.0}
    stacks = {"status": "captured", "processes": {"engine_core": "captured"}, "diverging": [], "after_s": 5.5}
    assert checks(ex, guard_result(kill=kill, stacks=stacks)) == [
        ("guard kills the tree within 2 s of its verdict's evidence", True,
         "3 killed, 0 survived, on not_serving (4 s after the injection), 2 s after the verdict (the stacks took "
         "1.50 s of it)"),
        ("guard exits 3 (it killed the server after a verdict)", True, "exit 3"),
        ("no process of the tree is left", True, "0 left")]
    late = checks(ex, guard_result(kill={**kill, "after_verdict_s": 2.01}, verdict_s=None))
    assert late[0] == ("guard kills the tree within 2 s of its verdict's evidence", False,
                       "3 killed, 0 survived, on not_serving, 2.01 s after the verdict")
    survivors = checks(Expect(guard=GuardExpect(kills=True)), guard_result(kill={**kill, "survivors": 1,
                                                                                 "after_verdict_s": None},
                                                                           exit=None, tree_left=1))
    assert survivors == [("guard kills the tree", False, "3 killed, 1 survived, on not_serving (4 s after the injection)"),
                         ("guard exits 3 (it killed the server after a verdict)", False,
                          "exit unknown (still running)"),
                         ("no process of the tree is left", False, "1 left")]
    none = checks(ex, guard_result(exit=0, acted_on=None))
    assert none == [("guard kills the tree", False, "no kill; guard exit 0"),
                    ("guard exits 3 (it killed the server after a verdict)", False, "exit 0"),
                    ("no process of the tree is left", False, "0 left")]


def test_guard_stacks_signalled_and_diverging():
    ex = Expect(guard=GuardExpect(kills=True, stacks_of=("engine_core", "api"), diverging=("{title}",)))
    stacks = {"status": "partial", "processes": {"engine_core": "captured", "api": "timed out"},
              "diverging": ["VLLM::Worker_TP1"], "after_s": 5.0}
    touched = [{"pid": 7, "title": "VLLM::Worker_TP1", "signal": "SIGSTOP"}, {"pid": 8, "title": "t", "signal": "SIGKILL"}]
    res = guard_result(kill={"killed": 1, "survivors": 0, "after_s": 6.0, "after_verdict_s": None}, stacks=stacks,
                       signalled_stacks=[7])
    res.touched = touched
    got = checks(ex, res)
    assert got[3:] == [("stacks captured of engine_core, api", False, "api timed out, engine_core captured"),
                       ("the stacks of the stopped process are in guard's dump", True,
                        "VLLM::Worker_TP1 (pid 7) captured"),
                       ("guard's stack dump names VLLM::Worker_TP1 as the diverging rank", True, "VLLM::Worker_TP1")]
    res.guard["stacks"] = {**stacks, "processes": {"engine_core": "captured", "api": "captured"}, "diverging": []}
    res.guard["signalled_stacks"] = []
    got = checks(ex, res)
    assert got[3:] == [("stacks captured of engine_core, api", True, "api captured, engine_core captured"),
                       ("the stacks of the stopped process are in guard's dump", False,
                        "VLLM::Worker_TP1 (pid 7) not captured"),
                       ("guard's stack dump names VLLM::Worker_TP1 as the diverging rank", False, "no divergence")]
    res.guard["stacks"] = None
    got = checks(ex, res)
    assert got[3] == ("stacks captured of engine_core, api", False, "no stacks")
    res.guard["stacks"] = {"status": "none", "processes": {}, "diverging": [], "after_s": 1.0}
    assert checks(ex, res)[3] == ("stacks captured of engine_core, api", False, "none")


def test_guard_leaves_the_server_alone():
    ex = Expect(guard=GuardExpect(kills=False))
    what = "guard leaves the server alone (no stacks, no kill)"
    assert checks(ex, guard_result(exit=0, acted_on=None)) == [(what, True, "no action; guard exit 0")]
    assert checks(ex, guard_result(exit=None, acted_on=None)) == [(what, True,
                                                                   "no action; guard exit unknown (still running)")]
    assert checks(ex, guard_result(exit=3, acted_on=None)) == [(what, False, "no action; guard exit 3")]
    assert checks(ex, guard_result(exit=3, stacks={"processes": {}}, kill={"killed": 1})) == [
        (what, False, "stacks and a kill on not_serving (4 s after the injection)")]
    assert checks(ex, result()) == [(what, True, "no action; guard exit unknown (still running)")]


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

def test_fire_any_at_its_bound_and_serve_livez_ok():
    assert checks(Expect(fire_any=(("a",), 3.0)), result(detected={"a": 3.0}))[0][1] is True
    assert checks(Expect(livez="ok"), result(livez={"200": 3})) == [
        ("servewatch serve's livez stays 200 while the fault holds", True, "200 x3")]


def test_a_single_cut_request_counted_failed_is_enough():
    assert checks(Expect(in_flight_cut=True), result(impact={"in_flight_at_fault": {
        "count": 1, "ok": 0, "whole": 0, "errors": {"stream_cut": 1}}}))[-1] == \
        ("the requests the fault cut are counted failed, none a success", True, "1 caught: 1 stream_cut")


def test_names_without_an_explanation_recorded():
    ex = Expect(fire={"a": 5.0}, names=("x",))
    assert checks(ex, result(detected={"a": 1.0}))[1] == ("the verdict names \u201cx\u201d", False,
                                                          "a: no explanation recorded")


def test_bundles_counted_where_a_count_is_missing():
    assert checks(Expect(), result(bundles={"written": 2, "verified": 2})) == [
        ("every bundle written verifies", True, "2 of 2 verified")]
    assert checks(Expect(), result(bundles={"written": 2})) == [
        ("every bundle written verifies", False, "0 of 2 verified")]
    assert checks(Expect(), result(bundles={"holding_model_path": 0})) == [
        ("no bundle holds the served model's path", True, "in none of the 0 bundle(s)")]
    assert checks(Expect(bundle_write_fails=True), result(bundles={"write_failures": 1})) == [
        ("the recorder reports bundles it could not write", True, "1 write failure(s), 0 written")]


def test_guard_kill_timed_from_evidence_held_after_the_firing():
    ex = Expect(guard=GuardExpect(kills=True, within_s=2.0))
    stacks = {"status": "captured", "processes": {}, "diverging": [], "after_s": 7.0}
    res = guard_result(kill={"killed": 2, "survivors": 0, "after_s": 8.0, "after_verdict_s": 1.5}, stacks=stacks,
                       evidence_s=6.5)
    del res.guard["tree_left"]
    got = checks(ex, res)
    # the evidence held at 6.5 s, 2.5 s after the firing (4 s); the stacks took 7.0 - 6.5 = 0.5 s
    assert got[0] == ("guard kills the tree within 2 s of its verdict's evidence", True,
                      "2 killed, 0 survived, on not_serving (4 s after the injection), 1.5 s after its evidence held "
                      "(the stacks took 0.50 s of it); the evidence held 2.50 s after the firing")
    assert got[2] == ("no process of the tree is left", True, "0 left")            # no count: none left
    nobody = guard_result(kill={"killed": 1, "survivors": 0, "after_s": 1.0, "after_verdict_s": None}, acted_on=None)
    assert checks(ex, nobody)[0] == ("guard kills the tree within 2 s of its verdict's evidence", False,
                                     "1 killed, 0 survived, on no verdict")


def test_guard_words_for_stacks_signalled_processes_and_divergence():
    ex = Expect(guard=GuardExpect(kills=True, stacks_of=("api",), diverging=("r1", "r2")))
    kill = {"killed": 1, "survivors": 0, "after_s": 1.0, "after_verdict_s": None}
    res = guard_result(kill=kill, stacks={"status": "partial", "processes": {}, "diverging": ["r2", "r3"],
                                          "after_s": 1.0})
    del res.guard["signalled_stacks"]
    res.touched = [{"pid": 7, "title": "a", "signal": "SIGSTOP"}, {"pid": 8, "title": "b", "signal": "SIGSTOP"}]
    got = checks(ex, res)
    assert got[3:] == [("stacks captured of api", False, "partial"),
                       ("the stacks of the stopped process are in guard's dump", False,
                        "a (pid 7) not captured; b (pid 8) not captured"),
                       ("guard's stack dump names r1, r2 as the diverging rank", False, "r2, r3")]
    res.guard["stacks"] = {"processes": {}, "diverging": [], "after_s": 1.0}
    assert checks(ex, res)[3] == ("stacks captured of api", False, "none")


# -- a miss while the recorder was starved is inconclusive (issue 50) ----------------------------------------

MISSED = {"expectation": "target_restarted within 5 s", "met": False, "observed": "after 14 s", "over_s": 9.0}
MET = {"expectation": "every bundle written verifies", "met": True, "observed": "1 of 1 verified"}
FIRED = {"expectation": "no process_exit", "met": False, "observed": "fired after 0.6 s"}


def test_a_late_verdict_is_a_time_bound_overshot_and_a_wrong_one_is_not():
    check = E.check

    result = StepResult(index=1, kind="restart", name="r", detected={"target_restarted": 14.0, "process_exit": 0.6})
    said = {c["expectation"]: c for c in check(Expect(fire={"target_restarted": 5, "stall": 9},
                                                      not_fire=("process_exit",)), result)}
    assert said["target_restarted within 5 s"] == MISSED
    assert said["stall within 9 s"] == {"expectation": "stall within 9 s", "met": False, "observed": "not fired"}
    assert said["no process_exit"] == FIRED
    on_time = check(Expect(fire={"target_restarted": 14}), result)
    assert on_time == [{"expectation": "target_restarted within 14 s", "met": True, "observed": "after 14 s"}]


def test_a_miss_while_the_recorder_was_starved_is_inconclusive_and_a_pass_stays_a_pass():
    # the case: restart named at 14 s against 5 s, a 7 s gap in the recorder's own sampling
    assert E.inconclusive([MET, MISSED], 7.0) == "recorder starved 7 s"
    assert E.inconclusive([MISSED], 1.3) == "recorder starved 1.3 s"
    assert E.inconclusive([MET], 7.0) is None          # met every expectation despite it: met
    assert E.inconclusive([MET, MISSED], 0.0) is None  # no gap: a miss is a miss
    # a verdict that must not fire and did is no timing: a miss, unless a quarter of the step was starved
    assert E.inconclusive([MISSED, FIRED], 7.0, frozen_s=7.0, window_s=28.01) is None
    assert E.inconclusive([MISSED, FIRED], 7.0, frozen_s=7.0, window_s=28.0) == "recorder starved 7 s"
    assert E.inconclusive([FIRED], 1.3, frozen_s=1.3, window_s=30.0) is None


def test_every_time_bound_says_how_far_it_was_overshot():
    """fire_any, a verdict's own threshold, a good request, livez and guard's default, a clearing, process_exit and
    guard's kill: each late one carries over_s (what `inconclusive` reads); each on time, or never there, none."""
    check = E.check
    result = StepResult(index=1, kind="stop", name="s", detected={"stall": 6.5, "process_exit": 4.25},
                        thresholds={"stall": 3.0}, recovery_s=12.0, cleared={"stall": 8.0},
                        policy={"acted_on": "stall", "acted_s": 7.5, "livez_failed_s": 9.0},
                        guard={"acted_on": "stall", "verdict_s": 6.5, "evidence_s": 6.5, "exit": 3, "tree_left": 0,
                               "kill": {"killed": 2, "survivors": 0, "after_s": 9.0, "after_verdict_s": 2.5},
                               "stacks": None, "signalled_stacks": []},
                        server_exit={"status": None, "reported": None, "read_as_parent": False})
    late = Expect(fire_any=(("stall", "health_loss"), 5.0), fire_by_threshold={"stall": 1.0}, recover_within_s=10.0,
                  restart_within_s=6.0, clear_within_s=5.0, exit_within_s=4.0, guard=GuardExpect(kills=True, within_s=2.0))
    over = {c["expectation"]: c.get("over_s") for c in check(late, result) if not c["met"]}
    assert over == {"one of stall, health_loss within 5 s": 1.5, "stall at its own threshold \u00b1 1 s": 2.5,
                    "a good request within 10 s after the fault": 2.0,
                    "restarted: guard's default and livez act within 6 s": 3.0,
                    "stall clears within 5 s once the fault ends and tokens move again": 3.0, "process_exit within 4 s": 0.25,
                    "guard kills the tree within 2 s of its verdict's evidence": 0.5}
    on_time = Expect(fire_any=(("stall",), 6.5), fire_by_threshold={"stall": 3.5}, recover_within_s=12.0,
                     restart_within_s=9.0, clear_within_s=8.0, exit_within_s=4.25, guard=GuardExpect(kills=True, within_s=2.5))
    assert [c for c in check(on_time, result) if not c["met"]] == []
    result.policy = {"acted_on": None, "acted_s": None, "livez_failed_s": None}
    result.recovery_s = None
    result.guard["kill"]["survivors"] = 1      # a kill that left a survivor is not late: it failed
    never = {c["expectation"]: c for c in check(late, result) if not c["met"]}
    for what in ("restarted: guard's default and livez act within 6 s", "a good request within 10 s after the fault",
                 "guard kills the tree within 2 s of its verdict's evidence"):
        assert "over_s" not in never[what], never[what]


def test_inconclusive_at_its_boundaries():
    assert E.inconclusive([MISSED], 1.0) == "recorder starved 1 s"          # any gap the recorder said
    assert E.inconclusive([FIRED], 1.3, window_s=4.0) is None               # no time in gaps given: none
    assert E.inconclusive([FIRED], 1.3, frozen_s=0.25) is None              # no window given: no share
    assert E.inconclusive([FIRED], 1.3, frozen_s=0.0, window_s=0.0) is None
    assert E.inconclusive([FIRED], 1.3, frozen_s=0.25, window_s=1.0) == "recorder starved 1.3 s"   # a quarter of 1 s


def test_over_s_to_the_hundredth_only_on_a_late_miss():
    ex = Expect(exit_within_s=4.0, guard=GuardExpect(kills=True, within_s=None))
    res = result(detected={"process_exit": 4.256}, server_exit={"status": None, "reported": None, "read_as_parent": False},
                 guard={"acted_on": "stall", "verdict_s": 1.0, "evidence_s": 1.0, "exit": 3, "tree_left": 0,
                        "kill": {"killed": 1, "survivors": 0, "after_s": 2.0, "after_verdict_s": 1.0},
                        "stacks": None, "signalled_stacks": []})
    said = {c["expectation"]: c for c in E.check(ex, res)}
    assert said["process_exit within 4 s"]["over_s"] == 0.26
    assert said["guard kills the tree"] == {"expectation": "guard kills the tree", "met": True,
                                            "observed": "1 killed, 0 survived, on stall (1 s after the injection), "
                                                        "1 s after the verdict"}
    early = E.check(Expect(fire_by_threshold={"stall": 0.5}), result(detected={"stall": 1.0}, thresholds={"stall": 3.0}))
    assert early == [{"expectation": "stall at its own threshold \u00b1 0.5 s", "met": False,
                      "observed": "after 1 s, threshold 3 s"}]                # too early: a miss, no overshoot


def test_guard_says_and_an_exit_status_the_plan_names():
    g = {"acted_on": "gpu_fault", "verdict_s": 1.0, "evidence_s": 1.0, "exit": 5, "tree_left": 0,
         "kill": {"killed": 1, "survivors": 0, "after_s": 2.0, "after_verdict_s": 1.0}, "stacks": None,
         "signalled_stacks": [], "said": "hardware: GPU 1 Xid 79, do not restart on this GPU"}
    ex = Expect(guard=GuardExpect(kills=True, exit=5, says=("Xid 79", "do not restart")))
    said = {c["expectation"]: (c["met"], c["observed"]) for c in E.check(ex, result(guard=g))}
    assert said["guard exits 5 (as the plan says)"] == (True, "exit 5")
    assert said["guard's last line says \u201cXid 79\u201d; \u201cdo not restart\u201d"] == (
        True, "\u201chardware: GPU 1 Xid 79, do not restart on this GPU\u201d")
    g["said"] = "hardware: GPU 1 Xid 79"
    said = {c["expectation"]: (c["met"], c["observed"]) for c in E.check(ex, result(guard=g))}
    assert said["guard's last line says \u201cXid 79\u201d; \u201cdo not restart\u201d"] == (
        False, "\u201chardware: GPU 1 Xid 79\u201d")
    del g["said"]
    said = {c["expectation"]: (c["met"], c["observed"]) for c in E.check(ex, result(guard=g))}
    assert said["guard's last line says \u201cXid 79\u201d; \u201cdo not restart\u201d"] == (False, "no exit line read")
