"""Byte, rate and duration quantities: parsed from what people type, printed in one stated unit.

Binary units (KiB, MiB, GiB) are powers of 1024; decimal units (KB, MB, GB, TB) powers of 1000 —
the way vendors state memory ("80 GB") and bandwidth ("3.35 TB/s") differ, and mixing them is how
capacity figures go wrong.
"""

from __future__ import annotations

import re
from fractions import Fraction

from servewatch import words

KiB, MiB, GiB = 2**10, 2**20, 2**30
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12

_BYTE_UNITS = {"": 1, "b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": 2**40,
               "kb": KB, "mb": MB, "gb": GB, "tb": TB}
_QUANTITY = re.compile(r"^\s*(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)\s*(?P<unit>[A-Za-z/]*)\s*$")


class QuantityError(ValueError):
    """Text that is not a quantity of the expected kind; str() says what was expected."""


def parse_bytes(text: str) -> Fraction:
    """'85520809984', '79.65GiB', '80GB', '1.5e9' -> bytes (exact, so no float rounding reaches a count)."""
    number, unit = _split(text, "a byte count such as 85520809984, 81559MiB or 80GB")
    if unit.lower() not in _BYTE_UNITS:
        raise QuantityError(f"{text!r}: unknown byte unit {unit!r} (use B, KiB, MiB, GiB, KB, MB, GB or TB)")
    return number * _BYTE_UNITS[unit.lower()]


def parse_rate(text: str) -> Fraction:
    """'3.35TB/s', '3.35e12', '900GB/s' -> bytes per second."""
    number, unit = _split(text, "a bandwidth such as 3.35TB/s or 3.35e12")
    unit = unit.lower().removesuffix("/s")
    if unit not in _BYTE_UNITS:
        raise QuantityError(f"{text!r}: unknown bandwidth unit (use B/s, GB/s or TB/s)")
    return number * _BYTE_UNITS[unit]


def parse_seconds(text: str) -> Fraction:
    """'0.05', '50ms', '2s', '35us' -> seconds, exact; zero is a figure here (servewatch.words.duration: the one
    grammar of a duration)."""
    try:
        return words.duration(str(text), zero_ok=True)
    except ValueError as exc:
        raise QuantityError(str(exc)) from None


def _split(text: str, expected: str) -> tuple[Fraction, str]:
    match = _QUANTITY.match(str(text))
    if not match:
        raise QuantityError(f"{text!r} is not {expected}")
    return Fraction(match["number"]), match["unit"]


def binary(size: float, digits: int = 2) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1: '128 KiB', '111.95 MiB', '79.65 GiB'."""
    size = float(size)
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(size) >= scale:
            return f"{_trim(size / scale, digits)} {unit}"
    return f"{size:,.0f} B"


def decimal(size: float, digits: int = 2) -> str:
    """Bytes in decimal units with fixed digits: '15.0 GB', '16.06 GB'."""
    size = float(size)
    for unit, scale in (("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB)):
        if abs(size) >= scale:
            return f"{size / scale:,.{digits}f} {unit}"
    return f"{size:,.0f} B"


def rate(bytes_per_s: float) -> str:
    return f"{decimal(bytes_per_s)}/s"


def duration(seconds: float) -> str:
    """'4.48 ms', '1.2 s', '35 us'."""
    seconds = float(seconds)
    if seconds >= 1:
        return f"{_trim(seconds, 2)} s"
    if seconds >= 1e-3:
        return f"{_trim(seconds * 1e3, 2)} ms"
    return f"{_trim(seconds * 1e6, 2)} us"


def _trim(value: float, digits: int) -> str:
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
