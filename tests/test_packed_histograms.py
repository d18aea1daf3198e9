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


# --- the dialect packs a scrape read through a layout itself (issue 54: serve's CPU a scrape) ----------------

def _laid_out(text: str, later: str):
    """`later` read through the layout learned from `text`, its full parse, and its engine's histograms read through
    the layout one kind at a time (as the dialect read them before it packed them itself)."""
    from servewatch.dialects import base, read_families, vllm, wanted_families
    from servewatch.exposition.layout import RepeatingParser

    parser = RepeatingParser()
    parser.parse(text, wanted_families())
    families = parser.parse(later, wanted_families())
    assert parser.fast_reads == 1
    by_kind = {kind: base.histograms_by(base.first_family(families, *names), vllm.IDENTITY_LABELS)
               for kind, names in vllm.HISTOGRAMS.items()}
    one, = {key for found in by_kind.values() for key in found}
    return read_families(families), read_scrape(later), {kind: found[one] for kind, found in by_kind.items() if found}


def _moved(text: str, factor: float) -> str:
    import re

    return re.sub(r"^((?:vllm:[a-z_]+_(?:bucket|count|sum))(?:\{[^\n]*\})?) (\S+)$",
                  lambda m: f"{m.group(1)} {float(m.group(2)) * factor + 1:.17g}", text, flags=re.M)


def test_a_scrape_read_through_a_layout_comes_packed_as_the_ring_would_pack_it_bit_for_bit():
    text = CAPTURE.read_text()
    later = _moved(text, 1.37)
    laid, full, kinds = _laid_out(text, later)
    state, = laid.engines
    as_read, = full.engines
    assert type(state.histograms) is PackedHistograms and type(as_read.histograms) is dict
    ring_packed = pack_histograms(kinds)
    assert state.histograms._values.tobytes() == ring_packed._values.tobytes()       # every value, bit for bit
    assert state.histograms._layout == ring_packed._layout and list(state.histograms) == list(as_read.histograms)
    assert all(state.histograms._layout[kind][0] is ring_packed._layout[kind][0] for kind in ring_packed)  # edges
    assert state == as_read and laid == full
    assert len(state.histograms._values) == sum(n + 2 for _, _, n in state.histograms._layout.values())   # no spare
    ring = Ring({"metrics": 4})
    ring.add(MetricsSample(1.0, "vllm", laid.naming, (state,)))
    assert ring.window().metrics[0].engines[0].histograms is state.histograms       # the ring keeps it as it is


HEAD = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1\n"


def _family(name: str, buckets, count, total, labels='engine="0",model_name="m"', extra="") -> str:
    lines = [f"# TYPE {name} histogram"]
    for le, value in buckets:
        lines.append(f'{name}_bucket{{{labels},le="{le}"}} {value}')
    lines.append(f"{name}_count{{{labels}}} {count}")
    if total is not None:
        lines.append(f"{name}_sum{{{labels}}} {total}")
    return "\n".join(lines) + "\n" + extra


def test_odd_counts_and_sums_come_packed_as_the_dict_read_gives_them():
    def scrape(count, total, first):
        return HEAD + _family("vllm:time_to_first_token_seconds", [("0.1", first), ("1.0", 2), ("+Inf", count)],
                              count, total) + \
            _family("vllm:e2e_request_latency_seconds", [("0.5", 1), ("5.0", 2), ("+Inf", 3)], 3, None)
    for count, total, first in [("-0", "-0", "-0"), ("+Inf", "NaN", "1e-300"), ("7", "1e308", "NaN")]:
        laid, full, kinds = _laid_out(scrape(1, 1, 1), scrape(count, total, first))
        state, as_read = laid.engines[0], full.engines[0]
        assert type(state.histograms) is PackedHistograms and type(as_read.histograms) is dict
        packed = pack_histograms(kinds)
        assert state.histograms._values.tobytes() == packed._values.tobytes(), (count, total, first)
        assert state.histograms._layout == packed._layout
        assert math.isnan(state.histograms["e2e"].sum)                            # no _sum: NaN, as the dict read
        if count == "-0":      # a bucket is read as written, the count and sum as added up: -0.0 and 0.0
            assert repr(state.histograms["ttft"].cumulative[0]) == "-0.0"
            assert repr(state.histograms["ttft"].count) == repr(state.histograms["ttft"].sum) == "0.0"
    assert repr(state.histograms["ttft"].count) == "7.0"


def test_an_identity_adding_up_label_sets_or_a_full_parse_is_read_as_histograms():
    other = 'engine="0",model_name="m",is_streaming="x"'
    twice = HEAD + _family("vllm:time_to_first_token_seconds", [("0.1", 1), ("1.0", 2), ("+Inf", 3)], 3, 1) + \
        _family("vllm:time_to_first_token_seconds", [("0.1", 1), ("1.0", 2), ("+Inf", 3)], 3, 1,
                labels=other).replace("# TYPE vllm:time_to_first_token_seconds histogram\n", "")
    laid, full, _ = _laid_out(twice, twice.replace(" 2\n", " 5\n"))
    assert type(laid.engines[0].histograms) is dict and laid == full
    assert laid.engines[0].histograms["ttft"].cumulative == array("d", (2.0, 10.0))
    assert type(read_scrape(CAPTURE.read_text()).engines[0].histograms) is dict        # not through a layout
