"""`servewatch verify BUNDLE...`: offline check of incident bundles; exit 0 only if everything matches."""

from __future__ import annotations

import argparse
import sys

HELP = "check incident bundles offline and recompute their verdicts"
DESCRIPTION = ("Check a bundle's manifest hashes, schema and identity, then recompute every stored "
               "verdict from the stored samples with the same detector code and configuration. A directory of "
               "bundles is checked bundle by bundle, a line each. Exit 0 only if all match; otherwise exit 1 "
               "with one line per failed bundle saying what failed (2 when a path does not exist).")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundles", metavar="BUNDLE", nargs="+",
                        help="a bundle directory, or a directory of bundles (watch --out's, the demo's bundles/): "
                             "each bundle in it is checked")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per bundle on stdout: {bundle, ok, ...counts | error}")


def run(args: argparse.Namespace) -> int:
    import json

    from servewatch.bundle.found import NotFound, bundles_at
    from servewatch.bundle.verify import verify_bundle
    from servewatch.errors import CHECKED_BAD, OK, USAGE, BundleInvalid

    missing = failed = 0
    for given in args.bundles:
        try:
            path, bundles = bundles_at(given)
        except NotFound as exc:             # bad input: status 2, as every command says a path that is not there
            missing += 1
            print(f"servewatch verify: {exc}", file=sys.stderr)
            continue
        inside = bundles != [path]          # a directory of bundles: each is named by its path
        bad = 0
        for bundle in bundles:
            shown = str(bundle) if inside else given
            try:
                verified = verify_bundle(bundle)
            except BundleInvalid as exc:
                bad += 1
                if args.json:
                    print(json.dumps({"bundle": shown, "ok": False, "error": str(exc)}), flush=True)
                else:
                    print(f"servewatch verify: {shown}: {exc}", file=sys.stderr)
                continue
            if args.json:
                incident = verified.incident
                print(json.dumps({"bundle": shown, "ok": True, "incident_id": incident["incident_id"],
                                  "trigger": incident["trigger"]["verdict"],
                                  "files_hashed": verified.files_hashed, "samples": len(verified.samples),
                                  "verdicts_checked": verified.verdicts_checked,
                                  "verdicts_not_stored": verified.verdicts_not_stored}), flush=True)
            else:
                print(verified.line())
        failed += bad
        if inside and not args.json:
            print(f"{given}: {len(bundles) - bad} of {len(bundles)} bundle(s) verified"
                  + (f", {bad} failed" if bad else ""))
    return USAGE if missing else CHECKED_BAD if failed else OK
