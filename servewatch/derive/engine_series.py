"""The series an alert rule or a dashboard reads, per engine and metric naming — each dialect
describes its own (`Dialect.alert_series`); this module looks them up in the registry."""

from __future__ import annotations

from servewatch import dialects
from servewatch.dialects.series import EngineSeries, LatencyHistogram, RatioSeries

__all__ = ["EngineSeries", "NAMINGS", "NAMING_HELP", "LatencyHistogram", "RatioSeries",
           "default_naming", "engine_series", "namings"]


def namings() -> dict[str, tuple[str, ...]]:
    """Each registered dialect's alert namings (newest first), read from the registry now: a dialect
    registered after import is a `--dialect` choice too."""
    return {d.name: tuple(d.alert_namings) for d in dialects.registered() if d.alert_namings}


NAMINGS = namings()          # the built-ins' (what the shipped tests and rule checks iterate)
NAMING_HELP = ("vllm-0.32 (current names), vllm-0.11, vllm-legacy (before 0.11: gpu_cache_usage_perc, "
                   "time_per_output_token_seconds), sglang-0.5.23")


def default_naming(dialect: str) -> str:
    return namings()[dialect][0]


def engine_series(dialect: str, naming: str | None = None) -> EngineSeries:
    """The series for `dialect` at `naming` (default: the current names). KeyError on an unknown pair."""
    found = dialects.by_name(dialect)
    if found is None or not found.alert_namings:
        raise KeyError(dialect)
    return found.alert_series(naming or found.alert_namings[0])
