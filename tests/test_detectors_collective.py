"""collective_hang from the real gloo dumps (tests/fixtures/flight_recorder/) and NCCL's documented RAS reports,
through the timeline events a bundle keeps."""

from __future__ import annotations

from pathlib import Path

from servewatch.bundle.serialize import sample_from_dict, sample_to_dict
from servewatch.detectors import collective, registry
from servewatch.detectors.config import DetectorConfig
from servewatch.sources import collective_events, flight_recorder as fr, nccl_ras
from servewatch.timeline.window import Window

FR = Path(__file__).parent / "fixtures" / "flight_recorder"
RAS = Path(__file__).parent / "fixtures" / "nccl_ras"


def fr_events(mode: str, t: float):
    dumps = {r: fr.parse_dump((FR / f"gloo_{mode}_rank{r}.json").read_bytes()) for r in (0, 1)}
    return collective_events.from_flight_recorder(fr.analyse(dumps), t)


def ras_events(name: str, t: float):
    return collective_events.from_ras(nccl_ras.parse((RAS / name).read_text()), t)


def detect(events):
    window = Window.from_samples(events)
    return collective.detect(window, DetectorConfig())


def test_the_real_gloo_hang_names_rank_1_behind_at_collective_5():
    (verdict,) = detect(fr_events("behind", 100.0))
    assert verdict.name == "collective_hang"
    assert verdict.details == {"cause": "behind", "evidence": "flight_recorder", "sources_disagree": False,
                               "rank": 1, "seq": 5, "group": 0, "behind_at": 4, "op": "all_reduce"}
    assert verdict.why == ("rank 1 behind in group 0: rank 0 waiting in collective 5 (all_reduce), rank 1 last "
                           "entered 4 — Flight Recorder; RAS: not read")


def test_held_across_observations_for_the_restart():
    spec = registry.spec("collective_hang")
    (early,) = detect(fr_events("behind", 100.0) + fr_events("behind", 110.0))
    assert early.onset == 100.0 and not spec.evidence_holds(early)
    (held,) = detect(fr_events("behind", 100.0) + fr_events("behind", 110.0) + fr_events("behind", 131.0))
    assert held.since_s == 31.0 and spec.evidence_holds(held)


def test_the_real_mismatch_is_named():
    (verdict,) = detect(fr_events("mismatch", 50.0))
    assert verdict.details["cause"] == "mismatch" and verdict.details["seq"] == 5
    assert verdict.why.startswith("ranks 0 and 1 issued different collectives at sequence 5 in group 0")


def test_ras_alone_and_sources_that_disagree():
    # an unresponsive rank alone is a stalled process (rank_stalled's), not a collective it did not enter
    assert detect(ras_events("docs_json_2.29.1.json", 10.0)) == []
    (agrees,) = detect(fr_events("behind", 10.0) + collective_events.from_ras(nccl_ras.RasReport(
        "json", "2.29.1", True, (nccl_ras.RasComm("0x1", "0x1", 2, (nccl_ras.RasRank(0), nccl_ras.RasRank(
            1, state="unresponsive"))),)), 10.0))
    assert agrees.why.endswith("RAS agrees (rank 1 unresponsive)") and agrees.details["sources_disagree"] is False
    (both,) = detect(fr_events("behind", 10.0) + ras_events("docs_text_running_ok.txt", 10.0))
    assert both.details["sources_disagree"] is True and both.why.endswith("RAS sees no rank behind")


def test_ras_counts_behind():
    (verdict,) = detect(ras_events("docs_text_mismatch_counts.txt", 10.0))
    assert verdict.details["cause"] == "behind" and verdict.details["rank"] == 0
    assert verdict.why == ("rank 0 behind: at collective count 6649, other ranks at 6650 — RAS; "
                           "Flight Recorder: not read")


def test_agreeing_ranks_clear_it():
    dumps = {r: fr.parse_dump((FR / "gloo_behind_rank0.json").read_bytes()) for r in (0, 1)}
    agree = collective_events.from_flight_recorder(fr.analyse(dumps), 20.0)
    assert detect(fr_events("behind", 10.0) + agree) == []


def test_the_events_survive_a_bundle_so_verify_recomputes_the_same_verdict():
    events = fr_events("behind", 100.0) + fr_events("behind", 131.0)
    back = [sample_from_dict(sample_to_dict(e)) for e in events]
    assert back == events
    assert detect(back) == detect(events)


def _tree(t: float):
    from servewatch.timeline.samples import ProcessMember, ProcessSample

    members = (ProcessMember(700, 1.0, "api", "python3", "sleeping"),
               ProcessMember(811, 2.0, "worker", "VLLM::Worker_TP0", "sleeping", ppid=700),
               ProcessMember(812, 2.0, "worker", "VLLM::Worker_TP1", "running", ppid=700))
    return ProcessSample(t, 700, 1.0, True, members)


def test_the_rank_behind_is_joined_by_its_pid_to_the_rank_model():
    dumps = {r: fr.parse_dump((FR / f"gloo_behind_rank{r}.json").read_bytes()) for r in (0, 1)}
    events = collective_events.from_flight_recorder(fr.analyse(dumps), 10.0, {0: 811, 1: 812})
    (verdict,) = detect([_tree(9.5), *events])
    assert verdict.why == ("rank 1 behind in group 0: rank 0 waiting in collective 5 (all_reduce), rank 1 last "
                           "entered 4; rank 1 is TP rank 1 of 2 (VLLM::Worker_TP1, pid 812) — Flight Recorder; "
                           "RAS: not read")
    # kept through a bundle: the pid is a number, and the join is made again from the stored process sample
    stored = [sample_from_dict(sample_to_dict(s)) for s in [_tree(9.5), *events]]
    assert detect(stored)[0].why == verdict.why
    # a pid the tree does not hold: no join, no guess
    events = collective_events.from_flight_recorder(fr.analyse(dumps), 10.0, {1: 999})
    assert "; rank 1 is" not in detect([_tree(9.5), *events])[0].why


def test_ras_ranks_are_joined_only_when_pid_and_host_are_the_watched_trees():
    report = nccl_ras.parse((RAS / "docs_text_mismatch_counts.txt").read_text())
    here = collective_events.from_ras(report, 10.0, lambda pid, host: (pid, host) == (483072, "172.16.64.210"))
    elsewhere = collective_events.from_ras(report, 10.0, lambda pid, host: False)
    assert [e.fields.get("pid") for e in here if e.fields["state"] == "behind"] == [483072]
    assert [e.fields.get("pid") for e in elsewhere if e.fields["state"] == "behind"] == [None]
