"""`servewatch demo`: the whole product in one command, on the built-in engine (no GPU)."""

from __future__ import annotations

import argparse

from servewatch.table import WIDE_HELP
from servewatch.commands.recording import duration

HELP = "run the built-in engine through four workloads and three silent failures, then report"
DESCRIPTION = ("Start the built-in engine, run four load scenarios (normal, overload, long prompt, "
               "long output) while the recorder watches, inject a health-green stall, an engine that "
               "wedges while idle (caught by the active probe) and an engine death, and end with the signature table, each verdict with its evidence and detection "
               "time, what /health said meanwhile, and report.html / report.md.")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", default="servewatch-demo",
                        help="where bundles and reports go (default ./servewatch-demo)")
    parser.add_argument("--fast", action="store_true",
                        help="virtual time: the same script in-process, in well under a minute")
    from servewatch.sim.behaviour import engine_names
    from servewatch.sim.config import SimConfig

    parser.add_argument("--dialect", choices=engine_names(), default=SimConfig.dialect,
                        help=f"which engine the simulator speaks (default {SimConfig.dialect})")
    parser.add_argument("--seed", type=int, default=0,
                        help="the simulated engine's seed: the same seed gives the same run (default 0)")
    parser.add_argument("--interval", type=duration, default=0.5, help="recorder cadence in seconds (default 0.5)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of tables")
    parser.add_argument("--wide", action="store_true", help=WIDE_HELP)


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    import time
    from pathlib import Path

    from servewatch.demo.plan import FAST_SLOTS, REALTIME_SLOTS, demo_plan
    from servewatch.demo.report import write_reports
    from servewatch.demo.result import DemoResult
    from servewatch.demo.view import LiveView
    from servewatch.detectors import DetectorConfig
    from servewatch.errors import ServewatchError
    from servewatch.sinks.bundle_sink import bundle_sink

    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ServewatchError(f"--out {out}: {exc.strerror or exc}") from None
    plan = demo_plan(args.fast, args.dialect)
    config = DetectorConfig()
    sink = bundle_sink(str(out / "bundles"), None, config, keep=100)
    result = DemoResult(mode="virtual" if args.fast else "realtime", dialect=args.dialect, out_dir=str(out),
                        slot_limit=FAST_SLOTS if args.fast else REALTIME_SLOTS)
    if not args.fast and not args.json:
        print(f"servewatch demo: real time: the built-in engine runs with {REALTIME_SLOTS} slots (--max-num-seqs "
              f"{REALTIME_SLOTS}), scaled from the RTX 3060's 256 so that 30 s of overload fill them and queue; "
              f"--fast keeps 256", file=sys.stderr)
    started = time.monotonic()
    with LiveView(plan, enabled=not args.json) as view:
        if args.fast:
            from servewatch.demo.virtual import run_virtual

            result.phases = run_virtual(plan, dialect=args.dialect, seed=args.seed, interval=args.interval,
                                        sink=sink, detector_config=config, history_s=1800.0,
                                        listeners=[view.on_fired], on_phase=view.on_phase)
        else:
            from servewatch.demo.realtime import run_realtime

            result.phases = run_realtime(plan, dialect=args.dialect, seed=args.seed, interval=args.interval,
                                         sink=sink, detector_config=config, listeners=[view.on_fired],
                                         on_phase=view.on_phase, log_dir=out)
    result.wall_s = time.monotonic() - started
    result.bundles = [str(p) for p in sink.writer.bundles()]
    result.bundle_failures = sink.failures
    html_path, md_path = write_reports(result, out)
    result.report_html, result.report_md = str(html_path), str(md_path)
    if args.json:
        json.dump(_json(result), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print(result, wide=args.wide)
    missing = result.missing_verdicts()
    if missing:
        print(f"servewatch demo: expected verdicts did not fire: {', '.join(missing)}", file=sys.stderr)
        return 1
    wrong = [shape for shape in result.shapes() if not shape.ok]
    if wrong:
        print("servewatch demo: a workload did not have the shape it announces: "
              + "; ".join(f"{s.phase}: announced {s.announced}, got {s.achieved}" for s in wrong), file=sys.stderr)
        return 1
    return 0


def _json(result) -> dict:
    from servewatch.demo.report import signature_rows

    return {
        "mode": result.mode, "dialect": result.dialect, "wall_s": round(result.wall_s, 2),
        "signature": {"scenarios": [p.phase.name for p in result.scenarios],
                      "rows": signature_rows(result.scenarios)},
        "signatures": {p.phase.name: {k: v for k, v in p.summary.get("signature", {}).items()
                                      if k not in ("sources", "client")} for p in result.scenarios},
        "errors": {p.phase.name: {k: v for k, v in p.summary.get("errors", {}).items() if v}
                   for p in result.phases},
        "verdicts": [{"phase": p.phase.name, "verdict": f.verdict.name, "why": f.verdict.why,
                      "detection_s": p.detection_s(f), "since_s": round(f.verdict.since_s, 3),
                      "bundle": f.bundle} for p in result.phases for f in p.fired],
        "health_during_faults": {p.phase.name: p.health for p in result.incidents},
        "slot_limit": result.slot_limit, "shapes": [shape.to_dict() for shape in result.shapes()],
        "bundles": result.bundles, "bundle_write_failures": result.bundle_failures,
        "report_html": result.report_html, "report_md": result.report_md,
    }


def _print(result, wide: bool = False) -> None:
    from servewatch import table as tables
    from servewatch.demo.report import NO_FAULT, signature_rows, verdict_rows

    console = tables.console(wide)
    # the workloads in the order they ran, the last left out first when the terminal is narrow
    columns = [tables.Column("", priority=tables.ALWAYS, justify="left", shrink="fold", name="field"),
               *(tables.Column(p.phase.name, priority=100 - i) for i, p in enumerate(result.scenarios))]
    table = tables.Table(columns, dict(title="Signatures of four workloads (shape measured on an RTX 3060, "
                                             "Qwen2.5-7B-AWQ)", title_justify="left"))
    for row in signature_rows(result.scenarios):
        table.add_row(*row)
    tables.print_table(console, table)
    console.print(f"[bold]Workload shapes[/bold] (the built-in engine with {result.slot_limit} slots)")
    for shape in result.shapes():
        colour = "green" if shape.ok else "red"
        console.print(f"  [{colour}]{shape.line()}[/{colour}]")
    console.print("[bold]What health checks missed[/bold]")
    for phase, name, detected, _since, _health, why in verdict_rows(result):
        when = detected if detected == NO_FAULT else f"detected {detected}"
        console.print(f"  [red]{name}[/red] ({phase}, {when}): {why}")
    for p in result.incidents:
        cut = sum(1 for r in p.records if r.error == "truncated")
        console.print(f"[bold]{p.phase.name}[/bold]: /health said "
                      + (", ".join(f"{k} ×{v}" for k, v in sorted(p.health.items())) or "nothing")
                      + f" from the fault on; {cut} request(s) cut short (counted as 'truncated', not success)")
    console.print(f"bundles ({len(result.bundles)}): {result.out_dir}/bundles — check each with `servewatch verify`")
    console.print(f"report: {result.report_html}  and  {result.report_md}")
