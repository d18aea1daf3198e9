"""The multiplication that names the culprit of an allocation failure: each known suspect's size against
the bytes the allocator was asked for, and the KV usage at death as evidence for or against the KV cache."""

from __future__ import annotations

import math
from dataclasses import dataclass

MIB = 2**20
LOGITS_BYTES_PER_VALUE = 4          # the sampler works on float32 logits
# PyTorch's caching allocator hands out large blocks in whole 2 MiB steps, so the size it reports can sit
# up to 2 MiB above the tensor that asked; a suspect within that (or 2 %) of the request matches.
MATCH_ABSOLUTE_BYTES = 2 * MIB
MATCH_RELATIVE = 0.02


@dataclass(frozen=True, slots=True)
class SuspectTest:
    suspect: str
    formula: str
    bytes: float | None
    verdict: str            # "matches" | "does not match" | "cannot test" | "ruled out" | "possible"
    why: str
    difference_bytes: float | None = None

    def to_dict(self) -> dict:
        return {"suspect": self.suspect, "formula": self.formula, "bytes": self.bytes, "verdict": self.verdict,
                "why": self.why, "difference_bytes": self.difference_bytes}


def mib(value: float) -> str:
    """MiB to two decimals, truncated (never overstated): 117,393,408 B is 111.95 MiB."""
    hundredths = math.floor(value / MIB * 100 + 1e-9)
    return f"{hundredths / 100:,.2f} MiB"


def _matches(candidate: float, requested: float) -> bool:
    difference = abs(requested - candidate)
    return difference <= MATCH_ABSOLUTE_BYTES or difference <= MATCH_RELATIVE * requested


def logits_temporary(requested: float, running: int | None, vocab: int | None, *,
                     bytes_per_value: int = LOGITS_BYTES_PER_VALUE, label: str = "logits-sized temporary") -> SuspectTest:
    if running is None or vocab is None:
        lacking = " and ".join(name for name, v in (("the running count at death", running),
                                                    ("the vocabulary (pass --model-config config.json or "
                                                     "--vocab-size N)", vocab)) if v is None)
        return SuspectTest(label, f"running × vocabulary × {bytes_per_value} bytes", None, "cannot test",
                           f"needs {lacking}")
    size = float(running * vocab * bytes_per_value)
    formula = f"{running:,} running × {vocab:,} vocabulary × {bytes_per_value} bytes = {size:,.0f} B = {mib(size)}"
    difference = requested - size
    if _matches(size, requested):
        return SuspectTest(label, formula, size, "matches",
                           f"{mib(size)} against {mib(requested)} requested: {abs(difference) / MIB:.2f} MiB apart "
                           f"({abs(difference) / requested:.2%})", difference)
    return SuspectTest(label, formula, size, "does not match",
                       f"{mib(size)} is {size / requested:.2f}× the {mib(requested)} requested", difference)


def kv_cache(requested: float | None, kv_pct_at_death: float | None, kv_high_pct: float,
             kv_bytes_per_token: int | None, kv_cache_tokens: int | None) -> SuspectTest:
    """The KV cache: sized once at startup, so it is a suspect only when it was full."""
    tokens = ""
    if requested is not None and kv_bytes_per_token:
        tokens = f"; {mib(requested)} would be the KV of {requested / kv_bytes_per_token:,.0f} tokens"
    formula = (f"KV usage at death {kv_pct_at_death:.1f} %" if kv_pct_at_death is not None else "KV usage at death")
    if kv_cache_tokens:
        formula += f" of {kv_cache_tokens:,} tokens"
    if kv_pct_at_death is None:
        return SuspectTest("KV cache", formula, None, "cannot test", "no KV usage before the death" + tokens)
    if kv_pct_at_death < kv_high_pct:
        return SuspectTest("KV cache", formula, None, "ruled out",
                           f"the KV cache is allocated once at startup and was {kv_pct_at_death:.1f} % used at death "
                           f"({100 - kv_pct_at_death:.1f} % free): the failed allocation is outside it{tokens}")
    return SuspectTest("KV cache", formula, None, "possible",
                       f"KV was {kv_pct_at_death:.1f} % used (≥ {kv_high_pct:.0f} %): a full cache preempts requests "
                       f"rather than allocating, but the cache cannot be ruled out{tokens}")
