"""Log grammar the recorder needs that servewatch.dialects does not hold yet.

FOR THE LEAD TO MOVE into servewatch/dialects/vllm.py (engine-specific literals live there); the log
source and the process_exit detector import them from here until then.
"""

from __future__ import annotations

import re

# vLLM 0.32/0.33 startup failures, with the numbers that make the message useful
# (v1/core/kv_cache_planning.py:67-87; v1/worker/cpu_worker.py:205-248). The literal prefixes are the
# dialect's STARTUP_FAILURE_LINES.
VLLM_KV_TOO_SMALL = re.compile(
    r"To serve at least one request with the model's max seq len \((?P<max_model_len>\d+)\), "
    r"\((?P<needed_gib>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory "
    r"\((?P<available_gib>[\d.]+) GiB\)"
)
VLLM_CPU_MEMORY_SHORT = re.compile(
    r"Available memory on node (?P<node>\d+) \((?P<available_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) on startup "
    r"is less than desired CPU memory utilization \((?P<utilization>[\d.]+), (?P<desired_gib>[\d.]+) GiB\)"
)
_NUMBERS = {VLLM_KV_TOO_SMALL: {"max_model_len": int, "needed_gib": float, "available_gib": float},
            VLLM_CPU_MEMORY_SHORT: {"node": int, "available_gib": float, "total_gib": float, "utilization": float,
                                    "desired_gib": float}}


def startup_failure_numbers(message: str) -> dict[str, float | int]:
    """The numbers of a known startup-failure message (empty when it is not one we can read)."""
    for pattern, names in _NUMBERS.items():
        match = pattern.search(message)
        if match:
            return {name: kind(match.group(name)) for name, kind in names.items()}
    return {}


def describe_startup_failure(fields: dict) -> str:
    """The engine's own message, rebuilt from the grammar literal and the parsed numbers only."""
    reason = str(fields.get("reason", "unknown"))
    if "max_model_len" in fields:
        return (f"{reason} ({fields['max_model_len']}), ({fields.get('needed_gib')} GiB KV cache is needed, which "
                f"is larger than the available KV cache memory ({fields.get('available_gib')} GiB))")
    if "desired_gib" in fields:
        return (f"Available memory on node {fields.get('node')} ({fields.get('available_gib')}/"
                f"{fields.get('total_gib')} GiB) on startup {reason} ({fields.get('utilization')}, "
                f"{fields.get('desired_gib')} GiB)")
    return reason
