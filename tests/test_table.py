"""Tables fit the terminal they are printed on (servewatch/table.py, issue 45): columns left out by declared
priority, least important first, with a line saying which and that --wide shows them; never a header cut
into fragments; long names ellipsised with a marker. The requests table at 80, 120 and 200 columns and piped."""

from __future__ import annotations

import json
from pathlib import Path
import os
import re
import subprocess
import sys

import pytest

from servewatch import table as tables
from servewatch.cli import main
from servewatch.load import records as R
from servewatch.load.render import REQUESTS_COLUMNS

LONG_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _rec(i: int, model: str, ttft: float, error: str | None = None) -> R.RequestRecord:
    rec = R.RequestRecord(id=i, scheduled=1000.0 + i, prompt_tokens_target=None, max_tokens=1234)
    rec.sent, rec.http_status, rec.error = rec.scheduled + 0.001, 200 if error is None else 503, error
    rec.ttft_s, rec.e2e_s, rec.tpot_s = ttft, ttft + 0.5, 0.05
    rec.output_tokens = 1234 if error is None else None
    rec.model, rec.api = model, "completions"
    rec.proxy = {"tenant": "t1", "itl_p99_s": 0.07}
    return rec


@pytest.fixture
def records(tmp_path) -> str:
    recs = [_rec(i, "Qwen/Qwen2.5-7B-Instruct-AWQ", 0.1 * (i + 1)) for i in range(5)]
    recs.append(_rec(5, LONG_MODEL, 0.2, error=R.STREAM_CUT))
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in recs))
    return str(path)


HEADERS = {" ".join(h.split()): h.split("\n") for h, _ in REQUESTS_COLUMNS}     # "TTFT p99" -> ["TTFT", "p99"]
BY_PRIORITY = [" ".join(h.split()) for h, _ in sorted(REQUESTS_COLUMNS, key=lambda c: c[1])]   # least first


def _read_table(out: str) -> tuple[list[str], list[str], list[str]]:
    """(the table's lines from its header to its last row, the header's lines, the columns said left out)."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.strip().startswith("TTFT") or "requests  not ok" in line)
    rule = next(i for i in range(top, len(lines)) if "───" in lines[i])
    end = next(i for i in range(rule, len(lines)) if lines[i].strip().startswith("total"))
    words = lines[top:rule]
    said = next((line for line in lines if line.startswith("(left out to fit the terminal: ")), None)
    left_out = [] if said is None else said.removeprefix("(left out to fit the terminal: ").split(";")[0].split(", ")
    if said is not None:
        assert said.endswith("; --wide shows them)")
    return lines[top - 1:end + 1], words, left_out


def _check(out: str, width: int) -> list[str]:
    """Every header whole or said left out, the left-out ones the least important, every line within width."""
    lines, header, left_out = _read_table(out)
    assert all(len(line.rstrip()) <= width for line in lines), [line for line in lines if len(line.rstrip()) > width]
    assert left_out == BY_PRIORITY[:len(left_out)], f"left out {left_out}, not the least important first"
    shown = [name for name in HEADERS if name not in left_out]
    for name in shown:
        for part in HEADERS[name]:
            assert any(re.search(rf"(^|\s){re.escape(part)}(\s|$)", line) for line in header), \
                f"the header {name!r} is not whole at {width} columns: {header}"
    whole_words = {"model", *(w for parts in HEADERS.values() for p in parts for w in p.split())}
    fragments = [w for line in header for w in line.split() if w not in whole_words]
    assert not fragments, f"pieces of headers at {width} columns: {fragments}"
    return left_out


@pytest.mark.parametrize("width, left_out", [(80, ["ITL p99"]), (120, []), (200, [])])
def test_the_requests_table_fits_the_terminal_with_every_header_whole(records, monkeypatch, capsys, width, left_out):
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["requests", records, "--goodput", "ttft=250"]) == 0
    out = capsys.readouterr().out
    assert _check(out, width) == left_out
    if width >= 120:
        assert LONG_MODEL in out and "…" not in out
    assert "6,170" in out and "33.3%" in out                      # tokens out and goodput kept at 80 columns too


def test_a_narrow_terminal_leaves_out_more_in_priority_order_and_cuts_names_with_a_marker(records, monkeypatch,
                                                                                         capsys):
    monkeypatch.setenv("COLUMNS", "50")
    assert main(["requests", records, "--goodput", "ttft=250"]) == 0
    out = capsys.readouterr().out
    left_out = _check(out, 50)
    assert len(left_out) >= 4 and "requests" not in left_out and "good-put" not in left_out
    assert re.search(r"meta-llama/\S*…", out)                       # the name ellipsised, with its marker
    assert f"model {LONG_MODEL}: stream_cut 1" in out                # and said whole below the table


def test_wide_prints_every_column_whatever_the_terminal(records, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "50")
    assert main(["requests", records, "--goodput", "ttft=250", "--wide"]) == 0
    out = capsys.readouterr().out
    assert _check(out, 10_000) == [] and LONG_MODEL in out and "left out" not in out


def test_piped_the_table_is_fitted_to_80_columns(records):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run([sys.executable, "-m", "servewatch", "requests", records, "--goodput", "ttft=250"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _check(done.stdout, 80) == ["ITL p99"]


# ---------------------------------------------------------------- the renderer itself

def _table(rows: int = 2) -> tables.Table:
    t = tables.Table([tables.Column("name", priority=tables.ALWAYS, justify="left", shrink="ellipsis", min_width=6),
                      tables.Column("first\nkept", priority=30), tables.Column("second", priority=20),
                      tables.Column("least\nwanted", priority=10)], {})
    for i in range(rows):
        t.add_row(f"a-rather-long-name-{i}", "1,000", "2,000", "3,000")
    return t


def _render(t: tables.Table, width: int) -> tuple[str, list[str]]:
    import io

    console = tables.console(wide=True, file=io.StringIO(), markup=False)   # the width is `width` alone
    left_out = tables.print_table(console, t, width=width)
    return console.file.getvalue(), [c.said() for c in left_out]


def test_columns_go_least_important_first_and_the_name_shrinks_before_any_goes():
    t = _table()
    full, _ = _render(t, 200)
    natural = max(len(line.rstrip()) for line in full.splitlines())
    assert _render(t, natural)[1] == []
    shrunk, gone = _render(t, natural - 5)                          # the name gives up 5 cells, nothing goes
    assert gone == [] and "…" in shrunk and "least" in shrunk
    assert _render(t, natural - 14)[1] == []                        # the name at its floor of 6 cells
    assert _render(t, natural - 15)[1] == ["least wanted"]          # one cell less: a column goes
    text, gone = _render(t, 16)
    assert gone == ["least wanted", "second", "first kept"]
    assert "name" in text and "(left out to fit the terminal: least wanted, second, first kept; --wide shows them)" in text


def test_a_row_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="a row of 2 cells in a table of 4 columns"):
        _table().add_row("x", "y")


# ---------------------------------------------------------------- watch's live table and load's summary

@pytest.mark.parametrize("width, wide, left_out", [(60, False, ["time", "after"]), (70, False, ["time"]),
                                                   (120, False, []), (44, True, [])])
def test_the_live_watch_table_leaves_out_time_then_after_and_folds_the_why(monkeypatch, width, wide, left_out):
    import io

    from rich.console import Console

    from servewatch.detectors.verdict import Verdict
    from servewatch.sinks.base import Fired
    from servewatch.timeline.window import Window
    from servewatch.watch.output import status_table

    monkeypatch.setenv("COLUMNS", str(width))
    why = "running 4 and the generation counter did not move in 12.0 s (threshold 8 s)"
    verdict = Verdict(name="alive_health_ok_no_progress", t=10.0, onset=8.0, why=why)
    out = io.StringIO()
    Console(file=out, width=tables.WIDE_WIDTH if wide else width).print(
        status_table(Window(), [Fired(verdict, None)], ["stall"], 3.0, wide=wide))
    text = out.getvalue()
    said = re.search(r"\(left out to fit the terminal: (.*); --wide shows them\)", " ".join(text.split()))
    assert (said.group(1).split(", ") if said else []) == left_out
    assert "alive_health_ok_no_progress" in text                         # a verdict's name is never cut
    for header in ("verdict", "why", *(h for h in ("time", "after") if h not in left_out)):
        assert re.search(rf"\b{header}\b", text), header
    if not wide:
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    flat = " ".join(w for line in text.splitlines() for w in line.replace("│", " ").split())
    assert all(word in flat for word in why.split() if len(word) < 12)    # the why folded, not cut


@pytest.mark.parametrize("width, left_out", [(50, ["p90"]), (80, [])])
def test_the_load_summary_keeps_p99_and_leaves_out_p90_first(monkeypatch, capsys, width, left_out):
    from servewatch.load.render import print_summary

    stats = {"mean": 0.0123, "p50": 0.0111, "p90": 0.0222, "p99": 0.0333, "max": 0.0444, "count": 20}
    signature = {k: None for k in ("tokens_in", "tokens_out", "queue_wait_s", "prefill_s", "ttft_s", "itl_s",
                                   "generation_s", "e2e_s", "max_running", "max_waiting", "max_kv")}
    summary = {"scenario": "custom", "requests": 20, "ok": 20, "requested_rate": 4.0, "achieved_rate": 3.9,
               "errors": {}, "schedule_delay_s": {"p50": 0.0001, "p99": 0.0002}, "ttft_s": stats, "itl_s": stats,
               "itl_chunk_s": stats, "tpot_s": stats, "e2e_s": stats, "signature": {**signature, "sources": {}},
               "token_count_source": "server", "prompt_token_source": "approx"}
    monkeypatch.setenv("COLUMNS", str(width))
    print_summary(summary)
    out = capsys.readouterr().out
    said = re.search(r"\(left out to fit the terminal: (.*); --wide shows them\)", out)
    assert (said.group(1).split(", ") if said else []) == left_out
    header = next(line for line in out.splitlines() if "metric" in line)
    assert all(re.search(rf"\b{h}\b", header) for h in ("mean", "p50", "p99", "max", "n") if h not in left_out)
    assert max(len(line.rstrip()) for line in out.splitlines() if not line.startswith("(left out")) <= width


# ---------------------------------------------------------------- the drill's faults table

DRILL_DOC = Path(__file__).parent / "fixtures" / "drill" / "short-sim.drill.json"   # a short drill on the simulator


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_drill_faults_table_keeps_the_verdict_and_leaves_out_the_least_important(monkeypatch, capsys, width):
    from servewatch.commands.drill import FAULT_PRIORITY, _print_faults
    from servewatch.drill import report

    doc = json.loads(DRILL_DOC.read_text())
    monkeypatch.setenv("COLUMNS", str(width))
    left_out = _print_faults(doc, wide=False)
    out = capsys.readouterr().out
    names = list(report.columns(doc))
    by_priority = sorted(names, key=lambda n: (FAULT_PRIORITY[n], -names.index(n)))
    assert left_out == by_priority[:len(left_out)]
    assert (f"(left out to fit the terminal: {', '.join(left_out)}; --wide shows them)" in out) == bool(left_out)
    assert "expectations" not in left_out and "FAILED:" in out
    assert (width, len(left_out)) in ((80, 6), (120, 4), (200, 0))
    table_lines = [line for line in out.splitlines() if line[:1] in "┏┃┡│├└"]
    assert max(len(line) for line in table_lines) <= width
    header = [line for line in table_lines if line.startswith("┃")]
    words = {w for line in header for w in line.replace("┃", " ").split()}
    for name in names:
        if name not in left_out:
            assert all(word in words for word in name.split()), (name, header)
    assert _print_faults(doc, wide=True) == [] and "left out" not in capsys.readouterr().out


NAMES = ("alive_health_ok_no_progress", "requests_aborted", "histogram_blind")


def _cells(out: str) -> list[list[str]]:
    """Each column's text, its lines joined, in a table drawn with rich's box lines (header and rows)."""
    lines = [line for line in out.splitlines() if line[:1] in "┃│"]
    columns: list[list[str]] = []
    for line in lines:
        for i, part in enumerate(re.split(r"[┃│]", line)[1:-1]):
            if len(columns) <= i:
                columns.append([])
            columns[i].append(part.strip())
    return columns


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_drill_table_never_cuts_a_verdict_name(monkeypatch, capsys, width):
    """A fault detected by three verdicts, one of them 27 characters long: at 80 columns the table folds its
    cells at spaces only, every verdict name on one line whole (rich alone printed `alive_health_ok_no_` over
    `progress`, `requests_aborte` over `d`), and it still fits the terminal."""
    from servewatch.commands.drill import _print_faults

    doc = json.loads(DRILL_DOC.read_text())
    doc["faults"][0]["detected"] = {"alive_health_ok_no_progress": 2.51, "requests_aborted": 3.02,
                                    "histogram_blind": 7.04}
    monkeypatch.setenv("COLUMNS", str(width))
    left_out = _print_faults(doc, wide=False)
    out = capsys.readouterr().out
    assert "detected by (s after injection)" not in left_out
    table_lines = [line for line in out.splitlines() if line[:1] in "┏┃┡│├└"]
    assert max(len(line) for line in table_lines) <= width
    for name in NAMES:
        assert sum(name in line for line in table_lines) == 1, (name, "\n".join(table_lines))
    detected = next(col for col in _cells(out) if any("detected" in part for part in col))
    assert re.findall(r"[a-z_]+ \d+\.\d+", " ".join(p for p in detected if p)) == [
        "alive_health_ok_no_progress 2.51", "requests_aborted 3.02", "histogram_blind 7.04"]


def test_a_folded_column_is_never_narrower_than_its_longest_word():
    """The renderer itself, squeezed: a `fold` column keeps its longest word whole and a column goes first."""
    import io

    from rich.console import Console

    table = tables.Table([tables.Column("check", priority=tables.ALWAYS, justify="left", shrink="fold", min_width=8),
                          tables.Column("note", priority=5, justify="left", shrink="fold", min_width=8)])
    table.add_row("requests_aborted and alive_health_ok_no_progress held", "x " * 30)
    out = io.StringIO()
    left_out = tables.print_table(Console(file=out, width=40, highlight=False), table)
    text = out.getvalue()
    assert "alive_health_ok_no_progress" in text and "requests_aborted" in text
    assert max(len(line) for line in text.splitlines() if line[:1] in "┏┃┡│├└┌└") <= 40
    assert [c.header for c in left_out] in ([], ["note"])


# ---------------------------------------------------------------- one renderer, --wide and --json everywhere

TABLE_COMMANDS = ("requests", "load", "watch", "inspect", "advise", "demo", "postmortem", "drill")


def test_every_table_goes_through_the_one_renderer():
    from pathlib import Path

    import servewatch

    root = Path(servewatch.__file__).parent
    # watch's live view keeps one rich grid: two columns of label and value, no header to cut
    allowed = {"table.py", "watch/output.py"}
    direct = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                    if str(p.relative_to(root)) not in allowed
                    and re.search(r"from rich\.table import|rich\.table\.Table", p.read_text(encoding="utf-8")))
    assert direct == [], f"tables drawn with rich directly, not servewatch/table.py: {direct}"
    grid_only = (root / "watch" / "output.py").read_text(encoding="utf-8")
    assert re.findall(r"\bTable\.(\w+)\(", grid_only) == ["grid"] and "Table(" not in grid_only.replace("tables.Table(", "")


@pytest.mark.parametrize("command", TABLE_COMMANDS)
def test_every_command_that_prints_a_table_has_wide_and_json(command):
    import argparse

    from servewatch.cli import build_parser

    root = build_parser()
    subparsers = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    flags = {flag for action in subparsers.choices[command]._actions for flag in action.option_strings}
    assert {"--wide", "--json"} <= flags, (command, sorted(flags))
