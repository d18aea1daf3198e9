"""A scrape's histograms held packed in the ring (engine.state.PackedHistograms, issue 54's memory): every reader gets
the same Histograms, verdicts and bundles as from the histograms as read, in about half the memory."""

from __future__ import annotations

import copy
import math
import pickle
import sys
from array import array
from pathlib import Path

import pytest

from servewatch.bundle.serialize import sample_to_dict
from servewatch.detectors import blindness, evidence_window, run_detectors
from servewatch.detectors.config import DetectorConfig
from servewatch.dialects import read_scrape
from servewatch.engine.state import EngineState, Histogram, PackedHistograms, pack_histograms
from servewatch.timeline.ring import Ring
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

CAPTURE = Path(__file__).parent / "fixtures" / "vllm_real" / "kv_pressure_t1.prom"
EDGES = (0.01, 0.025, 0.05, 0.1)


def scraped() -> dict[str, Histogram]:
    """The seven latency histograms of a real vLLM 0.32 scrape, as the dialect reads them."""
    state, = read_scrape(CAPTURE.read_text()).engines
    assert len(state.histograms) == 7 and type(state.histograms) is dict
    return state.histograms


def hist(first: float, count: float, edges=EDGES) -> Histogram:
    return Histogram(edges, array("d", (first, count, count, count)), count, first * 0.005 + (count - first) * 0.02)


def test_packed_reads_back_every_histogram_equal():
    histograms = scraped()
    packed = pack_histograms(histograms)
    assert type(packed) is PackedHistograms
    assert packed == histograms and histograms == packed and dict(packed) == histograms
    assert list(packed) == list(histograms) and len(packed) == 7
    for kind, h in histograms.items():
        back = packed[kind]
        assert type(back) is Histogram and back.edges is h.edges
        assert type(back.cumulative) is array and back.cumulative.typecode == "d"
        assert (back.cumulative, back.count, back.sum) == (h.cumulative, h.count, h.sum)
        assert type(back.count) is float and type(back.sum) is float
        assert kind in packed and packed.get(kind) == h
    assert "nope" not in packed and packed.get("nope") is None and packed.get("nope", 1) == 1
    with pytest.raises(KeyError):
        packed["nope"]
    assert repr(packed).startswith("PackedHistograms({'")


def test_special_values_come_back_bit_for_bit():
    odd = {"itl": Histogram(EDGES, array("d", (-0.0, 1.0, math.inf, 3.0)), -0.0, math.nan),
           "ttft": Histogram((), array("d"), 5.0, 1e-300)}
    packed = pack_histograms(odd)
    assert type(packed) is PackedHistograms
    itl = packed["itl"]
    assert [math.copysign(1, v) for v in (itl.cumulative[0], itl.count)] == [-1, -1]
    assert itl.cumulative[2] == math.inf and math.isnan(itl.sum)
    assert packed["ttft"] == odd["ttft"] and len(packed["ttft"].cumulative) == 0


@pytest.mark.parametrize("histograms", [
    {},
    {"itl": Histogram(EDGES, (1.0, 2.0, 3.0, 4.0), 4.0, 1.0)},                  # buckets not an array("d")
    {"itl": Histogram(EDGES, array("d", (1.0, 2.0, 3.0, 4.0)), 4, 1.0)},        # an int count: would come back 4.0
    {"itl": Histogram(EDGES, array("d", (1.0, 2.0, 3.0, 4.0)), 4.0, 1)},        # an int sum
    {"itl": Histogram(EDGES, array("f", (1.0, 2.0, 3.0, 4.0)), 4.0, 1.0)},      # other array kinds
])
def test_what_would_not_come_back_the_same_is_left_as_it_is(histograms):
    assert pack_histograms(histograms) is histograms


def test_scrapes_of_the_same_histograms_share_one_layout():
    a, b = pack_histograms(scraped()), pack_histograms(scraped())
    assert a._layout is b._layout
    assert pack_histograms(a) is a                           # packed once only


def test_packed_holds_about_half_the_memory():
    """What a scrape's histograms hold, by sys.getsizeof: 2,768 B as read (the dict, and each Histogram, its
    array and two floats), 1,392 B packed (measured 2026-12-07)."""
    histograms = scraped()
    as_read = sys.getsizeof(histograms) + sum(sys.getsizeof(h) + sys.getsizeof(h.cumulative) + sys.getsizeof(h.count)
                                              + sys.getsizeof(h.sum) for h in histograms.values())
    packed = pack_histograms(histograms)
    held = sys.getsizeof(packed) + sys.getsizeof(packed._values)
    assert held <= 0.55 * as_read, (held, as_read)


def test_copies_and_pickles_are_equal():
    packed = pack_histograms(scraped())
    assert pickle.loads(pickle.dumps(packed)) == packed
    assert copy.deepcopy(packed) == packed


def scrape(t: float, histograms: dict, engine: str = "0") -> MetricsSample:
    state = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": engine}, histograms=histograms)
    return MetricsSample(1000.0 + t, "vllm", "vllm-test", (state,))


def blind_scrapes() -> list[MetricsSample]:
    """An ITL histogram going blind over a minute, a TTFT one that is not, on two engines."""
    out = []
    for i in range(13):
        for engine in ("0", "1"):
            out.append(scrape(5.0 * i, {"itl": hist(30.0 * i, 30.0 * i), "ttft": hist(5.0 * i, 30.0 * i),
                                        "e2e": hist(1.0, 2.0)}, engine))
    return out


def test_the_ring_packs_and_the_verdicts_and_bundles_are_the_same():
    ring = Ring({"metrics": 100})
    ring.extend(blind_scrapes())
    window = ring.window()
    assert all(type(state.histograms) is PackedHistograms for m in window.metrics for state in m.engines)
    as_read = Window(metrics=tuple(blind_scrapes()))
    assert all(type(state.histograms) is dict for m in as_read.metrics for state in m.engines)
    config = DetectorConfig()
    verdicts = run_detectors(window, config)
    assert [v.name for v in verdicts if v.name == "histogram_blind"] == ["histogram_blind"] * 2
    assert verdicts == run_detectors(as_read, config)
    assert blindness.detect(window, config) == blindness.detect(as_read, config)
    assert ([sample_to_dict(m) for m in evidence_window(window, config).metrics]
            == [sample_to_dict(m) for m in evidence_window(as_read, config).metrics])
    assert [sample_to_dict(m) for m in window.metrics] == [sample_to_dict(m) for m in as_read.metrics]


def test_the_ring_memory_benchmark_counts_what_a_scrape_holds():
    """benchmarks/recorder_memory.py --scrape-bytes, CI's ring_memory figure: 3,051 against 4,392 bytes a scrape
    (0.69x) at 300 scrapes (2026-12-07); the tree before packing held 4,417 (1.01x)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "recorder_memory.py"
    spec = importlib.util.spec_from_file_location("benchmarks_recorder_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = module.scrape_bytes(100)
    assert 3500 <= found["as_read_bytes_per_scrape"] <= 5500
    assert 0.6 <= found["ring_ratio"] <= 0.8, found          # 0.71 at 100
