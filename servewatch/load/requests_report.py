"""`servewatch requests --html FILE`: the records read back as one offline page — the figures of the table,
the requests over time (arrivals, failures, TTFT, tokens) and the TTFT and TPOT distributions — made of the
report pieces the bundle reports use (inline SVG, no script, nothing fetched). No text of any request."""

from __future__ import annotations

import math
from collections.abc import Sequence

from servewatch.bundle.report_html import (Section, bin_values, render_facts, render_histogram_svg,
                                           render_report, render_table, render_timeline_svg)
from servewatch.clock import iso8601
from servewatch.load.readback import outcome_words, recorded_by_words
from servewatch.load.records import RequestRecord
from servewatch.load.summary import percentile

# 1-2-5 steps from 1 ms to 100 s: the TTFT and TPOT of a fast and of a drowning engine on one axis
EDGES_S = tuple(m * 10.0 ** e for e in range(-3, 2) for m in (1, 2, 5)) + (100.0,)
MAX_BINS = 120
LABELS = {"arrivals": "arrivals / s", "not_ok": "not ok / s", "ttft_p50": "TTFT p50 (s)",
          "ttft_p99": "TTFT p99 (s)", "tokens": "tokens out / s"}


def over_time(records: Sequence[RequestRecord]) -> tuple[dict[str, list], float]:
    """Per time bin (at most MAX_BINS, at least 1 s) of arrival: arrivals and failures a second, the TTFT
    p50 and p99 of the successful requests that arrived in it, and output tokens a second by their end."""
    t0 = min(r.scheduled for r in records)
    ends = [r.scheduled + (r.schedule_delay_s or 0.0) + (r.e2e_s or 0.0) for r in records]
    span = max(max(ends) - t0, 1e-9)
    width = max(1.0, span / MAX_BINS)
    n = math.floor(span / width) + 1
    arrivals, not_ok, tokens = [0] * n, [0] * n, [0] * n
    ttfts: list[list[float]] = [[] for _ in range(n)]
    for r, end in zip(records, ends):
        i = min(n - 1, int((r.scheduled - t0) / width))
        arrivals[i] += 1
        if not r.ok:
            not_ok[i] += 1
        elif r.ttft_s is not None:
            ttfts[i].append(r.ttft_s)
        if r.ok:
            tokens[min(n - 1, int((end - t0) / width))] += r.output_tokens or 0
    mids = [t0 + (i + 0.5) * width for i in range(n)]
    series = {"arrivals": [(t, a / width) for t, a in zip(mids, arrivals)],
              "not_ok": [(t, k / width) for t, k in zip(mids, not_ok)],
              "ttft_p50": [(t, percentile(sorted(v), 50) if v else None) for t, v in zip(mids, ttfts)],
              "ttft_p99": [(t, percentile(sorted(v), 99) if v else None) for t, v in zip(mids, ttfts)],
              "tokens": [(t, k / width) for t, k in zip(mids, tokens)]}
    return series, width


def _ms(x) -> str:
    return "–" if x is None else f"{1000 * x:.1f} ms"


def render_requests_page(summary: dict, records: Sequence[RequestRecord]) -> str:
    """The page for `summary` (load.readback.summarize_records) of `records`."""
    total, by = summary["total"], summary["by"]
    who = recorded_by_words(summary)
    facts = render_facts([
        ("files", ", ".join(summary.get("files", [])) or "–"),
        ("recorded by", who),
        ("first arrival", iso8601(total["first"])),
        ("span", "–" if total["span_s"] is None else f"{total['span_s']:.1f} s"),
        ("rate", "–" if total["rate"] is None else f"{total['rate']:.2f} requests/s"),
        ("requests", f"{total['requests']} ({total['ok']} ok)"),
        ("not ok", outcome_words(total["outcomes"])),
        ("lines skipped", summary.get("skipped_lines", 0)),
    ])
    headers = [by, "requests", "not ok", "TTFT p50", "TTFT p99", "TPOT p50", "ITL p99", "E2E p99", "tokens out"]
    slo = summary.get("goodput_slo")
    if slo is not None:
        headers.append("goodput")
    rows = []
    for g in [*(summary["groups"] if by != "all" else []), {"key": "total", **total}]:
        row = [g["key"], g["requests"], outcome_words(g["outcomes"]),
               _ms(g["ttft_s"]["p50"]), _ms(g["ttft_s"]["p99"]), _ms(g["tpot_s"]["p50"]), _ms(g["itl_s"]["p99"]),
               _ms(g["e2e_s"]["p99"]), g["tokens_out"]]
        if slo is not None:
            row.append("–" if g["goodput_fraction"] is None else f"{100 * g['goodput_fraction']:.1f}%")
        rows.append(row)
    itl_words = ("every token's gap" if total["itl_from"] != "each request's p99"
                 else "each request's own p99 (proxy records kept without --keep-itl)")
    table = render_table(headers, rows, caption=f"times of the successful requests; ITL p99 over {itl_words}")
    series, width = over_time(records)
    timeline = render_timeline_svg(series, labels=LABELS, title="requests over time")
    ok = [r for r in records if r.ok]
    charts = "".join(
        f"<figure>{render_histogram_svg(EDGES_S, bin_values(values, EDGES_S), title=title)}</figure>"
        for title, values in (("TTFT of the successful requests", [r.ttft_s for r in ok if r.ttft_s is not None]),
                              ("TPOT of the successful requests", [r.tpot_s for r in ok if r.tpot_s is not None])))
    sections = [
        Section("Summary", facts + table),
        Section("Over time", f"<figure>{timeline}<figcaption>by arrival, in bins of {width:g} s (tokens by the "
                             f"request's end); seconds from the first arrival</figcaption></figure>"),
        Section("Distributions", f'<div class="charts">{charts}</div>'),
    ]
    return render_report("Request records", sections,
                         subtitle=f"{total['requests']} requests recorded by {who}; no request text")
