"""`servewatch requests FILE...`: request records read back — `servewatch load`'s or `servewatch proxy`'s
requests.jsonl (one format), rotated files too — as latency, outcomes and goodput by model, tenant, API
or outcome."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

HELP = "read request records (of load or proxy) back: latency, outcomes and goodput by model, tenant or API"
DESCRIPTION = ("Read the requests.jsonl files that `servewatch load` and `servewatch proxy` write (one record "
               "format; give rotated files too, in any order) and print, for the whole and for each group, "
               "the outcomes by reason and the time to first token, time per output token, inter-token gap "
               "and end-to-end time of the successful requests. Lines that are not records (a file cut by "
               "a kill or a full disk) are counted and their places said; they never stop the reading. "
               "Prompt and completion text, where a record kept it, is never read (except, with --export "
               "and --tokenizer, the prompt's, turned into keyed block hashes and never written). With "
               "--export, write the requests as a Mooncake or Azure trace instead, for `servewatch load "
               "--trace` or `vllm bench serve`.")
EPILOG = ("examples:\n"
          "  servewatch requests proxy-records/requests.jsonl* --by tenant --last 10m\n"
          "  servewatch requests out/requests.jsonl --goodput ttft=500,tpot=50 --json\n"
          "  servewatch requests records.jsonl --by model --html requests.html\n"
          "  servewatch requests proxy-records/ --export mooncake incident.jsonl\n"
          "  servewatch requests out/requests.jsonl --export azure incident.csv")


PARSER_OPTIONS = {"description": textwrap.fill(DESCRIPTION, 79), "epilog": EPILOG,
                  "formatter_class": argparse.RawDescriptionHelpFormatter}


def arguments(parser: argparse.ArgumentParser) -> None:
    from servewatch.load.readback import GROUPS
    from servewatch.table import WIDE_HELP

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
    parser.add_argument("--wide", action="store_true", help=WIDE_HELP)
    parser.add_argument("--html", metavar="FILE",
                        help="also write a single offline HTML page: the figures, the requests over time, "
                             "the TTFT and TPOT distributions")
    parser.add_argument("--export", nargs=2, metavar=("FORMAT", "FILE"),
                        help="write the requests as a trace instead of reading them: mooncake (JSONL rows of "
                             "timestamp ms, input_length, output_length, hash_ids, as `vllm bench serve "
                             "--dataset-name timed_trace` reads them) or azure (CSV: TIMESTAMP, ContextTokens, "
                             "GeneratedTokens); no text, token id, request id or wall-clock time goes out")
    parser.add_argument("--hash-key-file", metavar="FILE",
                        help="with --export: the secret the prefix-block hashes are keyed with, reused from FILE "
                             "(or written there when FILE does not exist) so that two exports can be joined; "
                             "without it every export has its own and none can")
    parser.add_argument("--block-size", type=int, default=512, metavar="N",
                        help="with --export: tokens per prefix block of hash_ids (default 512, as Mooncake)")
    parser.add_argument("--fill-missing-hashes", action="store_true",
                        help="with --export mooncake: give a request whose token ids were not recorded block ids "
                             "of its own (shared with no other request), so that `vllm bench serve` builds its "
                             "prompt to the recorded length instead of an empty one; the row still says "
                             "hash_ids_missing")
    parser.add_argument("--tokenizer", metavar="DIR",
                        help="with --export: a tokenizer.json (or a directory holding one) to turn the prompt text "
                             "of --keep-text records into token ids for hash_ids; without it, only records that "
                             "carry prompt_token_ids get hashes")


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
    if args.export:
        return _export(args, since, last_s)
    for flag, given in (("--hash-key-file", args.hash_key_file), ("--tokenizer", args.tokenizer),
                        ("--fill-missing-hashes", args.fill_missing_hashes), ("--block-size", args.block_size != 512)):
        if given:
            raise ServewatchError(f"{flag} goes with --export")
    try:
        read = read_records([f for path in args.files for f in _files(path)])
    except OSError as exc:
        raise SourceUnavailable(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
    _say_skipped([(bad.path, bad.line, bad.why) for bad in read.bad], read.bad_count)
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
        print_requests(summary, wide=args.wide)
    if args.html:
        from servewatch.commands import write_atomically
        from servewatch.load.requests_report import render_requests_page

        write_atomically(args.html, render_requests_page(summary, records), "--html")
        print(f"servewatch requests: wrote {args.html}", file=sys.stderr)
    return 0


def _export(args: argparse.Namespace, since: float | None, last_s: float | None) -> int:
    """`--export FORMAT FILE`: the records as a trace, streamed through compact columns (see load/trace.py)."""
    import os
    import tempfile

    from servewatch.errors import ServewatchError, SourceUnavailable
    from servewatch.load import trace as T

    fmt, out_path = args.export
    if fmt not in T.FORMATS:
        raise ServewatchError(f"--export: format {fmt!r} is not one of {', '.join(T.FORMATS)}")
    if args.block_size < 1:
        raise ServewatchError(f"--block-size must be >= 1, got {args.block_size}")
    for flag, given in (("--by", args.by), ("--goodput", args.goodput), ("--json", args.json), ("--html", args.html)):
        if given:
            raise ServewatchError(f"{flag} does not go with --export")
    if args.hash_key_file:
        try:
            key, created = T.load_or_create_key(args.hash_key_file)
        except OSError as exc:
            raise ServewatchError(f"--hash-key-file {args.hash_key_file}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ServewatchError(f"--hash-key-file {args.hash_key_file}: {exc}") from None
        if created:
            print(f"servewatch requests: wrote a new hash key to {args.hash_key_file} (keep it secret; "
                  "exports made with it can be joined)", file=sys.stderr)
    else:
        key = T.new_key()
    tokenize = None
    if args.tokenizer:
        try:
            tokenize = T.local_tokenize(args.tokenizer)
        except (OSError, ValueError, ImportError) as exc:
            raise ServewatchError(f"--tokenizer {args.tokenizer}: {exc}") from None
    files = [f for path in args.files for f in _files(path)]
    directory = os.path.dirname(os.path.abspath(out_path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".servewatch-", suffix=".tmp")
    except OSError as exc:
        raise ServewatchError(f"--export: cannot write {out_path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w+", encoding="utf-8", buffering=1 << 20) as fh:
            try:
                stats = T.export(files, fh, fmt, key=key, block=args.block_size, tokenize=tokenize, since=since,
                                 last_s=last_s, fill_key=T.new_key() if args.fill_missing_hashes else None)
            except OSError as exc:
                if exc.filename in files:
                    raise SourceUnavailable(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
                raise
        _say_skipped(stats.bad, stats.skipped)
        if not stats.rows:
            raise ServewatchError(f"no request records in {', '.join(files)}"
                                  + (" in the window asked for (--since / --last)" if since or last_s else ""))
        os.replace(tmp, out_path)
    except OSError as exc:
        raise ServewatchError(f"--export: cannot write {out_path}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    written, without = stats.rows, stats.without_hashes
    missing = ""
    if fmt == "mooncake" and without and args.fill_missing_hashes:
        missing = f"; {'all' if without == written else without} without recorded token ids, given ids of their own"
    elif fmt == "mooncake" and without:
        missing = (f"; {'all' if without == written else without} without hash_ids (no token ids recorded: "
                   "prefix sharing unknown)")
    print(f"servewatch requests: wrote {written} {fmt} rows to {out_path}{missing}", file=sys.stderr)
    return 0


def _say_skipped(shown, total: int) -> None:
    """One line per bad line shown ((path, line, why)), then how many more were skipped, on stderr."""
    for path, line, why in shown:
        print(f"servewatch requests: {path}, line {line}: {why}; skipped", file=sys.stderr)
    if total > len(shown):
        more = total - len(shown)
        print(f"servewatch requests: {more} more line{'s' if more > 1 else ''} that "
              f"{'are not request records' if more > 1 else 'is not a request record'} skipped", file=sys.stderr)
