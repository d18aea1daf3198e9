"""Values of servewatch/doctor/arithmetic.py (issue 50: the mutation rule finds it): the MiB a postmortem prints,
the match window around an allocation request (2 MiB or 2 %, both edges), the logits suspect's size, formula and
words, and the KV cache as evidence for or against."""

from __future__ import annotations

import pytest

from servewatch.doctor.arithmetic import MIB, SuspectTest, _matches, kv_cache, logits_temporary, mib


def test_mib_is_truncated_to_two_decimals_with_thousands():
    assert mib(117_393_408) == "111.95 MiB"
    assert mib(MIB) == "1.00 MiB"
    assert mib(MIB * 0.999) == "0.99 MiB"          # truncated, not rounded up
    assert mib(MIB * 1234.5) == "1,234.50 MiB"
    assert mib(MIB * 0.29) == "0.29 MiB"           # 28.999999... in floating point: the 1e-9 keeps it 0.29
    assert mib(0) == "0.00 MiB"


@pytest.mark.parametrize("candidate, requested, expected", [
    (100 * MIB, 100 * MIB, True),
    (10 * MIB, 12 * MIB, True),                    # 2 MiB exactly: inside
    (10 * MIB, 12 * MIB + 1, False),               # above 2 MiB and above 2 % (0.24 MiB)
    (12 * MIB + 1, 10 * MIB, False),               # the other side
    (8 * MIB, 10 * MIB, True),
    (1000 * MIB, 1020 * MIB, True),                # 20 MiB is under 2 % of 1,020 MiB (20.4 MiB)
    (1000 * MIB, 1020.5 * MIB, False),             # 20.5 MiB > 2 % of 1,020.5 MiB (20.41 MiB)
    (1000 * MIB, 1020.4 * MIB, True),              # 20.4 MiB <= 20.408 MiB
    (196 * MIB, 200 * MIB, True),                  # 4 MiB is exactly 2 % of 200 MiB: inside
])
def test_a_suspect_matches_within_2_mib_or_2_percent(candidate, requested, expected):
    assert _matches(candidate, requested) is expected


def test_logits_that_match_the_request():
    # 28 running x 151,936 vocabulary x 4 bytes = 17,016,832 B (16.22 MiB), the request 17,825,792 B (17.00 MiB)
    test = logits_temporary(17_825_792.0, 28, 151_936)
    assert test.suspect == "logits-sized temporary"
    assert test.bytes == 17_016_832.0
    assert test.verdict == "matches"
    assert test.formula == ("28 running × 151,936 vocabulary × 4 bytes = 17,016,832 B = 16.22 MiB")
    assert test.difference_bytes == 17_825_792.0 - 17_016_832.0
    assert test.why == "16.22 MiB against 17.00 MiB requested: 0.77 MiB apart (4.54%)"


def test_logits_above_the_request_match_with_the_difference_negative():
    test = logits_temporary(16 * MIB, 1, 4 * MIB + 2 ** 18, bytes_per_value=4, label="sampler")
    assert test.suspect == "sampler"
    assert test.bytes == 17 * MIB
    assert test.verdict == "matches"
    assert test.difference_bytes == -MIB
    assert test.why == "17.00 MiB against 16.00 MiB requested: 1.00 MiB apart (6.25%)"


def test_logits_that_do_not_match_say_how_many_times_the_request():
    test = logits_temporary(100 * MIB, 10, 2 * MIB, bytes_per_value=2)
    assert test.bytes == 40 * MIB
    assert test.verdict == "does not match"
    assert test.formula == "10 running × 2,097,152 vocabulary × 2 bytes = 41,943,040 B = 40.00 MiB"
    assert test.why == "40.00 MiB is 0.40× the 100.00 MiB requested"
    assert test.difference_bytes == 60 * MIB


@pytest.mark.parametrize("running, vocab, needs", [
    (None, 1000, "needs the running count at death"),
    (4, None, "needs the vocabulary (pass --model-config config.json or --vocab-size N)"),
    (None, None, "needs the running count at death and the vocabulary (pass --model-config config.json or "
                 "--vocab-size N)"),
])
def test_logits_that_cannot_be_tested_say_what_is_missing(running, vocab, needs):
    test = logits_temporary(MIB, running, vocab, bytes_per_value=2)
    assert test == SuspectTest("logits-sized temporary", "running × vocabulary × 2 bytes", None, "cannot test", needs)
    assert test.difference_bytes is None


def test_the_suspect_as_json():
    assert SuspectTest("s", "f", 1.0, "matches", "w", 2.0).to_dict() == {
        "suspect": "s", "formula": "f", "bytes": 1.0, "verdict": "matches", "why": "w", "difference_bytes": 2.0}


def test_the_kv_cache_ruled_out_below_the_high_mark():
    test = kv_cache(2 * MIB, 42.25, 90.0, 131_072, 10_000)
    assert test.suspect == "KV cache"
    assert test.bytes is None
    assert test.verdict == "ruled out"
    assert test.formula == "KV usage at death 42.2 % of 10,000 tokens"
    assert test.why == ("the KV cache is allocated once at startup and was 42.2 % used at death (57.8 % free): the "
                        "failed allocation is outside it; 2.00 MiB would be the KV of 16 tokens")


def test_the_kv_cache_possible_at_the_high_mark():
    test = kv_cache(None, 90.0, 90.0, 131_072, None)
    assert test.suspect == "KV cache"
    assert test.verdict == "possible"
    assert test.formula == "KV usage at death 90.0 %"
    assert test.why == ("KV was 90.0 % used (≥ 90 %): a full cache preempts requests rather than allocating, but the "
                        "cache cannot be ruled out")
    assert kv_cache(None, 89.99, 90.0, None, None).verdict == "ruled out"


def test_the_kv_cache_without_usage_cannot_be_tested():
    test = kv_cache(3 * MIB, None, 90.0, 2 * MIB, 500)
    assert test.suspect == "KV cache"
    assert test.verdict == "cannot test"
    assert test.bytes is None
    assert test.formula == "KV usage at death of 500 tokens"
    assert test.why == "no KV usage before the death; 3.00 MiB would be the KV of 2 tokens"
    bare = kv_cache(3 * MIB, None, 90.0, 0, 0)
    assert (bare.formula, bare.why) == ("KV usage at death", "no KV usage before the death")
