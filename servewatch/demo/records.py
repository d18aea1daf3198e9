"""Requests of the in-process engine seen as the load generator would record them (virtual time).

The virtual client is ideal — no network, no client overhead, one token per chunk — so the records
carry the engine's own timings; everything else (error classes, ITL rule, summary) is the load
generator's code."""

from __future__ import annotations

from servewatch.load.itl import compute_timings
from servewatch.load.records import TRUNCATED, RequestRecord


def record_of(rid: int, request, scheduled: float, died_at: float | None) -> RequestRecord:
    rec = RequestRecord(id=rid, scheduled=scheduled, prompt_tokens_target=request.prompt_len,
                        max_tokens=request.max_tokens, sent=scheduled, http_status=200,
                        input_tokens=request.prompt_len, output_tokens=request.output_len,
                        token_source="server", finish_reason=request.finish_reason)
    offsets = [t - scheduled for t in request.token_times]
    rec.chunk_t_s = offsets
    rec.chunk_tokens = [1] * len(offsets)
    timings = compute_timings(offsets, rec.chunk_tokens, request.output_len, True)
    rec.ttft_s, rec.tpot_s = timings.ttft_s, timings.tpot_s
    rec.itl_token_s, rec.itl_chunk_s, rec.itl_exact = timings.itl_token_s, timings.itl_chunk_s, timings.exact
    end = request.finished_ts if request.finished_ts is not None else died_at
    rec.e2e_s = None if end is None else end - scheduled
    short = request.ignore_eos and request.output_len < request.max_tokens
    if request.finish_reason in ("abort", "error") or short or not request.finished:
        rec.error = TRUNCATED
        rec.error_detail = f"{request.output_len} of {request.max_tokens} tokens, finish {request.finish_reason}"
    return rec
