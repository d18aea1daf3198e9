"""Values of servewatch/detectors/verdict.py, one by one (issue 40: every survivor of scripts/mutation.sh
killed by a test of a value): a verdict's age, the evidence an action waits for (the boundaries just under, at
and just over, read from the spec's own fields), the evidence in words, and the exact words of a bad spec."""

import pytest

from servewatch.detectors.verdict import (
    ACTION_CLASSES, FINDING, INCIDENT, PAGE, RESTART, SEVERITIES, RunbookBranch, Verdict, VerdictSpec,
)
from servewatch.kinds import SOURCE_KINDS

BRANCH = RunbookBranch(meaning="m", check_next=("c",), expected_range="r", safe_action="s", rollback="b",
                       restart_destroys="d", by_cause={"slots": "the slots branch", "None": "a cause named None"})


def spec(**kw) -> VerdictSpec:
    args = dict(name="x_stalled", detect=lambda w, c: [], kind=INCIDENT, severity="page", summary="s",
                runbook=BRANCH, evidence_sources=("probe",), action=RESTART)
    args.update(kw)
    return VerdictSpec(**args)


def verdict(t: float, onset: float, **details) -> Verdict:
    return Verdict(name="x_stalled", t=t, onset=onset, why="w", details=details)


def test_since_s_is_the_time_from_onset_to_the_newest_sample():
    # 107.5 - 100.25 = 7.25
    assert verdict(107.5, 100.25).since_s == 7.25


def test_for_cause_takes_the_branch_of_the_cause_and_none_without_one():
    assert BRANCH.for_cause("slots") == "the slots branch"
    assert BRANCH.for_cause("kv") is None
    # no cause is no branch, even where a branch is keyed by the word "None"
    assert BRANCH.for_cause(None) is None


def test_evidence_holds_at_hold_s_and_not_just_under():
    s = spec(hold_s=30.0)
    assert not s.evidence_holds(verdict(100.0 + s.hold_s - 0.001, 100.0))   # held 29.999 s
    assert s.evidence_holds(verdict(100.0 + s.hold_s, 100.0))               # held 30 s: >= holds
    assert s.evidence_holds(verdict(100.0 + s.hold_s + 0.001, 100.0))


def test_evidence_holds_at_the_probe_count_and_not_one_under():
    s = spec(probes=2)
    assert not s.evidence_holds(verdict(1.0, 1.0, failed_probes=s.probes - 1))
    assert s.evidence_holds(verdict(1.0, 1.0, failed_probes=s.probes))
    assert s.evidence_holds(verdict(1.0, 1.0, failed_probes=s.probes + 1))
    assert not s.evidence_holds(verdict(1.0, 1.0))                          # no count: no evidence
    assert not s.evidence_holds(verdict(1.0, 1.0, failed_probes="2"))       # not an int count


def test_evidence_holds_needs_both_the_hold_and_the_probes():
    s = spec(hold_s=10.0, probes=1)
    assert not s.evidence_holds(verdict(105.0, 100.0, failed_probes=3))    # 5 s < 10 s
    assert s.evidence_holds(verdict(110.0, 100.0, failed_probes=1))
    assert spec().evidence_holds(verdict(1.0, 1.0))                         # nothing asked: the verdict is enough


def test_evidence_words():
    assert spec().evidence_words() == ""
    assert spec(hold_s=30.0).evidence_words() == "held 30 s"
    assert spec(hold_s=2.5, probes=1).evidence_words() == "held 2.5 s, a probe with no token"
    assert spec(probes=3).evidence_words() == "3 probes in a row with no token"


def test_a_bad_spec_names_every_problem_in_its_own_words():
    with pytest.raises(ValueError) as e:
        spec(name="Bad-Name", action="reboot", hold_s=-1.0, kind="alarm", severity="loud",
             evidence_sources=("probe", "telepathy"))
    assert str(e.value) == (
        "verdict 'Bad-Name': "
        f"action 'reboot' is not one of {', '.join(ACTION_CLASSES)}; "
        "hold_s and probes are never negative; "
        f"kind 'alarm' is not {INCIDENT!r} or {FINDING!r}; "
        "severity 'loud' is not one of page, ticket, info; "
        "the name must be a lower-case identifier; "
        "unknown evidence sources ['telepathy']")
    assert ", ".join(ACTION_CLASSES) == "restart, drain, page, info"
    assert SEVERITIES == ("page", "ticket", "info")


@pytest.mark.parametrize("name", ["Upper_case", "not-an-identifier", "9lives"])
def test_the_name_is_a_lower_case_identifier(name):
    # each fails one of the two checks (isidentifier, islower) or both
    with pytest.raises(ValueError, match="the name must be a lower-case identifier"):
        spec(name=name)


def test_negative_probes_are_refused_and_a_good_spec_is_not():
    with pytest.raises(ValueError, match="^verdict 'x_stalled': hold_s and probes are never negative$"):
        spec(probes=-1)
    assert spec(kind=FINDING, severity="ticket", action=PAGE, evidence_sources=SOURCE_KINDS).probes == 0


def test_action_by_and_actions_go_together_and_each_chosen_class_is_known():
    with pytest.raises(ValueError, match="^verdict 'x_stalled': action_by and actions go together$"):
        spec(action_by="per fault")
    with pytest.raises(ValueError, match="^verdict 'x_stalled': action_by and actions go together$"):
        spec(actions=(RESTART, PAGE))
    with pytest.raises(ValueError, match="^verdict 'x_stalled': action 'reboot' is not one of restart, drain, page, "
                                         "info$"):
        spec(action_by="per fault", actions=(RESTART, "reboot"))
    assert spec(action_by="per fault", actions=(RESTART, PAGE)).actions == (RESTART, PAGE)


def test_evidence_holds_needs_each_required_detail_to_be_true():
    required = spec(requires=("slots_full", "kv_full"))
    assert required.evidence_holds(verdict(10.0, 0.0, slots_full=True, kv_full=True)) is True
    assert required.evidence_holds(verdict(10.0, 0.0, slots_full=True, kv_full=1)) is False     # True, not truthy
    assert required.evidence_holds(verdict(10.0, 0.0, slots_full=True)) is False
    assert required.evidence_holds(verdict(10.0, 0.0, kv_full=True)) is False
    # a firing that chooses its own action but says none is reported, not acted on
    chooser = spec(action_by="per fault", actions=(RESTART, PAGE))
    assert chooser.evidence_holds(Verdict("x_stalled", 10.0, 0.0, "w", action=PAGE)) is True
    assert chooser.evidence_holds(Verdict("x_stalled", 10.0, 0.0, "w")) is False


def test_settings_helpers_word_each_value_out_of_its_range():
    import dataclasses

    from servewatch.detectors.verdict import Settings

    @dataclasses.dataclass(frozen=True)
    class Toy(Settings):
        share_a: float = 0.5
        share_b: float = 1.0
        count_a: float = 1.0
        low: float = 2.0
        high: float = 3.0

    good = Toy()
    assert good.shares("share_a", "share_b") == [] and good.counts("count_a") == [] and good.ordered("low", "high") == []
    assert Toy(share_a=0.0).shares("share_a") == []                                  # 0 and 1 are shares
    assert Toy(share_a=-0.25, share_b=1.5).shares("share_a", "share_b") == [
        "share_a is a share from 0 to 1, not -0.25", "share_b is a share from 0 to 1, not 1.5"]
    assert Toy(count_a=0.5).counts("count_a") == ["count_a counts at least 1, not 0.5"]
    assert Toy(count_a=0.0).counts("count_a") == ["count_a counts at least 1, not 0"]
    assert Toy(low=3.0).ordered("low", "high") == []                                 # equal is in order
    assert Toy(low=3.5).ordered("low", "high") == ["low (3.5) is above high (3)"]

    class Config:                       # a DetectorConfig holding some of the fields: the rest keep their defaults
        share_a = 0.75
        low = 1.0
    assert Toy.of(Config()) == Toy(share_a=0.75, low=1.0)
    assert Toy.of(object()) == Toy()
