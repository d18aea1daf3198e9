"""Requests of the in-process engine seen as the load generator records them (virtual time).

The virtual client is ideal — no network, no client overhead, one token per chunk, sent exactly when
scheduled — and everything else (error classes, the ITL rule, the summary) is the load generator's code."""

from __future__ import annotations

from servewatch.load.client import RequestSpec
from servewatch.load.records import RequestRecord
from servewatch.load.virtual import finish_from_engine


def record_of(rid: int, request, scheduled: float, died_at: float | None) -> RequestRecord:
    spec = RequestSpec(rid, scheduled, "", b"", request.prompt_len, request.max_tokens, True, None)
    rec = RequestRecord(id=rid, scheduled=scheduled, prompt_tokens_target=request.prompt_len,
                        max_tokens=request.max_tokens, sent=scheduled, http_status=200)
    end = request.finished_ts if request.finished_ts is not None else (died_at if died_at is not None else scheduled)
    finish_from_engine(rec, spec, request, end)
    return rec
