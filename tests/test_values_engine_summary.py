"""Values of servewatch/engine/summary.py (issue 50: on the path to a figure, found by the mutation rule): a histogram
reduced to its count, honest mean, the two quantiles a panel prints, its first bucket's share, and the one line
saying why the panel is blind — each computed by hand beside the assertion."""

from __future__ import annotations

import math

import pytest

from servewatch.engine.state import Histogram
from servewatch.engine.summary import HistogramSummary, summarize

EDGES = (0.01, 0.025, 0.05, 0.1)


def test_a_summary_of_a_histogram_that_sees():
    # 10 observations: 2 under 10 ms, 6 more under 25 ms, 2 more under 50 ms; sum 0.2 s
    s = summarize("ttft", Histogram(edges=EDGES, cumulative=(2.0, 8.0, 10.0, 10.0), count=10.0, sum=0.2))
    # mean 0.2 / 10; p50: rank 5 in (10, 25] ms, 3 of its 6: 0.01 + 0.015 x 3/6; p99: rank 9.9 in (25, 50] ms,
    # 1.9 of its 2: 0.025 + 0.025 x 1.9/2; first bucket 2 of 10
    assert (s.kind, s.count, s.first_bucket_le, s.first_bucket_fraction, s.blind) == ("ttft", 10.0, 0.01, 0.2, False)
    assert s.mean_s == pytest.approx(0.02) and s.p50_s == pytest.approx(0.0175) and s.p99_s == pytest.approx(0.04875)
    assert s.finding() is None
    assert s.as_json() == {"count": 10.0, "mean_s": s.mean_s, "p50_s": s.p50_s, "p99_s": s.p99_s,
                           "first_bucket_le": 0.01, "first_bucket_fraction": 0.2, "blind": False}


def test_one_observation_is_a_share_of_one():
    s = summarize("itl", Histogram(edges=EDGES, cumulative=(1.0, 1.0, 1.0, 1.0), count=1.0, sum=0.004))
    # rank 0.5 and 0.99 of one observation in [0, 10 ms]: 5 ms and 9.9 ms
    assert (s.first_bucket_fraction, s.blind, s.mean_s) == (1.0, True, 0.004)
    assert s.p50_s == pytest.approx(0.005) and s.p99_s == pytest.approx(0.0099)


def test_nothing_observed_and_no_buckets_give_no_figure():
    empty = summarize("itl", Histogram(edges=EDGES, cumulative=(0.0, 0.0, 0.0, 0.0), count=0.0, sum=0.0))
    # no observation: no share (not 0/0), no mean, no quantile (NaN from histogram_quantile is no figure)
    assert (empty.count, empty.mean_s, empty.p50_s, empty.p99_s) == (0.0, None, None, None)
    assert (empty.first_bucket_le, empty.first_bucket_fraction, empty.blind) == (0.01, None, False)
    no_edges = summarize("e2e", Histogram(edges=(), cumulative=(), count=5.0, sum=1.0))
    assert (no_edges.mean_s, no_edges.p50_s, no_edges.p99_s) == (0.2, None, None)
    assert (no_edges.first_bucket_le, no_edges.first_bucket_fraction, no_edges.blind) == (None, None, False)


def test_a_sum_that_is_not_a_number_gives_no_mean():
    s = summarize("itl", Histogram(edges=EDGES, cumulative=(3.0, 4.0, 5.0, 5.0), count=5.0, sum=math.nan))
    assert s.mean_s is None and s.p50_s == pytest.approx(0.01 * 2.5 / 3)
    # p99: rank 4.95 in (25, 50] ms, 0.95 of its 1
    assert s.p99_s == pytest.approx(0.025 + 0.025 * 0.95)


def test_the_finding_in_words():
    s = summarize("itl", Histogram(edges=EDGES, cumulative=(995.0, 1000.0, 1000.0, 1000.0), count=1000.0, sum=4.6))
    # mean 4.6 ms; p50 rank 500 of 995 in [0, 10 ms]: 5.025 ms; p99 rank 990 of 995: 9.950 ms
    assert s.finding() == ("ITL: 99.50% of 1,000 observations fall in the first bucket (≤ 10.0 ms); honest mean "
                           "4.6 ms; histogram_quantile(0.5) prints 5.0 ms and (0.99) prints 9.9 ms whatever the true "
                           "latency — the bucket edges are too coarse to see it")
    # a kind with no label of its own is named as it is; a figure that is not there reads "n/a"
    other = HistogramSummary("spec_decode", 2000.0, None, 0.0123, None, 0.025, 1.0, True)
    assert other.finding() == ("spec_decode: 100.00% of 2,000 observations fall in the first bucket (≤ 25.0 ms); "
                               "honest mean n/a; histogram_quantile(0.5) prints 12.3 ms and (0.99) prints n/a whatever "
                               "the true latency — the bucket edges are too coarse to see it")
