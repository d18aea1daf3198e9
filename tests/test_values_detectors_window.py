"""Values of servewatch/detectors/__init__.py (issue 50: the window every verdict is judged on, found by the mutation
rule): the lookback slice with the startup stages from before it, the smallest window that gives the same verdicts
(latency histograms kept on each engine's first and last scrape only), and what makes two verdicts the same."""

from __future__ import annotations

from servewatch.detectors import evidence_window, verdict_key, _recent
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Verdict
from servewatch.engine.state import EngineState, Histogram
from servewatch.timeline.samples import LogEvent, MetricsSample
from servewatch.timeline.window import Window

H = Histogram(edges=(0.01,), cumulative=(1.0,), count=1.0, sum=0.005)


def state(rank, histograms=None):
    return EngineState("vllm", "vllm-test", {"engine": rank}, running=1.0, histograms=histograms or {})


def test_what_makes_two_verdicts_the_same():
    v = Verdict("histogram_blind", 5.0, 1.0, "why", (), {"engine": "engine=0", "histogram": "itl", "count": 3})
    assert verdict_key(v) == ("histogram_blind", "engine=0", "itl", None)
    assert verdict_key(Verdict("stall", 5.0, 1.0, "why", (), {})) == ("stall", None, None, None)
    assert verdict_key(Verdict("stall", 5.0, 1.0, "why", (), {"instance": "prefill-0"}))[3] == "prefill-0"


def test_the_lookback_slice_keeps_the_startup_stages_before_it():
    config = DetectorConfig(lookback_s=10.0)
    logs = (LogEvent(1.0, "startup", {"stage": "a"}), LogEvent(2.0, "error"), LogEvent(5.0, "startup"),
            LogEvent(6.0, "stats"), LogEvent(7.0, "startup"))
    window = Window(metrics=(MetricsSample(4.0, "vllm", "x"), MetricsSample(17.0, "vllm", "x")), logs=logs)
    recent = _recent(window, config)                       # the end 17.0: since 7.0
    # the startup lines before 7.0 (not the error, not the stats), then what is at 7.0 or after
    assert [(e.t, e.kind) for e in recent.logs] == [(1.0, "startup"), (5.0, "startup"), (7.0, "startup")]
    assert [m.t for m in recent.metrics] == [17.0]
    assert _recent(Window(), config) is None


def test_the_evidence_window_keeps_the_histograms_blindness_compares():
    config = DetectorConfig(lookback_s=100.0)
    scrapes = (MetricsSample(1.0, "vllm", "x", (state("0", {"itl": H}), state("1", {"ttft": H}))),
               MetricsSample(2.0, "vllm", "x", (state("0", {"itl": H}), state("1", {"ttft": H}))),
               MetricsSample(3.0, "vllm", "x", (state("0", {"itl": H}), state("1"))),
               MetricsSample(4.0, "vllm", "x", (state("0", {"e2e": H}), state("1", {"ttft": H}))),
               MetricsSample(5.0, "vllm", "x", error="timeout"))
    out = evidence_window(Window(metrics=scrapes), config)
    kept = [[sorted(e.histograms) for e in m.engines] for m in out.metrics]
    # engine 0's itl on its first (1.0) and last (3.0) scrape with it; engine 1's ttft on 1.0 and 4.0; e2e is no
    # blind kind: dropped; an engine without histograms and a failed scrape pass unchanged
    assert kept == [[["itl"], ["ttft"]], [[], []], [["itl"], []], [[], ["ttft"]], []]
    assert [m.t for m in out.metrics] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert out.metrics[1].engines[0].running == 1.0 and out.metrics[4] is scrapes[4]
    assert evidence_window(Window(), config) == Window()
