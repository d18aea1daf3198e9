"""`servewatch verify BUNDLE...`: offline check of incident bundles; exit 0 only if everything matches."""

from __future__ import annotations

import argparse
import sys

from servewatch.commands import add_command

HELP = "check incident bundles offline and recompute their verdicts"
DESCRIPTION = ("Check a bundle's manifest hashes, schema and identity, then recompute every stored "
               "verdict from the stored samples with the same detector code and configuration. Exit 0 only "
               "if all match; otherwise exit 1 with one line per failed bundle saying what failed.")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "verify", HELP, DESCRIPTION, run)
    parser.add_argument("bundles", metavar="BUNDLE", nargs="+", help="a bundle directory")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per bundle on stdout: {bundle, ok, ...counts | error}")


def run(args: argparse.Namespace) -> int:
    from servewatch.errors import BundleInvalid
    from servewatch.bundle.verify import verify_bundle

    if args.json:
        return _run_json(args.bundles)
    failed = 0
    for bundle in args.bundles:
        try:
            print(verify_bundle(bundle).line())
        except BundleInvalid as exc:
            failed += 1
            print(f"servewatch verify: {bundle}: {exc}", file=sys.stderr)
    return 1 if failed else 0


def _run_json(bundles: list[str]) -> int:
    import json

    from servewatch.errors import BundleInvalid
    from servewatch.bundle.verify import verify_bundle

    failed = 0
    for bundle in bundles:
        try:
            verified = verify_bundle(bundle)
        except BundleInvalid as exc:
            failed += 1
            print(json.dumps({"bundle": bundle, "ok": False, "error": str(exc)}), flush=True)
            continue
        incident = verified.incident
        print(json.dumps({"bundle": bundle, "ok": True, "incident_id": incident["incident_id"],
                          "trigger": incident["trigger"]["verdict"],
                          "files_hashed": verified.files_hashed, "samples": len(verified.samples),
                          "verdicts_checked": verified.verdicts_checked,
                          "verdicts_not_stored": verified.verdicts_not_stored}), flush=True)
    return 1 if failed else 0
