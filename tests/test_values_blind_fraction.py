"""The histogram-blind fraction at its boundary, as a written number (issue 50): 99 % of a histogram's observations in
its first bucket make its quantiles blind, 98.9 % do not. The other boundary tests read the constant the code reads,
so a changed constant moved both sides together and passed (0.99 planted as 0.9: the whole suite passed). Here the
counts are literal: 990 of 1,000 is blind, 989 of 1,000 is not, wherever the fraction is applied — the summary that
reports print, the histogram_blind detector (its shortcut and its verdict) and advise's ITL check."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from servewatch.derive import advice
from servewatch.derive.observed import Observed
from servewatch.detectors import blindness as B
from servewatch.detectors.config import DetectorConfig
from servewatch.engine import histogram as H
from servewatch.engine import summary as S
from servewatch.engine.state import EngineState, Histogram
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

EDGES = (0.01, 0.025, 0.05, 0.1)
# (observations in the first bucket, of 1,000; blind?): just under 99 %, at it, just over, all; and the shares a
# fraction of 0.9 or 0.95 would call blind
CASES = [(989, False), (990, True), (991, True), (1000, True), (900, False), (950, False), (0, False)]


def hist(first: float, count: float = 1000.0) -> Histogram:
    """`count` observations, `first` of them in the first bucket (5 ms each), the rest in the second (20 ms)."""
    return Histogram(edges=EDGES, cumulative=(first, count, count, count), count=count,
                     sum=first * 0.005 + (count - first) * 0.02)


def test_the_fraction_is_written_once_as_99_percent():
    assert H.BLIND_FRACTION == 0.99
    # the summary, the detector and advise read that one name (no copy of the number of their own)
    assert S.BLIND_FRACTION is H.BLIND_FRACTION and advice.BLIND_FRACTION is H.BLIND_FRACTION
    # read through the signature (a wrapper, such as mutation testing's, keeps it; __defaults__ it does not)
    assert inspect.signature(H.blindness).parameters["threshold"].default == 0.99


@pytest.mark.parametrize("first,blind", CASES)
def test_the_summary_is_blind_from_99_percent_in_the_first_bucket(first, blind):
    s = S.summarize("itl", hist(first))
    assert (s.blind, s.first_bucket_fraction, s.first_bucket_le, s.count) == (blind, first / 1000, 0.01, 1000.0)
    assert (s.finding() is not None) is blind
    assert H.blindness(hist(first)).blind is blind            # the finding's default threshold


@pytest.mark.parametrize("first,blind", CASES)
def test_the_detector_fires_from_99_percent_of_the_windows_observations(first, blind):
    def scrape(t, h):
        state = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "0"}, histograms={"itl": h})
        return MetricsSample(1000.0 + t, "vllm", "vllm-test", (state,))

    # the delta counts: 1,000 observations before the window's start, then `first` of 1,000 more in bucket one
    window = Window(metrics=(scrape(0, hist(500.0, 1000.0)), scrape(30, hist(500.0 + first, 2000.0))))
    verdicts = B.detect(window, DetectorConfig())
    assert len(verdicts) == (1 if blind else 0)
    assert B._surely_not_blind(hist(500.0 + first, 2000.0), hist(500.0, 1000.0), 100) is (first < 990)
    if blind:
        assert verdicts[0].details["first_bucket_fraction"] == first / 1000
        assert verdicts[0].why.startswith(f"ITL: {first / 10:.2f}% of 1,000 observations fall in the first bucket")


@pytest.mark.parametrize("first,blind", CASES)
def test_advise_calls_the_itl_histogram_blind_from_99_percent(first, blind):
    observed = Observed(histograms={"itl": S.summarize("itl", hist(first))})
    check = advice._itl_check(SimpleNamespace(decode_floor_s=None), observed)
    assert check.observed.startswith(f"{first / 10:.1f}% of 1,000 ≤ ")
    assert check.explanation.startswith("blind: quantiles print") is blind
    # with a derived floor (1 ms) under the first edge (10 ms): "as derived ... blind" from 99 %, else the share
    # that clears the first edge
    floored = advice._itl_check(SimpleNamespace(decode_floor_s=0.001), observed)
    assert ("the quantile panels are blind" in floored.explanation) is blind
