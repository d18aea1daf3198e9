"""Request records read back: a requests.jsonl of `servewatch load` or of `servewatch proxy` (one format),
its rotated files too, as RequestRecords again, and what they say by model, tenant, API or outcome.

Reading never stops at a bad line: a proxy killed mid-write leaves a partial last line, and a file can be
cut by a full disk. Each line that is not a record is counted with its place; the caller says so.
Text (a `--keep-text` record's prompt and completion) is never read back, so nothing made from these
records can carry it.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import orjson

from servewatch.load.records import RequestRecord
from servewatch.load.scenarios import Goodput
from servewatch.load.summary import is_good, stats

MAX_LINE_BYTES = 4 * 2**20        # a record longer than this is not one (load's longest, 8k tokens of ITL: ~200 kB)
GROUPS = ("model", "tenant", "api", "outcome", "all")
UNRECORDED = "(not recorded)"


@dataclass(slots=True)
class BadLine:
    path: str
    line: int
    why: str


@dataclass(slots=True)
class Readback:
    records: list[RequestRecord] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    bad_count: int = 0            # every bad line; `bad` keeps the first few with their places
    files: list[str] = field(default_factory=list)


def read_records(paths: Iterable[str], keep_bad: int = 5, sequences: bool = False) -> Readback:
    """Every record of the files, in the order they were scheduled. OSError (a file that cannot be read)
    is the caller's to word; a line that is not a record is counted, never raised. Without `sequences`
    a record keeps of its per-chunk lists only the per-token gaps, compact (8 bytes a gap): what the
    figures need, so that a million records of load's fit in memory."""
    out = Readback()
    keep = out.records.append
    for path in paths:
        out.files.append(str(path))
        with open(path, "rb") as fh:
            for number, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), 1):
                if not line.strip():
                    continue
                why = None
                if len(line) > MAX_LINE_BYTES:      # read no more of it than the bound: skip to its end
                    size = len(line)
                    while not line.endswith(b"\n"):
                        line = fh.readline(2**20)
                        if not line:
                            break
                        size += len(line)
                    why = f"a line of {size:,} bytes, over {MAX_LINE_BYTES:,}"
                else:
                    try:
                        rec = RequestRecord.from_json(orjson.loads(line))
                        if not sequences:
                            rec.chunk_t_s = rec.chunk_tokens = rec.itl_chunk_s = ()
                            rec.itl_token_s = array("d", rec.itl_token_s)
                        keep(rec)
                    except orjson.JSONDecodeError:
                        why = "not JSON" + (" (cut short)" if not line.endswith(b"\n") else "")
                    except ValueError as exc:
                        why = f"not a request record: {exc}"
                if why is not None:
                    out.bad_count += 1
                    if len(out.bad) < keep_bad:
                        out.bad.append(BadLine(str(path), number, why))
    out.records.sort(key=lambda r: r.scheduled)
    return out


def window(records: Sequence[RequestRecord], *, since: float | None = None,
           last_s: float | None = None) -> list[RequestRecord]:
    """Records that arrived at `since` (epoch s) or later, and within `last_s` of the newest arrival."""
    if last_s is not None and records:
        newest = max(r.scheduled for r in records)
        since = max(since if since is not None else -math.inf, newest - last_s)
    if since is None:
        return list(records)
    return [r for r in records if r.scheduled >= since]


def key_of(rec: RequestRecord, by: str) -> str:
    if by == "all":
        return "all"
    if by == "outcome":
        return "ok" if rec.error is None and rec.http_status == 200 else (rec.error or f"HTTP {rec.http_status}")
    value = (rec.proxy or {}).get("tenant") if by == "tenant" else getattr(rec, by)
    return value if isinstance(value, str) and value else UNRECORDED


def summarize_group(records: Sequence[RequestRecord], slo: Goodput | None = None) -> dict:
    """One group's figures. Latencies are over successful requests only (as `servewatch load` reports
    them); every request counts in `outcomes`. Inter-token gaps are every token's where the records carry
    them (load's records, the proxy's with --keep-itl), else the distribution of each request's own p99."""
    ok = [r for r in records if r.ok]
    outcomes: dict[str, int] = {}
    for r in records:
        k = key_of(r, "outcome")
        outcomes[k] = outcomes.get(k, 0) + 1
    gaps = array("d")                       # compact until stats sorts them (8 bytes a gap, not 32)
    for r in ok:
        gaps.extend(r.itl_token_s)
    if gaps:
        itl, itl_from = stats(gaps), "every token"
    else:
        per_request = [r.proxy["itl_p99_s"] for r in ok
                       if r.proxy and isinstance(r.proxy.get("itl_p99_s"), (int, float))]
        itl, itl_from = stats(per_request), ("each request's p99" if per_request else None)
    first = min((r.scheduled for r in records), default=None)
    ends = [r.scheduled + (r.e2e_s or 0.0) + (r.schedule_delay_s or 0.0) for r in records]
    span = (max(ends) - first) if records else None
    good = None
    if slo is not None and records:
        good = sum(1 for r in records if is_good(r, slo)) / len(records)
    return {
        "requests": len(records),
        "ok": len(ok),
        "outcomes": dict(sorted(outcomes.items(), key=lambda kv: (kv[0] != "ok", -kv[1], kv[0]))),
        "first": first,
        "span_s": span,
        "rate": len(records) / span if span else None,
        "ttft_s": stats(r.ttft_s for r in ok if r.ttft_s is not None),
        "tpot_s": stats(r.tpot_s for r in ok if r.tpot_s is not None),
        "itl_s": itl,
        "itl_from": itl_from,
        "e2e_s": stats(r.e2e_s for r in ok if r.e2e_s is not None),
        "tokens_in": sum(r.input_tokens or 0 for r in ok),
        "tokens_out": sum(r.output_tokens or 0 for r in ok),
        "goodput_fraction": good,
    }


def outcome_words(outcomes: dict) -> str:
    """What went wrong, by reason ("timeout 3, http_5xx 1"), or "none"."""
    return ", ".join(f"{k} {v}" for k, v in outcomes.items() if k != "ok") or "none"


def recorded_by_words(summary: dict) -> str:
    return " and ".join({"load": "servewatch load", "proxy": "servewatch proxy"}[k] for k in summary["recorded_by"])


def summarize_records(records: Sequence[RequestRecord], by: str = "model", slo: Goodput | None = None) -> dict:
    """The whole and its groups (largest first), as `servewatch requests --json` prints them."""
    if by not in GROUPS:
        raise ValueError(f"group by one of {', '.join(GROUPS)}, not {by!r}")
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(key_of(r, by), []).append(r)
    order = sorted(groups, key=lambda k: (-len(groups[k]), k))
    seen_by = sorted({"proxy" if r.proxy is not None else "load" for r in records})
    return {
        "by": by,
        "recorded_by": seen_by,
        "goodput_slo": None if slo is None else slo.to_json(),
        "total": summarize_group(records, slo),
        "groups": [{"key": k, **summarize_group(groups[k], slo)} for k in order],
    }
