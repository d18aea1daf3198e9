"""`servewatch requests FILE...`: request records read back — `servewatch load`'s or `servewatch proxy`'s
requests.jsonl (one format), rotated files too — as latency, outcomes and goodput by model, tenant, API
or outcome."""

from __future__ import annotations

import argparse
import json
import sys

from servewatch.commands import add_command

HELP = "read request records (of load or proxy) back: latency, outcomes and goodput by model, tenant or API"
DESCRIPTION = ("Read the requests.jsonl files that `servewatch load` and `servewatch proxy` write (one record "
               "format; give rotated files too, in any order) and print, for the whole and for each group, "
               "the outcomes by reason and the time to first token, time per output token, inter-token gap "
               "and end-to-end time of the successful requests. Lines that are not records (a file cut by "
               "a kill or a full disk) are counted and their places said; they never stop the reading. "
               "Prompt and completion text, where a record kept it, is never read.")
EPILOG = ("examples:\n"
          "  servewatch requests proxy-records/requests.jsonl* --by tenant --last 10m\n"
          "  servewatch requests out/requests.jsonl --goodput ttft=500,tpot=50 --json\n"
          "  servewatch requests records.jsonl --by model --html requests.html")


def register(subparsers: argparse._SubParsersAction) -> None:
    from servewatch.load.readback import GROUPS

    import textwrap

    parser = add_command(subparsers, "requests", HELP, textwrap.fill(DESCRIPTION, 79), run, epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", metavar="FILE", nargs="+",
                        help="requests.jsonl files (rotated ones too), or a directory holding them")
    parser.add_argument("--by", choices=GROUPS,
                        help="group by the model asked for, the tenant (hashed; in the proxy's records only), "
                             "the API, the outcome, or not at all (default: model where the records name one, "
                             "else all)")
    parser.add_argument("--last", metavar="DURATION",
                        help="only requests that arrived within DURATION (30s, 10m) of the newest one")
    parser.add_argument("--since", metavar="TIME",
                        help="only requests that arrived at TIME or later (ISO 8601, UTC when no offset "
                             "is given, or epoch seconds)")
    parser.add_argument("--goodput", metavar="ttft=MS,tpot=MS,e2e=MS",
                        help="the share of requests that succeeded within these SLOs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a single offline HTML page: the figures, the requests over time, "
                             "the TTFT and TPOT distributions")


def _since(text: str) -> float:
    from servewatch.clock import parse_iso8601
    from servewatch.errors import ServewatchError

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_iso8601(text)
    except ValueError:
        raise ServewatchError(f"--since: {text!r} is neither an ISO 8601 time (2026-12-04T17:00:00Z) "
                              "nor epoch seconds") from None


def _last(text: str) -> float:
    from servewatch.errors import ServewatchError
    from servewatch.sim.faults import FaultSpecError, parse_seconds

    try:
        seconds = parse_seconds(text)
    except FaultSpecError:
        raise ServewatchError(f"--last: {text!r} is not a duration (use e.g. 30s, 500ms, 10m)") from None
    if seconds <= 0:
        raise ServewatchError(f"--last: {text!r} must be longer than zero")
    return seconds


def _files(path: str) -> list[str]:
    """A file as it is; a directory (load's --out, the proxy's records directory) as its requests.jsonl and
    the rotated requests.jsonl.N, oldest first."""
    import os
    import re

    from servewatch.errors import SourceUnavailable

    if not os.path.isdir(path):
        return [path]
    names = [n for n in os.listdir(path) if re.fullmatch(r"requests\.jsonl(\.\d+)?", n)]
    if not names:
        raise SourceUnavailable(f"{path}: a directory without a requests.jsonl")
    names.sort(key=lambda n: -int(n.rpartition(".")[2]) if n[-1].isdigit() else 0)
    return [os.path.join(path, n) for n in names]


def run(args: argparse.Namespace) -> int:
    from servewatch.errors import ServewatchError, SourceUnavailable
    from servewatch.load.readback import read_records, summarize_records, window
    from servewatch.load.render import print_requests
    from servewatch.load.scenarios import Goodput

    try:
        slo = Goodput.parse(args.goodput) if args.goodput else None
    except ValueError as exc:
        raise ServewatchError(f"--goodput: {exc}") from None
    since = _since(args.since) if args.since is not None else None
    last_s = _last(args.last) if args.last is not None else None
    try:
        read = read_records([f for path in args.files for f in _files(path)])
    except OSError as exc:
        raise SourceUnavailable(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
    for bad in read.bad:
        print(f"servewatch requests: {bad.path}, line {bad.line}: {bad.why}; skipped", file=sys.stderr)
    if read.bad_count > len(read.bad):
        more = read.bad_count - len(read.bad)
        print(f"servewatch requests: {more} more line{'s' if more > 1 else ''} that "
              f"{'are not request records' if more > 1 else 'is not a request record'} skipped", file=sys.stderr)
    if not read.records:
        bad = ("" if not read.bad_count else " (1 line that is not a record)" if read.bad_count == 1
               else f" ({read.bad_count} lines that are not records)")
        raise ServewatchError(f"no request records in {', '.join(read.files)}{bad}")
    records = window(read.records, since=since, last_s=last_s)
    if not records:
        raise ServewatchError(f"none of the {len(read.records)} requests arrived in the window asked for "
                              "(--since / --last)")
    by = args.by or ("model" if any(r.model for r in records) else "all")
    summary = summarize_records(records, by, slo)
    summary["files"] = read.files
    summary["skipped_lines"] = read.bad_count
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_requests(summary)
    if args.html:
        from servewatch.commands import write_atomically
        from servewatch.load.requests_report import render_requests_page

        write_atomically(args.html, render_requests_page(summary, records), "--html")
        print(f"servewatch requests: wrote {args.html}", file=sys.stderr)
    return 0
