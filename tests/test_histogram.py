"""Histogram truth: Prometheus's histogram_quantile on hand-computed cases, the honest mean, scrape
deltas with resets, and the blindness finding on the real vLLM ITL histogram."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servewatch.engine.histogram import (BlindnessFinding, blindness, counter_delta, delta, histogram_from_samples,
                                         histogram_quantile, histograms_by_labels, mean)
from servewatch.engine.state import Histogram
from servewatch.exposition.model import Sample
from servewatch.exposition.parser import parse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "metrics"
ITL = "vllm:inter_token_latency_seconds"

# edges 1, 2, 4 (+Inf); cumulative 2, 6, 8; count 10; sum 20
SIMPLE = Histogram(edges=(1.0, 2.0, 4.0), cumulative=(2.0, 6.0, 8.0), count=10.0, sum=20.0)


def itl_of(fixture: str) -> Histogram:
    family = parse((FIXTURES / fixture).read_text(encoding="utf-8"), {ITL})[ITL]
    return histogram_from_samples(family.samples, ITL)


# --- histogram_quantile ---------------------------------------------------------------------------

@pytest.mark.parametrize("q, expected", [
    # rank = q * 10. First bucket whose cumulative count >= rank, then linear interpolation in it.
    (0.5, 1.75),   # rank 5 -> bucket (1,2]: 1 + (2-1) * (5-2)/(6-2) = 1.75
    (0.1, 0.5),    # rank 1 -> lowest bucket, from 0: 0 + 1 * 1/2 = 0.5
    (0.8, 4.0),    # rank 8 -> bucket (2,4]: 2 + (4-2) * (8-6)/(8-6) = 4
    (0.0, 0.0),    # rank 0 -> lowest bucket: 0 + 1 * 0/2 = 0
    (0.9, 4.0),    # rank 9 > 8 -> the +Inf bucket: the last finite upper bound, 4
    (1.0, 4.0),    # rank 10 -> the +Inf bucket: 4
])
def test_quantile_hand_computed(q, expected):
    assert histogram_quantile(q, SIMPLE) == expected


def test_quantile_out_of_range_and_nan():
    assert histogram_quantile(-0.1, SIMPLE) == -math.inf
    assert histogram_quantile(1.1, SIMPLE) == math.inf
    assert math.isnan(histogram_quantile(math.nan, SIMPLE))


def test_quantile_nan_without_observations_or_without_finite_bucket():
    assert math.isnan(histogram_quantile(0.5, Histogram((1.0, 2.0), (0.0, 0.0), 0.0, 0.0)))
    assert math.isnan(histogram_quantile(0.5, Histogram((), (), 5.0, 1.0)))   # only the +Inf bucket
    # q = 0 with an empty lowest bucket: Prometheus computes 1 * (0/0) = NaN
    assert math.isnan(histogram_quantile(0.0, Histogram((1.0, 2.0), (0.0, 4.0), 4.0, 5.0)))


def test_quantile_lowest_bucket_at_or_below_zero_returns_its_bound():
    h = Histogram(edges=(-1.0, 0.0, 1.0), cumulative=(3.0, 5.0, 9.0), count=10.0, sum=0.0)
    assert histogram_quantile(0.2, h) == -1.0     # rank 2 in the lowest bucket, bound -1 <= 0: -1
    assert histogram_quantile(0.45, h) == -0.25   # rank 4.5 in (-1,0]: -1 + 1 * (4.5-3)/(5-3) = -0.25


def test_quantile_forces_monotonic_cumulative_counts():
    # cumulative 4, 3, 8 dips: Prometheus raises the 3 to 4 -> counts 4, 4, 8, 10
    h = Histogram(edges=(1.0, 2.0, 3.0), cumulative=(4.0, 3.0, 8.0), count=10.0, sum=0.0)
    # rank 4.5 -> bucket (2,3]: 2 + 1 * (4.5-4)/(8-4) = 2.125 (without the fix: 2 + 1.5/5 = 2.3)
    assert histogram_quantile(0.45, h) == 2.125
    # a +Inf count below the last finite bucket is raised too: counts 5, 10, 10 -> rank 5 -> 0 + 1 * 5/5
    assert histogram_quantile(0.5, Histogram((1.0, 2.0), (5.0, 10.0), 8.0, 0.0)) == 1.0


def test_quantile_flattens_float_noise_like_prometheus():
    # 100 -> 100.00000000001 differs by a relative 1e-13 (<= 1e-12): flattened to 100
    h = Histogram(edges=(1.0, 2.0, 3.0), cumulative=(100.0, 100.00000000001, 300.0), count=300.0, sum=0.0)
    # rank 150 -> bucket (2,3]: 2 + 1 * (150-100)/(300-100) = 2.25 exactly
    assert histogram_quantile(0.5, h) == 2.25


# The expected values Prometheus's own test suite states for histogram_quantile over these buckets
# (promql/testdata/histograms.test, "testhistogram" at 50m: counts 50/70/110/120 and 10/20/20/30).
POSITIVE = Histogram(edges=(0.1, 0.2, 1.0), cumulative=(50.0, 70.0, 110.0), count=120.0, sum=0.0)
NEGATIVE = Histogram(edges=(-0.2, -0.1, 0.3), cumulative=(10.0, 20.0, 20.0), count=30.0, sum=0.0)


@pytest.mark.parametrize("q, positive, negative", [
    (0.0, 0.0, -0.2), (1.0, 1.0, 0.3), (0.2, 0.048, -0.2), (0.5, 0.15, -0.15), (0.8, 0.72, 0.3),
])
def test_quantile_matches_prometheus_test_data(q, positive, negative):
    assert histogram_quantile(q, POSITIVE) == pytest.approx(positive, rel=1e-12, abs=1e-15)
    assert histogram_quantile(q, NEGATIVE) == pytest.approx(negative, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("cumulative, count, q, expected", [
    ((10.0, 30.0), 40.0, 0.3, 0.11), ((10.0, 30.0), 40.0, 0.5, 0.15),          # job1 ins1
    ((20.0, 50.0), 60.0, 0.3, 0.09), ((20.0, 50.0), 60.0, 0.5, 0.13333333333333333),   # job1 ins2
    ((30.0, 40.0), 60.0, 0.3, 0.06), ((30.0, 40.0), 60.0, 0.5, 0.1),           # job2 ins1
    ((40.0, 70.0), 90.0, 0.3, 0.0675), ((40.0, 70.0), 90.0, 0.5, 0.11666666666666667),  # job2 ins2
])
def test_quantile_matches_prometheus_request_duration_cases(cumulative, count, q, expected):
    h = Histogram(edges=(0.1, 0.2), cumulative=cumulative, count=count, sum=0.0)
    assert histogram_quantile(q, h) == pytest.approx(expected, rel=1e-12)


# --- mean, delta, counter_delta --------------------------------------------------------------------

def test_mean_is_sum_over_count():
    assert mean(SIMPLE) == 2.0
    assert mean(Histogram((1.0,), (0.0,), 0.0, 0.0)) is None


def test_delta_between_scrapes():
    later = Histogram(edges=(1.0, 2.0, 4.0), cumulative=(5.0, 9.0, 12.0), count=15.0, sum=31.5)
    window = delta(later, SIMPLE)
    assert window == Histogram(edges=(1.0, 2.0, 4.0), cumulative=(3.0, 3.0, 4.0), count=5.0, sum=11.5)
    assert histogram_quantile(0.5, window) == 0.8333333333333334   # rank 2.5 in (0,1]: 2.5/3


def test_delta_is_none_across_a_reset_or_new_edges():
    restarted = Histogram(edges=(1.0, 2.0, 4.0), cumulative=(1.0, 1.0, 1.0), count=1.0, sum=0.5)
    assert delta(restarted, SIMPLE) is None                              # count went down
    bucket_down = Histogram(edges=(1.0, 2.0, 4.0), cumulative=(1.0, 7.0, 9.0), count=11.0, sum=25.0)
    assert delta(bucket_down, SIMPLE) is None                            # a bucket went down
    other_edges = Histogram(edges=(1.0, 2.0, 5.0), cumulative=(2.0, 6.0, 8.0), count=10.0, sum=20.0)
    assert delta(other_edges, SIMPLE) is None


def test_delta_on_real_scrapes():
    t0, t1, idle = itl_of("vllm_kv_pressure_t0.prom"), itl_of("vllm_kv_pressure_t1.prom"), itl_of("vllm_idle.prom")
    window = delta(t1, t0)
    assert window.count == 77210.0 - 71860.0
    assert window.cumulative[0] == 77117.0 - 71778.0
    assert delta(idle, t0) is None                                     # going back in time looks like a reset


def test_counter_delta():
    assert counter_delta(40.0, 32.0) == 8.0
    assert counter_delta(32.0, 32.0) == 0.0
    assert counter_delta(3.0, 32.0) is None          # reset: never subtracted
    assert counter_delta(None, 1.0) is None
    assert counter_delta(1.0, math.nan) is None


# --- blindness ---------------------------------------------------------------------------------------

def test_blindness_on_the_real_itl_histogram():
    finding = blindness(itl_of("vllm_kv_pressure_t0.prom"))
    assert isinstance(finding, BlindnessFinding)
    assert finding.blind
    assert finding.first_bucket_upper == 0.01
    assert finding.count == 71860.0
    assert finding.first_bucket_fraction == pytest.approx(0.99885889, abs=1e-8)   # 71778 / 71860
    assert finding.mean == pytest.approx(0.00203312, abs=1e-8)                    # 146.0997 / 71860
    # rank 0.5 * 71860 = 35930 in the first bucket: 0.01 * 35930 / 71778
    assert finding.p50 == pytest.approx(0.00500571, abs=1e-8)
    # rank 0.99 * 71860 = 71141.4 in the first bucket: 0.01 * 71141.4 / 71778
    assert finding.p99 == pytest.approx(0.00991131, abs=1e-8)


def test_blindness_on_a_scrape_window():
    window = delta(itl_of("vllm_kv_pressure_t1.prom"), itl_of("vllm_kv_pressure_t0.prom"))
    finding = blindness(window)
    assert finding.blind and finding.first_bucket_fraction == pytest.approx(5339 / 5350)


def test_blindness_threshold_and_absence():
    finding = blindness(SIMPLE)
    assert finding is not None and not finding.blind and finding.first_bucket_fraction == 0.2
    assert finding.p50 == 1.75 and finding.p99 == 4.0 and finding.mean == 2.0
    exactly = Histogram(edges=(0.01, 1.0), cumulative=(99.0, 100.0), count=100.0, sum=1.0)
    assert blindness(exactly).blind                               # 99/100 >= 0.99
    assert not blindness(exactly, threshold=0.995).blind
    assert blindness(Histogram((1.0,), (0.0,), 0.0, 0.0)) is None      # no observation
    assert blindness(Histogram((), (), 3.0, 1.0)) is None              # no finite bucket


# --- building histograms from samples ---------------------------------------------------------------

def test_histogram_from_real_samples():
    h = itl_of("vllm_kv_pressure_t0.prom")
    assert h.edges[:3] == (0.01, 0.025, 0.05) and h.edges[-1] == 80.0 and len(h.edges) == 19
    assert tuple(h.cumulative[:2]) == (71778.0, 71822.0)
    assert h.count == 71860.0 and h.sum == 146.09973976000015


def _bucket(le: str, value: float, **labels: str) -> Sample:
    return Sample("h_bucket", {**labels, "le": le}, value)


def test_histograms_grouped_by_labels_sorted_and_coalesced():
    samples = [
        _bucket("+Inf", 9.0, rank="0"), _bucket("2", 7.0, rank="0"), _bucket("1", 3.0, rank="0"),
        Sample("h_sum", {"rank": "0"}, 12.0), Sample("h_count", {"rank": "0"}, 9.0),
        _bucket("1", 1.0, rank="1"), _bucket("1.0", 1.0, rank="1"),        # same bound spelled twice
        Sample("h_count", {"rank": "1"}, 4.0),                             # no +Inf bucket, no sum
        Sample("h_created", {"rank": "0"}, 1.7e9),
    ]
    found = histograms_by_labels(samples, "h")
    assert found[(("rank", "0"),)] == Histogram(edges=(1.0, 2.0), cumulative=(3.0, 7.0), count=9.0, sum=12.0)
    second = found[(("rank", "1"),)]
    assert (second.edges, tuple(second.cumulative), second.count) == ((1.0,), (2.0,), 4.0) and math.isnan(second.sum)
    assert histogram_from_samples(samples, "h", {"rank": "0", "le": "ignored"}) == found[(("rank", "0"),)]
    assert histogram_from_samples(samples, "h", {"rank": "7"}) is None
    with pytest.raises(ValueError):
        histogram_from_samples(samples, "h")
