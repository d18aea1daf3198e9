"""One grammar of a duration (issue 51 item 5): the recording flags (argparse's type), serve's config, a fault's time,
`requests --last` and advise's latency thresholds all read a duration through servewatch.words.duration, so each
entry point takes the same texts to the same seconds and refuses the same texts."""

from __future__ import annotations

import argparse
from fractions import Fraction

import pytest

from servewatch.commands.recording import duration as flag_duration
from servewatch.derive.quantities import QuantityError
from servewatch.derive.quantities import parse_seconds as quantity_seconds
from servewatch.sim.faults import FaultSpecError
from servewatch.sim.faults import parse_seconds as fault_seconds
from servewatch.words import duration, duration_s

GOOD = [("0.5", Fraction(1, 2)), ("500ms", Fraction(1, 2)), ("35us", Fraction(35, 10**6)), ("1.5MS", Fraction(3, 2000)),
        ("2 S", Fraction(2)), (" 10m ", Fraction(600)), ("2h", Fraction(7200)), ("1w", Fraction(604800)),
        (".25", Fraction(1, 4)), ("3.", Fraction(3)), ("1.5e-3s", Fraction(3, 2000)), ("0.1m", Fraction(6))]
BAD = ["5min", "soon", "-1", "", "1 2s", "5 minutes", "1e5000s", "nan", "inf", "0x10", "1,5s"]


@pytest.mark.parametrize("text, seconds", GOOD)
def test_every_entry_point_reads_a_duration_to_the_same_seconds(text, seconds):
    assert duration(text) == seconds                     # exact
    assert quantity_seconds(text) == seconds             # advise's thresholds: exact too
    assert duration_s(text) == float(seconds)            # the nearest float to the exact figure
    assert fault_seconds(text) == float(seconds)
    assert flag_duration(text) == float(seconds)


@pytest.mark.parametrize("text", BAD)
def test_every_entry_point_refuses_the_same_texts_in_the_same_words(text):
    with pytest.raises(ValueError) as refused:
        duration(text, zero_ok=True)
    said = f"{text!r} is not a duration (e.g. 0.5, 500ms, 1s, 10m)"
    assert str(refused.value) == said
    with pytest.raises(ValueError):
        duration_s(text, zero_ok=True)
    with pytest.raises(QuantityError) as quantity:
        quantity_seconds(text)
    assert str(quantity.value) == said
    with pytest.raises(FaultSpecError):
        fault_seconds(text)
    with pytest.raises(argparse.ArgumentTypeError) as flag:
        flag_duration(text)
    assert str(flag.value) == said


def test_zero_is_a_figure_where_the_caller_takes_it_and_refused_where_not():
    assert quantity_seconds("0ms") == 0 and fault_seconds("0s") == 0.0 and duration("0", zero_ok=True) == 0
    with pytest.raises(argparse.ArgumentTypeError) as flag:
        flag_duration("0s")
    assert str(flag.value) == "'0s' must be more than zero"


def test_a_duration_past_a_float_is_refused_in_words():
    with pytest.raises(ValueError) as refused:
        duration_s("1e400s")
    assert str(refused.value) == "'1e400s' is too long a duration"
    assert duration("1e400s") == 10**400
