"""Values of servewatch/load/readback.py (issue 50: what `servewatch requests` reports from the records of load and the
proxy, found by the mutation rule): each group's counts, outcomes in their order, span and rate, latencies over the
successful requests, gaps from every token or from each request's p99, the goodput share; the groups' keys; the bad
lines counted with their places. Each figure computed by hand beside the assertion."""

from __future__ import annotations

import json

import pytest

from servewatch.load import readback as B
from servewatch.load import records as R
from servewatch.load.scenarios import Goodput


def rec(i, scheduled, *, sent_after=0.0, e2e=None, ttft=None, tpot=None, status=200, error=None, itl=(), proxy=None,
        tokens=(None, None), model=None, api=None):
    r = R.RequestRecord(id=i, scheduled=scheduled, prompt_tokens_target=1, max_tokens=1,
                        sent=scheduled + sent_after, http_status=status, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e,
                        error=error, itl_token_s=list(itl), proxy=proxy, model=model, api=api)
    r.input_tokens, r.output_tokens = tokens
    return r


def test_a_group_in_figures():
    records = [
        rec(1, 100.0, sent_after=0.5, e2e=2.0, ttft=0.25, tpot=0.125, itl=(0.125, 0.25), tokens=(10, 3)),
        rec(2, 101.0, e2e=4.0, ttft=0.75, tpot=0.375, itl=(0.5,), tokens=(20, 2)),
        rec(3, 102.0, e2e=1.0, status=503, error=R.HTTP_5XX, tokens=(7, 0)),
        rec(4, 103.0, error=R.TIMEOUT, status=None),
        rec(5, 103.5, error=R.TIMEOUT, status=None),
        rec(6, 99.0, status=429, error=None, ttft=9.0),            # an answer that is not 200: not ok, not an error class
    ]
    g = B.summarize_group(records, Goodput(ttft_s=0.5))
    assert (g["requests"], g["ok"]) == (6, 2)
    # ok first, then by count (largest first), then by name
    assert list(g["outcomes"].items()) == [("ok", 2), ("timeout", 2), ("HTTP 429", 1), ("http_5xx", 1)]
    # from the first arrival (99.0) to the last end: 101.0 + 4.0 (+ no send delay) = 105.0; 100.0 + 0.5 + 2.0 earlier
    assert (g["first"], g["span_s"], g["rate"]) == (99.0, 6.0, 1.0)
    assert (g["ttft_s"]["count"], g["ttft_s"]["mean"], g["ttft_s"]["max"]) == (2, 0.5, 0.75)
    assert (g["tpot_s"]["mean"], g["e2e_s"]["mean"], g["e2e_s"]["count"]) == (0.25, 3.0, 2)
    assert (g["itl_s"]["count"], g["itl_s"]["max"], g["itl_from"]) == (3, 0.5, "every token")
    assert (g["tokens_in"], g["tokens_out"]) == (30, 5)                     # successful requests only
    assert g["goodput_fraction"] == 1 / 6                                   # request 1 only (0.25 <= 0.5)
    assert B.summarize_group(records)["goodput_fraction"] is None


def test_gaps_from_each_requests_p99_where_no_token_gaps_are_kept():
    records = [rec(1, 10.0, e2e=1.0, proxy={"itl_p99_s": 0.25}), rec(2, 11.0, e2e=1.0, proxy={"itl_p99_s": 0.75}),
               rec(3, 12.0, e2e=1.0, proxy={"itl_p99_s": None}), rec(4, 13.0, e2e=1.0, proxy={"itl_p99_s": "x"}),
               rec(5, 14.0, e2e=1.0), rec(6, 15.0, e2e=1.0, proxy={"itl_p99_s": 5.0}, error=R.TIMEOUT)]
    g = B.summarize_group(records)
    assert (g["itl_from"], g["itl_s"]["count"], g["itl_s"]["mean"], g["itl_s"]["max"]) == \
           ("each request's p99", 2, 0.5, 0.75)
    none = B.summarize_group([rec(1, 10.0, e2e=1.0)])
    assert (none["itl_from"], none["itl_s"]["count"]) == (None, 0)
    assert (none["span_s"], none["rate"]) == (1.0, 1.0)


def test_an_empty_group_and_a_span_of_nothing():
    g = B.summarize_group([])
    assert (g["requests"], g["ok"], g["outcomes"], g["first"], g["span_s"], g["rate"], g["goodput_fraction"]) == \
           (0, 0, {}, None, None, None, None)
    g = B.summarize_group([rec(1, 10.0)], Goodput(e2e_s=1.0))                # no e2e: it ended as it arrived
    assert (g["span_s"], g["rate"], g["goodput_fraction"]) == (0.0, None, 0.0)


def test_the_keys_of_the_groups():
    r = rec(1, 1.0, model="m", api="chat", proxy={"tenant": "t1"})
    assert [B.key_of(r, by) for by in B.GROUPS] == ["m", "t1", "chat", "ok", "all"]
    bare = rec(2, 1.0, model="", status=404, error=R.HTTP_4XX)
    assert [B.key_of(bare, by) for by in ("model", "tenant", "api", "outcome")] == \
           ["(not recorded)", "(not recorded)", "(not recorded)", "http_4xx"]
    assert B.key_of(rec(3, 1.0, status=302), "outcome") == "HTTP 302"
    assert B.key_of(rec(4, 1.0, error=R.TRUNCATED), "outcome") == "truncated"
    assert B.key_of(rec(5, 1.0, proxy={"tenant": 7}), "tenant") == "(not recorded)"


def test_the_whole_and_its_groups():
    records = [rec(1, 1.0, model="b", e2e=1.0), rec(2, 2.0, model="a", e2e=1.0), rec(3, 3.0, model="b", e2e=1.0,
                                                                                     proxy={"tenant": "x"})]
    s = B.summarize_records(records, "model", Goodput(ttft_s=1.0))
    assert (s["by"], s["recorded_by"], s["goodput_slo"]) == ("model", ["load", "proxy"], Goodput(ttft_s=1.0).to_json())
    assert [(g["key"], g["requests"]) for g in s["groups"]] == [("b", 2), ("a", 1)]
    assert s["total"]["requests"] == 3 and B.summarize_records(records)["goodput_slo"] is None
    assert B.recorded_by_words(s) == "servewatch load and servewatch proxy"
    assert B.recorded_by_words({"recorded_by": ["proxy"]}) == "servewatch proxy"
    tie = B.summarize_records([rec(1, 1.0, model="b"), rec(2, 1.0, model="a")])
    assert [g["key"] for g in tie["groups"]] == ["a", "b"]                 # equal sizes: by name
    with pytest.raises(ValueError) as bad:
        B.summarize_records(records, "region")
    assert str(bad.value) == "group by one of model, tenant, api, outcome, all, not 'region'"
    assert B.outcome_words({"ok": 5, "timeout": 3, "http_5xx": 1}) == "timeout 3, http_5xx 1"
    assert B.outcome_words({"ok": 5}) == "none" and B.outcome_words({}) == "none"


def test_reading_never_stops_at_a_bad_line(tmp_path):
    good = [rec(i, float(10 - i), e2e=1.0, itl=(0.5, 0.25)) for i in range(3)]
    lines = [json.dumps(good[0].to_json()), "", "{not json", json.dumps({"id": 1}), json.dumps(good[1].to_json()),
             "[1, 2]", json.dumps(good[2].to_json())]
    first = tmp_path / "requests.jsonl"
    first.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cut = tmp_path / "requests.1.jsonl"
    cut.write_text(json.dumps(good[0].to_json()) + "\n" + '{"id": 9, "sch', encoding="utf-8")
    back = B.read_records([str(first), str(cut)], keep_bad=3)
    assert [r.id for r in back.records] == [2, 1, 0, 0]                    # in the order they were scheduled
    assert back.files == [str(first), str(cut)] and back.bad_count == 4
    assert [(b.path, b.line, b.why) for b in back.bad] == [
        (str(first), 3, "not JSON"),
        (str(first), 4, "not a request record: field 'scheduled' is missing"),
        (str(first), 6, "not a request record: not a JSON object")]
    r = back.records[0]
    assert (r.chunk_t_s, r.chunk_tokens, r.itl_chunk_s, list(r.itl_token_s)) == ((), (), (), [0.5, 0.25])
    assert r.itl_token_s.typecode == "d"
    whole = B.read_records([str(cut)], sequences=True)
    assert whole.bad[0].why == "not JSON (cut short)" and isinstance(whole.records[0].itl_token_s, list)


def test_a_line_over_the_bound_is_skipped_to_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(B, "MAX_LINE_BYTES", 100)
    path = tmp_path / "requests.jsonl"
    ok = json.dumps(rec(1, 5.0, e2e=1.0).to_json(), separators=(",", ":"))
    assert len(ok) > 100
    monkeypatch.setattr(B, "MAX_LINE_BYTES", len(ok) + 1)
    long_line = "x" * (len(ok) + 50)
    path.write_text(long_line + "\n" + ok + "\n" + "y" * (len(ok) + 2), encoding="utf-8")
    back = B.read_records([str(path)])
    assert [r.id for r in back.records] == [1] and back.bad_count == 2
    limit = len(ok) + 1
    assert [(b.line, b.why) for b in back.bad] == [
        (1, f"a line of {len(long_line) + 1:,} bytes, over {limit:,}"),
        (3, f"a line of {len(ok) + 2:,} bytes, over {limit:,}")]


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

def test_ok_first_however_few_and_tokens_not_said_are_none(tmp_path):
    g = B.summarize_group([rec(1, 1.0, e2e=1.0)] + [rec(i, 1.0, error=R.TIMEOUT, status=None) for i in (2, 3, 4)]
                          + [rec(5, 1.0, e2e=1.0, tokens=(None, None))])
    assert list(g["outcomes"].items()) == [("ok", 2), ("timeout", 3)]
    assert (g["tokens_in"], g["tokens_out"]) == (0, 0)
    # five bad lines kept with their places by default, every one counted
    path = tmp_path / "requests.jsonl"
    path.write_text("x\n" * 8, encoding="utf-8")
    back = B.read_records([str(path)])
    assert (len(back.bad), back.bad_count, [b.line for b in back.bad]) == (5, 8, [1, 2, 3, 4, 5])


def test_a_window_since_a_time_and_within_the_last_seconds():
    records = [rec(i, float(t), e2e=1.0) for i, t in enumerate((10, 20, 30, 40))]
    assert [r.scheduled for r in B.window(records, since=25.0)] == [30.0, 40.0]
    assert [r.scheduled for r in B.window(records, last_s=15.0)] == [30.0, 40.0]            # 40 - 15 = 25
    assert [r.scheduled for r in B.window(records, since=35.0, last_s=25.0)] == [40.0]      # the later of the two
    assert [r.scheduled for r in B.window(records, since=12.0, last_s=25.0)] == [20.0, 30.0, 40.0]
    assert B.window(records) == records and B.window([], last_s=5.0) == []
