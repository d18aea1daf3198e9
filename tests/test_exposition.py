"""The exposition parser against prometheus_client on the real captures, its semantics, and its errors."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from servewatch.errors import BodyTooLarge, ExpositionError
from servewatch.exposition import parser as parser_module
from servewatch.exposition.model import Sample
from servewatch.exposition.parser import parse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "metrics"
PROM_FIXTURES = sorted(FIXTURES.glob("*.prom"))


def _value_key(value: float) -> object:
    return "NaN" if math.isnan(value) else float(value)


def sample_multiset(samples) -> Counter:
    """(sample name, labels, value, timestamp) with NaN comparable to NaN."""
    return Counter(
        (s.name, tuple(sorted(s.labels.items())), _value_key(s.value),
         None if s.timestamp is None else float(s.timestamp))
        for s in samples)


def ours(families) -> Counter:
    return sample_multiset(s for family in families.values() for s in family.samples)


def canonical(families) -> dict:
    """Families comparable with ==, NaN values included (sample order kept)."""
    return {name: (family.name, family.type, family.help,
                   [(s.name, s.labels, _value_key(s.value), s.timestamp) for s in family.samples])
            for name, family in families.items()}


def theirs(text: str, reader=text_string_to_metric_families) -> Counter:
    return sample_multiset(s for family in reader(text) for s in family.samples)


# --- the real captures -----------------------------------------------------------------------------

def test_fixtures_are_present():
    names = {path.name for path in PROM_FIXTURES}
    assert {"vllm_idle.prom", "vllm_kv_pressure_t0.prom", "vllm_kv_pressure_t1.prom",
            "synthetic_from_registration_code.prom"} <= names


@pytest.mark.parametrize("path", PROM_FIXTURES, ids=lambda p: p.name)
def test_fixture_samples_equal_prometheus_client(path):
    text = path.read_text(encoding="utf-8")
    expected = theirs(text)
    assert sum(expected.values()) > 300
    assert ours(parse(text)) == expected


@pytest.mark.parametrize("path", PROM_FIXTURES, ids=lambda p: p.name)
def test_fixture_families_types_and_help_equal_prometheus_client(path):
    text = path.read_text(encoding="utf-8")
    parsed = parse(text)
    for family in text_string_to_metric_families(text):
        # prometheus_client strips _total from counter family names; ours keep the TYPE-line name
        key = family.name + "_total" if family.type == "counter" and family.name + "_total" in parsed \
            else family.name
        assert parsed[key].type == family.type, key
        assert parsed[key].help == family.documentation, key
    assert len(parsed) == len(list(text_string_to_metric_families(text)))


@pytest.mark.parametrize("path", PROM_FIXTURES, ids=lambda p: p.name)
def test_bytes_and_str_give_the_same_result(path):
    raw = path.read_bytes()
    assert canonical(parse(raw)) == canonical(parse(raw.decode("utf-8")))


def test_vllm_fixture_families_keyed_by_type_line_name():
    families = parse((FIXTURES / "vllm_kv_pressure_t0.prom").read_text(encoding="utf-8"))
    preemptions = families["vllm:num_preemptions_total"]
    assert preemptions.type == "counter"
    assert [s.name for s in preemptions.samples] == ["vllm:num_preemptions_total"]
    # in 0.0.4 prometheus_client serves _created as a gauge family of its own
    assert families["vllm:num_preemptions_created"].type == "gauge"
    itl = families["vllm:inter_token_latency_seconds"]
    assert itl.type == "histogram"
    assert {s.name for s in itl.samples} == {"vllm:inter_token_latency_seconds_bucket",
                                             "vllm:inter_token_latency_seconds_count",
                                             "vllm:inter_token_latency_seconds_sum"}
    first = itl.samples[0]
    assert first.labels == {"engine": "0", "le": "0.01", "model_name": "tiny"}
    assert first.value == 71778.0
    assert families["vllm:num_requests_waiting"].samples[0].value == 9.0


# --- families= --------------------------------------------------------------------------------------

def _restricted(full, names):
    return {name: family for name, family in full.items() if name in names}


@pytest.mark.parametrize("path", PROM_FIXTURES, ids=lambda p: p.name)
def test_families_fast_path_equals_full_parse_restricted(path):
    from servewatch.dialects import wanted_families

    text = path.read_text(encoding="utf-8")
    full = parse(text)
    wanted = set(wanted_families())
    fast = parse(text, wanted)
    assert canonical(fast) == canonical(_restricted(full, wanted))
    assert fast, "the dialect families should be found in the capture"
    every = set(full)
    for subset in (set(), {"vllm:inter_token_latency_seconds"}, {"no_such_family"},
                   set(list(every)[::3]), every):
        assert canonical(parse(text, subset)) == canonical(_restricted(full, subset))


def test_families_fast_path_keeps_resolution_of_created_and_openmetrics_counters():
    text = ("# TYPE a histogram\n"
            'a_bucket{le="+Inf"} 2\n'
            "a_count 2\n"
            "a_sum 3\n"
            "# TYPE a_created gauge\n"
            "a_created 17\n"
            "# TYPE b counter\n"
            "b_total 4\n")
    full = parse(text)
    assert parse(text, {"a"}) == _restricted(full, {"a"})
    assert [s.name for s in full["a"].samples] == ["a_bucket", "a_count", "a_sum"]
    assert parse(text, {"b_total"}) == {}        # b_total belongs to counter b
    assert [s.name for s in parse(text, {"b"})["b"].samples] == ["b_total"]


def test_families_fast_path_skips_lines_of_other_families_unread():
    text = "# TYPE good gauge\ngood 1\n# TYPE bad gauge\nbad{x=\"unterminated 2\n"
    with pytest.raises(ExpositionError):
        parse(text)
    assert parse(text, {"good"})["good"].samples[0].value == 1.0


# --- semantics --------------------------------------------------------------------------------------

def test_label_escapes_special_values_and_timestamps():
    text = ("# HELP m A help with a \\\\ backslash\\nand a newline.\n"
            "# TYPE m gauge\n"
            'm{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",u="ünï,cødé}{="} +Inf\n'
            "m{k=\"2\"} -Inf 1500\n"
            "m{k=\"3\"} NaN\n"
            "m{k=\"4\",} 1e-3 -2000\n")
    family = parse(text)["m"]
    assert family.help == "A help with a \\ backslash\nand a newline."
    first, second, third, fourth = family.samples
    assert first.labels == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb", "u": "ünï,cødé}{="}
    assert first.value == math.inf and first.timestamp is None
    assert second.value == -math.inf and second.timestamp == 1.5      # 0.0.4 timestamps are ms
    assert math.isnan(third.value)
    assert fourth.labels == {"k": "4"} and fourth.value == 0.001 and fourth.timestamp == -2.0
    assert ours(parse(text)) == theirs(text)


def test_untyped_samples_and_help_without_type():
    text = "# HELP lonely Just help.\nlonely 3\nother{a=\"b\"} 4 17\n"
    families = parse(text)
    assert families["lonely"].type == "untyped" and families["lonely"].help == "Just help."
    assert families["other"].type == "untyped"
    assert families["other"].samples == [Sample("other", {"a": "b"}, 4.0, 0.017)]
    assert ours(families) == theirs(text)


def test_blank_and_comment_lines_and_tabs_and_crlf():
    text = ("\n# just a comment\n#\tTYPE t gauge\r\n"
            "t\t5\r\n\n  t{a=\"x\"}  6  \n")
    samples = parse(text)["t"].samples
    assert [(s.labels, s.value) for s in samples] == [({}, 5.0), ({"a": "x"}, 6.0)]


def test_openmetrics_created_belongs_to_family_exemplars_tolerated_eof():
    text = ("# TYPE req counter\n"
            "# HELP req Requests \\\"served\\\".\n"
            'req_total{code="200"} 7 # {trace_id="abc def"} 1.0 1690000000.5\n'
            'req_created{code="200"} 1690000000.0\n'
            "# TYPE lat histogram\n"
            'lat_bucket{le="0.5"} 1 # {trace_id="x"} 0.2\n'
            'lat_bucket{le="+Inf"} 2\n'
            "lat_count 2\n"
            "lat_sum 1.25\n"
            "lat_created 1690000000.0\n"
            "# TYPE up gauge\n"
            "up 1 1690000001.5\n"
            "# EOF\n")
    families = parse(text)
    assert set(families) == {"req", "lat", "up"}
    assert families["req"].help == 'Requests "served".'
    assert [s.name for s in families["req"].samples] == ["req_total", "req_created"]
    assert families["req"].samples[0].value == 7.0
    assert [s.name for s in families["lat"].samples][-1] == "lat_created"
    assert families["up"].samples[0].timestamp == 1690000001.5     # OpenMetrics timestamps are seconds
    assert ours(families) == theirs(text, openmetrics_families)


def test_openmetrics_can_be_forced_and_text_after_eof_is_an_error():
    assert parse("a 1 1500\n", openmetrics=True)["a"].samples[0].timestamp == 1500.0
    assert parse("a 1 1500\n", openmetrics=False)["a"].samples[0].timestamp == 1.5
    with pytest.raises(ExpositionError) as error:
        parse("a 1\n# EOF\nb 2\n", openmetrics=True)
    assert error.value.line_no == 3


def test_fast_sample_construction_equals_the_dataclass():
    assert tuple(field.name for field in dataclasses.fields(Sample)) == parser_module.SAMPLE_FIELDS
    built = parse('x{a="b"} 2.5 1000\n')["x"].samples[0]
    assert built == Sample("x", {"a": "b"}, 2.5, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.value = 3.0


# --- errors -----------------------------------------------------------------------------------------

GOOD = "# HELP g A gauge.\n# TYPE g gauge\ng{a=\"1\"} 1\n"


@pytest.mark.parametrize("bad_line, what", [
    ('g{a="1', "unterminated"),                   # truncated mid label value
    ('g{a="1",b="2"', "unterminated"),            # truncated before the closing brace
    ('g{a="1"}', "without a value"),              # missing value
    ("g", "without a value"),
    ('g{a="x\\t"} 1', "bad escape"),
    ('g{a="1"} twelve', "non-numeric value"),
    ('g{a="1"} 1_000', "non-numeric value"),
    ('g{a="1"} 1 soon', "non-numeric timestamp"),
    ('g{a="1"} 1 2 3', "unexpected text"),
    ('g{a=1} 1', "not quoted"),
    ('g{1a="1"} 1', "invalid label name"),
    ('g{a="1",a="2"} 1', "duplicate label"),
    ('g{a="1" b="2"} 1', "expected ','"),
    ("9g 1", "invalid metric name"),
    ("# TYPE g gauge", "duplicate TYPE"),
    ("# TYPE h wobbly", "unknown type"),
])
def test_bad_structure_names_the_line(bad_line, what):
    text = GOOD + "g{a=\"2\"} 2\n" + bad_line + "\n"
    with pytest.raises(ExpositionError) as error:
        parse(text)
    assert error.value.line_no == 5
    assert str(error.value).startswith("line 5: ")
    assert what in str(error.value)
    assert "\n" not in str(error.value)


def test_type_after_samples_of_the_family():
    with pytest.raises(ExpositionError) as error:
        parse("x 1\nx 2\n# TYPE x gauge\n")
    assert error.value.line_no == 3 and "after its samples" in str(error.value)


def test_bare_sample_of_histogram_family_is_an_error():
    with pytest.raises(ExpositionError) as error:
        parse("# TYPE h histogram\nh 1\n")
    assert error.value.line_no == 2


def test_non_utf8_bytes_name_the_line():
    raw = GOOD.encode() + b'g{a="\xff\xfe"} 2\n'
    with pytest.raises(ExpositionError) as error:
        parse(raw)
    assert error.value.line_no == 4
    assert "not UTF-8" in str(error.value) and "0xff" in str(error.value)


def test_oversize_body_refused_before_work():
    raw = GOOD.encode() * 10
    with pytest.raises(BodyTooLarge) as error:
        parse(raw, max_bytes=len(raw) - 1)
    assert error.value.line_no is None and str(len(raw)) in str(error.value)
    assert parse(raw[:len(GOOD)], max_bytes=len(GOOD))["g"].samples
    # a str is measured in UTF-8 bytes: 10 two-byte characters are 20 bytes
    with pytest.raises(BodyTooLarge):
        parse("# " + "é" * 10 + "\n", max_bytes=21)
    assert parse("# " + "é" * 10 + "\n", max_bytes=23) == {}


def test_default_body_bound_is_16_mib():
    huge = b"#" * (16 * 2**20 + 1)
    with pytest.raises(BodyTooLarge):
        parse(huge)


def test_absurd_line_names_the_line():
    text = GOOD + 'g{a="' + "x" * 70_000 + '"} 1\n'
    with pytest.raises(BodyTooLarge) as error:
        parse(text)
    assert error.value.line_no == 4 and "line limit" in str(error.value)
    with pytest.raises(BodyTooLarge) as error:
        parse("a 1\n# " + "ü" * 600 + "\n", max_line_bytes=1000)   # 1202 bytes in 602 characters
    assert error.value.line_no == 2
    assert parse("a 1\n# " + "ü" * 400 + "\n", max_line_bytes=1000)["a"].samples


def test_families_must_be_a_collection_not_one_name():
    with pytest.raises(TypeError):
        parse(GOOD, "g")


def test_remembered_names_are_bounded(monkeypatch):
    monkeypatch.setattr(parser_module, "_VALIDATED_LIMIT", 10)
    many = "m{" + ",".join(f'a{i}="v"' for i in range(30)) + "} 1\n"
    assert len(parse(many)["m"].samples[0].labels) == 30
    assert "a29" in parser_module._LABEL_NAMES
    assert parse('n{z="v"} 1\n')["n"].samples[0].labels == {"z": "v"}
    assert "a29" not in parser_module._LABEL_NAMES and "z" in parser_module._LABEL_NAMES


@pytest.mark.parametrize("bad_line", ['g{a="x"",} 1', 'g{a="x"""} 1', 'g{a="x",b} 1', 'g{a="x"b="y"} 1'])
def test_stray_quotes_after_a_good_line_of_the_same_layout_are_errors(bad_line):
    with pytest.raises(ExpositionError) as error:
        parse('g{a="ok"} 1\n' + bad_line + "\n")
    assert error.value.line_no == 2


@pytest.mark.parametrize("body, line_no", [
    ("<!DOCTYPE html>\n<html><body>Bad Gateway</body></html>\n", 1),
    ('\n{"detail": "Not Found"}\n', 2),
    ("Internal Server Error\n", 1),
])
def test_families_fast_path_still_refuses_a_body_that_is_not_an_exposition(body, line_no):
    for families in (None, {"vllm:num_requests_running"}):
        with pytest.raises(ExpositionError) as error:
            parse(body, families)
        assert error.value.line_no == line_no


def test_families_fast_path_accepts_an_exposition_without_the_families():
    assert parse("# HELP other_metric Something else.\n# TYPE other_metric gauge\nother_metric 1\n",
                 {"vllm:num_requests_running"}) == {}
    assert parse("other_metric 1\n", {"vllm:num_requests_running"}) == {}
    assert parse("", {"vllm:num_requests_running"}) == {}


def test_long_escaped_values():
    value = '\\"\\\\\\n' * 5000                     # \" \\ \n, 5000 times
    samples = parse('m{a="' + value + '",b="x"} 1\n')["m"].samples
    assert samples[0].labels == {"a": '"\\\n' * 5000, "b": "x"}


# --- sample heads remembered across parses -------------------------------------------------------

@pytest.mark.parametrize("path", PROM_FIXTURES, ids=lambda p: p.name)
def test_a_second_parse_from_remembered_heads_equals_a_first_one(path):
    text = path.read_text(encoding="utf-8")
    parser_module.forget_memos()
    first = parse(text)
    assert parser_module._HEADS, "a parse remembers the heads it read"
    second = parse(text)
    parser_module.forget_memos()
    assert canonical(second) == canonical(first) == canonical(parse(text))
    wanted = {"vllm:inter_token_latency_seconds", "vllm:num_requests_running", "sglang:num_running_reqs"}
    assert canonical(parse(text, wanted)) == {k: v for k, v in canonical(first).items() if k in wanted}


def test_labels_of_a_remembered_head_are_each_samples_own():
    text = 'h_bucket{le="0.1"} 1\nh_bucket{le="+Inf"} 2\n'
    parse(text)["h_bucket"].samples[0].labels["le"] = "changed"
    assert parse(text)["h_bucket"].samples[0].labels == {"le": "0.1"}


@pytest.mark.parametrize("line, value, timestamp", [
    ('g{a="x"} 7 1700000000000', 7.0, 1700000000.0),      # the same head, now with a timestamp
    ('g{a="x"} 7 # {trace_id="t"} 1', 7.0, None),        # ...or with an exemplar
    ('g{a="x"}  7', 7.0, None),                            # ...or two blanks
])
def test_a_remembered_head_with_another_tail_is_read_in_full(line, value, timestamp):
    parse('# TYPE g gauge\ng{a="x"} 1\n')
    (sample,) = parse(f"# TYPE g gauge\n{line}\n")["g"].samples
    assert (sample.labels, sample.value, sample.timestamp) == ({"a": "x"}, value, timestamp)


@pytest.mark.parametrize("tail", ["1_0", "abc", ""])
def test_a_remembered_head_with_a_bad_value_names_the_line(tail):
    parse('g{a="x"} 1\n')
    with pytest.raises(ExpositionError) as error:
        parse(f'# HELP g x\ng{{a="x"}} {tail}\n')
    assert error.value.line_no == 2


def test_remembered_heads_are_bounded(monkeypatch):
    monkeypatch.setattr(parser_module, "_HEADS_LIMIT", 5)
    parse("".join(f'm{{a="{i}"}} 1\n' for i in range(20)))
    assert len(parser_module._HEADS) >= 20                  # over the bound only until the next parse...
    parse('n{z="v"} 1\n')
    assert set(parser_module._HEADS) == {'n{z="v"}'}        # ...which starts afresh


@pytest.mark.parametrize("indent", [" ", "\t", "  \t"])
def test_families_fast_path_reads_indented_lines_of_the_families_asked_for(indent):
    text = (f"# TYPE a gauge\n{indent}a{{x=\"1\"}} 1\nb 2\n# TYPE c counter\nc_total 3\n{indent}c_total{{y=\"z\"}} 4\n")
    full = parse(text)
    assert canonical(parse(text, {"a", "c"})) == {k: v for k, v in canonical(full).items() if k in {"a", "c"}}
    assert [s.value for s in parse(text, {"c"})["c"].samples] == [3.0, 4.0]
