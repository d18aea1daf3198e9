"""Values of servewatch/bundle/series.py (issue 50: the series a bundle's report charts, found by the mutation rule):
health as 1/0, running and waiting summed over engines, KV % the fullest engine's, the generation rate between
consecutive scrapes — None across a failed scrape or a counter reset. Each figure computed by hand beside it."""

from __future__ import annotations

from servewatch.bundle.series import LABELS, SERIES, timeline_series
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import HealthSample, MetricsSample, ProcessSample


def engine(running=None, waiting=None, kv=None, tokens=None, rank="0"):
    return EngineState("vllm", "vllm-test", {"engine": rank}, running=running, waiting=waiting, kv_usage=kv,
                       counters=Counters(generation_tokens=tokens))


def scrape(t, *engines, error=None):
    return MetricsSample(t, "vllm", "vllm-test", tuple(engines), error=error)


def test_the_series_of_two_engines():
    samples = [
        HealthSample(10.0, 200, 0.01),
        scrape(10.0, engine(2, 1, 0.25, 100.0), engine(3, 0, 0.5, 50.0, rank="1")),
        HealthSample(12.0, 503, 0.01),
        scrape(12.0, engine(1, 4, 0.75, 180.0), engine(None, None, None, 70.0, rank="1")),
        HealthSample(14.0, None, None, error="connect"),
        HealthSample(15.0, 299, 0.01),
        HealthSample(16.0, 300, 0.01),
    ]
    out = timeline_series(samples)
    assert list(out) == list(SERIES) and set(LABELS) == set(SERIES)
    # 2xx is 1, anything else (503, no answer, 300) 0
    assert out["health"] == [(10.0, 1.0), (12.0, 0.0), (14.0, 0.0), (15.0, 1.0), (16.0, 0.0)]
    # summed over engines, an engine that says nothing left out; KV % the fullest engine's x 100
    assert out["running"] == [(10.0, 5.0), (12.0, 1.0)] and out["waiting"] == [(10.0, 1.0), (12.0, 4.0)]
    assert out["kv_pct"] == [(10.0, 50.0), (12.0, 75.0)]
    # tokens 150 then 250: (250 - 150) / (12 - 10)
    assert out["progress_rate"] == [(10.0, None), (12.0, 50.0)]


def test_no_rate_across_a_failed_scrape_a_reset_or_a_missing_counter():
    samples = [
        scrape(0.0, engine(1, 0, None, 100.0)),
        scrape(4.0, engine(1, 0, None, 140.0)),           # (140 - 100) / 4
        scrape(6.0, error="timeout"),                      # failed: every engine series None, the rate starts over
        scrape(8.0, engine(1, 0, None, 160.0)),
        scrape(10.0, engine(1, 0, None, 20.0)),           # a reset (the counter went down): no rate
        scrape(12.0, engine(1, 0, None, 20.0)),           # unchanged: 0, not None
        scrape(13.0, engine(1, 0, None, None)),           # no counter: no rate, and none after it
        scrape(14.0, engine(1, 0, None, 30.0)),
        scrape(14.0, engine(1, 0, None, 40.0)),           # no time passed: no rate
        scrape(15.0),                                      # no engine: like a failed scrape
        scrape(16.0, engine(None, None, None, 50.0)),
        ProcessSample(16.5, 123, None, True),              # other samples are not charted here
        scrape(17.0, engine(None, None, None, 53.0)),
    ]
    out = timeline_series(samples)
    assert out["progress_rate"] == [(0.0, None), (4.0, 10.0), (6.0, None), (8.0, None), (10.0, None), (12.0, 0.0),
                                    (13.0, None), (14.0, None), (14.0, None), (15.0, None), (16.0, None),
                                    (17.0, 3.0)]
    assert [v for _, v in out["running"]] == [1.0, 1.0, None, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, None, None, None]
    assert out["kv_pct"][0] == (0.0, None) and out["waiting"][2] == (6.0, None) and out["health"] == []


def test_a_scrape_that_failed_charts_nothing_whatever_it_holds():
    out = timeline_series([scrape(0.0, engine(1, 0, 0.5, 10.0)), scrape(2.0, engine(3, 2, 0.75, 30.0), error="too_large"),
                           scrape(4.0, engine(1, 0, 0.5, 50.0))])
    assert out["running"] == [(0.0, 1.0), (2.0, None), (4.0, 1.0)] and out["kv_pct"][1] == (2.0, None)
    assert out["progress_rate"] == [(0.0, None), (2.0, None), (4.0, None)]       # no rate across the failed one
