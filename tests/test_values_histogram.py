"""Values of the histogram maths (servewatch/engine/histogram.py): PromQL's histogram_quantile over classic buckets
computed by hand bucket by bucket, its edge cases, the honest mean, scrape deltas and the blindness threshold
(just under, at, just over), issue 40."""

import math
from array import array

import pytest

from servewatch.engine import histogram as H
from servewatch.engine.histogram import blindness, counter_delta, delta, histogram_quantile, mean
from servewatch.engine.state import Histogram
from servewatch.exposition.model import Sample


def hist(edges, cumulative, count, total=0.0):
    return Histogram(edges=tuple(edges), cumulative=array("d", cumulative), count=count, sum=total)


# edges 1, 2, 4 with 10, 10 and 20 observations in them, none above 4: cumulative 10, 20, 40
H40 = hist((1.0, 2.0, 4.0), (10, 20, 40), 40, 100.0)


@pytest.mark.parametrize("q, want", [
    (0.125, 0.5),     # rank 5 in the first bucket [0, 1]: 0 + 1 x 5 / 10
    (0.25, 1.0),      # rank 10: the first bucket's top
    (0.5, 2.0),       # rank 20: bucket (1, 2], 1 + 1 x (20 - 10) / 10
    (0.75, 3.0),      # rank 30: bucket (2, 4], 2 + 2 x (30 - 20) / 20
    (0.625, 2.5),     # rank 25: 2 + 2 x 5 / 20
    (1.0, 4.0),       # rank 40: the top of the last finite bucket
    (0.0, 0.0),       # rank 0: index 0 (10 >= 0), 0 + 1 x 0 / 10
])
def test_quantile_by_hand(q, want):
    assert histogram_quantile(q, H40) == want


def test_quantile_edges():
    assert math.isnan(histogram_quantile(math.nan, H40))
    assert histogram_quantile(-0.001, H40) == -math.inf
    assert histogram_quantile(1.001, H40) == math.inf
    # 10 of 50 above the last edge: rank 45 falls in +Inf, which answers the last finite edge (4)
    assert histogram_quantile(0.9, hist((1.0, 2.0, 4.0), (10, 20, 40), 50)) == 4.0
    # rank 40 of 50 = 0.8: still in (2, 4]: 2 + 2 x 20 / 20
    assert histogram_quantile(0.8, hist((1.0, 2.0, 4.0), (10, 20, 40), 50)) == 4.0
    # the first bucket's lower bound is 0 unless its upper bound is <= 0: then the bound itself
    assert histogram_quantile(0.25, hist((0.0, 1.0), (5, 10), 10)) == 0.0
    assert histogram_quantile(0.25, hist((-1.0, 1.0), (5, 10), 10)) == -1.0
    assert histogram_quantile(0.25, hist((0.5, 1.0), (5, 10), 10)) == 0.25     # 0 + 0.5 x 2.5 / 5
    assert math.isnan(histogram_quantile(0.5, hist((), (), 10)))                 # +Inf alone: fewer than 2 bounds
    assert math.isnan(histogram_quantile(0.5, hist((1.0,), (0,), 0)))            # no observation
    # an empty bucket on the way: rank 10 of 20 is met at the first bucket (10 >= 10)
    assert histogram_quantile(0.5, hist((1.0, 2.0, 3.0), (10, 10, 20), 20)) == 1.0
    # rank 15 of 20: bucket (2, 3] holds 10: 2 + 1 x 5 / 10
    assert histogram_quantile(0.75, hist((1.0, 2.0, 3.0), (10, 10, 20), 20)) == 2.5


def test_quantile_repairs_like_prometheus():
    # a dip (20 then 15) is raised to the running maximum: cumulative 10, 20, 20, 40
    dipped = hist((1.0, 2.0, 3.0, 4.0), (10, 20, 15, 40), 40)
    # rank 30 in (3, 4]: 3 + 1 x (30 - 20) / 20
    assert histogram_quantile(0.75, dipped) == 3.5
    # counts within 1e-12 (relative) of the previous are float noise, flattened to it
    noisy = hist((1.0, 2.0, 3.0), (10.0, 10.0 + 1e-11, 20.0), 20)
    # 10 + 1e-11: difference 1e-11 / 10.00000000001 = 1e-12 -> noise: the bucket (1, 2] is empty; rank 10 at the
    # first bucket
    assert histogram_quantile(0.5, noisy) == 1.0
    real = hist((1.0, 2.0, 3.0), (10.0, 10.0 + 1e-9, 20.0), 20)
    # 1e-9 is not noise: (1, 2] holds 1e-9, and rank 10 is still met at 1 (10 >= 10)
    assert histogram_quantile(0.5, real) == 1.0
    # rank 10 + 1e-9 x 0.5 ... of a bucket of 1e-9: 1 + 1 x 0.5e-9 / 1e-9 = 1.5
    assert histogram_quantile((10.0 + 0.5e-9) / 20.0, real) == pytest.approx(1.5, abs=1e-3)


def test_coalesce_and_correct_precision_directly():
    assert H._coalesce([(1.0, 2.0), (1.0, 3.0), (2.0, 6.0)]) == ([1.0, 2.0], [5.0, 6.0])
    counts = [10.0, 10.0 + 1e-11, 10.0 + 2e-11, 30.0]
    H._correct_precision_errors(counts)
    # each compared with the last count kept (10): 1e-11 / 10 = 1e-12 <= 1e-12, flattened; 2e-11 / 10 = 2e-12, kept
    assert counts == [10.0, 10.0, 10.0 + 2e-11, 30.0]
    counts = [10.0, 11.0, 11.0, 12.0]
    H._correct_precision_errors(counts)
    assert counts == [10.0, 11.0, 11.0, 12.0]
    counts = [5.0, 3.0, 4.0, 7.0, 6.0]
    H._ensure_monotonic(counts)
    assert counts == [5.0, 5.0, 5.0, 7.0, 7.0]


def test_ieee_divide():
    assert H._ieee_divide(3.0, 2.0) == 1.5
    assert H._ieee_divide(1.0, 0.0) == math.inf
    assert H._ieee_divide(-1.0, 0.0) == -math.inf
    assert H._ieee_divide(1.0, -0.0) == -math.inf
    assert math.isnan(H._ieee_divide(0.0, 0.0))
    assert math.isnan(H._ieee_divide(math.nan, 0.0))


def test_mean_delta_counter_delta():
    assert mean(H40) == 2.5                                    # 100 / 40
    assert mean(hist((1.0,), (0,), 0, 5.0)) is None
    assert mean(hist((1.0,), (0,), math.nan, 5.0)) is None
    old = hist((1.0, 2.0), (1, 2), 3, 4.0)
    new = hist((1.0, 2.0), (4, 6), 9, 10.5)
    d = delta(new, old)
    assert (d.edges, list(d.cumulative), d.count, d.sum) == ((1.0, 2.0), [3.0, 4.0], 6, 6.5)
    same = delta(old, old)
    assert (list(same.cumulative), same.count, same.sum) == ([0.0, 0.0], 0, 0.0)
    assert delta(hist((1.0, 3.0), (4, 6), 9), old) is None                      # other edges
    assert delta(hist((1.0, 2.0), (4, 6), 2), old) is None                      # the count went down
    assert delta(hist((1.0, 2.0), (0, 6), 9), old) is None                      # a bucket went down
    assert delta(hist((1.0, 2.0), (4, 1), 9), old) is None
    assert counter_delta(7.5, 2.0) == 5.5 and counter_delta(2.0, 2.0) == 0.0
    for new_v, old_v in ((None, 1.0), (1.0, None), (math.nan, 1.0), (1.0, math.nan), (1.0, 2.0)):
        assert counter_delta(new_v, old_v) is None


def test_blindness_at_its_threshold():
    # 99 of 100 in the first bucket: 0.99 >= 0.99 -> blind
    at = blindness(hist((0.5, 1.0), (99, 100), 100, 20.0))
    assert (at.first_bucket_upper, at.first_bucket_fraction, at.count, at.mean, at.blind) == (0.5, 0.99, 100, 0.2, True)
    # p50: rank 50 in [0, 0.5]: 0.5 x 50 / 99; p99: rank 99 -> 0.5
    assert at.p50 == pytest.approx(0.5 * 50 / 99) and at.p99 == 0.5
    assert blindness(hist((0.5, 1.0), (98, 100), 100)).blind is False                 # 0.98
    assert blindness(hist((0.5, 1.0), (98, 100), 100), threshold=0.98).blind is True
    assert blindness(hist((0.5, 1.0), (100, 100), 100)).blind is True
    assert blindness(hist((), (), 10)) is None
    assert blindness(hist((0.5,), (0,), 0)) is None


def S_(name, value, **labels):
    return Sample(name=name, labels=labels, value=value)


def test_histograms_from_samples():
    samples = [S_("x_bucket", 1, le="0.5", job="a"), S_("x_bucket", 3, le="1", job="a"),
               S_("x_bucket", 4, le="+Inf", job="a"), S_("x_sum", 2.5, job="a"), S_("x_count", 4, job="a"),
               S_("x_bucket", 2, le="1", job="b"), S_("x_bucket", 2, le="1.0", job="b"), S_("x_count", 5, job="b"),
               S_("x_bucket", 9, le="bad", job="c"), S_("x_bucket", 9, job="d"), S_("y_bucket", 1, le="1", job="a")]
    found = H.histograms_by_labels(samples, "x")
    a = found[(("job", "a"),)]
    assert (a.edges, list(a.cumulative), a.count, a.sum) == ((0.5, 1.0), [1.0, 3.0], 4.0, 2.5)
    b = found[(("job", "b"),)]
    # two buckets of the same bound (1 and 1.0) are added; no +Inf: the count is _count; no _sum: NaN
    assert (b.edges, list(b.cumulative), b.count) == ((1.0,), [4.0], 5.0) and math.isnan(b.sum)
    assert set(found) == {(("job", "a"),), (("job", "b"),)}
    assert H.histogram_from_samples(samples, "x", {"job": "a"}) == a
    assert H.histogram_from_samples(samples, "x", {"job": "z"}) is None
    with pytest.raises(ValueError, match="^x has 2 label sets; say which one$"):
        H.histogram_from_samples(samples, "x")
    only = H.histogram_from_samples([S_("z_bucket", 2, le="1"), S_("z_bucket", 3, le="2")], "z")
    # neither +Inf nor _count: the count is the last bucket's
    assert (only.edges, list(only.cumulative), only.count) == ((1.0, 2.0), [2.0, 3.0], 3.0)
    assert H.histogram_from_samples([], "z") is None
    assert H.label_key({"le": "1", "b": "2", "a": "1"}) == (("a", "1"), ("b", "2"))
    assert H.label_key({"x": "1", "a": "2"}, drop="x") == (("a", "2"),)


def test_plan_with_an_identity_adds_label_sets():
    samples = [S_("x_bucket", 1, le="1", pod="p1"), S_("x_bucket", 2, le="+Inf", pod="p1"), S_("x_sum", 1.5, pod="p1"),
               S_("x_bucket", 3, le="1", pod="p2"), S_("x_bucket", 5, le="+Inf", pod="p2"), S_("x_sum", 2.0, pod="p2"),
               S_("x_bucket", 7, le="2", pod="p3"), S_("x_bucket", 9, le="+Inf", pod="p3")]
    plan = H.histogram_plan(samples, "x", identity=lambda key: "all")
    [(into, h)] = H.apply_plan(plan, [s.value for s in samples]).items()
    # p1 + p2 (same edges): bucket 1 + 3, count 2 + 5, sum 1.5 + 2.0; p3 (other edges) left out
    assert (into, h.edges, list(h.cumulative), h.count, h.sum) == ("all", (1.0,), [4.0], 7.0, 3.5)
    no_sum = H.histogram_plan(samples[:2] + samples[3:5], "x", identity=lambda key: "all")
    assert math.isnan(H.apply_plan(no_sum, [s.value for s in samples[:2] + samples[3:5]])["all"].sum)


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

def test_precision_correction_at_its_tolerance():
    # 1 in 1e12: 1 / 1e12 = 1e-12, at the tolerance: flattened (<=)
    counts = [1e12 - 1, 1e12, 3e12]
    H._correct_precision_errors(counts)
    assert counts == [1e12 - 1, 1e12 - 1, 3e12]
    # an equal count does not end the pass
    counts = [10.0, 10.0, 10.0 + 1e-11]
    H._correct_precision_errors(counts)
    assert counts == [10.0, 10.0, 10.0]


def test_quantile_of_one_edge_and_of_one_observation():
    # one finite edge: bounds [1, +Inf]; rank 2.5 of 10 in [0, 1]: 0 + 1 x 2.5 / 5 = 0.5
    assert histogram_quantile(0.25, hist((1.0,), (5,), 10)) == 0.5
    # one observation: rank 0.5 in [0, 1]: 0.5
    assert histogram_quantile(0.5, hist((1.0, 2.0), (1, 1), 1)) == 0.5
    # q = 0 over an empty first bucket at 0: the bound itself (0), not 0 x 0 / 0
    assert histogram_quantile(0.0, hist((0.0, 1.0), (0, 10), 10)) == 0.0


def test_mean_and_blindness_of_one_observation():
    assert mean(hist((1.0,), (1,), 1, 0.5)) == 0.5
    one = blindness(hist((0.5,), (1,), 1, 0.25))
    assert (one.first_bucket_fraction, one.blind, one.mean) == (1.0, True, 0.25)


def test_a_bucket_without_a_bound_is_skipped_not_the_end():
    samples = [S_("x_bucket", 9, job="a"), S_("x_bucket", 9, le="bad", job="a"),
               S_("x_bucket", 2, le="1", job="a"), S_("x_bucket", 3, le="+Inf", job="a")]
    h = H.histogram_from_samples(samples, "x")
    assert (h.edges, list(h.cumulative), h.count) == ((1.0,), [2.0], 3.0)


def test_the_count_is_the_last_bucket_of_three():
    only = H.histogram_from_samples([S_("z_bucket", 2, le="1"), S_("z_bucket", 3, le="2"), S_("z_bucket", 5, le="4")],
                                    "z")
    assert (only.edges, only.count) == ((1.0, 2.0, 4.0), 5.0)


def test_shared_edges_returns_the_edges_even_the_first_time():
    import uuid
    edges = (float(uuid.uuid4().int % 10 ** 9) + 0.5, 2e9)           # edges no scrape has had before
    assert H.shared_edges(edges) == edges
    assert H.shared_edges(tuple(list(edges))) is H.shared_edges(edges)


def test_a_compiled_plan_makes_the_plan_s_histograms_with_one_getter_where_each_bucket_is_one_sample():
    inf = math.inf
    plan = (
        ("a", (0.1, 1.0, inf), (((0,),), ((1,),), ((2,),)), ((2,),), ((3,),)),      # one sample a bucket
        ("b", (inf,), (((4,),),), ((4,),), None),                                    # one bucket, no sum
        ("c", (1.0, inf), (((0,), (5,)), ((1,), (6,))), ((1,), (6,)), ((3,), (7,))),  # two label sets merged
        ("d", (1.0, inf), (((0, 5),), ((1, 6),)), ((1, 6),), ((3,),)),              # two samples one label set
    )
    values = [1.0, 2.0, 3.0, 10.0, 4.0, 5.0, 6.0, 20.0]
    compiled = H.compile_plan(plan)
    assert [c[:5] for c in compiled] == list(plan)
    assert compiled[0][5](values) == (1.0, 2.0, 3.0)
    assert [c[5] for c in compiled[1:]] == [None, None, None]
    got = H.apply_compiled(compiled, values)
    want = H.apply_plan(plan, values)
    assert list(got) == ["a", "b", "c", "d"]
    expected = {"a": ((0.1, 1.0, inf), [1.0, 2.0, 3.0], 3.0, 10.0), "b": ((inf,), [4.0], 4.0, None),
                "c": ((1.0, inf), [6.0, 8.0], 8.0, 30.0), "d": ((1.0, inf), [6.0, 8.0], 8.0, 10.0)}
    for name, (edges, cumulative, count, total) in expected.items():
        for h in (got[name], want[name]):
            assert (h.edges, list(h.cumulative), h.count) == (edges, cumulative, count)
            assert math.isnan(h.sum) if total is None else h.sum == total
            assert isinstance(h.cumulative, array)


def test_two_buckets_of_one_sample_each_are_read_by_one_getter_too():
    compiled = H.compile_plan((("e", (1.0, math.inf), (((0,),), ((1,),)), ((1,),), None),))
    assert compiled[0][5]([7.0, 9.0]) == (7.0, 9.0)
    assert list(H.apply_compiled(compiled, [7.0, 9.0])["e"].cumulative) == [7.0, 9.0]
