"""The series an alert rule or a dashboard reads, per engine and metric-name generation — each dialect
describes its own (`Dialect.alert_series`); this module looks them up in the registry."""

from __future__ import annotations

from servewatch import dialects
from servewatch.dialects.series import EngineSeries, LatencyHistogram, RatioSeries

__all__ = ["EngineSeries", "GENERATIONS", "GENERATION_HELP", "LatencyHistogram", "RatioSeries", "add_series_arguments",
           "default_generation", "engine_series", "series_from_args"]

GENERATIONS = {d.name: tuple(d.alert_generations) for d in dialects.registered() if d.alert_generations}
GENERATION_HELP = ("vllm-0.32 (current names), vllm-0.11, vllm-legacy (before 0.11: gpu_cache_usage_perc, "
                   "time_per_output_token_seconds), sglang-0.5.23")


def default_generation(dialect: str) -> str:
    return GENERATIONS[dialect][0]


def engine_series(dialect: str, generation: str | None = None) -> EngineSeries:
    """The series for `dialect` at `generation` (default: the current names). KeyError on an unknown pair."""
    found = dialects.by_name(dialect)
    if found is None or not found.alert_generations:
        raise KeyError(dialect)
    return found.alert_series(generation or found.alert_generations[0])


def add_series_arguments(parser) -> None:
    """--dialect and --names, as `rules` and `dashboard` take them."""
    parser.add_argument("--dialect", choices=tuple(GENERATIONS), default="vllm")
    parser.add_argument("--names", metavar="GENERATION", default=None,
                        help=f"metric-name generation: {GENERATION_HELP} (default: the dialect's current names)")


def series_from_args(args) -> EngineSeries:
    from servewatch.errors import ServewatchError

    try:
        return engine_series(args.dialect, args.names)
    except KeyError:
        raise ServewatchError(f"--names: {args.names!r} is not a {args.dialect} name generation "
                              f"(one of {', '.join(GENERATIONS[args.dialect])})") from None
