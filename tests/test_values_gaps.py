"""Values of servewatch/timeline/gaps.py (issue 50 item 8: the recorder's starved gaps, the freeze meter's arithmetic):
the threshold, the gaps overlapping a window (touching counts), the longest, the time frozen, the bundle's form and
the words. Each figure computed by hand beside the assertion."""

from __future__ import annotations

import re

import pytest

from servewatch.timeline import gaps as g
from servewatch.timeline.gaps import (
    Gap, SamplingGaps, across_words, frozen, gaps_from_dict, longest, overlapping, starved_over, starved_words,
)


def test_the_constants_are_the_measured_ones():
    assert (g.ALLOWANCE_S, g.FLOOR_S, g.KEPT) == (0.25, 1.0, 256)


def test_starved_over_is_twice_the_interval_plus_the_allowance_at_least_the_floor():
    assert starved_over(0.5) == 1.25                      # 2 * 0.5 + 0.25
    assert starved_over(2.0) == 4.25                      # 2 * 2.0 + 0.25
    assert starved_over(2.0, 1.0) == 5.0                  # 2 * 2.0 + 1.0
    assert starved_over(0.1) == 1.0                       # 0.45: the floor
    assert starved_over(0.375) == 1.0                     # exactly the floor
    assert starved_over(0.4) == pytest.approx(1.05)


def test_a_gap_is_its_end_less_its_start():
    assert Gap(10.0, 13.5).seconds == 3.5
    with pytest.raises(AttributeError):
        Gap(1.0, 2.0).start = 0.0                         # frozen


def test_overlapping_counts_a_gap_touching_either_end():
    a, b, c, d = Gap(0.0, 5.0), Gap(5.0, 7.0), Gap(10.0, 12.0), Gap(12.5, 20.0)
    assert overlapping([a, b, c, d], 5.0, 10.0) == [a, b, c]     # a ends at since, c starts at until
    assert overlapping([a, b, c, d], 5.01, 9.99) == [b]
    assert overlapping([a, b, c, d], 12.1, 12.4) == []
    assert overlapping([], 0.0, 1.0) == []


def test_longest_is_the_longest_overlapping_and_zero_without_one():
    gaps = [Gap(0.0, 2.0), Gap(3.0, 9.0), Gap(20.0, 21.5)]
    assert longest(gaps, 1.0, 4.0) == 6.0
    assert longest(gaps, 10.0, 20.0) == 1.5               # touching at 20.0
    assert longest(gaps, 10.0, 19.0) == 0.0
    assert longest([], 0.0, 9.0) == 0.0


def test_frozen_sums_each_gap_clipped_to_the_window():
    gaps = [Gap(0.0, 4.0), Gap(6.0, 8.0), Gap(9.0, 15.0), Gap(30.0, 31.0)]
    assert frozen(gaps, 2.0, 10.0) == 5.0                 # 2 (2..4) + 2 (6..8) + 1 (9..10)
    assert frozen(gaps, 10.0, 20.0) == 5.0                # 10..15
    assert frozen(gaps, 16.0, 29.0) == 0.0                # none inside: no negative part counted
    assert frozen([Gap(5.0, 6.0)], 0.0, 100.0) == 1.0
    assert frozen([], 0.0, 1.0) == 0.0


def test_sampling_gaps_keep_only_the_starved_ones_and_count_every_beat():
    s = SamplingGaps(0.5)
    assert (s.interval_s, s.threshold_s, s.beats) == (0.5, 1.25, 0)
    assert s.beat(100.0) is None                          # the first wake: nothing before it
    assert s.beat(101.25) is None                         # exactly the threshold: not starved
    gap = s.beat(102.75)                                  # 1.5 s > 1.25 s
    assert gap == Gap(101.25, 102.75)
    assert s.beat(103.0) is None
    assert s.beats == 4
    assert list(s.gaps) == [Gap(101.25, 102.75)]
    assert SamplingGaps(0.5, allowance_s=1.0).threshold_s == 2.0


def test_sampling_gaps_keep_the_newest_kept():
    s = SamplingGaps(0.1, keep=2)
    for t in (0.0, 2.0, 4.0, 6.0):
        s.beat(t)
    assert list(s.gaps) == [Gap(2.0, 4.0), Gap(4.0, 6.0)]
    assert SamplingGaps(0.1).gaps.maxlen == 256


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_a_sampling_interval_must_be_positive(interval):
    with pytest.raises(ValueError) as bad:
        SamplingGaps(interval)
    assert str(bad.value) == "the sampling interval must be positive"


def test_across_is_the_longest_starved_gap_in_the_window():
    s = SamplingGaps(0.5)
    for t in (0.0, 2.0, 2.5, 6.5, 7.0, 9.0):              # gaps 0..2 (2 s), 2.5..6.5 (4 s), 7..9 (2 s)
        s.beat(t)
    assert s.across(0.0, 10.0) == Gap(2.5, 6.5)
    assert s.across(7.5, 8.0) == Gap(7.0, 9.0)
    assert s.across(1.0, 2.2) == Gap(0.0, 2.0)
    assert s.across(20.0, 30.0) is None


def test_to_dict_holds_the_interval_threshold_and_the_gaps_in_the_window():
    s = SamplingGaps(0.5)
    for t in (0.0, 2.0, 2.5, 6.5):
        s.beat(t)
    both = [{"start_t": 0.0, "end_t": 2.0}, {"start_t": 2.5, "end_t": 6.5}]
    assert s.to_dict(None, None) == {"interval_s": 0.5, "threshold_s": 1.25, "gaps": both}
    assert s.to_dict(None, 1.0)["gaps"] == both
    assert s.to_dict(1.0, None)["gaps"] == both
    assert s.to_dict(3.0, 4.0) == {"interval_s": 0.5, "threshold_s": 1.25, "gaps": both[1:]}
    assert gaps_from_dict(s.to_dict(None, None)) == [Gap(0.0, 2.0), Gap(2.5, 6.5)]


def test_gaps_from_dict_reads_numbers_and_nothing_from_nothing():
    assert gaps_from_dict({"gaps": [{"start_t": "1.5", "end_t": 3}]}) == [Gap(1.5, 3.0)]
    assert gaps_from_dict(None) == []
    assert gaps_from_dict({}) == []


def test_the_words_carry_the_gap_its_time_and_the_interval():
    line = starved_words(Gap(1_800_000_000.123, 1_800_000_007.0), 0.5)
    assert line == "recorder starved: 6.9 s gap at 2027-01-15T08:00:00.123Z, interval 0.5 s"
    m = re.match(g.STARVED_LINE, line)
    assert m is not None and m.group(1) == "6.9" and m.group(2) == "2027-01-15T08:00:00.123Z"
    assert re.match(g.STARVED_LINE, "recorder starved: 12 s gap at X, interval").group(1) == "12"
    assert across_words(6.94) == "concluded across a 6.9 s gap in the recorder's own sampling"
