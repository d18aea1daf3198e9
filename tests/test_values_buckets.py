"""Values of servewatch/derive/buckets.py (issue 50: the mutation rule finds it): the nice values in a range (both
ends kept, short decimals), the first coarse edge at or above a value, the edges planned around the decode floor,
the dense range, the ceiling and the SLO threshold, and the flags' command line as a shell would read it."""

from __future__ import annotations

import pytest

from servewatch.derive.buckets import (COARSE_SERIES, FINE_SERIES, MAX_FINE_EDGES, EdgePlan, command_line,
                                       first_nice_at_or_above, latency_edges, nice_values)


def test_the_series():
    assert FINE_SERIES[0] == (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)
    assert FINE_SERIES[-1] == (1,)
    assert COARSE_SERIES == (1, 2, 5)
    assert MAX_FINE_EDGES == 12


@pytest.mark.parametrize("low, high, mantissas, values", [
    (0.003, 0.05, (1, 2, 5), [0.005, 0.01, 0.02, 0.05]),
    (0.0012, 0.0015, FINE_SERIES[0], [0.0012, 0.0015]),           # both ends kept
    (0.001, 0.001, (1, 2, 5), [0.001]),
    (5, 5, (1, 2, 5), [5.0]),
    (0.3, 40, (1, 3), [0.3, 1.0, 3.0, 10.0, 30.0]),
    (0.0021, 0.0049, (1, 2, 5), []),
    (0, 1, (1,), []),                                             # no edge at or below zero
    (-1, 1, (1,), []),
    (2, 1, (1,), []),                                             # an empty range
])
def test_nice_values(low, high, mantissas, values):
    got = nice_values(low, high, mantissas)
    assert got == values
    assert [repr(v) for v in got] == [repr(v) for v in values]    # 0.003, never 0.0030000000000000005


def test_nice_values_are_short_decimals():
    assert nice_values(0.0001, 0.001, (1.2, 3)) == [0.00012, 0.0003]
    assert repr(nice_values(0.0001, 0.0002, (1.2,))[0]) == "0.00012"


@pytest.mark.parametrize("value, first", [(0.0042, 0.005), (0.005, 0.005), (7, 10.0), (0.011, 0.02), (1, 1.0),
                                          (0.9, 1.0), (21, 50.0)])
def test_first_nice_at_or_above(value, first):
    assert first_nice_at_or_above(value) == first


def test_first_nice_at_or_above_in_another_series():
    assert first_nice_at_or_above(4, (1, 3)) == 10.0
    assert first_nice_at_or_above(2.5, (1, 3)) == 3.0


def test_edges_around_a_dense_range_with_an_slo():
    plan = latency_edges("itl", 0.002, 0.005, 0.03, 0.5, 0.1, "why")
    assert plan == EdgePlan("itl", (0.002, 0.005, 0.006, 0.008, 0.01, 0.012, 0.015, 0.02, 0.025, 0.03, 0.05, 0.1,
                                    0.2, 0.5), 0.005, 0.03, 0.5, 0.1, "why")
    assert plan.as_json() == {"kind": "itl", "edges": [0.002, 0.005, 0.006, 0.008, 0.01, 0.012, 0.015, 0.02, 0.025,
                                                       0.03, 0.05, 0.1, 0.2, 0.5],
                              "dense_from_s": 0.005, "dense_to_s": 0.03, "ceiling_s": 0.5, "slo_s": 0.1,
                              "reason": "why"}


def test_a_wide_dense_range_takes_a_coarser_series():
    plan = latency_edges("itl", 0.002, 0.005, 0.5, 0.5, 0.1, "why")
    assert plan.edges == (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5)
    # exactly 12 edges stays in the densest series: 1 .. 8 and 10, 12 (0.01 .. 0.12)
    assert latency_edges("itl", 0.01, 0.01, 0.12, 0.12, None, "").edges == (
        0.01, 0.012, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.12, 0.2)
    # 13 would not
    assert latency_edges("itl", 0.01, 0.01, 0.15, 0.15, None, "").edges == (
        0.01, 0.015, 0.02, 0.03, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2)


def test_a_dense_end_below_its_start_is_raised_to_it_and_the_ceiling_sets_the_top():
    plan = latency_edges("ttft", 0.5, 0.05, 0.01, 2, None, "r")
    assert plan.edges == (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
    assert (plan.dense_from, plan.dense_to, plan.ceiling, plan.slo) == (0.05, 0.05, 2, None)


def test_a_dense_range_with_no_nice_value_takes_the_next_one_and_the_slo_is_an_edge():
    plan = latency_edges("ttft", 0.01, 0.0123, 0.0124, 0.02, 0.0333333333, "r")
    assert plan.edges == (0.01, 0.02, 0.0333333, 0.05)


def test_the_slo_above_the_ceiling_sets_the_top():
    assert latency_edges("e2e", 1, 1, 2, 3, 7.5, "").edges == (1.0, 1.2, 1.5, 2.0, 5.0, 7.5, 10.0)
    assert latency_edges("e2e", 1, 1, 2, 3, 0, "").edges == (1.0, 1.2, 1.5, 2.0, 5.0)


def test_a_dense_range_above_the_ceiling_still_gets_an_edge_above_it():
    # 4 is no 1-2-5 value: the top edge is the next one, 5, though the ceiling (2) is below the dense range
    assert latency_edges("x", 1, 1, 4, 2, None, "").edges == (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0)


def test_a_very_wide_range_falls_back_to_one_and_three():
    plan = latency_edges("e2e", 1, 1, 100000, 1, None, "x")
    assert plan.edges == (1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0, 30000.0, 100000.0)


def test_the_command_line_quotes_for_a_shell():
    assert command_line(["--a", "b c", "it's", "0.005,0.01"]) == "--a 'b c' 'it'\"'\"'s' 0.005,0.01"
    assert command_line([]) == ""
