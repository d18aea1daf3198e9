"""`servewatch inspect SOURCE`: one scrape (URL or file) → dialect, name generation, engine states,
histogram summaries with blindness findings."""

from __future__ import annotations

import argparse
import json
import sys

DEFAULT_MAX_BYTES = 16 * 2**20


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect", help="read one /metrics scrape (URL or file) into the canonical engine picture",
        description="Read one /metrics exposition from a URL or a file and show the engine dialect, its "
                    "name generation, each engine's state and its latency histograms with blindness findings.")
    parser.add_argument("source", metavar="SOURCE", help="http(s)://host:port/metrics, or a file path")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds for the fetch (default 5)")
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES,
                        help="refuse bodies larger than this (default 16 MiB)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from servewatch.dialects import read_scrape
    from servewatch.errors import ExpositionError
    from servewatch.exposition.parser import parse
    from servewatch.sources.fetch import read_source

    text = read_source(args.source, timeout_s=args.timeout, max_bytes=args.max_bytes)
    scrape = read_scrape(text, max_bytes=args.max_bytes)
    if scrape.dialect is None:
        families = parse(text, max_bytes=args.max_bytes)  # raises on a body that is not an exposition
        if not families:
            raise ExpositionError(f"{args.source}: not a Prometheus exposition (no metric families)")
        raise ExpositionError(f"{args.source}: no vLLM or SGLang metrics among {len(families)} families")
    report = build_report(scrape)
    if args.json:
        json.dump(report, sys.stdout, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print_report(report)
    return 0


def build_report(scrape) -> dict:
    from servewatch.engine.summary import summarize

    engines = []
    findings = []
    for engine in scrape.engines:
        summaries = {kind: summarize(kind, h) for kind, h in engine.histograms.items()}
        for summary in summaries.values():
            line = summary.finding()
            if line:
                findings.append({"labels": engine.labels, "histogram": summary.kind, "finding": line})
        engines.append({
            "labels": engine.labels,
            "running": engine.running,
            "waiting": engine.waiting,
            "waiting_by_reason": engine.waiting_by_reason,
            "slot_limit": engine.slot_limit,
            "kv_usage": engine.kv_usage,
            "kv_used_tokens": engine.kv_used_tokens,
            "kv_total_tokens": engine.kv_total_tokens,
            "counters": {
                "prompt_tokens": engine.counters.prompt_tokens,
                "generation_tokens": engine.counters.generation_tokens,
                "preemptions": engine.counters.preemptions,
                "steps": engine.counters.steps,
                "finished": engine.counters.finished,
            },
            "histograms": {kind: s.as_json() for kind, s in summaries.items()},
        })
    return {"dialect": scrape.dialect, "generation": scrape.generation, "engines": engines, "findings": findings}


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{report['dialect']}[/bold] (names: {report['generation']}), "
                  f"{len(report['engines'])} engine(s)")
    for engine in report["engines"]:
        labels = ", ".join(f"{k}={v}" for k, v in engine["labels"].items())
        state = Table(title=f"engine {labels}", show_header=False, title_justify="left")
        state.add_column("field")
        state.add_column("value", justify="right")
        reasons = engine["waiting_by_reason"]
        waiting = _num(engine["waiting"]) + (f" ({', '.join(f'{k} {_num(v)}' for k, v in reasons.items())})"
                                             if reasons else "")
        kv = "n/a" if engine["kv_usage"] is None else f"{engine['kv_usage']:.1%}"
        if engine["kv_total_tokens"]:
            kv += f" of {engine['kv_total_tokens']:,.0f} tokens"
        counters = engine["counters"]
        rows = [("running", _num(engine["running"])), ("waiting", waiting),
                ("slot limit", _num(engine["slot_limit"])), ("KV usage", kv),
                ("prompt tokens", _num(counters["prompt_tokens"])),
                ("generation tokens", _num(counters["generation_tokens"])),
                ("preemptions", _num(counters["preemptions"])), ("engine steps", _num(counters["steps"])),
                ("finished", ", ".join(f"{k} {_num(v)}" for k, v in counters["finished"].items()) or "n/a")]
        for name, value in rows:
            state.add_row(name, value)
        console.print(state)
        hist = Table(title="latency histograms (cumulative since start)", title_justify="left")
        for column in ("histogram", "count", "mean", "p50*", "p99*", "in 1st bucket", "blind"):
            hist.add_column(column, justify="right" if column != "histogram" else "left")
        for kind, h in engine["histograms"].items():
            first = ("n/a" if h["first_bucket_fraction"] is None
                     else f"{h['first_bucket_fraction']:.2%} (≤{_s(h['first_bucket_le'])})")
            hist.add_row(kind, _num(h["count"]), _s(h["mean_s"]), _s(h["p50_s"]), _s(h["p99_s"]), first,
                         "[red]BLIND[/red]" if h["blind"] else "")
        console.print(hist)
    console.print("* p50/p99 as Prometheus histogram_quantile computes them from the buckets")
    for finding in report["findings"]:
        console.print(f"[yellow]finding[/yellow] {finding['finding']}")


def _num(value) -> str:
    if value is None:
        return "unknown"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3f}"


def _s(seconds) -> str:
    if seconds is None:
        return "n/a"
    if seconds >= 1:
        return f"{seconds:.2f}s"
    return f"{seconds * 1000:.1f}ms" if seconds < 0.01 else f"{seconds * 1000:.0f}ms"
