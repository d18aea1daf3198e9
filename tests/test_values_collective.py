"""Value tests of detectors/collective.py (issue 40): collective_hang as a whole verdict from hand-built collective
events (what servewatch.sources.collective_events puts on the timeline), its onset (the first of the trailing run
of observations that show the same hang: state, rank, sequence and group), the why line's words for each source
and state, the other source's word, and the rank joined by PID to the process tree."""

from __future__ import annotations

from servewatch.detectors import collective as C
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.samples import LogEvent, ProcessMember, ProcessSample
from servewatch.timeline.window import Window

CONFIG = DetectorConfig()


def ev(t, component, state, **fields):
    return LogEvent(t, C.KIND, {"component": component, "state": state, **fields})


def fr(t, state="behind", rank=1, seq=5, group=0, behind_at=4, op="all_reduce", waiting_rank=0, ranks_waiting=1, **kw):
    return ev(t, "flight_recorder", state, rank=rank, seq=seq, group=group, behind_at=behind_at, op=op,
              waiting_rank=waiting_rank, ranks_waiting=ranks_waiting, **kw)


def detect(*events, process=()):
    return C.detect(Window(logs=tuple(sorted(events, key=lambda e: e.t)), process=tuple(process)), CONFIG)


def test_a_held_hang_that_ras_confirms_is_the_whole_verdict():
    events = (fr(100.0), ev(100.0, "flight_recorder", "ok", group=1), fr(110.0), fr(131.0),
              ev(125.0, "ras", "unresponsive", rank=1), LogEvent(140.0, "error", {"component": "ras", "state": "dead"}))
    assert detect(*events) == [Verdict(
        "collective_hang", 131.0, 100.0,
        "rank 1 behind in group 0: rank 0 waiting in collective 5 (all_reduce), rank 1 last entered 4 — Flight "
        "Recorder; RAS agrees (rank 1 unresponsive)",
        (Evidence("log", 100.0, "collective.state", "behind"), Evidence("log", 131.0, "collective.state", "behind"),
         Evidence("log", 125.0, "collective.component", "ras")),
        {"cause": "behind", "evidence": "flight_recorder", "sources_disagree": False, "rank": 1, "seq": 5, "group": 0,
         "behind_at": 4, "op": "all_reduce"})]


def test_the_onset_is_the_first_observation_of_the_same_hang():
    for changed in (dict(seq=6), dict(rank=2), dict(group=3), dict(state="mismatch")):
        v, = detect(fr(100.0, **changed), fr(110.0), fr(120.0))
        assert v.onset == 110.0, changed
        assert v.evidence[0] == Evidence("log", 110.0, "collective.state", "behind")
    # an observation without the hang between breaks the run; op and behind_at are not part of the sameness
    v, = detect(fr(100.0), ev(105.0, "flight_recorder", "ok"), fr(110.0), fr(120.0, op="broadcast", behind_at=3))
    assert (v.onset, v.t) == (110.0, 120.0)
    # one observation: its own time, one evidence
    v, = detect(fr(100.0))
    assert (v.onset, v.evidence) == (100.0, (Evidence("log", 100.0, "collective.state", "behind"),))


def test_only_the_newest_observation_of_a_source_speaks():
    assert detect(fr(100.0), ev(110.0, "flight_recorder", "ok")) == []
    assert detect() == [] and detect(LogEvent(1.0, "stats", {"component": "flight_recorder", "state": "behind"})) == []
    # behind is named before a mismatch of the same observation, whatever their order
    v, = detect(fr(100.0, state="mismatch", rank=3), fr(100.0))
    assert (v.details["cause"], v.details["rank"]) == ("behind", 1)


def test_the_words_for_each_state():
    v, = detect(fr(100.0, ranks_waiting=3, behind_at=None, op=7, group=None))
    assert v.why == ("rank 1 behind: rank 0 and 2 more waiting in collective 5, rank 1 last entered none — Flight "
                     "Recorder; RAS: not read")
    assert v.details == {"cause": "behind", "evidence": "flight_recorder", "sources_disagree": False, "rank": 1,
                         "seq": 5}
    v, = detect(fr(100.0, ranks_waiting=None, group=True, seq=5.0))
    assert v.why.startswith("rank 1 behind: rank 0 waiting in collective 5 (all_reduce), rank 1 last entered 4")
    assert "group" not in v.details and v.details["seq"] == 5
    v, = detect(fr(100.0, state="mismatch", group=2))
    assert v.why == ("ranks 0 and 1 issued different collectives at sequence 5 in group 2 — Flight Recorder; RAS: "
                     "not read")
    v, = detect(ev(100.0, "ras", "behind", rank=0, seq=6650, behind_at=6649, op="all_gather"))
    assert v.why == ("rank 0 behind: at collective count 6649, other ranks at 6650 (all_gather) — RAS; Flight "
                     "Recorder: not read")
    assert v.details == {"cause": "behind", "evidence": "ras", "sources_disagree": False, "rank": 0, "seq": 6650,
                         "behind_at": 6649, "op": "all_gather"}


def test_the_other_sources_word():
    # RAS alone names the hang; the Flight Recorder read but naming nobody disagrees
    v, = detect(ev(100.0, "ras", "behind", rank=0, seq=10, behind_at=9), ev(90.0, "flight_recorder", "ok"))
    assert v.why.endswith("— RAS; Flight Recorder sees no rank behind")
    assert v.details["sources_disagree"] is True
    assert v.evidence[-1] == Evidence("log", 90.0, "collective.component", "flight_recorder")
    # another rank named by the other source
    for state in ("behind", "unresponsive", "dead", "mismatch"):
        v, = detect(fr(100.0), ev(100.0, "ras", state, rank=0))
        assert v.why.endswith(f"— Flight Recorder; RAS says otherwise: rank 0 {state}"), state
        assert v.details["sources_disagree"] is True
    # the same rank dead or behind agrees
    for state in ("behind", "dead"):
        v, = detect(fr(100.0), ev(100.0, "ras", state, rank=1))
        assert v.why.endswith(f"RAS agrees (rank 1 {state})") and v.details["sources_disagree"] is False
    # a mismatch of the same rank is no agreement
    v, = detect(fr(100.0), ev(100.0, "ras", "mismatch", rank=1))
    assert v.why.endswith("RAS says otherwise: rank 1 mismatch")


def member(pid, title, role="other", ppid=None):
    return ProcessMember(pid, 1.0, role, title, "sleeping", ppid=ppid)


def test_the_rank_joined_to_its_process_by_pid():
    tree = ProcessSample(99.0, 800, 1.0, True, (member(800, "python3", "api"), member(812, "helper"),
                                                member(813, "")))
    v, = detect(fr(100.0, pid=812), process=[tree])
    assert "rank 1 last entered 4; rank 1 is pid 812 (helper) — Flight Recorder" in v.why
    v, = detect(fr(100.0, pid=813), process=[tree])
    assert "rank 1 last entered 4; rank 1 is pid 813 — Flight Recorder" in v.why
    for pid in (999, None, "812"):
        v, = detect(fr(100.0, pid=pid), process=[tree])
        assert "last entered 4 — Flight Recorder" in v.why, pid
    v, = detect(fr(100.0, pid=812))
    assert "last entered 4 — Flight Recorder" in v.why
    # the newest process sample is the one read
    old = ProcessSample(50.0, 800, 1.0, True, (member(812, "old title"),))
    v, = detect(fr(100.0, pid=812), process=[old, tree])
    assert "pid 812 (helper)" in v.why


def test_two_ranks_waiting_is_one_more():
    v, = detect(fr(100.0, ranks_waiting=2))
    assert v.why.startswith("rank 1 behind in group 0: rank 0 and 1 more waiting in collective 5 (all_reduce)")
