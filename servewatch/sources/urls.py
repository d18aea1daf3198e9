"""The URL a user gives, read once for every command: its base (scheme://host:port) and its /metrics."""

from __future__ import annotations

from urllib.parse import urlsplit

from servewatch.errors import ServewatchError


def base_url(url: str) -> str:
    """scheme://host:port of what the user gave (a path such as /metrics or a query is dropped)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServewatchError(f"{url!r}: not an http(s) URL")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise ServewatchError(f"{url!r}: bad port") from None
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


def metrics_url(url: str) -> str:
    """The /metrics URL of what the user gave: a base URL (scheme://host:port, with or without a trailing
    slash) gets /metrics; a URL with a path of its own (/metrics, or an exporter's other path) is kept."""
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        return f"{base_url(url)}/metrics"
    return url
