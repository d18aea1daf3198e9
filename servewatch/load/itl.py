"""Inter-token latency per token, from chunk arrivals and the tokens each chunk carried.

The rule (documented in every output as "itl_rule"):
- Only chunks that carry tokens count. The first such chunk gives TTFT; its tokens contribute no
  ITL observation (their spacing inside the first chunk is unknowable).
- A later chunk carrying k tokens that arrives Δ after the previous token-carrying chunk contributes
  k observations of Δ/k to the per-token series, and one observation Δ to the per-chunk series.
  So the per-token series has (output tokens − tokens of the first chunk) entries and sums to
  (last token-carrying arrival − first token-carrying arrival).
- The per-token counts come from the server's continuous usage (completion_tokens deltas). Without
  it each chunk with text counts one token; if the server's final usage then disagrees with that
  count, each chunk gap Δ is divided by the mean tokens per chunk k̄ and yields one observation
  (`exact` = False).
- TPOT = (last token-carrying arrival − first) / (output tokens − 1), None for one token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import sub

ITL_RULE = ("per-token ITL: a chunk of k tokens arriving Δ after the previous token-carrying chunk "
            "adds k observations of Δ/k; the first chunk's tokens add none")


@dataclass(slots=True)
class Timings:
    ttft_s: float | None = None
    tpot_s: float | None = None
    last_token_s: float | None = None
    itl_token_s: list[float] = field(default_factory=list)
    itl_chunk_s: list[float] = field(default_factory=list)
    exact: bool = True


def compute_timings(chunk_t: Sequence[float], chunk_k: Sequence[int], total_tokens: int | None,
                    counts_exact: bool) -> Timings:
    """`chunk_t` are arrival offsets after send; `chunk_k` the tokens each chunk carried."""
    out = Timings()
    if chunk_k and max(chunk_k) == 1:
        # the common stream, one token a chunk (some chunks with none): the same numbers, in C loops
        times = list(compress(chunk_t, chunk_k))
        counted = len(times)
        n_tokens = total_tokens if total_tokens is not None else counted
        if counts_exact or total_tokens is None or total_tokens == counted:
            out.ttft_s = times[0]
            out.last_token_s = times[-1]
            gaps = list(map(sub, times[1:], times[:-1]))
            out.itl_chunk_s = gaps
            out.itl_token_s = gaps.copy()
            if n_tokens > 1:
                out.tpot_s = (times[-1] - times[0]) / (n_tokens - 1)
            return out
    times = [t for t, k in zip(chunk_t, chunk_k) if k > 0]
    counts = [k for k in chunk_k if k > 0]
    if not times:
        return out
    out.ttft_s = times[0]
    out.last_token_s = times[-1]
    counted = sum(counts)
    n_tokens = total_tokens if total_tokens is not None else counted
    exact = counts_exact or total_tokens is None or total_tokens == counted
    out.exact = exact
    prev = times[0]
    if exact:
        per_token = out.itl_token_s
        for t, k in zip(times[1:], counts[1:]):
            gap = t - prev
            out.itl_chunk_s.append(gap)
            share = gap / k
            if k == 1:
                per_token.append(share)
            else:
                per_token.extend([share] * k)
            prev = t
    else:
        gaps = len(times) - 1
        mean_k = (n_tokens - counts[0]) / gaps if gaps else 0.0
        for t in times[1:]:
            gap = t - prev
            out.itl_chunk_s.append(gap)
            if mean_k > 0:
                out.itl_token_s.append(gap / mean_k)
            prev = t
    if n_tokens > 1:
        out.tpot_s = (times[-1] - times[0]) / (n_tokens - 1)
    return out
