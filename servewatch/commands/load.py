"""`servewatch load URL --scenario ...`: drive a scenario against an OpenAI-compatible server."""

from __future__ import annotations

import argparse
import json
import os
import sys

from servewatch.errors import ServewatchError
from servewatch.table import WIDE_HELP

HELP = "run a load scenario (normal, overload, long-prompt, long-output) or replay a trace, and record every request"
DESCRIPTION = ("Run a load scenario (normal, overload, long-prompt, long-output, custom) against an "
               "OpenAI-compatible server, record every request, and sample the server's /metrics "
               "alongside. Errors are counted per request; the run never stops on them. With --trace FILE, "
               "replay a Mooncake, Azure or servewatch trace open-loop at its recorded times instead.")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="base URL of the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--scenario", default="normal", metavar="NAME",
                   choices=("normal", "overload", "long-prompt", "long-output", "custom"),
                   help="normal (2 req/s, 44 prompt and 128 output tokens), overload (14 req/s), long-prompt "
                        "(1 req/s, 2,905 prompt tokens), long-output (1 req/s, 1,024 output tokens) or custom "
                        "(--rate or --concurrency given); default normal")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rate", type=float, help="requests per second (default: the scenario's)")
    g.add_argument("--concurrency", type=int, help="fixed number of requests in flight instead of a rate")
    p.add_argument("--arrival", default="poisson", help="poisson | constant | gamma:SHAPE (default poisson)")
    h = p.add_mutually_exclusive_group()
    h.add_argument("--duration", type=float, help="seconds of arrivals (default 60)")
    h.add_argument("--requests", type=int, help="number of requests")
    p.add_argument("--prompt-tokens", metavar="N[:STDEV]", help="prompt length in tokens")
    p.add_argument("--output-tokens", type=int, help="max_tokens, sent with ignore_eos")
    p.add_argument("--prompt-pool", type=int,
                   help="distinct prompts, cycled (default 256; long-prompt sends one, so the prefix cache "
                        "serves most of its prefill)")
    p.add_argument("--tokenizer", default="auto",
                   help="DIR or tokenizer.json | auto (server /tokenize, else approx) | approx")
    p.add_argument("--model", help="model name (default: the first of /v1/models)")
    p.add_argument("--api", default="completions", choices=("completions", "chat"),
                   help="completions (/v1/completions, default) or chat (/v1/chat/completions)")
    p.add_argument("--goodput", metavar="ttft=MS,tpot=MS,e2e=MS", help="SLOs for goodput")
    p.add_argument("--metrics-interval", type=float, default=0.5,
                   help="seconds between /metrics samples (0: no server view)")
    p.add_argument("--seed", type=int, default=0,
                   help="the random draws of prompts and arrival times: the same seed sends the same run "
                        "(default 0)")
    p.add_argument("--timeout", type=float, default=600.0, help="per-request deadline in seconds")
    p.add_argument("--sender-priority", default="realtime", choices=("realtime", "normal"),
                   help="the thread that sends rate-scheduled requests on time: real-time priority where the "
                        "system permits it (p99 schedule delay ~1 ms here), or normal (~3 ms on a busy machine)")
    p.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                   help="a header sent with every request (repeatable): an API key, or a routing header such as "
                        "vLLM's 'X-data-parallel-rank: 1' to load one data-parallel engine; never written to --out")
    t = p.add_argument_group("trace replay")
    t.add_argument("--trace", metavar="FILE",
                   help="replay a trace open-loop instead of a scenario: Mooncake JSONL (timestamp ms, input_length, "
                        "output_length, hash_ids), the Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, "
                        "GeneratedTokens) or servewatch's own requests.jsonl; each row at its arrival time, its "
                        "prompt built to its input length (rows sharing hash_ids share prefixes), max_tokens with "
                        "ignore_eos at its output length")
    t.add_argument("--speed", type=float, default=1.0, help="with --trace: replay X times as fast (default 1)")
    t.add_argument("--window", metavar="A:B",
                   help="with --trace: only the rows that arrived from A s to before B s after its first (30:90, :60)")
    t.add_argument("--max-rows", type=int, metavar="N", help="with --trace: at most the first N rows (of the window)")
    t.add_argument("--trace-block", type=int, default=512, metavar="N",
                   help="with --trace: tokens per hash id of a Mooncake trace (default 512, as Mooncake's)")
    p.add_argument("--client", default="http1", choices=("http1", "aiohttp"), help=argparse.SUPPRESS)
    p.add_argument("--out", help="directory for requests.jsonl, server.jsonl, summary.json")
    p.add_argument("--keep-text", action="store_true",
                   help="keep prompt and completion text in requests.jsonl (off by default)")
    p.add_argument("--json", action="store_true", help="print summary.json to stdout")
    p.add_argument("--wide", action="store_true", help=WIDE_HELP)


def _prompt_tokens(text: str | None) -> tuple[int | None, float]:
    if text is None:
        return None, 0.0
    mean, _, stdev = text.partition(":")
    try:
        return int(mean), float(stdev) if stdev else 0.0
    except ValueError:
        raise ServewatchError(f"--prompt-tokens {text!r}: expected N or N:STDEV") from None


def _nth(i: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(i, f"{i}th")


def _headers(given: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for i, text in enumerate(given, 1):
        name, colon, value = text.partition(":")
        if not colon or not name.strip():     # not echoed: it may hold a key
            raise ServewatchError(f"--header (the {_nth(i)} given): expected 'NAME: VALUE'")
        out.append((name.strip(), value.strip()))
    return tuple(out)


def config_from_args(args):
    from servewatch.load.scenarios import Goodput, LoadConfig
    from servewatch.transport.urls import resolve

    resolve(args.url)          # a bad URL, a host name that does not resolve: one line, status 2
    prompt, stdev = _prompt_tokens(args.prompt_tokens)
    try:
        goodput = Goodput.parse(args.goodput) if args.goodput else None
    except ValueError as exc:
        raise ServewatchError(f"--goodput: {exc}") from None
    return LoadConfig(
        url=args.url, scenario=args.scenario, rate=args.rate, concurrency=args.concurrency,
        arrival=args.arrival, duration_s=args.duration, requests=args.requests, prompt_tokens=prompt,
        prompt_stdev=stdev, output_tokens=args.output_tokens, tokenizer=args.tokenizer,
        model=args.model, api=args.api, goodput=goodput, metrics_interval_s=args.metrics_interval,
        seed=args.seed, keep_text=args.keep_text, request_timeout_s=args.timeout, client=args.client,
        prompt_pool=args.prompt_pool, sender_priority=args.sender_priority, headers=_headers(args.header),
        **_trace_args(args))


def _trace_args(args) -> dict:
    if args.trace is None:
        for flag, given in (("--speed", args.speed != 1.0), ("--window", args.window),
                            ("--max-rows", args.max_rows), ("--trace-block", args.trace_block != 512)):
            if given:
                raise ServewatchError(f"{flag} goes with --trace FILE")
        return {}
    from servewatch.load.scenarios import parse_window

    try:
        window = parse_window(args.window) if args.window is not None else None
    except ValueError as exc:
        raise ServewatchError(str(exc)) from None
    return {"trace": args.trace, "speed": args.speed, "window": window, "max_rows": args.max_rows,
            "trace_block": args.trace_block}


def _read_trace(config):
    """The trace, its bad rows said on stderr (one line each: file, line, why) before the run."""
    from servewatch.errors import SourceUnavailable
    from servewatch.load import trace as T

    try:
        trace = T.read_trace(config.trace, max_rows=config.max_rows, window=config.window, block=config.trace_block)
    except OSError as exc:
        raise SourceUnavailable(f"--trace {config.trace}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ServewatchError(f"--trace {config.trace}: {exc}") from None
    for bad in trace.bad:
        print(f"servewatch load: {bad.words()}", file=sys.stderr)
    if trace.bad_count > len(trace.bad):
        more = trace.bad_count - len(trace.bad)
        print(f"servewatch load: {config.trace}: {more} more bad row{'s' if more > 1 else ''} skipped", file=sys.stderr)
    return trace


def run(args) -> int:
    from servewatch.load import output
    from servewatch.load.render import LiveProgress, print_summary
    from servewatch.load.runner import run_load

    config = config_from_args(args)
    try:
        config.resolved()
    except ValueError as exc:
        raise ServewatchError(str(exc)) from None
    if args.out:
        try:
            output.prepare_out_dir(args.out)
        except OSError as exc:
            raise ServewatchError(f"--out {args.out}: {exc.strerror or exc}") from None
    trace = _read_trace(config) if config.trace is not None else None
    show = not args.json and sys.stderr.isatty()
    with LiveProgress(enabled=show) as live:
        result = run_load(config, on_progress=live.update, salvage_on_cancel=True, trace=trace)
    problems = output.write_outputs(result, args.out) if args.out else []
    if args.json:
        json.dump(result.summary, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print_summary(result.summary, wide=args.wide)
    for problem in problems:
        print(f"servewatch load: {problem}", file=sys.stderr)
    if result.summary.get("interrupted"):       # ^C, SIGTERM or SIGHUP: what finished is kept (servewatch.stopping)
        from servewatch import stopping

        count = f"{len(result.records)} record{'' if len(result.records) == 1 else 's'}"
        if args.out and not problems:
            kept = (f"{count} kept in {os.path.join(args.out, 'requests.jsonl')}, their summary in "
                    f"{os.path.join(args.out, 'summary.json')}")
        else:
            kept = f"{count} in the summary above ({'files not written' if args.out else 'no --out given'})"
        stopping.say("load", kept)
        return stopping.status()
    sent, ok = result.summary.get("requests", 0), result.summary.get("ok", 0)
    if sent and not ok:         # every request failed: the thing checked is bad (errors.CHECKED_BAD)
        from servewatch.kinds import failure_words

        why = ", ".join(f"{n} {failure_words(kind)}" for kind, n in (result.summary.get("errors") or {}).items() if n)
        print(f"servewatch load: none of the {sent} request(s) succeeded" + (f" ({why})" if why else ""),
              file=sys.stderr)
        return 1
    return 1 if problems else 0
