"""`servewatch summarize BUNDLE [--md F] [--html F]`: a Markdown and a single-file HTML report of a bundle."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "write a Markdown and/or HTML report of an incident bundle"
DESCRIPTION = ("Render a bundle as Markdown and as one self-contained HTML page (inline SVG, no external "
               "assets). The bundle's hashes and schema are checked first. Without --md or --html the "
               "Markdown goes to stdout.")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE",
                        help="the bundle directory, or a directory of bundles (watch --out's, the demo's bundles/)")
    parser.add_argument("--md", metavar="F", type=Path,
                        help="write the Markdown summary to F (for a directory of bundles: F is a directory, "
                             "one NAME.md per bundle)")
    parser.add_argument("--html", metavar="F", type=Path,
                        help="write the HTML report to F (for a directory of bundles: F is a directory, one "
                             "NAME.html per bundle)")


def run(args: argparse.Namespace) -> int:
    import sys

    from servewatch.bundle.found import NotFound, bundles_at
    from servewatch.errors import CHECKED_BAD, OK, BundleInvalid, SourceUnavailable

    try:
        path, bundles = bundles_at(args.bundle)
    except NotFound as exc:             # bad input (status 2), not a bundle that fails
        raise SourceUnavailable(str(exc)) from None
    if bundles == [path]:
        try:
            _summarize(path, args.md, args.html)
        except BundleInvalid as exc:        # what failed is said of a file in the bundle: say which bundle
            raise BundleInvalid(f"{args.bundle}: {exc}") from None
        return OK
    for directory in (args.md, args.html):
        if directory is not None:
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SourceUnavailable(f"cannot write {directory}: {exc.strerror or exc}") from None
    failed = 0
    for i, bundle in enumerate(bundles):    # a directory of bundles: a summary each, a line for each that fails
        if i and args.md is None and args.html is None:
            print(flush=True)                   # a blank line between two summaries on stdout
        try:
            _summarize(bundle, args.md and args.md / f"{bundle.name}.md",
                       args.html and args.html / f"{bundle.name}.html")
        except BundleInvalid as exc:
            failed += 1
            print(f"servewatch summarize: {bundle}: {exc}", file=sys.stderr)
    if failed:
        print(f"servewatch summarize: {args.bundle}: {failed} of {len(bundles)} bundle(s) not summarized",
              file=sys.stderr)
    return CHECKED_BAD if failed else OK


def _summarize(bundle: Path, md: Path | None, html: Path | None) -> None:
    """One bundle's Markdown on stdout, or its reports into `md` and `html`; BundleInvalid when it fails."""
    from servewatch.errors import SourceUnavailable
    from servewatch.bundle.incident import load_incident
    from servewatch.bundle.report_html import render_incident_page
    from servewatch.bundle.summarize import render_markdown

    incident = load_incident(bundle)
    markdown = render_markdown(incident)
    if md is None and html is None:
        print(markdown, end="", flush=True)
        return
    for path, text in ((md, markdown), (html, render_incident_page(incident) if html else None)):
        if path is None:
            continue
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SourceUnavailable(f"cannot write {path}: {exc.strerror or exc}") from None
        print(f"wrote {path}")
