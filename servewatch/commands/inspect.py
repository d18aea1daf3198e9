"""`servewatch inspect SOURCE`: one scrape (URL or file) → dialect, metric naming, engine states,
histogram summaries with blindness findings."""

from __future__ import annotations

import argparse
import json
import sys

from servewatch.exposition.parser import DEFAULT_MAX_BYTES, DEFAULT_MAX_SERIES
from servewatch.table import WIDE_HELP

TABLE_ENGINES = 8          # the table shows this many engines; --json has them all

HELP = "read one /metrics scrape (URL or file) into the canonical engine picture"
DESCRIPTION = ("Read one /metrics exposition from a URL or a file and show the engine dialect, its "
               f"metric naming, each engine's state (the first {TABLE_ENGINES} in the table, all of them "
               "with --json) and its latency histograms with blindness findings.")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="http(s)://host:port (its /metrics is read), http(s)://host:port/metrics, or a file path")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--wide", action="store_true", help=WIDE_HELP)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds for the fetch (default 5)")
    parser.add_argument("--max-bytes", type=_positive, default=DEFAULT_MAX_BYTES,
                        help="refuse bodies larger than this (default 16 MiB)")
    parser.add_argument("--max-series", type=_positive, default=DEFAULT_MAX_SERIES,
                        help="refuse bodies with more series (sample lines) than this "
                             f"(default {DEFAULT_MAX_SERIES:,}; one vLLM 0.32 engine on CPU exposed 430)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from servewatch.errors import ServewatchError
    from servewatch.sources.fetch import read_source
    from servewatch.sources.scrape import (NO_ENGINE_METRICS, TOO_MANY_SERIES, ScrapeBounds, ScrapeFailed,
                                           ScrapeFailure, read_metrics)

    if args.timeout <= 0:
        raise ServewatchError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    bounds = ScrapeBounds(max_bytes=args.max_bytes, max_series=args.max_series)
    def failed(scrape: ScrapeFailure) -> ScrapeFailed:
        if scrape.kind == TOO_MANY_SERIES:
            scrape = ScrapeFailure(TOO_MANY_SERIES, detail=f"{scrape.detail}; --max-series sets it")
        return ScrapeFailed(args.source, scrape)

    try:
        status, body = read_source(args.source, timeout_s=args.timeout, max_bytes=bounds.max_bytes,
                                   max_series=bounds.max_series)
    except ScrapeFailed as refused:
        raise failed(refused.failure) from None
    scrape = read_metrics(status, body, bounds)
    if isinstance(scrape, ScrapeFailure):
        if scrape.kind == NO_ENGINE_METRICS:
            scrape = ScrapeFailure(NO_ENGINE_METRICS, detail=_what_it_holds(body, bounds))
        raise failed(scrape)
    report = build_report(scrape)
    _add_slots(report, args)
    if args.json:
        json.dump(report, sys.stdout, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print_report(report, wide=args.wide)
    return 0


def _add_slots(report: dict, args) -> None:
    """The slot picture, where the engine lists its slots and SOURCE is a URL (a file has none)."""
    from servewatch import dialects
    from servewatch.sources.slots import read_once, reading_json
    from servewatch.sources.urls import base_url

    dialect = dialects.by_name(report["dialect"])
    if dialect is not None and dialect.slots_path and "://" in args.source:
        reading = read_once(base_url(args.source) + dialect.slots_path, dialect, timeout_s=args.timeout)
        report["slots"] = reading_json(reading)


def _slots_line(slots: dict) -> str:
    from servewatch.kinds import failure_words

    if slots["error"]:
        return f"slots: not read ({failure_words(slots['error'])})"
    busy = [s for s in slots["slots"] if s["busy"]]
    said = "; ".join(f"slot {s['id']} " + (f"on its prompt ({_num(s['prompt_processed'])} tokens computed)"
                                            if s["prefilling"] else f"generating ({_num(s['decoded'])} tokens)")
                     for s in busy[:TABLE_ENGINES])
    return f"slots: {len(busy)} of {len(slots['slots'])} busy" + (f": {said}" if said else "")


def _what_it_holds(body: bytes, bounds) -> str:
    """Why a readable exposition showed no engine: empty, or how many families of something else."""
    from servewatch.exposition.parser import parse

    families = parse(body, max_bytes=bounds.max_bytes, max_series=bounds.max_series)
    if not families:
        return "not a Prometheus exposition (no metric families)"
    return f"no vLLM or SGLang metrics among {len(families)} families"


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
    return {"dialect": scrape.dialect, "generation": scrape.naming, "engines": engines, "findings": findings}


def _engine_title(labels: dict[str, str]) -> str:
    """"engine 0, model Qwen/Qwen2.5-7B-Instruct-AWQ" rather than the raw label pairs."""
    from servewatch.detectors.series import engine_words

    model = labels.get("model_name")
    key = ",".join(f"{k}={v}" for k, v in labels.items() if k != "model_name")
    return engine_words(key) + (f", model {model}" if model else "")


# The histogram table's columns after its name, by what is kept as the terminal narrows (servewatch.table).
HISTOGRAM_COLUMNS = (("p99*", 90), ("blind", 85), ("p50*", 80), ("count", 70), ("mean", 60), ("in 1st bucket", 40))


def print_report(report: dict, max_engines: int = TABLE_ENGINES, wide: bool = False) -> None:
    from rich.text import Text

    from servewatch import table as tables

    console = tables.console(wide, markup=False)   # label values and findings are the server's words: never markup
    engines = report["engines"]
    shown = engines[:max_engines]
    left_out = len(engines) - len(shown)
    console.print(Text.assemble((str(report['dialect']), "bold"),
                                f" (names: {report['generation']}), {len(engines)} engine(s)"
                                + (f", the first {len(shown)} shown" if left_out else "")))
    for engine in shown:
        state = tables.Table([tables.Column("field", priority=tables.ALWAYS, justify="left"),
                              tables.Column("value", priority=tables.ALWAYS, shrink="fold", min_width=16)],
                             dict(title=_engine_title(engine["labels"]), show_header=False, title_justify="left"))
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
        tables.print_table(console, state)
        priority = dict(HISTOGRAM_COLUMNS)
        hist = tables.Table([tables.Column("histogram", priority=tables.ALWAYS, justify="left", shrink="fold",
                                           min_width=10),
                             *(tables.Column(c, priority=priority[c]) for c in ("count", "mean", "p50*", "p99*",
                                                                               "in 1st bucket", "blind"))],
                            dict(title="latency histograms (cumulative since start)", title_justify="left"))
        for kind, h in engine["histograms"].items():
            first = ("n/a" if h["first_bucket_fraction"] is None
                     else f"{h['first_bucket_fraction']:.2%} (≤{_s(h['first_bucket_le'])})")
            hist.add_row(kind, _num(h["count"]), _s(h["mean_s"]), _s(h["p50_s"]), _s(h["p99_s"]), first,
                         Text("BLIND", style="red") if h["blind"] else "")
        tables.print_table(console, hist)
    console.print("* p50/p99 as Prometheus histogram_quantile computes them from the buckets")
    if "slots" in report:
        console.print(_slots_line(report["slots"]))
    shown_labels = [engine["labels"] for engine in shown]
    findings = [f for f in report["findings"] if f["labels"] in shown_labels]
    for finding in findings:
        console.print(Text.assemble(("finding", "yellow"), f" {finding['finding']}"))
    if left_out:
        hidden = len(report["findings"]) - len(findings)
        console.print(f"{left_out:,} more engine(s) not shown"
                      + (f" ({hidden:,} finding(s) about them)" if hidden else "") + "; --json lists them all")


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
