"""The layout path (a server's next scrape read through the layout of its previous one) gives exactly
what the full parse gives — the same families, the same engine states, the same typed failure — on
every real capture, and on captures changed in the ways a server, a proxy or an attacker changes them."""

import random
import re
from pathlib import Path

import pytest

from servewatch.dialects import read_families, read_scrape, wanted_families
from servewatch.errors import ExpositionError
from servewatch.exposition.layout import Layout, RepeatingParser
from servewatch.exposition.parser import parse
from servewatch.sources.metrics import MetricsSource
from servewatch.sources.scrape import read_metrics
from tests.tools import in_ci

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = sorted([*FIXTURES.glob("vllm_real/*.prom"), *FIXTURES.glob("sglang_real/*.prom"),
                   *FIXTURES.glob("metrics/*.prom")])
VALUE = re.compile(r"^([^#\s][^\n]*) (\S+)$", re.M)


def moved(text: str, seed: int) -> str:
    """The same scrape a moment later: every sample value changed, nothing else."""
    rng = random.Random(seed)
    return VALUE.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * (1 + rng.random()) + rng.randint(0, 9):g}"
                     if m.group(2) not in ("NaN", "+Inf", "-Inf") else m.group(0), text)


@pytest.fixture(autouse=True, params=["piece by piece", "compiled matcher", "compiled read"])
def reading(request, monkeypatch):
    """Every case three times: through the piece-by-piece loop, through the compiled matcher a layout gets
    once it has been read often (both in Python), and through the compiled read (servewatch/exposition/_layout.c,
    where it was built)."""
    import servewatch.exposition.layout as layout

    if request.param == "compiled read":
        _built(layout)
    else:
        monkeypatch.setattr(layout, "_compiled", None)
    monkeypatch.setattr(layout, "COMPILE_AFTER", 10**9 if request.param == "piece by piece" else 1)
    return request.param


def _built(layout):
    if layout._compiled is None:
        if in_ci():
            pytest.fail("servewatch.exposition._layout was not built; under CI=true `pip install -e .` builds it",
                        pytrace=False)
        pytest.skip("servewatch.exposition._layout was not built (pip install -e . builds it where a C compiler is)")


def outcome(read, text):
    """("ok", result) or (the failure's type, its one line, its line number)."""
    try:
        return "ok", read(text)
    except ExpositionError as error:
        return type(error), str(error), error.line_no


def learned(text: str) -> RepeatingParser:
    parser = RepeatingParser()
    parser.parse(text, wanted_families())
    assert parser.layout is not None and parser.full_reads == 1
    return parser


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_next_scrape_through_the_layout_equals_a_full_parse(capture):
    text = capture.read_text()
    parser = learned(text)
    for seed in range(3):
        later = moved(text, seed)
        assert later != text
        families = parser.parse(later, wanted_families())
        assert families == parse(later, wanted_families())
        assert read_families(families) == read_scrape(later)     # the same EngineState, field by field
    assert (parser.fast_reads, parser.full_reads) == (3, 1)       # ... and it was the layout that read them


def test_a_source_reads_consecutive_real_scrapes_as_the_library_path_does():
    source = MetricsSource(transport=None, clock=None, interval=1.0)
    texts = [(FIXTURES / "vllm_real" / name).read_text() for name in ("kv_pressure_t0.prom", "kv_pressure_t1.prom")]
    for text in [texts[0], moved(texts[0], 1), texts[1], moved(texts[1], 2), moved(texts[1], 3)]:
        ours = read_metrics(200, text.encode(), source.bounds, read_scrape=source.read_scrape)
        library = read_metrics(200, text.encode(), source.bounds)
        assert ours.engines == library.engines and (ours.dialect, ours.naming) == (library.dialect,
                                                                                       library.naming)
    # t0 and t1, taken minutes apart from one real vLLM under load, differ only in their values:
    # only the first scrape was parsed in full.
    assert (source.parser.fast_reads, source.parser.full_reads) == (4, 1)


def _first_wanted_value_line(text: str) -> re.Match:
    return next(m for m in VALUE.finditer(text) if m.group(1).startswith("vllm:num_requests_running"))


def _unwanted_value_line(text: str) -> re.Match:
    return next(m for m in VALUE.finditer(text) if m.group(1).startswith("python_gc_objects_collected_total"))


def _swap(text: str, match: re.Match, line: str) -> str:
    return text[:match.start()] + line + text[match.end():]


BASE = (FIXTURES / "vllm_real" / "kv_pressure_t1.prom").read_text()
RUNNING = _first_wanted_value_line(BASE)
UNWANTED = _unwanted_value_line(BASE)
CHANGED = {
    "a kept value that is not a number": _swap(BASE, RUNNING, f"{RUNNING.group(1)} abc"),
    "a kept value with an underscore": _swap(BASE, RUNNING, f"{RUNNING.group(1)} 1_000"),
    "a kept value with a timestamp": _swap(BASE, RUNNING, f"{RUNNING.group(1)} 3 1700000000000"),
    "a kept value with an exemplar": _swap(BASE, RUNNING, f'{RUNNING.group(1)} 3 # {{trace_id="a"}} 1'),
    "a kept value run into its name": _swap(BASE, RUNNING, f"{RUNNING.group(1)}3"),
    "a kept value missing": _swap(BASE, RUNNING, f"{RUNNING.group(1)} "),
    "a value nobody reads that is not a number": _swap(BASE, UNWANTED, f"{UNWANTED.group(1)} abc"),
    "a new series": BASE.replace(RUNNING.group(0), RUNNING.group(0) + "\n" +
                                 RUNNING.group(1).replace('engine="0"', 'engine="1"') + " 7"),
    "a series gone": BASE.replace(RUNNING.group(0) + "\n", ""),
    "a line over the line bound": _swap(BASE, UNWANTED, f"{UNWANTED.group(1)} {'9' * 70_000}"),
    "cut in the middle of a line": BASE[:len(BASE) // 2],
    "cut after a kept value": BASE[:RUNNING.end()],
    "an OpenMetrics end": BASE + "# EOF\n",
    "text after the end": BASE + "# EOF\nvllm:num_requests_running{engine=\"0\"} 1\n",
    "a blank before a sample": _swap(BASE, RUNNING, " " + RUNNING.group(0)),
    "an HTML error page": "<html><body>502 Bad Gateway</body></html>\n",
    "empty": "",
    "Windows line ends": BASE.replace("\n", "\r\n"),
}


@pytest.mark.parametrize("name", CHANGED)
def test_a_changed_scrape_gives_what_the_full_parse_gives_values_or_the_same_typed_failure(name):
    text = CHANGED[name]
    parser = learned(BASE)
    ours = outcome(lambda t: parser.parse(t, wanted_families()), text)
    library = outcome(lambda t: parse(t, wanted_families()), text)
    assert ours == library
    if ours[0] == "ok":
        assert outcome(lambda t: read_families(parser.parse(t, wanted_families())), text) == \
            outcome(read_scrape, text)


def test_malformed_kept_values_are_left_to_the_full_parse():
    parser = learned(BASE)
    for name in ("a kept value that is not a number", "a kept value with an underscore", "a kept value with a timestamp",
                 "a kept value run into its name", "a line over the line bound", "a new series"):
        assert parser.layout.read(CHANGED[name]) is None, name


def test_a_value_nobody_reads_does_not_send_the_scrape_to_the_full_parse():
    parser = learned(BASE)
    parser.parse(CHANGED["a value nobody reads that is not a number"], wanted_families())
    assert parser.fast_reads == 1


def test_a_scrape_with_timestamps_on_kept_samples_is_not_learned():
    text = _swap(BASE, RUNNING, f"{RUNNING.group(1)} 3 1700000000000")
    origins: list = []
    families = parse(text, wanted_families(), origins=origins)
    assert Layout.learn(text, families, origins) is None
    assert Layout.learn(BASE, (found := parse(BASE, wanted_families(), origins=(kept := []))), kept) is not None
    assert len(kept) == sum(len(f.samples) for f in found.values())


def test_replicas_serving_the_same_layout_share_one():
    one, other = learned(BASE), learned(moved(BASE, 7))
    assert one.layout is other.layout


def test_a_laid_out_scrape_becomes_engine_states_without_a_sample_object_per_series():
    """serve's CPU per scrape (issue 54): the dialects sum, count and bucket a family read through a layout by
    plans made once per layout and shared by the targets serving it (dialects.base), not through a Sample
    object per series (the first scrape read through a layout makes them once, to plan); the states equal the
    full parse's. Only the family read for its labels alone (vLLM's cache_config_info: the KV capacity) makes
    its samples at every scrape."""
    text = (FIXTURES / "vllm_real" / "kv_pressure_t1.prom").read_text()
    parser = learned(text)
    read_families(parser.parse(moved(text, 6), wanted_families()))
    later = moved(text, 7)
    families = parser.parse(later, wanted_families())
    assert parser.fast_reads == 2
    scrape = read_families(families)
    assert [name for name, family in families.items() if family._built is not None] == ["vllm:cache_config_info"]
    assert scrape == read_scrape(later)
    assert scrape.engines[0].running is not None and scrape.engines[0].histograms


def test_a_nan_sample_is_left_out_of_a_planned_sum_as_of_the_full_parse():
    text = (FIXTURES / "vllm_real" / "kv_pressure_t1.prom").read_text()
    parser = learned(text)
    running = re.compile(r"^(vllm:num_requests_running\{[^\n]*\}) \S+$", re.M)
    later = running.sub(r"\1 NaN", moved(text, 3))
    assert later.count(" NaN\n") >= 1
    families = parser.parse(later, wanted_families())
    assert parser.fast_reads == 1
    scrape = read_families(families)
    assert scrape == read_scrape(later)
    assert [state.running for state in scrape.engines] == [None] * len(scrape.engines)   # its only sample: NaN


# Values as a server, a proxy or an attacker may write them: the compiled read must give what float() gives, and
# refuse (None) what the Python read refuses.
ODD_VALUES = ["1", "-1.5e3", "+2", ".5", "5.", "-0", "1e500", "-1e-400", "+Inf", "-Inf", "NaN", "nan", "inf",
              "Infinity", "1_0", "1__0", "_1", "0x10", "", "1e", "e5", ".", "1 2", "1#", " 1", "1 ", "1\r", "\t1",
              "9" * 70, "1." + "0" * 80, "+-1", "1e+5", "1E-5", "١", "1\x0b"]


@pytest.mark.parametrize("reading", ["compiled read"], indirect=True)   # it compares that read with the Python one
def test_the_compiled_read_gives_what_the_python_read_gives_for_any_value(reading):
    import servewatch.exposition.layout as layout

    first = "# TYPE a gauge\na 1\n# TYPE b counter\nb_total{x=\"y\"} 2\nc 3\n"
    parser = RepeatingParser()
    parser.parse(first, {"a", "b"})
    shape = parser.layout
    assert shape is not None and shape.ascii
    rng = random.Random(54)
    for _ in range(400):
        a, b, c = rng.choice(ODD_VALUES), rng.choice(ODD_VALUES), rng.choice(ODD_VALUES)
        text = f"# TYPE a gauge\na {a}\n# TYPE b counter\nb_total{{x=\"y\"}} {b}\nc {c}\n"
        plain = shape._values(text)
        if text.isascii():
            compiled = layout._compiled.values(text, shape.pieces, shape.slots, shape.tail)
            assert repr(compiled) == repr(plain), (a, b, c)      # repr: NaN equals itself, -0.0 is not 0.0
        assert repr(_values_of(shape.read(text))) == repr(_values_of(_read_in_python(shape, text))), (a, b, c)
    assert layout._compiled.values(first.replace("# TYPE b", "# TYPE B"), shape.pieces, shape.slots, shape.tail) is None
    assert layout._compiled.values(first + "d 4\n", shape.pieces, shape.slots, shape.tail) is None      # the tail
    assert layout._compiled.values(first[:-3], shape.pieces, shape.slots, shape.tail) is None           # cut short


def _values_of(families):
    return None if families is None else {name: list(family.values) for name, family in families.items()}


def _read_in_python(shape, text):
    import servewatch.exposition.layout as layout

    compiled, layout._compiled = layout._compiled, None
    try:
        return shape.read(text)
    finally:
        layout._compiled = compiled
