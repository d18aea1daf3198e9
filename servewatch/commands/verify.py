"""`servewatch verify BUNDLE`: offline check of an incident bundle; exit 0 only if everything matches."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "verify", help="check an incident bundle offline and recompute its verdicts",
        description="Check a bundle's manifest hashes, schema and identity, then recompute every stored "
                    "verdict from the stored samples with the same detector code. Exit 0 only if all match; "
                    "otherwise exit 1 with one line saying what failed.")
    parser.add_argument("bundle", metavar="BUNDLE", help="the bundle directory")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from servewatch.sinks.verify import verify_bundle

    print(verify_bundle(args.bundle).line())
    return 0
