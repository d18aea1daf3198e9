"""Value tests of detectors/blindness.py (issue 40): histogram_blind on the window's delta, with its boundaries read
from the constants the code reads: at least blind_min_count observations (`count < blind_min_count` says nothing),
and a first-bucket share of at least BLIND_FRACTION (engine.summary: `< BLIND_FRACTION` is not blind)."""

from __future__ import annotations

from dataclasses import replace

from servewatch.detectors import blindness as B
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Evidence
from servewatch.engine.state import EngineState, Histogram
from servewatch.engine.summary import BLIND_FRACTION
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
MIN = CONFIG.blind_min_count
EDGES = (0.01, 0.025, 0.05, 0.1)


def hist(first, count, edges=EDGES):
    """`count` observations, `first` of them in the first bucket, the rest in the second."""
    return Histogram(edges=edges, cumulative=(first, count, count, count), count=count,
                     sum=first * 0.005 + (count - first) * 0.02)


def scrape(t, histograms, engine="0"):
    state = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": engine}, histograms=histograms)
    return MetricsSample(T0 + t, "vllm", "vllm-test", (state,))


def window(first, count, *, old=(0.0, 0.0), kind="itl"):
    return Window(metrics=(scrape(0, {kind: hist(*old)}), scrape(5, {}), scrape(30, {kind: hist(first, count)})))


def test_blind_min_count_under_at_and_over():
    for count, fires in ((MIN - 1, False), (MIN, True), (MIN + 1, True)):
        assert (B.detect(window(count, count), CONFIG) != []) is fires, count
    # the delta is what counts, not the cumulative total
    assert B.detect(window(2 * MIN - 1, 2 * MIN - 1, old=(MIN, MIN)), CONFIG) == []
    assert len(B.detect(window(2 * MIN, 2 * MIN, old=(MIN, MIN)), CONFIG)) == 1


def test_blind_fraction_under_at_and_over():
    count = 10_000.0                            # 1 observation is 0.0001 of the delta
    at = BLIND_FRACTION * count
    for first, fires in ((at - 1, False), (at, True), (at + 1, True)):
        assert (B.detect(window(first, count), CONFIG) != []) is fires, first


def test_the_whole_verdict():
    v, = B.detect(window(200.0, 200.0), CONFIG)
    assert (v.name, v.t, v.onset) == ("histogram_blind", T0 + 30, T0)
    assert v.why.endswith(" on engine 0 — over 30 s, 200 observations")
    assert v.why.startswith("ITL: 100.00% of 200 observations fall in the first bucket (≤ 10")
    assert v.evidence == (Evidence("metrics", T0, "histograms.itl.count", 0.0),
                          Evidence("metrics", T0 + 30, "histograms.itl.count", 200.0),
                          Evidence("metrics", T0 + 30, "histograms.itl.cumulative[0]", 200.0))
    d = v.details
    assert (d["engine"], d["histogram"], d["count"], d["first_bucket_fraction"], d["first_bucket_le"]) == \
        ("engine=0", "itl", 200.0, 1.0, 0.01)
    assert d["mean_s"] == 0.005 and d["p50_s"] is not None and d["p99_s"] is not None


def test_only_the_kinds_asked_and_the_points_that_have_them():
    assert B.detect(window(200.0, 200.0, kind="ttft"), replace(CONFIG, blind_kinds=("itl",))) == []
    v, = B.detect(window(200.0, 200.0, kind="ttft"), CONFIG)
    assert v.details["histogram"] == "ttft"
    one = Window(metrics=(scrape(0, {}), scrape(30, {"itl": hist(200.0, 200.0)})))
    assert B.detect(one, CONFIG) == []                 # one point with the histogram: no delta
    # the first and the last points that have it, whatever lies between
    w = Window(metrics=(scrape(0, {}), scrape(3, {"itl": hist(0.0, 0.0)}), scrape(10, {"itl": hist(50.0, 50.0)}),
                        scrape(20, {"itl": hist(200.0, 200.0)}), scrape(25, {})))
    v, = B.detect(w, CONFIG)
    assert (v.onset, v.t, v.details["count"]) == (T0 + 3, T0 + 20, 200.0)


def test_changed_edges_or_a_reset_are_not_read():
    other = Window(metrics=(scrape(0, {"itl": hist(0.0, 0.0, edges=(0.005, 0.025, 0.05, 0.1))}),
                            scrape(30, {"itl": hist(200.0, 200.0)})))
    assert B.detect(other, CONFIG) == []
    reset = Window(metrics=(scrape(0, {"itl": hist(500.0, 500.0)}), scrape(30, {"itl": hist(200.0, 300.0)})))
    assert B.detect(reset, CONFIG) == []


def test_surely_not_blind():
    assert B._surely_not_blind(hist(MIN - 1, MIN - 1), hist(0.0, 0.0), MIN) is True
    assert B._surely_not_blind(hist(MIN, MIN), hist(0.0, 0.0), MIN) is False
    assert B._surely_not_blind(hist(MIN, MIN), hist(0.0, 0.0, edges=(1.0, 2.0, 3.0, 4.0)), MIN) is True
    count = 10_000.0
    assert B._surely_not_blind(hist(BLIND_FRACTION * count - 1, count), hist(0.0, 0.0), MIN) is True
    assert B._surely_not_blind(hist(BLIND_FRACTION * count, count), hist(0.0, 0.0), MIN) is False
    empty = Histogram(edges=(), cumulative=(), count=200.0, sum=1.0)
    assert B._surely_not_blind(empty, Histogram(edges=(), cumulative=(), count=0.0, sum=0.0), MIN) is False
    assert B._surely_not_blind(hist(5.0, 5.0), hist(0.0, 0.0), 0.0) is False
    assert B._surely_not_blind(hist(0.0, 0.0), hist(0.0, 0.0), 0.0) is False      # nothing observed: not "sure"


def test_each_engine_apart():
    w = Window(metrics=(MetricsSample(T0, "vllm", "vllm-test", (
        EngineState("vllm", "vllm-test", {"engine": "0"}, histograms={"itl": hist(0.0, 0.0)}),
        EngineState("vllm", "vllm-test", {"engine": "1"}, histograms={"itl": hist(0.0, 0.0)}))),
        MetricsSample(T0 + 30, "vllm", "vllm-test", (
            EngineState("vllm", "vllm-test", {"engine": "0"}, histograms={"itl": hist(10.0, 200.0)}),
            EngineState("vllm", "vllm-test", {"engine": "1"}, histograms={"itl": hist(200.0, 200.0)})))))
    assert [v.details["engine"] for v in B.detect(w, CONFIG)] == ["engine=1"]


def _two_kinds(itl_old, itl_new):
    """itl as given (None: absent), and a blind ttft (200 observations in its first bucket) after it."""
    old = {"ttft": hist(0.0, 0.0)} | ({"itl": itl_old} if itl_old is not None else {})
    new = {"ttft": hist(200.0, 200.0)} | ({"itl": itl_new} if itl_new is not None else {})
    return Window(metrics=(scrape(0, old), scrape(30, new)))


def test_each_kind_is_judged_whatever_the_one_before_it():
    cases = {
        "itl in one scrape only": (None, hist(200.0, 200.0)),
        "itl surely not blind": (hist(0.0, 0.0), hist(10.0, 200.0)),
        "itl's delta unreadable (a bucket went down)": (
            Histogram(edges=EDGES, cumulative=(0.0, 500.0, 500.0, 500.0), count=500.0, sum=5.0),
            Histogram(edges=EDGES, cumulative=(900.0, 450.0, 900.0, 900.0), count=900.0, sum=5.0)),
        "itl without edges": (Histogram(edges=(), cumulative=(), count=0.0, sum=0.0),
                              Histogram(edges=(), cumulative=(), count=200.0, sum=1.0)),
    }
    for what, (old, new) in cases.items():
        assert [v.details["histogram"] for v in B.detect(_two_kinds(old, new), CONFIG)] == ["ttft"], what


def test_the_first_bucket_count_is_the_evidence():
    v, = B.detect(window(9950.0, 10_000.0), CONFIG)
    assert v.evidence[-1] == Evidence("metrics", T0 + 30, "histograms.itl.cumulative[0]", 9950.0)


def test_surely_not_blind_on_the_delta_of_the_first_bucket():
    assert B._surely_not_blind(hist(0.0, 1.0), hist(0.0, 0.0), 0.5) is True          # one observation, not in bucket one
    old = hist(100.0, 100.0)
    assert B._surely_not_blind(hist(150.0, 200.0), old, MIN) is True                 # (150 - 100) / 100 = 0.5
    assert B._surely_not_blind(hist(200.0, 200.0), old, MIN) is False                # (200 - 100) / 100 = 1.0
