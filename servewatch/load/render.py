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


def print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    head = (f"scenario {summary['scenario']}: {summary['requests']} requests, {summary['ok']} ok, "
            f"rate {_fmt(summary['requested_rate'], 'n')} requested / "
            f"{_fmt(summary['achieved_rate'], 'n')} achieved req/s")
    console.print(head)
    errors = {k: v for k, v in summary["errors"].items() if v}
    console.print("errors: " + (", ".join(f"{k} {v}" for k, v in errors.items()) if errors else "none"))
    delay = summary["schedule_delay_s"]
    console.print(f"schedule delay p50 {_ms(delay['p50'])} p99 {_ms(delay['p99'])}")
    table = Table(title="latency (successful requests)")
    for col in ("metric", "mean", "p50", "p90", "p99", "max", "n"):
        table.add_column(col, justify="right" if col != "metric" else "left")
    for key, label in (("ttft_s", "TTFT"), ("itl_s", "ITL per token"), ("itl_chunk_s", "ITL per chunk"),
                       ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        s = summary[key]
        table.add_row(label, *(_fmt(s[c]) for c in ("mean", "p50", "p90", "p99", "max")), str(s["count"]))
    console.print(table)
    sig = summary["signature"]
    srcs = sig["sources"]
    row = Table(title="signature", caption_justify="left",
                caption="the fields that told four workloads apart on an RTX 3060 serving Qwen2.5-7B-AWQ")
    for col in ("field", "value", "from"):
        row.add_column(col, justify="left" if col != "value" else "right")
    for key, label, unit in (("tokens_in", "tokens in (mean)", "n"), ("tokens_out", "tokens out (mean)", "n"),
                             ("queue_wait_s", "queue wait (s)", "s"), ("prefill_s", "prefill (s)", "s"),
                             ("ttft_s", "TTFT (s)", "s"), ("itl_s", "between two tokens (s)", "s"),
                             ("generation_s", "token generation (s)", "s"), ("e2e_s", "E2E (s)", "s"),
                             ("max_running", "running, max", "n"), ("max_waiting", "waiting, max", "n"),
                             ("max_kv", "KV cache, max", "%")):
        row.add_row(label, _fmt(sig[key], unit), srcs.get(key) or "—")
    console.print(row)
    if summary.get("goodput") is not None:
        console.print(f"goodput {summary['goodput']:.2f} req/s ({100 * summary['goodput_fraction']:.1f}% of requests)")
    console.print(f"token counts: {summary['token_count_source']}; prompts built with "
                  f"{summary['prompt_token_source']}")
    for note in summary.get("notes", []):
        console.print(f"[yellow]note:[/yellow] {note}")


def _ms(x) -> str:
    return "—" if x is None else f"{1000 * x:.2f} ms"
