"""`servewatch summarize BUNDLE [--md F] [--html F]`: a Markdown and a single-file HTML report of a bundle."""

from __future__ import annotations

import argparse
from pathlib import Path

from servewatch.commands import add_command

HELP = "write a Markdown and/or HTML report of an incident bundle"
DESCRIPTION = ("Render a bundle as Markdown and as one self-contained HTML page (inline SVG, no external "
               "assets). The bundle's hashes and schema are checked first. Without --md or --html the "
               "Markdown goes to stdout.")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "summarize", HELP, DESCRIPTION, run)
    parser.add_argument("bundle", metavar="BUNDLE", help="the bundle directory")
    parser.add_argument("--md", metavar="F", type=Path, help="write the Markdown summary to F")
    parser.add_argument("--html", metavar="F", type=Path, help="write the HTML report to F")


def run(args: argparse.Namespace) -> int:
    from servewatch.errors import BundleInvalid, SourceUnavailable
    from servewatch.bundle.incident import load_incident
    from servewatch.bundle.report_html import render_incident_page
    from servewatch.bundle.summarize import render_markdown

    try:
        incident = load_incident(args.bundle)
    except BundleInvalid as exc:        # what failed is said of a file in the bundle: say which bundle
        raise BundleInvalid(f"{args.bundle}: {exc}") from None
    markdown = render_markdown(incident)
    if args.md is None and args.html is None:
        print(markdown, end="")
        return 0
    for path, text in ((args.md, markdown), (args.html, render_incident_page(incident) if args.html else None)):
        if path is None:
            continue
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SourceUnavailable(f"cannot write {path}: {exc.strerror or exc}") from None
        print(f"wrote {path}")
    return 0
