"""Generated expositions: our parser equals prometheus_client value for value, and families= equals the
full parse restricted to the asked families."""

from __future__ import annotations

import math
import operator
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from servewatch.exposition.parser import parse

EXAMPLES = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Names end with their family's index so that no family name equals another's name plus a suffix.
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
NAME_STEM = st.builds(operator.add, st.sampled_from(LETTERS + "_:"),
                      st.text(alphabet=LETTERS + "0123456789_:", max_size=10))
LABEL_NAME = st.builds(operator.add, st.sampled_from(LETTERS),
                       st.text(alphabet=LETTERS + "0123456789_", max_size=8)).filter(
    lambda name: name not in ("le", "quantile"))
LABEL_VALUE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=10)
HELP_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), max_size=30)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


# Strategies are built once: building them inside the composites costs most of the run time.
FLOAT_SPELLINGS = [repr, lambda value: f"{value:.6e}", lambda value: f"{value:.3f}"]
NUMBER = st.one_of(
    st.integers(-10**18, 10**18).map(str),
    st.builds(lambda value, spell: spell(value), st.floats(allow_nan=False, allow_infinity=False),
              st.sampled_from(FLOAT_SPELLINGS)),
    st.sampled_from(["NaN", "nan", "+Inf", "Inf", "inf", "+inf", "-Inf", "-inf"]),
)
LABEL_NAMES = st.lists(LABEL_NAME, max_size=3, unique=True)
TIMESTAMP = st.one_of(st.none(), st.integers(-10**12, 10**13))
KIND_004 = st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "none"])
KIND_OPENMETRICS = st.sampled_from(["counter", "gauge", "histogram", "unknown"])
EXEMPLAR = st.sampled_from(["", ' # {trace_id="t-1"} 0.5'])
BOOLEAN = st.booleans()
FAMILY_COUNT = st.integers(0, 5)
SERIES_COUNT = st.integers(0, 2)


def number():
    return NUMBER


@st.composite
def label_sets(draw) -> list[tuple[str, str]]:
    return [(name, draw(LABEL_VALUE)) for name in draw(LABEL_NAMES)]


def sample_line(name: str, labels: list[tuple[str, str]], value: str, timestamp: int | None) -> str:
    text = name
    if labels:
        text += "{" + ",".join(f'{key}="{escape_label_value(val)}"' for key, val in labels) + "}"
    text += " " + value
    if timestamp is not None:
        text += f" {timestamp}"
    return text


@st.composite
def exposition_004(draw) -> str:
    """A Prometheus text 0.0.4 body as prometheus_client writes it (counters named *_total,
    _created as gauge families), with untyped samples mixed in."""
    lines: list[str] = []
    for index in range(draw(FAMILY_COUNT)):
        stem = f"{draw(NAME_STEM)}{index}"
        kind = draw(KIND_004)
        name = stem + "_total" if kind == "counter" else stem
        if kind != "none":
            if draw(BOOLEAN):
                lines.append(f"# HELP {name} {escape_help(draw(HELP_TEXT))}".rstrip())
            lines.append(f"# TYPE {name} {kind}")
        for _ in range(max(draw(SERIES_COUNT), kind == "none")):   # a family without TYPE needs a sample
            labels = draw(label_sets())
            timestamp = draw(TIMESTAMP)
            if kind == "histogram":
                for bound in ["0.1", "+Inf"]:
                    lines.append(sample_line(stem + "_bucket", labels + [("le", bound)], draw(number()), timestamp))
                lines.append(sample_line(stem + "_count", labels, draw(number()), timestamp))
                lines.append(sample_line(stem + "_sum", labels, draw(number()), None))
            elif kind == "summary":
                lines.append(sample_line(stem, labels + [("quantile", "0.5")], draw(number()), timestamp))
                lines.append(sample_line(stem + "_count", labels, draw(number()), None))
                lines.append(sample_line(stem + "_sum", labels, draw(number()), timestamp))
            else:
                lines.append(sample_line(name, labels, draw(number()), timestamp))
        if kind in ("counter", "histogram", "summary") and draw(BOOLEAN):
            lines.append(f"# TYPE {stem}_created gauge")
            lines.append(sample_line(stem + "_created", [], draw(number()), None))
    body = "\n".join(lines)
    return body + "\n" if draw(BOOLEAN) else body


def multiset(samples) -> Counter:
    return Counter(
        (s.name, tuple(sorted(s.labels.items())), "NaN" if math.isnan(s.value) else float(s.value),
         None if s.timestamp is None else float(s.timestamp))
        for s in samples)


def canonical(families) -> dict:
    return {name: (family.type, family.help, [(s.name, s.labels, repr(s.value), s.timestamp)
                                               for s in family.samples])
            for name, family in families.items()}


@EXAMPLES
@given(exposition_004(), st.data())
def test_generated_004_equals_prometheus_client_and_fast_path_equals_full(text, data):
    ours = parse(text)
    expected = multiset(s for family in text_string_to_metric_families(text) for s in family.samples)
    assert multiset(s for family in ours.values() for s in family.samples) == expected
    for family in text_string_to_metric_families(text):
        if family.type == "unknown":               # prometheus_client's Metric renames untyped to unknown
            assert ours[family.name].type in ("untyped", "unknown")
            continue
        key = family.name + "_total" if family.type == "counter" else family.name
        assert (ours[key].type, ours[key].help) == (family.type, family.documentation)

    names = sorted(ours)
    asked = set(data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([])))
    asked |= set(data.draw(st.lists(NAME_STEM, max_size=2)))           # names that may not be there
    restricted = {name: family for name, family in ours.items() if name in asked}
    assert canonical(parse(text, asked)) == canonical(restricted)


@st.composite
def exposition_openmetrics(draw) -> str:
    """An OpenMetrics body: counters declared without _total, _created inside the family, histograms
    with ordered integer buckets, exemplars on buckets and counters, # EOF."""
    lines: list[str] = []
    for index in range(draw(st.integers(0, 5))):
        name = f"{draw(NAME_STEM)}{index}"
        kind = draw(KIND_OPENMETRICS)
        lines.append(f"# TYPE {name} {kind}")
        if draw(BOOLEAN):
            lines.append(f"# HELP {name} {escape_help(draw(HELP_TEXT.filter(bool)))}")
        exemplar = EXEMPLAR
        label_names: list[list[tuple[str, str]]] = []
        for _ in range(draw(st.integers(0, 3))):
            labels = draw(label_sets())
            if any(labels == seen for seen in label_names):
                continue
            label_names.append(labels)
            if kind == "counter":
                total = draw(st.integers(0, 10**9))
                lines.append(sample_line(name + "_total", labels, str(total), None) + draw(exemplar))
                if draw(BOOLEAN):
                    lines.append(sample_line(name + "_created", labels, f"{draw(st.integers(0, 2**31))}.5",
                                             None))
            elif kind == "histogram":
                counts = sorted(draw(st.lists(st.integers(0, 10**6), min_size=3, max_size=3)))
                for bound, count in zip(["0.1", "1.0", "+Inf"], counts):
                    lines.append(sample_line(name + "_bucket", labels + [("le", bound)], str(count), None)
                                 + draw(exemplar))
                lines.append(sample_line(name + "_count", labels, str(counts[-1]), None))
                lines.append(sample_line(name + "_sum", labels, draw(st.integers(0, 10**6)).__str__(), None))
            else:
                lines.append(sample_line(name, labels, draw(number()), None))
    return "\n".join(lines + ["# EOF"]) + "\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exposition_openmetrics(), st.data())
def test_generated_openmetrics_equals_prometheus_client_and_fast_path_equals_full(text, data):
    ours = parse(text)
    expected = multiset(s for family in openmetrics_families(text) for s in family.samples)
    assert multiset(s for family in ours.values() for s in family.samples) == expected
    for family in openmetrics_families(text):
        assert (ours[family.name].type, ours[family.name].help) == (family.type, family.documentation)

    # asking for an OpenMetrics counter by its sample name (foo_total) finds nothing: foo owns it
    names = sorted(ours) + [name + "_total" for name in ours]
    asked = set(data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([])))
    restricted = {name: family for name, family in ours.items() if name in asked}
    assert canonical(parse(text, asked)) == canonical(restricted)


def careful_labels(segment: str):
    """The reference: the escape-aware label scanner alone, or the error it raises."""
    from servewatch.errors import ExpositionError
    from servewatch.exposition.labels import parse_labels

    line = "m{" + segment + "} 1"
    try:
        labels, end = parse_labels(line, 2, 2, set())
    except ExpositionError:
        return "error"
    return labels if line[end:] == " 1" else "error"


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='ab=",\\ n}', max_size=16), st.sampled_from(['a="1"', 'a="1",b="2"', 'a="1",']))
def test_label_fast_path_agrees_with_the_careful_scanner(segment, primer):
    """Whatever the segment, after a line that primes a label layout, parse() gives the careful
    scanner's labels or an error exactly when the careful scanner fails."""
    from servewatch.errors import ExpositionError

    expected = careful_labels(segment)
    text = f"m{{{primer}}} 0\nm{{{segment}}} 1\n"
    try:
        got = parse(text)["m"].samples[-1].labels
    except ExpositionError:
        got = "error"
    assert got == expected
