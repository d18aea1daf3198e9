"""Values of servewatch/derive/quantities.py (issue 50: the mutation rule finds it): bytes, rates and durations as
people type them (binary and decimal units kept apart), the refusals' words, and each printed unit's threshold."""

from __future__ import annotations

from fractions import Fraction

import pytest

from servewatch.derive.quantities import (GB, GiB, KB, KiB, MB, MiB, TB, QuantityError, binary, decimal, duration,
                                          parse_bytes, parse_rate, parse_seconds, rate)


def test_the_units():
    assert (KiB, MiB, GiB) == (1024, 1_048_576, 1_073_741_824)
    assert (KB, MB, GB, TB) == (1000, 1_000_000, 1_000_000_000, 1_000_000_000_000)


@pytest.mark.parametrize("text, count", [
    ("85520809984", 85_520_809_984), ("81559MiB", 81_559 * 2**20), ("80GB", 80 * 10**9), ("1.5e9", 1_500_000_000),
    ("79.65GiB", Fraction("79.65") * 2**30), ("2 KiB", 2048), ("3kb", 3000), ("7 b", 7), (" 5MB ", 5_000_000),
    ("1TiB", 2**40), ("2TB", 2 * 10**12), (".5KiB", 512), ("4.", 4), ("1E3", 1000), ("2e+3B", 2000),
    ("1.5e-1KB", 150),
])
def test_a_byte_count(text, count):
    assert parse_bytes(text) == count


def test_a_byte_count_is_exact():
    assert parse_bytes("0.1GB") == 100_000_000
    assert isinstance(parse_bytes("0.1GB"), Fraction)


@pytest.mark.parametrize("text, words", [
    ("80 parsecs", "'80 parsecs': unknown byte unit 'parsecs' (use B, KiB, MiB, GiB, KB, MB, GB or TB)"),
    ("GB", "'GB' is not a byte count such as 85520809984, 81559MiB or 80GB"),
    ("-5GB", "'-5GB' is not a byte count such as 85520809984, 81559MiB or 80GB"),
    ("5 GB x", "'5 GB x' is not a byte count such as 85520809984, 81559MiB or 80GB"),
    ("1e", "'1e': unknown byte unit 'e' (use B, KiB, MiB, GiB, KB, MB, GB or TB)"),
])
def test_a_byte_count_refused(text, words):
    with pytest.raises(QuantityError) as refused:
        parse_bytes(text)
    assert str(refused.value) == words
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize("text, per_s", [
    ("3.35TB/s", 3_350_000_000_000), ("3.35e12", 3_350_000_000_000), ("900GB/s", 900 * 10**9),
    ("1GiB/s", 2**30), ("10 mb/S", 10**7), ("5B/s", 5), ("64", 64),
])
def test_a_rate(text, per_s):
    assert parse_rate(text) == per_s


def test_a_rate_refused():
    with pytest.raises(QuantityError) as refused:
        parse_rate("3 TB/h")
    assert str(refused.value) == "'3 TB/h': unknown bandwidth unit (use B/s, GB/s or TB/s)"
    with pytest.raises(QuantityError) as bad:
        parse_rate("fast")
    assert str(bad.value) == "'fast' is not a bandwidth such as 3.35TB/s or 3.35e12"


@pytest.mark.parametrize("text, seconds", [
    ("0.05", Fraction(1, 20)), ("50ms", Fraction(1, 20)), ("2s", 2), ("2 S", 2), ("35us", Fraction(35, 10**6)),
    ("7", 7), ("1.5MS", Fraction(3, 2000)),
])
def test_a_duration(text, seconds):
    assert parse_seconds(text) == seconds


def test_a_duration_refused():
    with pytest.raises(QuantityError) as refused:
        parse_seconds("5min")
    assert str(refused.value).startswith("'5min'") and "duration" in str(refused.value)
    with pytest.raises(QuantityError) as bad:
        parse_seconds("soon")
    assert str(bad.value).startswith("'soon'") and "duration" in str(bad.value)


@pytest.mark.parametrize("size, text", [
    (131_072, "128 KiB"), (117_393_408, "111.96 MiB"), (79.65 * 2**30, "79.65 GiB"), (2**30, "1 GiB"),
    (2**30 - 1, "1,024 MiB"), (2**20, "1 MiB"), (1024, "1 KiB"), (1023, "1,023 B"), (0, "0 B"),
    (-2 * 2**20, "-2 MiB"), (1.5 * 2**40, "1,536 GiB"), (1536, "1.5 KiB"), (12.5, "12 B"),
])
def test_binary(size, text):
    assert binary(size) == text


def test_binary_digits():
    assert binary(1.23456 * 2**20, digits=3) == "1.235 MiB"
    assert binary(1.23456 * 2**20, 0) == "1 MiB"
    assert binary(10 * 2**30, 0) == "10 GiB"          # no decimal point: nothing trimmed
    assert binary(100 * 2**20, 1) == "100 MiB"


@pytest.mark.parametrize("size, text", [
    (15e9, "15.00 GB"), (16.06e9, "16.06 GB"), (3.35e12, "3.35 TB"), (10**12, "1.00 TB"), (10**12 - 10**7, "999.99 GB"),
    (10**9, "1.00 GB"), (10**6, "1.00 MB"), (2.5e6, "2.50 MB"), (1000, "1.00 KB"), (999, "999 B"), (0, "0 B"),
    (-3e9, "-3.00 GB"), (1234e12, "1,234.00 TB"),
])
def test_decimal(size, text):
    assert decimal(size) == text


def test_decimal_digits_and_a_rate():
    assert decimal(15e9, digits=1) == "15.0 GB"
    assert decimal(15.25e9, 0) == "15 GB"
    assert rate(3.35e12) == "3.35 TB/s"
    assert rate(500) == "500 B/s"


@pytest.mark.parametrize("seconds, text", [
    (1.2, "1.2 s"), (1, "1 s"), (1234.5, "1,234.5 s"), (0.00448, "4.48 ms"), (0.001, "1 ms"), (0.999, "999 ms"),
    (0.000035, "35 us"), (0.0009994, "999.4 us"), (0.0009999949, "999.99 us"), (0.0000123456, "12.35 us"), (0.0, "0 us"), (2.005, "2 s"), (Fraction(1, 8), "125 ms"),
])
def test_duration(seconds, text):
    assert duration(seconds) == text
