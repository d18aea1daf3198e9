"""Terminal output: a progress bar refreshed from the runner's own ticks (no refresh thread, so it
never competes with the load loop) and the summary table."""

from __future__ import annotations

from servewatch.load.runner import Progress


class LiveProgress:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._progress = None
        self._task = None

    def __enter__(self) -> "LiveProgress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

            self._progress = RichProgress(
                TextColumn("[bold]load"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                console=Console(stderr=True), auto_refresh=False, transient=True)
            self._progress.start()
            self._task = self._progress.add_task("starting", total=None)
        return self

    def update(self, p: Progress) -> None:
        if self._progress is None:
            return
        if p.total is not None:
            total, completed = p.total, p.done
        elif p.duration_s:
            total, completed = p.duration_s, min(p.elapsed_s, p.duration_s)
        else:
            total, completed = None, p.done
        text = (f"{p.done} done, {p.in_flight} in flight, {p.errors} errors, "
                f"{p.tokens_out} tokens out")
        self._progress.update(self._task, total=total, completed=completed, description=text)
        self._progress.refresh()

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def _fmt(x, unit: str = "s") -> str:
    if x is None:
        return "—"
    if unit == "s":
        return f"{x:.3f}"
    if unit == "%":
        return f"{100 * x:.1f}%"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


LATENCY_COLUMNS = (("p99", 90), ("p50", 80), ("n", 70), ("mean", 60), ("max", 50), ("p90", 40))


def print_summary(summary: dict, wide: bool = False) -> None:
    """`servewatch load`'s summary: the run, its latency table and its signature, fitted to the terminal
    (servewatch.table) unless `wide`."""
    from servewatch import table as tables

    console = tables.console(wide)
    head = (f"scenario {summary['scenario']}: {summary['requests']} requests, {summary['ok']} ok, "
            f"rate {_fmt(summary['requested_rate'], 'n')} requested / "
            f"{_fmt(summary['achieved_rate'], 'n')} achieved req/s")
    console.print(head)
    errors = {k: v for k, v in summary["errors"].items() if v}
    console.print("errors: " + (", ".join(f"{k} {v}" for k, v in errors.items()) if errors else "none"))
    trace = summary.get("trace")
    if trace:
        console.print(f"trace ({trace['format']}): {trace['rows']} rows replayed at speed {trace['speed']:g} over "
                      f"{trace['span_s']:.1f} s, {trace['rows_with_hash_ids']} with prefix hash ids"
                      + (f", {trace['skipped_rows']} bad rows skipped" if trace['skipped_rows'] else ""))
    delay = summary["schedule_delay_s"]
    console.print(f"schedule delay p50 {_ms(delay['p50'])} p99 {_ms(delay['p99'])}"
                  + (" (the sender's lag behind the trace)" if trace else ""))
    priority = dict(LATENCY_COLUMNS)
    table = tables.Table([tables.Column("metric", priority=tables.ALWAYS, justify="left", shrink="fold", min_width=6),
                          *(tables.Column(c, priority=priority[c]) for c in ("mean", "p50", "p90", "p99", "max", "n"))],
                         dict(title="latency (successful requests)"))
    for key, label in (("ttft_s", "TTFT"), ("itl_s", "ITL per token"), ("itl_chunk_s", "ITL per chunk"),
                       ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        s = summary[key]
        table.add_row(label, *(_fmt(s[c]) for c in ("mean", "p50", "p90", "p99", "max")), str(s["count"]))
    tables.print_table(console, table)
    sig = summary["signature"]
    srcs = sig["sources"]
    row = tables.Table([tables.Column("field", priority=tables.ALWAYS, justify="left", shrink="fold", min_width=8),
                        tables.Column("value", priority=tables.ALWAYS), tables.Column("from", justify="left")],
                       dict(title="signature",
                            caption="the fields that told four workloads apart on an RTX 3060 serving Qwen2.5-7B-AWQ"))
    for key, label, unit in (("tokens_in", "tokens in (mean)", "n"), ("tokens_out", "tokens out (mean)", "n"),
                             ("queue_wait_s", "queue wait (s)", "s"), ("prefill_s", "prefill (s)", "s"),
                             ("ttft_s", "TTFT (s)", "s"), ("itl_s", "between two tokens (s)", "s"),
                             ("generation_s", "token generation (s)", "s"), ("e2e_s", "E2E (s)", "s"),
                             ("max_running", "running, max", "n"), ("max_waiting", "waiting, max", "n"),
                             ("max_kv", "KV cache, max", "%")):
        row.add_row(label, _fmt(sig[key], unit), srcs.get(key) or "—")
    tables.print_table(console, row)
    if summary.get("goodput") is not None:
        console.print(f"goodput {summary['goodput']:.2f} req/s ({100 * summary['goodput_fraction']:.1f}% of requests)")
    console.print(f"token counts: {summary['token_count_source']}; prompts built with "
                  f"{summary['prompt_token_source']}")
    for note in summary.get("notes", []):
        console.print(f"[yellow]note:[/yellow] {note}")


def _ms(x) -> str:
    return "—" if x is None else f"{1000 * x:.2f} ms"


# The requests table's columns, most important first after the group's name: what is kept as the terminal narrows.
# (header, priority); the name column is never left out, and shrinks with "…" before anything else goes.
REQUESTS_COLUMNS = (("requests", 100), ("not ok", 90), ("good-\nput", 85), ("TTFT\np99", 80), ("TPOT\np50", 70),
                    ("E2E\np99", 60), ("TTFT\np50", 50), ("tokens\nout", 40), ("ITL\np99", 30))


def print_requests(summary: dict, wide: bool = False) -> None:
    """`servewatch requests`: the whole, then a table of its groups (see load.readback.summarize_records),
    fitted to the terminal (servewatch.table) unless `wide`."""
    from rich import box

    from servewatch import table as tables
    from servewatch.clock import iso8601
    from servewatch.load.readback import outcome_words, recorded_by_words

    console = tables.console(wide, markup=False, highlight=False)   # a group's name is read from a file: never markup
    total = summary["total"]
    by = summary["by"]
    who = recorded_by_words(summary)
    span = "—" if total["span_s"] is None else f"{total['span_s']:.1f} s"
    rate = "—" if total["rate"] is None else f"{total['rate']:.2f} req/s"
    console.print(f"{total['requests']} requests recorded by {who}, from {iso8601(total['first'])} over {span} "
                  f"({rate})", soft_wrap=True)
    console.print(f"{total['ok']} ok; not ok: {outcome_words(total['outcomes'])}", soft_wrap=True)
    if summary.get("skipped_lines"):
        console.print(f"{summary['skipped_lines']} lines that are not request records skipped (see stderr)")
    slo = summary.get("goodput_slo")
    itl_words = ("of every token" if total["itl_from"] != "each request's p99"
                 else "of each request's own p99 (proxy records kept without --keep-itl)")
    rows = summary["groups"] if by != "all" else []
    priority = dict(REQUESTS_COLUMNS)
    headers = ["requests", "not ok", "TTFT\np50", "TTFT\np99", "TPOT\np50", "ITL\np99", "E2E\np99", "tokens\nout"]
    if slo is not None:
        headers.append("good-\nput")
    key = tables.Column(by if by != "all" else "", priority=tables.ALWAYS, justify="left", shrink="ellipsis",
                        min_width=16, name=by)
    table = tables.Table([key, *(tables.Column(h, priority=priority[h]) for h in headers)],
                         dict(title=(f"by {by}" if by != "all" else "all requests") + ", times in ms",
                              box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, collapse_padding=True))
    for group in [*rows, {"key": "total", **total}]:
        cells = [group["key"], str(group["requests"]), str(group["requests"] - group["ok"]),
                 *(_ms_cell(group[k][q]) for k, q in (("ttft_s", "p50"), ("ttft_s", "p99"), ("tpot_s", "p50"),
                                                      ("itl_s", "p99"), ("e2e_s", "p99"))),
                 f"{group['tokens_out']:,}"]
        if slo is not None:
            cells.append(_fmt(group["goodput_fraction"], "%"))
        table.add_row(*cells, end_section=bool(rows) and group is rows[-1])
    tables.print_table(console, table)
    console.print(f"times are of the successful requests; ITL p99 {itl_words}")
    if by not in ("all", "outcome"):
        for group in rows:
            if group["ok"] < group["requests"]:
                console.print(f"not ok, {by} {group['key']}: {outcome_words(group['outcomes'])}", soft_wrap=True)
    if slo is not None:
        words = ", ".join(f"{k.removesuffix('_ms').upper()} ≤ {v:g} ms" for k, v in slo.items() if v is not None)
        console.print(f"goodput: the share of all requests that succeeded with {words}", soft_wrap=True)


def _ms_cell(x) -> str:
    """Milliseconds for a table cell: two decimals under 10 ms, one above."""
    if x is None:
        return "—"
    ms = 1000 * x
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}"
