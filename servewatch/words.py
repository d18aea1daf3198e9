"""Parsed numbers as a reader says them: one place, so no Python field name reaches a table."""

from __future__ import annotations

import re
from fractions import Fraction

# A log line's parsed numbers as a reader says them: "gib=5.2" -> "5.2 GiB", "per_request=2048" -> "2,048 tokens per
# request". A field not listed is said as its name in words and its value.
FIELD_WORDS = {
    "gib": "{} GiB", "mib": "{} MiB", "available_gib": "{} GiB available", "total_gib": "{} GiB in total",
    "needed_gib": "{} GiB needed", "desired_gib": "{} GiB wanted", "seconds": "took {} s",
    "tokens": "{} tokens", "per_request": "{} tokens per request", "concurrency": "{}x concurrency at that length",
    "max_running": "at most {} running", "context_len": "context {} tokens", "max_model_len": "context {} tokens",
    "running": "{} running", "waiting": "{} waiting", "kv_pct": "KV {}%", "cpu_kv_pct": "CPU KV {}%",
    "prompt_tps": "{} prompt tokens/s", "gen_tps": "{} generated tokens/s", "prefix_hit_pct": "prefix hits {}%",
    "preemptions": "{} preemptions", "count": "×{}", "exit_code": "exit code {}", "reason": "{}",
    "engine": "engine {}", "dialect": "{} log", "load_weight_s": "weights loaded in {} s", "kv_allocation_s": "KV allocated in {} s",
    "token_usage": "token usage {}", "queue": "{} queued", "retracted": "{} retracted", "signal": "signal {}",
}


def field_words(fields) -> str:
    """Parsed log fields in words, in a stable order: never a Python field name."""
    said = []
    for key, value in sorted(fields.items()):
        number = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else \
            f"{value:,.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
        template = FIELD_WORDS.get(key)
        said.append(template.format(number) if template else f"{key.replace('_', ' ')} {number}")
    return ", ".join(said)


# Durations as a person writes them, parsed in one place: "0.5" (seconds), "500ms", "1s", "10m", "2h", "30d", "1w",
# "35us", "1.5e-3s"; the unit in any case ("50MS" is 50 ms). Every duration the project reads goes through
# `duration` (exact) or `duration_s` (its float): the recording flags, serve's config, fault times, SLO windows and
# advise's thresholds accept and refuse the same texts.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?(?:e[+-]?\d{1,3})?|\.\d+(?:e[+-]?\d{1,3})?)\s*(us|ms|s|m|h|d|w)?\s*$",
                       re.IGNORECASE)
_WHOLE_DURATION = re.compile(r"^(\d+)(s|m|h|d|w)$")        # Prometheus's own range: a whole number and its unit
_UNIT_S = {"us": Fraction(1, 10**6), "ms": Fraction(1, 1000), "s": Fraction(1), "m": Fraction(60),
           "h": Fraction(3600), "d": Fraction(86400), "w": Fraction(604800), None: Fraction(1)}
DURATION_UNITS_S = {unit: float(size) for unit, size in _UNIT_S.items()}


def duration(text: str, *, zero_ok: bool = False, whole: bool = False) -> Fraction:
    """A duration in seconds, exact: "0.5", "500ms", "1s", "10m" (a bare number is seconds); `whole`: only as
    Prometheus writes a range (a whole number with its unit: 5m, 1h, 30d). Raises ValueError, worded, on anything
    else, and on zero unless `zero_ok`."""
    match = (_WHOLE_DURATION if whole else _DURATION).match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (e.g. {'5m, 1h, 30d' if whole else '0.5, 500ms, 1s, 10m'})")
    unit = match.group(2)
    seconds = Fraction(match.group(1)) * _UNIT_S[unit.lower() if unit else None]
    if seconds <= 0 and not zero_ok:
        raise ValueError(f"{text!r} must be more than zero")
    return seconds


def duration_s(text: str, *, zero_ok: bool = False, whole: bool = False) -> float:
    """`duration`, as a float (the nearest to the exact figure)."""
    seconds = duration(text, zero_ok=zero_ok, whole=whole)
    try:
        return float(seconds)
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration") from None
