"""Values of the drill's derived figures (servewatch/drill/measure.py, "derived figures (pure)"), each computed by
hand with the arithmetic beside it (issue 40: a mutant of a figure an operator reads is killed by a test of the
figure). Boundaries read the constants the module uses: just under, at, just over."""

import json

import pytest

from servewatch.drill import measure as M
from servewatch.drill.measure import HttpAnswer, VerdictEvent
from servewatch.load.records import RequestRecord

P = M.KUBELET_PERIOD_S        # 10 s
T = M.KUBELET_TIMEOUT_S       # 1 s


def fired(verdict, t, *, why="", details=None, bundle=None, held=True, onset=None):
    return VerdictEvent("fired", verdict, t, t if onset is None else onset, bundle, why, details, held)


def cleared(verdict, t):
    return VerdictEvent("cleared", verdict, t, t)


def rec(i, sent, *, ttft=None, e2e=None, status=200, error=None, out=None, max_tokens=16, scheduled=None):
    r = RequestRecord(id=i, scheduled=sent if scheduled is None else scheduled, prompt_tokens_target=8,
                      max_tokens=max_tokens, sent=sent, http_status=status, ttft_s=ttft, e2e_s=e2e, error=error)
    r.output_tokens = out
    return r


# -- recording's small values ------------------------------------------------------------------------------

@pytest.mark.parametrize("status, ok", [(None, False), (199, False), (200, True), (399, True), (400, False)])
def test_probe_answer_ok_is_2xx_or_3xx(status, ok):
    assert HttpAnswer(0.0, "/health", status, 0.1).ok is ok


def test_parse_watch_line_reads_every_field():
    line = json.dumps({"event": "fired", "verdict": "not_serving", "t": "2026-01-01T00:00:10Z",
                       "onset": "2026-01-01T00:00:04+00:00", "bundle": "/b/1", "why": "no token",
                       "details": {"failed_probes": 2}, "evidence_held": False})
    e = M.parse_watch_line(line)
    # 2026-01-01T00:00:00Z is 1767225600 epoch seconds
    assert (e.event, e.verdict, e.t, e.onset) == ("fired", "not_serving", 1767225610.0, 1767225604.0)
    assert (e.bundle, e.why, e.details, e.evidence_held) == ("/b/1", "no token", {"failed_probes": 2}, False)
    bare = M.parse_watch_line(json.dumps({"event": "cleared", "verdict": "x", "t": "2026-01-01T00:00:10Z",
                                          "onset": "2026-01-01T00:00:10Z", "why": None, "details": [1]}))
    assert (bare.bundle, bare.why, bare.details, bare.evidence_held) == (None, "", None, True)
    assert M.parse_watch_line("not json") is None
    assert M.parse_watch_line(json.dumps({"event": "fired"})) is None


# -- the kubelet -----------------------------------------------------------------------------------------------

def test_kubelet_restart_at_the_third_failed_probe_in_a_row():
    failing = [(30.0, False), (10.0, False), (20.0, False)]       # sorted first: probes at 10, 20, 30
    assert M.kubelet_restart(failing, 0.0, 30.0) == 30.0           # probe_t <= end: the one at 30 counts
    assert M.kubelet_restart(failing, 0.0, 29.9) is None           # only two probes before the end
    assert M.kubelet_restart(failing, 0.0, 30.0, threshold=1) == 10.0
    assert M.kubelet_restart(failing, 0.0, 30.0, threshold=4) is None


def test_kubelet_restart_an_answer_resets_and_a_missing_one_is_skipped():
    # probes at 10 (F), 20 (ok: reset), 30, 40, 50 (F, F, F) -> the third in a row at 50
    answers = [(10.0, False), (20.0, True), (30.0, False), (40.0, False), (50.0, False)]
    assert M.kubelet_restart(answers, 0.0, 60.0) == 50.0
    # probe at 30 reads the first answer at or after 30 within one period: 40.0 is not < 30 + 10, skipped
    # (neither a failure nor a reset); probe at 40 reads 40.0: third failure -> 40
    answers = [(10.0, False), (20.0, False), (29.999, False), (40.0, False)]
    assert M.kubelet_restart(answers, 0.0, 60.0) == 40.0
    # an answer 9.999 s after the probe is read by it: probes 10, 20, 30 read 10, 20, 39.999
    assert M.kubelet_restart([(10.0, False), (20.0, False), (39.999, False)], 0.0, 60.0) == 30.0
    # the period is the argument's: probes at 5, 10, 15
    assert M.kubelet_restart([(5.0, False), (10.0, False), (15.0, False)], 0.0, 60.0, period_s=5.0) == 15.0


def test_health_answers_fail_past_the_kubelet_timeout():
    probes = [HttpAnswer(1.0, "/health", 200, T), HttpAnswer(2.0, "/health", 200, T + 0.001),
              HttpAnswer(3.0, "/health", 503, 0.01), HttpAnswer(4.0, "/v1/models", 200, 0.01)]
    assert M.health_answers(probes) == [(1.0, True), (2.0, False), (3.0, False)]
    assert M.health_answers(probes, "/v1/models") == [(4.0, True)]


# -- the action policy -------------------------------------------------------------------------------------------

def test_acting_from_the_firing_or_from_the_evidence_until_cleared():
    events = [fired("not_serving", 10.0, held=False), VerdictEvent("evidence_held", "not_serving", 13.0, 10.0),
              cleared("not_serving", 20.0),
              fired("engine_dead", 30.0), fired("overload", 31.0),
              fired("rank_stalled", 40.0, held=False)]           # its evidence never held: not acting
    assert M.acting(events, "restart") == [(13.0, 20.0, "not_serving"), (30.0, float("inf"), "engine_dead")]
    assert M.acting(events, "page") == [(31.0, float("inf"), "overload")]
    # evidence before the firing or after the clearing does not count
    late = [fired("not_serving", 10.0, held=False), cleared("not_serving", 20.0),
            VerdictEvent("evidence_held", "not_serving", 20.0, 10.0), VerdictEvent("evidence_held", "not_serving", 9.0, 9.0)]
    assert M.acting(late, "restart") == []
    at_fire = [fired("not_serving", 10.0, held=False), VerdictEvent("evidence_held", "not_serving", 10.0, 10.0)]
    assert M.acting(at_fire, "restart") == [(10.0, float("inf"), "not_serving")]
    # a cleared line before the firing is not its end; one at the firing's own time is
    assert M.acting([cleared("engine_dead", 5.0), fired("engine_dead", 6.0)], "restart") == [(6.0, float("inf"), "engine_dead")]
    assert M.acting([fired("engine_dead", 6.0), cleared("engine_dead", 6.0)], "restart") == [(6.0, 6.0, "engine_dead")]


def test_livez_answers_fail_while_a_restart_verdict_holds():
    events = [fired("engine_dead", 1.0), cleared("engine_dead", 2.0)]
    # t = 0, 0.5, 1.0, 1.5, 2.0, 2.5: failing on [1.0, 2.0)
    assert M.livez_answers(events, 0.0, 2.5) == [(0.0, True), (0.5, True), (1.0, False), (1.5, False),
                                                 (2.0, True), (2.5, True)]
    assert M.livez_answers([], 0.0, 1.0, step_s=1.0) == [(0.0, True), (1.0, True)]


def test_policy_from_the_recorder_lines():
    events = [fired("overload", 101.0), fired("not_serving", 104.0, held=False),
              VerdictEvent("evidence_held", "not_serving", 106.5, 104.0)]
    out = M.policy("restart", events, 100.0, 200.0)
    # acted at the evidence, 106.5 - 100 = 6.5 s; a kubelet on livez: 6.5 + 3 x 10 = 36.5 s
    assert out == {"demands": "restart", "acted_on": "not_serving", "acted_s": 6.5, "kubelet_by_s": 36.5}
    # a verdict holding since before the injection acts from the injection: max(95, 100) -> 0 s
    out = M.policy("restart", [fired("engine_dead", 95.0)], 100.0, 200.0)
    assert (out["acted_on"], out["acted_s"], out["kubelet_by_s"]) == ("engine_dead", 0.0, 30.0)
    # one that began after `end` or ended before the injection did not act in the step
    assert M.policy("none", [fired("engine_dead", 201.0)], 100.0, 200.0)["acted_s"] is None
    assert M.policy("none", [fired("engine_dead", 90.0), cleared("engine_dead", 100.0)], 100.0, 200.0)["acted_on"] is None
    assert M.policy("none", [fired("engine_dead", 200.0)], 100.0, 200.0)["acted_s"] == 100.0     # at `end`: in
    assert M.policy("none", [], 100.0, 200.0) == {"demands": "none", "acted_on": None, "acted_s": None,
                                                  "kubelet_by_s": None}


def test_policy_with_serve_reads_livez_as_answered():
    events = [fired("engine_dead", 103.0)]
    livez = [(99.0, 503), (101.0, 200), (102.0, None), (103.2, 503), (104.0, 503)]
    out = M.policy("restart", events, 100.0, 200.0, livez=livez)
    # the first answer at or after the injection that is an answer and not 200: 103.2 -> 3.2 s; +30 -> 33.2
    assert out == {"demands": "restart", "acted_on": "engine_dead", "acted_s": 3.2, "livez_failed_s": 3.2,
                   "kubelet_by_s": 33.2}
    # serve's lines carry no evidence: the restart verdict fired at or before the failing answer is named
    out = M.policy("restart", [fired("overload", 101.0), fired("not_serving", 102.0, held=False)], 100.0, 200.0,
                   livez=[(102.0, 503)])
    assert (out["acted_on"], out["acted_s"]) == ("not_serving", 2.0)
    out = M.policy("restart", [fired("not_serving", 102.5, held=False)], 100.0, 200.0, livez=[(102.0, 503)])
    assert (out["acted_on"], out["acted_s"]) == (None, 2.0)
    out = M.policy("none", [], 100.0, 200.0, livez=[(100.0, 200), (200.0, 503), (200.5, 503)])
    assert (out["acted_s"], out["livez_failed_s"], out["kubelet_by_s"]) == (100.0, 100.0, 130.0)
    out = M.policy("none", [], 100.0, 200.0, livez=[(100.0, 200)])
    assert (out["acted_s"], out["livez_failed_s"], out["kubelet_by_s"]) == (None, None, None)


# -- detections and explanations ---------------------------------------------------------------------------------

def test_detections_from_the_first_firing_at_or_after_the_injection():
    events = [fired("b", 112.345, why="second"), fired("a", 99.0, why="before"), fired("a", 100.0, why="at"),
              fired("a", 105.0, why="later"), cleared("c", 101.0), fired("b", 111.0, why="first")]
    # a: 100 - 100 = 0; b: 111 - 100 = 11 (sorted by time, first wins); round(12.345, 2) not reached
    assert M.detections(events, 100.0) == {"a": 0.0, "b": 11.0}
    assert M.explanations(events, 100.0) == {"a": "at", "b": "first"}
    assert M.detections([fired("a", 101.23456)], 100.0) == {"a": 1.23}


# -- health during the fault ------------------------------------------------------------------------------------

def test_health_during_counts_by_answer_and_after_the_fault_when_stopped():
    end = 10.0
    probes = [HttpAnswer(0.0, "/health", 200, 0.01),                  # at start: in
              HttpAnswer(2.0, "/health", None, 5.0),                  # no answer
              HttpAnswer(3.0, "/health", 200, 7.5),                   # answered at 10.5 > end, sent 7 s before end
              HttpAnswer(end - T, "/health", 200, 1.5),               # sent exactly T before the end: after the fault
              HttpAnswer(end - T + 0.01, "/health", 200, 1.5),        # sent 0.99 s before: counted by its answer
              HttpAnswer(4.0, "/health", 200, 6.0),                   # answered at 10.0, not after the end
              HttpAnswer(end, "/health", 503, 0.1),                   # at end: in
              HttpAnswer(10.5, "/health", 200, 0.1),                  # after: out
              HttpAnswer(5.0, "/v1/models", 200, 0.1)]
    assert M.health_during(probes, 0.0, end) == {"200": 5, "no answer": 1, "503": 1}
    assert M.health_during(probes, 0.0, end, stopped=True) == {"200": 3, "no answer": 1, "200 after the fault": 2,
                                                               "503": 1}
    assert M.health_during(probes, 0.0, end, "/v1/models") == {"200": 1}


def test_slowest_answers_during_and_first_ok_after():
    probes = [HttpAnswer(1.0, "/health", 200, 0.123), HttpAnswer(2.0, "/health", None, 4.996),
              HttpAnswer(3.0, "/v1/models", 200, 9.0), HttpAnswer(9.0, "/health", 200, 0.5)]
    assert M.slowest(probes, 1.0, 2.0) == 5.0            # round(4.996, 2)
    assert M.slowest(probes, 1.0, 1.0) == 0.12
    assert M.slowest(probes, 1.0, 3.0, "/v1/models") == 9.0
    assert M.slowest(probes, 4.0, 5.0) is None
    assert M.answers_during([(1.0, 200), (2.0, None), (3.0, 200), (3.5, 503), (4.0, 200)], 1.0, 3.5) == \
        {"200": 2, "no answer": 1, "503": 1}
    # first 200 at or after t0 = 2.0 on /health: sent 9.0, answered 9.5 -> 7.5 s (the None one does not count)
    assert M.first_ok_after(probes, 2.0) == 7.5
    assert M.first_ok_after(probes, 1.0) == 0.12          # 1.0 + 0.123 - 1.0, rounded
    assert M.first_ok_after(probes, 3.0, "/v1/models") == 9.0
    assert M.first_ok_after(probes, 9.5) is None
    assert M.first_ok_after([HttpAnswer(5.0, "/health", 204, 0.1)], 0.0) is None


# -- client impact -----------------------------------------------------------------------------------------------

def test_impact_counts_errors_and_compares_ttft_medians():
    inj, rev = 100.0, 110.0
    records = [rec(1, 90.0, ttft=0.2, e2e=1.0), rec(2, 95.0, ttft=0.4, e2e=2.0), rec(3, 98.0, ttft=0.3, e2e=3.0),
               rec(4, 100.0, ttft=1.2, e2e=5.0),                          # sent at the injection: during
               rec(5, 105.0, ttft=2.0, e2e=1.0), rec(6, 110.0, ttft=3.0, e2e=1.0),   # at the revert: during
               rec(7, 111.0, ttft=9.0, e2e=1.0),                          # after: neither
               rec(8, 99.0, error="truncated", status=200, ttft=0.1, e2e=2.0),
               rec(9, 99.5, status=503, e2e=0.1), rec(10, 101.0, error="timeout", status=None)]
    out = M.impact(records, inj, rev)
    # before: 0.2, 0.4, 0.3, 0.1 (the truncated one has a TTFT too) -> median (0.2 + 0.3) / 2 = 0.25
    # during: 1.2, 2.0, 3.0 -> 2.0; inflation 2.0 / 0.25 = 8.0
    # e2e before: ok ones done before 100: 91, 97, 101 (no) -> 1.0, 2.0 -> 1.5
    assert (out.requests, out.failed, out.truncated) == (10, 3, 1)
    assert out.errors == {"truncated": 1, "timeout": 1}
    assert (out.ttft_before_s, out.ttft_during_s, out.ttft_inflation, out.e2e_before_s) == (0.25, 2.0, 8.0, 1.5)
    assert out.error_rate == 0.3
    assert out.to_json() == {"requests": 10, "failed": 3, "error_rate": 0.3, "errors": {"timeout": 1, "truncated": 1},
                             "truncated": 1, "ttft_before_s": 0.25, "ttft_during_s": 2.0, "ttft_inflation": 8.0,
                             "e2e_before_s": 1.5, "e2e_outside_s": 1.0}
    # outside the fault: done before 100 (1.0, 2.0) or sent at or after the revert at 110 (1.0, 1.0) -> 1.0;
    # rec 3 (sent 98, done 101) and rec 4-5 overlap the fault, the truncated one and the 503 are not good
    assert out.e2e_outside_s == 1.0
    assert M.impact(records[2:4], inj, rev).e2e_outside_s is None      # both overlap the fault
    # at the edges: done exactly at the injection overlaps it; sent exactly at the revert is after it; 3 decimals
    assert M.impact([rec(1, 99.5, ttft=0.1, e2e=0.5)], 100.0, 110.0).e2e_outside_s is None
    assert M.impact([rec(1, 110.0, ttft=0.1, e2e=1.23456)], 100.0, 110.0).e2e_outside_s == 1.235


def test_impact_during_is_at_least_a_second_and_sent_falls_back_to_scheduled():
    # the revert 0.2 s after the injection: "during" runs to injected + 1.0 = 101.0
    records = [rec(1, 99.0, ttft=0.5, e2e=0.5), rec(2, 100.9, ttft=1.5), rec(3, 101.0, ttft=2.5),
               rec(4, 101.1, ttft=9.0)]
    unsent = rec(5, None, ttft=4.5, scheduled=100.5)       # never sent: its schedule places it
    out = M.impact([*records, unsent], 100.0, 100.2)
    assert (out.ttft_before_s, out.ttft_during_s) == (0.5, 2.5)       # median(1.5, 2.5, 4.5)
    # done exactly at the injection (99.5 + 0.5 = 100.0) is not before it
    assert M.impact([rec(1, 99.5, ttft=0.1, e2e=0.5)], 100.0, 110.0).e2e_before_s is None
    assert M.impact([rec(1, 99.5, ttft=0.1, e2e=0.4999)], 100.0, 110.0).e2e_before_s == 0.5   # round(0.4999, 3)
    empty = M.impact([], 100.0, 110.0)
    assert (empty.error_rate, empty.ttft_before_s, empty.ttft_during_s, empty.ttft_inflation) == (0.0, None, None, None)


@pytest.mark.parametrize("before, during, inflation", [(None, 1.0, None), (0.0, 1.0, None), (0.5, None, None),
                                                       (0.3, 1.0, 3.33), (2.0, 0.0, 0.0)])
def test_ttft_inflation(before, during, inflation):
    assert M.Impact(ttft_before_s=before, ttft_during_s=during).ttft_inflation == inflation


def test_recovery_is_the_first_good_request_sent_after_the_fault():
    records = [rec(1, 109.0, e2e=0.5), rec(2, 110.0, e2e=2.0), rec(3, 111.0, e2e=0.25),
               rec(4, 110.5, e2e=0.1, status=503), rec(5, 110.2, e2e=None)]
    # sent at or after 110: ends at 112.0 and 111.25 -> 1.25 s
    assert M.recovery(records, 110.0) == 1.25
    assert M.recovery(records[:1], 110.0) is None


def test_in_flight_the_requests_the_fault_caught():
    inj = 100.0
    records = [rec(1, 99.0, e2e=0.5),                                   # ended before: not caught
               rec(2, 99.0, e2e=1.0),                                   # ended at the injection: not caught
               rec(3, 99.0, e2e=2.0, out=16),                           # whole
               rec(4, 99.5, e2e=3.0, out=15),                           # ok, cut short
               rec(5, inj + M.CAUGHT_AFTER_S - 0.01, error="stream_cut", e2e=0.1),
               rec(6, inj + M.CAUGHT_AFTER_S, e2e=0.1),                 # sent 1 s after: not caught
               rec(7, 99.9, status=503, e2e=0.2), rec(8, 99.9, e2e=None, error="timeout"),
               rec(9, 99.9, e2e=1.0, out=None), rec(10, None)]
    # caught: 3, 4, 5, 7 (99.9 + 0.2 = 100.1 > 100), 8 (no end), 9
    assert M.in_flight(records, inj) == {"count": 6, "ok": 3, "whole": 1,
                                         "errors": {"HTTP 503": 1, "stream_cut": 1, "timeout": 1}}


# -- guard -------------------------------------------------------------------------------------------------------

def test_stacks_captured():
    text = "=== pid 12 (engine_core): captured\n...\n=== pid 13 (api_server): failed\n=== pid 14 (rank): captured"
    assert M.stacks_captured(text) == {12, 14}


def test_guard_outcome():
    events = [fired("not_serving", 95.0), fired("not_serving", 104.0)]
    actions = [(99.0, {"guard": "kill", "verdict": "old"}),
               (105.0, {"guard": "stacks", "verdict": "not_serving", "status": "captured",
                        "processes": {"engine": "captured"}, "diverging": ["rank 1"]}),
               (106.25, {"guard": "kill", "verdict": "not_serving", "killed": 3, "survivors": [7]})]
    out = M.guard_outcome(actions, events, 100.0, exit_code=3, tree_left=1, signalled=[7, 8], captured={8, 9})
    # verdict 104 - 100 = 4; stacks 105 - 100 = 5; kill 106.25 - 100 = 6.25, after the verdict 2.25
    assert out == {"acted_on": "not_serving", "verdict_s": 4.0, "evidence_s": 4.0, "exit": 3, "tree_left": 1,
                   "signalled_stacks": [8],
                   "stacks": {"status": "captured", "processes": {"engine": "captured"}, "diverging": ["rank 1"],
                              "after_s": 5.0},
                   "kill": {"killed": 3, "survivors": 1, "after_s": 6.25, "after_verdict_s": 2.25}}
    nothing = M.guard_outcome([], [], 100.0, exit_code=None, tree_left=0, signalled=[], captured=set())
    assert nothing == {"acted_on": None, "verdict_s": None, "evidence_s": None, "stacks": None, "kill": None,
                       "exit": None, "tree_left": 0, "signalled_stacks": []}
    # not_serving fired on one probe (104) and its evidence, the second, held at 105.5: guard's kill at 106.25 is
    # 106.25 - 105.5 = 0.75 s after the evidence, what guard waited for (not 2.25 s after the firing)
    later = M.guard_outcome(actions, [fired("not_serving", 104.0, held=False),
                                      VerdictEvent("evidence_held", "not_serving", 105.5, 103.0)],
                            100.0, exit_code=3, tree_left=0, signalled=[], captured=set())
    assert (later["verdict_s"], later["evidence_s"], later["kill"]["after_verdict_s"]) == (4.0, 5.5, 0.75)
    only_stacks = M.guard_outcome([(101.0, {"guard": "stacks", "verdict": "x"})], [], 100.0, exit_code=0,
                                  tree_left=0, signalled=[], captured=set())
    assert only_stacks["acted_on"] == "x" and only_stacks["stacks"] == {"status": None, "processes": {},
                                                                         "diverging": [], "after_s": 1.0}
    unfired = M.guard_outcome([(101.0, {"guard": "kill", "verdict": "x"})], [], 100.0, exit_code=0, tree_left=0,
                              signalled=[], captured=set())
    assert unfired["kill"] == {"killed": 0, "survivors": 0, "after_s": 1.0, "after_verdict_s": None}


# -- clearances, stored details, thresholds, exit words ----------------------------------------------------------

def test_clearances_from_the_end_of_the_fault():
    events = [fired("a", 99.0), cleared("a", 99.5), fired("a", 101.0), cleared("a", 100.5), cleared("a", 112.25),
              fired("b", 102.0), cleared("b", 105.0), fired("c", 103.0), cleared("c", 120.0)]
    # a: the first cleared at or after its firing (101): 112.25 - 110 = 2.25 (the 100.5 one is before it)
    # b: cleared at 105, before the revert: 0.0, never negative; c fired: 120 - 110 = 10
    assert M.clearances(events, 100.0, 110.0) == {"a": 2.25, "b": 0.0, "c": 10.0}
    assert M.clearances([fired("a", 101.0)], 100.0, 110.0) == {}
    assert M.clearances([fired("a", 101.0), cleared("a", 101.0)], 100.0, 100.5) == {"a": 0.5}   # cleared at its firing


def test_resumed_is_the_first_token_a_request_held_across_the_fault_got_after_it():
    from servewatch.load.records import RequestRecord

    def rec(sent, e2e, chunks):
        r = RequestRecord(id=0, scheduled=sent, prompt_tokens_target=1, max_tokens=9, sent=sent, e2e_s=e2e)
        r.chunk_t_s, r.chunk_tokens = [t for t, _ in chunks], [k for _, k in chunks]
        return r

    held = rec(100.0, 20.0, [(1.0, 1), (2.0, 1), (15.0, 0), (15.25, 2), (20.0, 1)])   # tokens again at 115.25
    earlier = rec(101.0, 20.0, [(1.0, 1), (14.5, 1)])                               # at 115.5
    after = rec(110.5, 1.0, [(0.1, 1)])          # sent after the fault's end (110): its first token says nothing
    ended = rec(100.0, 5.0, [(1.0, 1)])          # ended before the fault's end
    assert M.resumed([held, earlier, after, ended], 110.0) == 5.25
    assert M.resumed([after, ended], 110.0) is None
    assert M.resumed([rec(100.0, 10.0, [(10.0, 1)])], 110.0) == 0.0     # a token at the end itself
    assert M.resumed([rec(100.0, 12.0, [(12.0, 0)])], 110.0) is None    # a chunk with no token is no progress
    assert M.resumed([rec(None, None, [])], 110.0) is None


def test_stored_details_from_the_line_or_the_bundle(tmp_path):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "incident.json").write_text(json.dumps({"verdicts": [
        {"name": "other", "details": {"threshold_s": 1}},
        {"name": "process_exit", "details": {"exit_code": None, "exit_signal": 9}}]}))
    events = [fired("process_exit", 99.0, details={"exit_code": 1}), fired("process_exit", 101.0, bundle=str(bundle))]
    assert M.stored_details(events, 100.0, "process_exit") == {"exit_code": None, "exit_signal": 9}
    assert M.reported_exit(events, 100.0) == {"exit_code": None, "exit_signal": 9}
    assert M.stored_details(events, 98.0, "process_exit") == {"exit_code": 1}     # the line's own
    assert M.stored_details(events, 100.0, "absent") is None
    assert M.stored_details([fired("x", 101.0)], 100.0, "x") is None               # no details, no bundle
    assert M.stored_details([fired("x", 101.0, bundle=str(tmp_path / "gone"))], 100.0, "x") is None
    assert M.stored_details([fired("x", 101.0, bundle=str(bundle))], 100.0, "x") is None   # not in the bundle
    (bundle / "incident.json").write_text(json.dumps({"verdicts": [{"name": "x"}]}))
    assert M.stored_details([fired("x", 101.0, bundle=str(bundle))], 100.0, "x") == {}
    (bundle / "incident.json").write_text("{")
    assert M.stored_details([fired("x", 101.0, bundle=str(bundle))], 100.0, "x") is None
    assert M.reported_exit([fired("x", 101.0)], 100.0) is None


def test_thresholds_from_threshold_s_or_bound_s():
    events = [fired("a", 101.0, details={"threshold_s": 2.00049}), fired("b", 101.0, details={"bound_s": 30}),
              fired("c", 101.0, details={"threshold_s": "2", "bound_s": 4.5}), fired("d", 101.0, details={})]
    assert M.thresholds(events, 100.0, ["a", "b", "c", "d", "e"]) == {"a": 2.0, "b": 30.0, "c": 4.5}
    both = [fired("a", 101.0, details={"threshold_s": 1.0, "bound_s": 9.0})]
    assert M.thresholds(both, 100.0, ["a"]) == {"a": 1.0}


@pytest.mark.parametrize("args, kw, words", [
    ((0,), {}, "exit code 0"), ((3,), {}, "exit code 3"), ((-9,), {}, "killed by SIGKILL"),
    ((None,), {"exit_code": 1}, "exit code 1"), ((None,), {"exit_signal": 15}, "killed by SIGTERM"),
    ((None,), {"exit_signal": 99}, "killed by signal 99"), ((), {}, "still running")])
def test_exit_words(args, kw, words):
    assert M.exit_words(*args, **kw) == words


# -- boundaries and precision the first mutation run left open (scripts/mutation.sh) -------------------------------

def test_kubelet_restart_when_every_answer_is_before_a_probe():
    # probe 10 reads 10.0 (one failure); probes 20 and 30 find no answer at or after them: skipped, not an error
    assert M.kubelet_restart([(10.0, False)], 0.0, 30.0) is None


def test_clearances_a_firing_at_the_injection_counts_and_a_second_one_does_not():
    events = [fired("a", 100.0), cleared("a", 112.256), fired("a", 113.0), cleared("a", 118.0)]
    # the firing at the injection itself counts; its clearance 112.256 - 110 = 2.256 -> 2.26 (two decimals);
    # the second firing (113) does not replace it
    assert M.clearances(events, 100.0, 110.0) == {"a": 2.26}


def test_guard_outcome_at_the_injection_and_to_two_decimals():
    events = [fired("not_serving", 100.0)]
    actions = [(100.0, {"guard": "stacks", "verdict": "not_serving"}),
               (106.256, {"guard": "kill", "verdict": "not_serving", "killed": 1})]
    out = M.guard_outcome(actions, events, 100.0, exit_code=0, tree_left=0, signalled=[], captured=set())
    # an action and a firing at the injection itself count: verdict 0 s, stacks 0 s
    assert (out["acted_on"], out["verdict_s"], out["stacks"]["after_s"]) == ("not_serving", 0.0, 0.0)
    # kill 106.256 - 100 = 6.256 -> 6.26; after the verdict the same
    assert (out["kill"]["after_s"], out["kill"]["after_verdict_s"]) == (6.26, 6.26)
    events = [fired("x", 104.123)]
    actions = [(105.257, {"guard": "stacks", "verdict": "x"}), (106.256, {"guard": "kill", "verdict": "x"})]
    out = M.guard_outcome(actions, events, 100.0, exit_code=0, tree_left=0, signalled=[], captured=set())
    # verdict 4.123 -> 4.12; stacks 5.257 -> 5.26; kill after the verdict 106.256 - 104.123 = 2.133 -> 2.13
    assert (out["verdict_s"], out["stacks"]["after_s"], out["kill"]["after_verdict_s"]) == (4.12, 5.26, 2.13)


def test_impact_counts_each_error_class_and_places_a_request_by_when_it_was_sent():
    records = [rec(1, 99.0, error="truncated", e2e=1.0), rec(2, 99.0, error="truncated", e2e=1.0),
               rec(3, 99.0, error="timeout"),
               rec(4, 100.5, ttft=0.12346, scheduled=99.0),      # scheduled before, sent after: during
               rec(5, 99.5, ttft=0.56789)]
    out = M.impact(records, 100.0, 110.0)
    assert (out.failed, out.truncated, out.errors) == (3, 2, {"timeout": 1, "truncated": 2})
    # medians to four decimals: 0.12346 -> 0.1235, 0.56789 -> 0.5679; 3 of 5 failed
    assert (out.ttft_before_s, out.ttft_during_s) == (0.5679, 0.1235)
    one_third = M.Impact(requests=3, failed=1)
    assert one_third.to_json()["error_rate"] == 0.333            # three decimals


def test_in_flight_counts_each_error_class():
    records = [rec(1, 99.0, error="stream_cut", e2e=2.0), rec(2, 99.5, error="stream_cut", e2e=2.0)]
    assert M.in_flight(records, 100.0)["errors"] == {"stream_cut": 2}


def test_policy_at_the_injection_and_to_its_decimals():
    # a restart verdict fired at the injection itself acts at 0 s
    assert M.policy("restart", [fired("engine_dead", 100.0)], 100.0, 200.0)["acted_s"] == 0.0
    # acted 106.256 - 100 = 6.256 -> 6.26; a kubelet 6.256 + 30 = 36.256 -> 36.3 (one decimal)
    out = M.policy("restart", [fired("engine_dead", 106.256)], 100.0, 200.0)
    assert (out["acted_s"], out["kubelet_by_s"]) == (6.26, 36.3)
    # serve's livez failing at the injection itself; livez 503 at 103.256 -> 3.26
    assert M.policy("restart", [], 100.0, 200.0, livez=[(100.0, 503)])["livez_failed_s"] == 0.0
    assert M.policy("restart", [], 100.0, 200.0, livez=[(103.256, 503)])["livez_failed_s"] == 3.26
    # the verdict the recorder's lines say acted is kept: not replaced by an earlier restart verdict's name
    events = [fired("not_serving", 90.0, held=False), fired("engine_dead", 102.0)]
    assert M.policy("restart", events, 100.0, 200.0, livez=[(103.0, 503)])["acted_on"] == "engine_dead"


def test_recovery_counts_a_request_sent_at_the_revert_and_two_decimals():
    assert M.recovery([rec(1, 110.0, e2e=1.256), rec(2, 110.5, e2e=1.0)], 110.0) == 1.26    # 111.256 - 110


def test_reported_exit_reads_the_exit_code(tmp_path):
    events = [fired("process_exit", 100.0, details={"exit_code": 1, "exit_signal": None})]
    assert M.reported_exit(events, 100.0) == {"exit_code": 1, "exit_signal": None}
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "incident.json").write_text("{}")                  # no verdicts in it
    assert M.stored_details([fired("x", 101.0, bundle=str(bundle))], 100.0, "x") is None


def test_guard_outcome_times_the_evidence():
    from servewatch.detectors.verdict import ACTION_CLASSES
    assert M._classes_of("not_serving") == ("restart",)
    assert tuple(M._classes_of("nonesuch")) == tuple(M._classes_of(None)) == tuple(ACTION_CLASSES)   # every class
    kill = (107.0, {"guard": "kill", "verdict": "not_serving", "killed": 1})
    events = [fired("not_serving", 104.0, held=False), VerdictEvent("evidence_held", "not_serving", 106.256, 104.0)]
    out = M.guard_outcome([kill], events, 100.0, exit_code=3, tree_left=0, signalled=[], captured=set())
    # the evidence held 106.256 - 100 = 6.256 -> 6.26 s after the injection; the verdict 4 s
    assert (out["verdict_s"], out["evidence_s"]) == (4.0, 6.26)
    # evidence held at the injection itself, of a verdict fired before it: 0 s
    events = [fired("not_serving", 99.0, held=False), VerdictEvent("evidence_held", "not_serving", 100.0, 99.0)]
    out = M.guard_outcome([kill], events, 100.0, exit_code=3, tree_left=0, signalled=[], captured=set())
    assert (out["verdict_s"], out["evidence_s"]) == (None, 0.0)


# -- the recorder's own sampling gaps, as it said them on stderr (issue 50: a starved recorder) -------------

T0 = 1_796_467_630.25          # an epoch with whole milliseconds: the line's stamp holds it exactly


def test_the_drill_reads_the_gaps_the_recorder_said_and_measures_them_over_a_step():
    from servewatch.clock import iso8601
    from servewatch.timeline.gaps import Gap, starved_words

    lines = ["servewatch watch: recording http://127.0.0.1:8000: /health 200, /metrics vllm (v1)",
             "servewatch watch: " + starved_words(Gap(T0, T0 + 7.0), 0.5),
             "servewatch watch: recorder starved: 7.0 s gap at not-a-time, interval 0.5 s",     # skipped, not the end
             "servewatch guard: " + starved_words(Gap(T0 + 20.0, T0 + 21.3), 0.5)]
    assert lines[1] == f"servewatch watch: recorder starved: 7.0 s gap at {iso8601(T0)}, interval 0.5 s"
    gaps = M.starved_gaps(lines)
    assert [(g.start, round(g.seconds, 3)) for g in gaps] == [(T0, 7.0), (T0 + 20.0, 1.3)]
    assert M.starved_during(gaps, T0 - 5, T0 + 30) == 7.0
    assert M.starved_during(gaps, T0 + 7.0, T0 + 30) == 7.0          # touching its end
    assert M.starved_during(gaps, T0 + 7.001, T0 + 30) == 1.3
    assert M.starved_during(gaps, T0 + 7.001, T0 + 19.999) == 0.0
    assert M.starved_during([], T0, T0 + 30) == 0.0
    assert M.frozen_during(gaps, T0 + 3.0, T0 + 30) == 4.0 + 1.3      # each clipped to the step, summed
    assert M.frozen_during(gaps, T0 + 21.3, T0 + 30) == 0.0
    # to a tenth of a second, as the recorder says them
    assert M.starved_during([Gap(0.0, 7.04)], 0.0, 10.0) == 7.0 and M.frozen_during([Gap(0.0, 7.04)], 0.0, 10.0) == 7.0


def test_guard_outcome_keeps_what_guards_exit_line_said():
    """`said`: the why of guard's exit line (its last), not of another line; absent without one or without words."""
    events = [fired("gpu_fault", 101.0)]
    lines = [(101.5, {"guard": "stacks", "why": "stacks of the tree"}),
             (102.0, {"guard": "exit", "why": "hardware: GPU 1 Xid 79, do not restart on this GPU"})]
    out = M.guard_outcome(lines, events, 100.0, exit_code=6, tree_left=0, signalled=[], captured=set())
    assert out["said"] == "hardware: GPU 1 Xid 79, do not restart on this GPU"
    assert "said" not in M.guard_outcome(lines[:1], events, 100.0, exit_code=6, tree_left=0, signalled=[],
                                         captured=set())
    wordless = [(102.0, {"guard": "exit", "why": None})]
    assert "said" not in M.guard_outcome(wordless, events, 100.0, exit_code=6, tree_left=0, signalled=[], captured=set())
