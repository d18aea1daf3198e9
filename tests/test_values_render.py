"""Values of load's terminal output, servewatch/load/render.py (issue 50): `servewatch load`'s summary and
`servewatch requests`' table, each printed in full (--wide: no fitting to the terminal) from a hand-made summary and
from records read back (two models, one request failed), with the figures' formats (seconds to 3 decimals, % to one,
counts whole, milliseconds to 2 decimals under 10 ms and 1 above) and the progress bar's totals."""

from __future__ import annotations

from servewatch.load import readback as B
from servewatch.load import records as R
from servewatch.load import render as RN
from servewatch.load.runner import Progress
from servewatch.load.scenarios import Goodput
from tests.test_values_readback import rec

stats = {"mean": 0.0123, "p50": 0.0111, "p90": 0.0222, "p99": 0.0333, "max": 0.0444, "count": 20}
none = {"mean": None, "p50": None, "p90": None, "p99": None, "max": None, "count": 0}
SUMMARY = {"scenario": "custom", "requests": 20, "ok": 18, "requested_rate": 4.0, "achieved_rate": 3.95,
           "errors": {"timeout": 2, "http_5xx": 0}, "schedule_delay_s": {"p50": 0.0001, "p99": None},
           "ttft_s": stats, "itl_s": none, "itl_chunk_s": stats, "tpot_s": stats, "e2e_s": stats,
           "signature": {"tokens_in": 44.0, "tokens_out": 127.5, "queue_wait_s": 0.25, "prefill_s": None,
                         "ttft_s": 0.0111, "itl_s": 0.02, "generation_s": 2.5, "e2e_s": 2.75, "max_running": 8.0,
                         "max_waiting": 0.0, "max_kv": 0.1234,
                         "sources": {"tokens_in": "server", "queue_wait_s": "client"}},
           "token_count_source": "server", "prompt_token_source": "approx",
           "goodput": 3.5, "goodput_fraction": 0.875, "notes": ["first note", "second"]}
TRACE = {"format": "mooncake", "rows": 120, "speed": 2.0, "span_s": 59.96, "rows_with_hash_ids": 100, "skipped_rows": 3}

def records():
    return [rec(1, 100.0, e2e=2.0, ttft=0.25, tpot=0.00125, itl=(0.125, 0.25), tokens=(10, 3), model="a"),
            rec(2, 101.0, e2e=4.0, ttft=0.75, tpot=0.375, itl=(0.5,), tokens=(20, 1200), model="b"),
            rec(3, 102.0, e2e=1.0, status=503, error=R.HTTP_5XX, tokens=(7, 0), model="b")]


SUMMARY_OUT = """scenario custom: 20 requests, 18 ok, rate 4 requested / 4.0 achieved req/s
errors: timeout 2
schedule delay p50 0.10 ms p99 —
                latency (successful requests)                 
┏━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━┓
┃ metric        ┃  mean ┃   p50 ┃   p90 ┃   p99 ┃   max ┃  n ┃
┡━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━┩
│ TTFT          │ 0.012 │ 0.011 │ 0.022 │ 0.033 │ 0.044 │ 20 │
│ ITL per token │     — │     — │     — │     — │     — │  0 │
│ ITL per chunk │ 0.012 │ 0.011 │ 0.022 │ 0.033 │ 0.044 │ 20 │
│ TPOT          │ 0.012 │ 0.011 │ 0.022 │ 0.033 │ 0.044 │ 20 │
│ E2E           │ 0.012 │ 0.011 │ 0.022 │ 0.033 │ 0.044 │ 20 │
└───────────────┴───────┴───────┴───────┴───────┴───────┴────┘
                 signature                 
┏━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━┓
┃ field                  ┃ value ┃ from   ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━┩
│ tokens in (mean)       │    44 │ server │
│ tokens out (mean)      │ 127.5 │ —      │
│ queue wait (s)         │ 0.250 │ client │
│ prefill (s)            │     — │ —      │
│ TTFT (s)               │ 0.011 │ —      │
│ between two tokens (s) │ 0.020 │ —      │
│ token generation (s)   │ 2.500 │ —      │
│ E2E (s)                │ 2.750 │ —      │
│ running, max           │     8 │ —      │
│ waiting, max           │     0 │ —      │
│ KV cache, max          │ 12.3% │ —      │
└────────────────────────┴───────┴────────┘
the fields that told four workloads apart on an RTX 3060 serving Qwen2.5-7B-AWQ
goodput 3.50 req/s (87.5% of requests)
token counts: server; prompts built with approx
note: first note
note: second
"""

TRACE_OUT = """scenario custom: 20 requests, 18 ok, rate 4 requested / 4.0 achieved req/s
errors: none
trace (mooncake): 120 rows replayed at speed 2 over 60.0 s, 100 with prefix hash ids, 3 bad rows skipped
schedule delay p50 0.10 ms p99 — (the sender's lag behind the trace)
                latency (successful requests)                 
┏━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━┓
┃ metric        ┃  mean ┃   p50 ┃   p90 ┃   p99 ┃   max ┃  n ┃
┡━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━┩
│ TTFT          │ 0.012 │ 0.011 │ 0.022 │ 0.033 │ 0.044 │ 20 │
│ ITL per token │     — │     — │     — │     — │     — │  0 │
│ ITL per chunk │ 0.012 │ 0.011 │ 0.022 │ 0.033 │ 0.044 │ 20 │
│ TPOT          │ 0.012 │ 0.011 │ 0.022 │ 0.033 │ 0.044 │ 20 │
│ E2E           │ 0.012 │ 0.011 │ 0.022 │ 0.033 │ 0.044 │ 20 │
└───────────────┴───────┴───────┴───────┴───────┴───────┴────┘
                 signature                 
┏━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━┓
┃ field                  ┃ value ┃ from   ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━┩
│ tokens in (mean)       │    44 │ server │
│ tokens out (mean)      │ 127.5 │ —      │
│ queue wait (s)         │ 0.250 │ client │
│ prefill (s)            │     — │ —      │
│ TTFT (s)               │ 0.011 │ —      │
│ between two tokens (s) │ 0.020 │ —      │
│ token generation (s)   │ 2.500 │ —      │
│ E2E (s)                │ 2.750 │ —      │
│ running, max           │     8 │ —      │
│ waiting, max           │     0 │ —      │
│ KV cache, max          │ 12.3% │ —      │
└────────────────────────┴───────┴────────┘
the fields that told four workloads apart on an RTX 3060 serving Qwen2.5-7B-AWQ
token counts: server; prompts built with approx
"""

BY_MODEL_OUT = """3 requests recorded by servewatch load, from 1970-01-01T00:01:40.000Z over 5.0 s (0.60 req/s)
2 ok; not ok: http_5xx 1
                            by model, times in ms                            
                                                                             
                           TTFT   TTFT   TPOT    ITL     E2E  tokens   good- 
 model  requests  not ok    p50    p99    p50    p99     p99     out     put 
 ─────────────────────────────────────────────────────────────────────────── 
 b             2       1  750.0  750.0  375.0  500.0  4000.0   1,200    0.0% 
 a             1       0  250.0  250.0   1.25  248.8  2000.0       3  100.0% 
                                                                             
 total         3       1  500.0  745.0  188.1  495.0  3980.0   1,203   33.3% 
                                                                             
times are of the successful requests; ITL p99 of every token
not ok, model b: http_5xx 1
goodput: the share of all requests that succeeded with TTFT ≤ 500 ms, E2E ≤ 3000 ms
"""

ALL_OUT = """3 requests recorded by servewatch load, from 1970-01-01T00:01:40.000Z over 5.0 s (0.60 req/s)
2 ok; not ok: http_5xx 1
                      all requests, times in ms                      
                                                                     
                           TTFT   TTFT   TPOT    ITL     E2E  tokens 
        requests  not ok    p50    p99    p50    p99     p99     out 
 ─────────────────────────────────────────────────────────────────── 
 total         3       1  500.0  745.0  188.1  495.0  3980.0   1,203 
                                                                     
times are of the successful requests; ITL p99 of every token
"""


def test_the_load_summary_in_full(capsys):
    RN.print_summary(SUMMARY, wide=True)
    assert capsys.readouterr().out == SUMMARY_OUT


def test_the_load_summary_of_a_trace_replay(capsys):
    RN.print_summary({**SUMMARY, "trace": TRACE, "goodput": None, "notes": [], "errors": {}}, wide=True)
    assert capsys.readouterr().out == TRACE_OUT
    RN.print_summary({**SUMMARY, "trace": {**TRACE, "skipped_rows": 0}}, wide=True)
    assert "trace (mooncake): 120 rows replayed at speed 2 over 60.0 s, 100 with prefix hash ids\n" in \
        capsys.readouterr().out
    no_notes = dict(SUMMARY)
    del no_notes["notes"], no_notes["goodput"]
    RN.print_summary(no_notes, wide=True)
    assert capsys.readouterr().out.endswith("token counts: server; prompts built with approx\n")


def test_the_requests_table_by_model_in_full(capsys):
    RN.print_requests(B.summarize_records(records(), by="model", slo=Goodput.parse("ttft=500,e2e=3000")), wide=True)
    assert capsys.readouterr().out == BY_MODEL_OUT


def test_the_requests_table_of_all(capsys):
    RN.print_requests(B.summarize_records(records(), by="all"), wide=True)
    assert capsys.readouterr().out == ALL_OUT


def test_the_requests_table_by_outcome_and_other_wordings(capsys):
    summary = B.summarize_records(records(), by="outcome")
    RN.print_requests(summary, wide=True)
    out = capsys.readouterr().out
    assert "not ok, outcome" not in out and "by outcome, times in ms" in out
    summary = B.summarize_records(records(), by="model")
    summary["skipped_lines"] = 4
    summary["total"] = {**summary["total"], "span_s": None, "rate": None, "itl_from": "each request's p99"}
    RN.print_requests(summary, wide=True)
    out = capsys.readouterr().out
    assert " over — (—)\n" in out
    assert "\n4 lines that are not request records skipped (see stderr)\n" in out
    assert out.endswith("times are of the successful requests; ITL p99 of each request's own p99 (proxy records "
                        "kept without --keep-itl)\nnot ok, model b: http_5xx 1\n")
    ok_only = B.summarize_records(records()[:2], by="model")
    RN.print_requests(ok_only, wide=True)
    out = capsys.readouterr().out
    assert "not ok, model" not in out and "2 ok; not ok: none\n" in out and "good-" not in out


def test_the_formats():
    assert RN._fmt(None) == "—" and RN._fmt(None, "%") == "—"
    assert RN._fmt(0.12345) == "0.123" and RN._fmt(2.0) == "2.000"
    assert RN._fmt(0.12345, "%") == "12.3%" and RN._fmt(1.0, "%") == "100.0%"
    assert RN._fmt(4.0, "n") == "4" and RN._fmt(3.95, "n") == "4.0" and RN._fmt(127.54, "n") == "127.5"
    assert RN._ms(None) == "—" and RN._ms(0.0001234) == "0.12 ms" and RN._ms(1.5) == "1500.00 ms"
    assert RN._ms_cell(None) == "—" and RN._ms_cell(0.00999) == "9.99" and RN._ms_cell(0.01) == "10.0"
    assert RN._ms_cell(0.0123456) == "12.3" and RN._ms_cell(0.0) == "0.00"
    assert RN.LATENCY_COLUMNS == (("p99", 90), ("p50", 80), ("n", 70), ("mean", 60), ("max", 50), ("p90", 40))
    assert dict(RN.REQUESTS_COLUMNS) == {"requests": 100, "not ok": 90, "good-\nput": 85, "TTFT\np99": 80,
                                         "TPOT\np50": 70, "E2E\np99": 60, "TTFT\np50": 50, "tokens\nout": 40,
                                         "ITL\np99": 30}


class _Bar:
    def __init__(self):
        self.updates, self.refreshed, self.stopped = [], 0, 0

    def update(self, task, **kw):
        self.updates.append((task, kw))

    def refresh(self):
        self.refreshed += 1

    def stop(self):
        self.stopped += 1


def _progress(**kw):
    base = dict(elapsed_s=12.5, done=7, total=None, in_flight=3, errors=1, tokens_out=900, duration_s=None)
    base.update(kw)
    return Progress(**base)


def test_the_progress_bar_totals():
    live = RN.LiveProgress(enabled=False)
    with live as entered:
        assert entered is live and live._progress is None
        live.update(_progress())                                  # disabled: nothing to update
    live = RN.LiveProgress()
    assert live.enabled is True
    bar = live._progress = _Bar()
    live._task = "task"
    live.update(_progress(total=20))
    live.update(_progress(duration_s=10.0))
    live.update(_progress(duration_s=60.0))
    live.update(_progress())
    text = "7 done, 3 in flight, 1 errors, 900 tokens out"
    assert bar.updates == [("task", dict(total=20, completed=7, description=text)),
                           ("task", dict(total=10.0, completed=10.0, description=text)),
                           ("task", dict(total=60.0, completed=12.5, description=text)),
                           ("task", dict(total=None, completed=7, description=text))]
    assert bar.refreshed == 4
    live.__exit__(None, None, None)
    assert bar.stopped == 1


def test_the_progress_bar_starts_on_stderr_and_goes(capsys):
    with RN.LiveProgress() as live:
        assert live._progress is not None and live._task is not None
        assert live._progress.live.transient is True and live._progress.live.auto_refresh is False
        assert live._progress.console.stderr is True
        [task] = live._progress.tasks
        assert task.description == "starting" and task.total is None
        columns = live._progress.columns
        assert [type(c).__name__ for c in columns] == ["TextColumn", "BarColumn", "TextColumn", "TimeElapsedColumn"]
        assert columns[0].text_format == "[bold]load" and columns[2].text_format == "{task.description}"
        live.update(_progress(total=2, done=1))
    assert capsys.readouterr().out == ""
    assert live._progress.live.is_started is False


NARROW_SUMMARY = """scenario custom: 20 requests, 18 ok, rate 4 
requested / 4.0 achieved req/s
errors: timeout 2, connect 1
schedule delay p50 0.10 ms p99 12.50 ms
       latency (successful requests)        
┏━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━━━━┳━━━━┓
┃ metric      ┃  mean ┃   p50 ┃   p99 ┃  n ┃
┡━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━━━━╇━━━━┩
│ TTFT        │ 0.012 │ 0.011 │ 0.033 │ 20 │
│ ITL per     │     — │     — │     — │  0 │
│ token       │       │       │       │    │
│ ITL per     │ 0.012 │ 0.011 │ 0.033 │ 20 │
│ chunk       │       │       │       │    │
│ TPOT        │ 0.012 │ 0.011 │ 0.033 │ 20 │
│ E2E         │ 0.012 │ 0.011 │ 0.033 │ 20 │
└─────────────┴───────┴───────┴───────┴────┘
(left out to fit the terminal: p90, max; --wide shows them)
                 signature                 
┏━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━┓
┃ field                  ┃ value ┃ from   ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━┩
│ tokens in (mean)       │    44 │ server │
│ tokens out (mean)      │ 127.5 │ —      │
│ queue wait (s)         │ 0.250 │ client │
│ prefill (s)            │ 0.250 │ —      │
│ TTFT (s)               │ 0.011 │ —      │
│ between two tokens (s) │ 0.020 │ —      │
│ token generation (s)   │ 2.500 │ —      │
│ E2E (s)                │ 2.750 │ —      │
│ running, max           │     8 │ —      │
│ waiting, max           │     0 │ —      │
│ KV cache, max          │ 12.3% │ —      │
└────────────────────────┴───────┴────────┘
the fields that told four workloads apart on
an RTX 3060 serving Qwen2.5-7B-AWQ
goodput 3.50 req/s (87.5% of requests)
token counts: server; prompts built with 
approx
note: first note
note: second
"""

NARROW_REQUESTS = """2 requests recorded by servewatch load, from 1970-01-01T00:01:40.000Z over 2.0 s (1.00 req/s)
1 ok; not ok: http_5xx 1
           by model, times in ms            
                                            
                                       TTFT 
 model              requests  not ok    p99 
 ────────────────────────────────────────── 
 [b]m[/b] with a           2       1  250.0 
 long name                                  
                                            
 total                     2       1  250.0 
                                            
(left out to fit the terminal: ITL p99, tokens out, TTFT p50, E2E p99, TPOT p50; --wide shows them)
times are of the successful requests; ITL 
p99 of every token
not ok, model [b]m[/b] with a long name: http_5xx 1
"""


def test_fitted_to_a_terminal_of_44_columns(monkeypatch, capsys):
    """The columns' shrink (the name folds at its word), minimum widths and what goes first; a group's name that looks
    like rich markup printed as it is; long lines wrapped at the terminal's width."""
    monkeypatch.setenv("COLUMNS", "44")
    summary = {**SUMMARY, "errors": {"timeout": 2, "connect": 1}, "schedule_delay_s": {"p50": 0.0001, "p99": 0.0125}}
    summary["signature"] = {**summary["signature"], "prefill_s": 0.25}
    RN.print_summary(summary)
    assert capsys.readouterr().out == NARROW_SUMMARY
    name = "[b]m[/b] with a long name"
    recs = [rec(1, 100.0, e2e=2.0, ttft=0.25, tokens=(10, 3), model=name),
            rec(2, 101.0, e2e=1.0, status=503, error=R.HTTP_5XX, tokens=(7, 0), model=name)]
    RN.print_requests(B.summarize_records(recs, by="model"))
    assert capsys.readouterr().out == NARROW_REQUESTS


SQUEEZED_SUMMARY = """scenario custom: 20 requests, 
18 ok, rate 4 requested / 4.0 
achieved req/s
errors: timeout 2
schedule delay p50 0.10 ms p99
—
latency (successful requests) 
┏━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━┓
┃ metric     ┃   p50 ┃   p99 ┃
┡━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━┩
│ TTFT       │ 0.011 │ 0.033 │
│ ITL per    │     — │     — │
│ token      │       │       │
│ ITL per    │ 0.011 │ 0.033 │
│ chunk      │       │       │
│ TPOT       │ 0.011 │ 0.033 │
│ E2E        │ 0.011 │ 0.033 │
└────────────┴───────┴───────┘
(left out to fit the terminal: p90, max, mean, n; --wide shows them)
          signature           
┏━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┓
┃ field              ┃ value ┃
┡━━━━━━━━━━━━━━━━━━━━╇━━━━━━━┩
│ tokens in (mean)   │    44 │
│ tokens out (mean)  │ 127.5 │
│ queue wait (s)     │ 0.250 │
│ prefill (s)        │     — │
│ TTFT (s)           │ 0.011 │
│ between two tokens │ 0.020 │
│ (s)                │       │
│ token generation   │ 2.500 │
│ (s)                │       │
│ E2E (s)            │ 2.750 │
│ running, max       │     8 │
│ waiting, max       │     0 │
│ KV cache, max      │ 12.3% │
└────────────────────┴───────┘
the fields that told four 
workloads apart on an RTX 3060
serving Qwen2.5-7B-AWQ
(left out to fit the terminal: from; --wide shows them)
goodput 3.50 req/s (87.5% of 
requests)
token counts: server; prompts 
built with approx
note: first note
note: second
"""

SQUEEZED_REQUESTS = """3 requests recorded by servewatch load, from 1970-01-01T00:01:40.000Z over 5.0 s (0.60 req/s)
2 ok; not ok: http_5xx 1
  by model, times in ms  
                         
 model  requests  not ok 
 ─────────────────────── 
 b             2       1 
 a             1       0 
                         
 total         3       1 
                         
(left out to fit the terminal: ITL p99, tokens out, TTFT p50, E2E p99, TPOT p50, TTFT p99, good- put; --wide shows them)
times are of the successful 
requests; ITL p99 of every 
token
not ok, model b: http_5xx 1
goodput: the share of all requests that succeeded with TTFT ≤ 500 ms, E2E ≤ 3000 ms
"""


def test_squeezed_to_30_columns(monkeypatch, capsys):
    """The signature's field column folds at its words down to its minimum, the value column stays, long lines wrap
    at the terminal's width."""
    monkeypatch.setenv("COLUMNS", "30")
    RN.print_summary(SUMMARY)
    assert capsys.readouterr().out == SQUEEZED_SUMMARY
    RN.print_requests(B.summarize_records(records(), by="model", slo=Goodput.parse("ttft=500,e2e=3000")))
    assert capsys.readouterr().out == SQUEEZED_REQUESTS
