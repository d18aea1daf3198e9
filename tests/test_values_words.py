"""Values of servewatch/words.py (issue 50: the mutation rule finds it): a duration as a person writes it, in seconds,
for each unit (the recording flags, serve's config, fault times and SLO windows read it), at zero and in
Prometheus's whole form; a log line's parsed numbers in words."""

from __future__ import annotations

import pytest

from servewatch.words import duration_s, field_words


@pytest.mark.parametrize("text, seconds", [
    ("0.5", 0.5), ("2", 2.0), (".25", 0.25), ("3.", 3.0), ("500ms", 0.5), ("1s", 1.0), (" 10m ", 600.0),
    ("2h", 7200.0), ("30d", 2_592_000.0), ("1w", 604_800.0), ("1.5 m", 90.0),
])
def test_a_duration_in_seconds(text, seconds):
    assert duration_s(text) == seconds


def test_zero_only_where_allowed_and_the_words_of_a_refusal():
    assert duration_s("0", zero_ok=True) == 0.0
    assert duration_s("0ms", zero_ok=True) == 0.0
    with pytest.raises(ValueError) as zero:
        duration_s("0s")
    assert str(zero.value) == "'0s' must be more than zero"
    with pytest.raises(ValueError) as bad:
        duration_s("5 minutes")
    assert str(bad.value) == "'5 minutes' is not a duration (e.g. 0.5, 500ms, 1s, 10m)"
    with pytest.raises(ValueError) as negative:
        duration_s("-1")
    assert str(negative.value) == "'-1' is not a duration (e.g. 0.5, 500ms, 1s, 10m)"


def test_a_whole_duration_as_prometheus_writes_a_range():
    assert [duration_s(t, whole=True) for t in ("5m", "1h", "30d", "45s", "2w")] == [300.0, 3600.0, 2_592_000.0,
                                                                                    45.0, 1_209_600.0]
    for text in ("0.5h", "5", "500ms", " 5m"):
        with pytest.raises(ValueError) as bad:
            duration_s(text, whole=True)
        assert str(bad.value) == f"{text!r} is not a duration (e.g. 5m, 1h, 30d)"


def test_parsed_numbers_in_words_in_a_stable_order():
    assert field_words({"tokens": 123456, "gib": 5.20, "per_request": 2048, "reason": "out of memory",
                        "kv_pct": 87.125, "some_new_field": 3.0, "flag": True, "seconds": 12.5}) == (
        "flag True, 5.2 GiB, KV 87.12%, 2,048 tokens per request, out of memory, took 12.5 s, some new field 3, "
        "123,456 tokens")
    assert field_words({"gib": 1234.5, "count": 0.0, "running": 10.0}) == "×0, 1,234.5 GiB, 10 running"
    assert field_words({}) == ""
