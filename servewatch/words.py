"""Parsed numbers as a reader says them: one place, so no Python field name reaches a table."""

from __future__ import annotations

import re

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


# Durations as a person writes them, parsed in one place: "0.5" (seconds), "500ms", "1s", "10m", "2h", "30d", "1w".
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)?\s*$")
_WHOLE_DURATION = re.compile(r"^(\d+)(s|m|h|d|w)$")        # Prometheus's own range: a whole number and its unit
DURATION_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, None: 1.0}


def duration_s(text: str, *, zero_ok: bool = False, whole: bool = False) -> float:
    """A duration in seconds: "0.5", "500ms", "1s", "10m" (a bare number is seconds); `whole`: only as Prometheus
    writes a range (a whole number with its unit: 5m, 1h, 30d). Raises ValueError, worded, on anything else, and on
    zero unless `zero_ok`."""
    match = (_WHOLE_DURATION if whole else _DURATION).match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (e.g. {'5m, 1h, 30d' if whole else '0.5, 500ms, 1s, 10m'})")
    seconds = float(match.group(1)) * DURATION_UNITS_S[match.group(2)]
    if seconds <= 0 and not zero_ok:
        raise ValueError(f"{text!r} must be more than zero")
    return seconds
