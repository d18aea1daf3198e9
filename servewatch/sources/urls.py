"""The URL a user gives, read once for every command: its base (scheme://host:port) and its /metrics."""

from __future__ import annotations

from servewatch.transport.urls import parse


def base_url(url: str, what: str | None = None) -> str:
    """scheme://host:port of what the user gave (a path such as /metrics or a query is dropped); BadUrl (one
    line, status 2) when it is not a server's URL (servewatch.transport.urls, the one checker)."""
    return parse(url, what).base


def metrics_url(url: str) -> str:
    """The /metrics URL of what the user gave: a base URL (scheme://host:port, with or without a trailing
    slash) gets /metrics; a URL with a path of its own (/metrics, or an exporter's other path) is kept."""
    parsed = parse(url)
    if parsed.path in ("", "/"):
        return f"{parsed.base}/metrics"
    return url if "://" in url else f"http://{url}"
