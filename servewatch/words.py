"""Parsed numbers as a reader says them: one place, so no Python field name reaches a table."""

from __future__ import annotations

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
