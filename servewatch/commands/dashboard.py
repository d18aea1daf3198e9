"""`servewatch dashboard`: a Grafana dashboard (JSON to import) for one engine dialect."""

from __future__ import annotations

import argparse

from servewatch.commands import add_out_argument, write_out

HELP = "write a Grafana dashboard for vLLM or SGLang"
DESCRIPTION = ("Write a Grafana dashboard (JSON, import it in Grafana under Dashboards > New > Import): "
               "TTFT, TPOT and end-to-end p50/p95 with where their buckets go blind, queue wait and "
               "waiting, running vs slot limit, KV usage, preemptions, unfinished requests, errors by "
               "class, and servewatch serve's stall and verdict panels. Every panel's description says "
               "which action it leads to.")


def arguments(parser: argparse.ArgumentParser) -> None:
    from servewatch.commands.recording import add_series_arguments

    add_series_arguments(parser)
    parser.add_argument("--slot-limit", type=int, default=None, metavar="N",
                        help="the engine's slot limit, drawn on the running panel (default: vLLM's 256; "
                             "none for SGLang)")
    add_out_argument(parser)


def run(args: argparse.Namespace) -> int:
    import json

    from servewatch.derive.dashboard import panels, to_grafana
    from servewatch.commands.recording import series_from_args
    from servewatch.errors import ServewatchError

    series = series_from_args(args)
    if args.slot_limit is not None and args.slot_limit < 1:
        raise ServewatchError(f"--slot-limit: {args.slot_limit} is not a whole number >= 1")
    model = to_grafana(series, panels(series, args.slot_limit or series.default_slot_limit))
    text = json.dumps(model, indent=2) + "\n"
    write_out(args.out, text)
    return 0
