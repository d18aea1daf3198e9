"""`servewatch rules --slo FILE`: a Prometheus rule file derived from an SLO and the engine's series."""

from __future__ import annotations

import argparse

from servewatch.commands import add_out_argument, write_out

HELP = "write Prometheus alert and recording rules for an SLO"
DESCRIPTION = ("Write a Prometheus rule file: SLI recording rules, multi-window multi-burn-rate alerts "
               "(page at 14.4x over 1 h and 5 m and at 6x over 6 h and 30 m; ticket at 3x over 1 d and 2 h "
               "and at 1x over 3 d and 6 h, for a 30-day budget), leading indicators, absent() guards and "
               "alerts on servewatch serve's series. Every alert carries its runbook branch. A latency "
               "threshold must be a bucket edge of the engine's histogram.")


def arguments(parser: argparse.ArgumentParser) -> None:
    from servewatch.commands.recording import add_series_arguments

    parser.add_argument("--slo", required=True, metavar="FILE", help="the SLO file (YAML)")
    add_series_arguments(parser)
    parser.add_argument("--no-serve", action="store_true",
                        help="leave out the alerts on servewatch serve's series")
    add_out_argument(parser)


def run(args: argparse.Namespace) -> int:
    from servewatch.commands.recording import series_from_args
    from servewatch.derive.rules import action_routes_yaml, build_rules, inhibit_rules_yaml, render_rule_file
    from servewatch.derive.slo import check_selector, check_thresholds, load_slo
    from servewatch.errors import ServewatchError
    from servewatch.textfile import TextFileError, read_text

    series = series_from_args(args)
    try:
        text = read_text(args.slo, max_bytes=1 << 20)
    except TextFileError as exc:
        raise ServewatchError(f"--slo {args.slo}: {exc}") from None
    slo = load_slo(text, args.slo)
    check_thresholds(slo, series, args.slo)
    check_selector(slo, series, args.slo)
    groups = build_rules(slo, series, with_serve=not args.no_serve)
    header = (f"servewatch rules for SLO '{slo.service}' on {series.dialect} ({series.naming} metric names).\n"
              f"Load with rule_files: in prometheus.yml; check with: promtool check rules FILE\n"
              f"Severity labels page > ticket > warning; in alertmanager.yml, so that a page silences the "
              f"same job's tickets and warnings:\n" + inhibit_rules_yaml()
              + "# servewatch's own alerts carry action (restart, drain, page, info: what helps); route on it, e.g.:\n"
              + action_routes_yaml())
    output = render_rule_file(groups, header)
    write_out(args.out, output)
    return 0
