"""Values of servewatch/load/requests_report.py (issue 50: `servewatch requests --html`, found by the mutation rule):
the requests over time in bins (arrivals and failures a second, the TTFT quantiles of each bin's successes, tokens
a second by their end) and the page's facts, table and captions, each written beside the assertion."""

from __future__ import annotations

import html as H

import pytest

from servewatch.load import readback as B
from servewatch.load import records as R
from servewatch.load import requests_report as Q
from servewatch.load.scenarios import Goodput


def rec(i, scheduled, *, e2e=1.0, ttft=None, tpot=None, error=None, status=200, tokens=None, sent_after=0.0,
        model="m", proxy=None):
    r = R.RequestRecord(id=i, scheduled=scheduled, prompt_tokens_target=1, max_tokens=1, sent=scheduled + sent_after,
                        http_status=status, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, error=error, model=model, proxy=proxy)
    r.output_tokens = tokens
    return r


def test_the_bins_over_time():
    records = [rec(1, 100.0, ttft=0.5, tokens=4, e2e=1.5),           # ends at 101.5: bin 1
               rec(2, 100.25, ttft=0.25, tokens=2, e2e=0.5),         # ends at 100.75: bin 0
               rec(3, 101.0, ttft=1.0, tokens=6, sent_after=0.75, e2e=0.5),  # sent 0.75 s late: ends at 102.25, bin 2
               rec(4, 101.5, error=R.TIMEOUT, status=None, tokens=9, e2e=1.0),
               rec(5, 102.0, status=503, error=R.HTTP_5XX, ttft=0.1, e2e=0.25)]
    series, width = Q.over_time(records)
    # span 100.0 -> 102.25: under MAX_BINS seconds, so bins of 1 s: 3 bins, their middles 100.5, 101.5, 102.5
    assert width == 1.0 and [t for t, _ in series["arrivals"]] == [100.5, 101.5, 102.5]
    assert [v for _, v in series["arrivals"]] == [2.0, 2.0, 1.0]
    assert [v for _, v in series["not_ok"]] == [0.0, 1.0, 1.0]
    # TTFT of each bin's successes: [0.5, 0.25] (p50 0.375, p99 0.4975 by linear interpolation), [1.0], none
    assert [v for _, v in series["ttft_p50"]] == [0.375, 1.0, None]
    assert series["ttft_p99"][0][1] == pytest.approx(0.4975) and series["ttft_p99"][1][1] == 1.0
    # tokens of the successes, by the bin of their end; a failure's tokens are not counted
    assert [v for _, v in series["tokens"]] == [2.0, 4.0, 6.0]


def test_wide_bins_for_a_long_stretch():
    records = [rec(1, 0.0, e2e=0.0, ttft=0.1, tokens=1), rec(2, 480.0, e2e=0.0, ttft=0.2, tokens=3),
               rec(3, 241.0, e2e=0.5, ttft=0.3, tokens=2), rec(4, 242.0, e2e=1.0, ttft=0.5, tokens=5),
               rec(5, 241.5, error=R.TIMEOUT, status=None), rec(6, 242.5, error=R.TIMEOUT, status=None)]
    series, width = Q.over_time(records)
    # bin 60 (240 to 244 s): 4 arrivals, 2 of them failed, tokens 2 + 5 ended in it, TTFTs [0.3, 0.5]
    assert series["arrivals"][60] == (242.0, 1.0) and series["not_ok"][60] == (242.0, 0.5)
    assert series["tokens"][60] == (242.0, 1.75) and series["ttft_p50"][60] == (242.0, 0.4)
    # 480 s over at most 120 bins: 4 s a bin, floor(480 / 4) + 1 = 121 bins, the last holding the last arrival
    assert (width, len(series["arrivals"])) == (4.0, 121)
    assert series["arrivals"][0] == (2.0, 0.25) and series["arrivals"][-1] == (482.0, 0.25)
    assert series["tokens"][-1] == (482.0, 0.75) and series["ttft_p50"][-1] == (482.0, 0.2)
    one, width = Q.over_time([rec(1, 5.0, e2e=None, ttft=0.3, tokens=None)])
    assert (width, one["arrivals"], one["tokens"]) == (1.0, [(5.5, 1.0)], [(5.5, 0.0)])


def test_the_page():
    records = [rec(1, 1_700_000_000.0, ttft=0.25, tpot=0.0125, tokens=10, e2e=2.0),
               rec(2, 1_700_000_001.0, ttft=0.5, tpot=0.025, tokens=20, e2e=4.0, model="n"),
               rec(3, 1_700_000_002.0, error=R.STREAM_CUT, e2e=1.0)]
    summary = B.summarize_records(records, "model", Goodput(ttft_s=0.3))
    summary["files"] = ["a.jsonl", "b.jsonl"]
    summary["skipped_lines"] = 2
    page = H.unescape(Q.render_requests_page(summary, records))
    for fact in [("files", "a.jsonl, b.jsonl"), ("recorded by", "servewatch load"),
                 ("first arrival", "2023-11-14T22:13:20.000Z"), ("span", "5.0 s"), ("rate", "0.60 requests/s"),
                 ("requests", "3 (2 ok)"), ("not ok", "stream_cut 1"), ("lines skipped", "2")]:
        assert f"<tr><th>{fact[0]}</th><td>{fact[1]}</td></tr>" in page, fact
    for header in ("model", "requests", "not ok", "TTFT p50", "TTFT p99", "TPOT p50", "ITL p99", "E2E p99",
                   "tokens out", "goodput"):
        assert f"<th>{header}</th>" in page, header
    # the groups (largest first: m with 2), then the total; goodput 1 of 3 overall
    assert page.index(">m<") < page.index(">n<") < page.index(">total<")
    assert "<thead><tr><th>model</th><th>requests</th><th>not ok</th><th>TTFT p50</th><th>TTFT p99</th>" \
           "<th>TPOT p50</th><th>ITL p99</th><th>E2E p99</th><th>tokens out</th><th>goodput</th></tr></thead>" in page
    # the total's TTFT p99 of [0.25, 0.5] by interpolation: 497.5 ms; its E2E p99 of [2.0, 4.0]: 3,980 ms
    assert "<td>497.5 ms</td>" in page and "<td>3980.0 ms</td>" in page
    assert "<title>Request records</title>" in page
    for title in ("Summary", "Over time", "Distributions"):
        assert f"<h2>{title}</h2>" in page, title
    assert page.count("<figure>") == 3
    assert "250.0 ms" in page and "12.5 ms" in page and "33.3%" in page and "50.0%" in page and "0.0%" in page
    assert "times of the successful requests; ITL p99 over every token's gap" in page
    assert "by arrival, in bins of 1 s (tokens by the request's end); seconds from the first arrival" in page
    assert "3 requests recorded by servewatch load; no request text" in page
    assert "<title>TTFT of the successful requests</title>" in page
    assert "<title>TPOT of the successful requests</title>" in page and "</svg></figure><figure><svg" in page
    assert "<title>requests over time</title>" in page and "TTFT p99 (s)" in page and "tokens out / s" in page
    assert page.count("<svg") == 3
    # by "all": the total only; without an SLO, no goodput column; proxy records with per-request p99s
    proxied = [rec(1, 1_700_000_000.0, ttft=0.25, tokens=1, proxy={"itl_p99_s": 0.125})]
    bare = H.unescape(Q.render_requests_page(B.summarize_records(proxied, "all"), proxied))
    assert "<th>goodput</th>" not in bare and bare.count(">all<") == 1 and ">total<" in bare   # (the header)
    assert "ITL p99 over each request's own p99 (proxy records kept without --keep-itl)" in bare
    assert "<tr><th>files</th><td>–</td></tr>" in bare and "<tr><th>lines skipped</th><td>0</td></tr>" in bare
    assert "125.0 ms" in bare and "servewatch proxy" in bare


def test_figures_not_there_read_as_a_dash():
    summary = B.summarize_records([rec(1, 10.0, e2e=None, error=R.CONNECT, status=None)], "model")
    summary["total"]["span_s"] = None
    page = H.unescape(Q.render_requests_page(summary, [rec(1, 10.0, e2e=None, error=R.CONNECT, status=None)]))
    assert "<tr><th>span</th><td>–</td></tr>" in page and "<tr><th>rate</th><td>–</td></tr>" in page
    assert Q._ms(None) == "–" and Q._ms(0.01234) == "12.3 ms"
    summary = B.summarize_records([rec(1, 10.0, ttft=0.1)], "all", Goodput(ttft_s=1.0))
    summary["total"]["goodput_fraction"] = None
    assert '<td class="num">0</td><td>–</td></tr>' in H.unescape(Q.render_requests_page(summary, [rec(1, 10.0, ttft=0.1)]))
    assert Q.EDGES_S[:4] == (0.001, 0.002, 0.005, 0.01) and Q.EDGES_S[-1] == 100.0 and len(Q.EDGES_S) == 16
