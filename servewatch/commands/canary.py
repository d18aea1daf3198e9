"""`servewatch canary record URL --out FILE` and `servewatch canary check URL FILE`: the output canary."""

from __future__ import annotations

import argparse

HELP = "record a greedy completion of a fixed prompt once; check later deploys answer the same"
DESCRIPTION = ("A server can answer fast and healthy with a different model behaviour (weights loaded in the "
               "wrong order, a wrong quantisation scale, a changed rotary base). `record` asks a known-good "
               "deployment for a greedy completion (temperature 0) of a fixed prompt and keeps its SHA-256 and "
               "token count; `check` asks again and compares. Exit status: 0 same, 1 different, 2 an error.")


def arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    record = actions.add_parser("record", help="record the canary from a known-good server",
                                description="Ask URL for the canary's greedy completion and write FILE.")
    record.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    record.add_argument("--out", required=True, metavar="FILE", help="the canary file to write")
    record.add_argument("--keep-text", action="store_true",
                        help="also store the completion's text (default: only its hash and token count)")
    record.add_argument("--model", help="the model to ask (default: the first /v1/models lists)")
    record.set_defaults(func=run_record)
    check = actions.add_parser("check", help="check a server against a recorded canary",
                               description="Ask URL the recorded prompt again; exit 0 if the completion is the "
                                           "same, 1 (and one line saying how it differs) if not.")
    check.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    check.add_argument("file", metavar="FILE", help="a file written by `servewatch canary record`")
    check.add_argument("--model", help="the model to ask (default: the first /v1/models lists)")
    check.set_defaults(func=run_check)


def run_record(args: argparse.Namespace) -> int:
    import asyncio
    import os
    import time

    from servewatch import canary
    from servewatch.errors import ServewatchError

    directory = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(directory):
        raise ServewatchError(f"--out {args.out}: no such directory")
    try:
        text, tokens, model = asyncio.run(canary.ask(args.url, None, args.model))
    except KeyboardInterrupt:      # ^C, SIGTERM or SIGHUP before the answer (servewatch.stopping)
        from servewatch import stopping

        stopping.say("canary", f"no canary recorded, {args.out} left as it was")
        return stopping.status()
    recorded = canary.recorded(text, tokens, model, time.time(), keep_text=args.keep_text)
    partial = f"{args.out}.partial"         # whole or not at all: a stop while it is written leaves the old file
    try:
        with open(partial, "w", encoding="utf-8") as out:
            out.write(recorded.to_json())
        os.replace(partial, args.out)
    except OSError as exc:
        raise ServewatchError(f"--out {args.out}: {exc.strerror or exc}") from None
    count = f"{tokens} token(s)" if tokens is not None else f"{len(text)} character(s)"
    print(f"canary recorded: {count} from model {recorded.model}, sha256 {recorded.completion_sha256[:16]}… "
          f"-> {args.out}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    import asyncio

    from servewatch import canary
    from servewatch.errors import ServewatchError

    try:
        with open(args.file, encoding="utf-8") as source:
            content = source.read(1 << 20)
    except OSError as exc:
        raise ServewatchError(f"{args.file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ServewatchError(f"{args.file}: not a canary file (not UTF-8 text)") from None
    recorded = canary.parse(content, args.file)
    text, tokens, model = asyncio.run(canary.ask(args.url, recorded, args.model))
    result = canary.compare(recorded, text, tokens, model)
    print(result.line)
    return 0 if result.matches else 1
