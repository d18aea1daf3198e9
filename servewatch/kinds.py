"""The words every layer shares, written once on the ground floor.

Source kinds: where a sample comes from. A timeline `Window` holds one tuple per kind, an `Evidence`
pointer names one as its `source`, and a bundle tags each stored sample and counts them by it. SOURCE_KINDS are
the built-in ones; `servewatch.timeline.kinds` is the registry of every kind (these and any registered after them).

Scrape failure kinds: how a scrape of /metrics (or /health) failed; the meaning of each is in
`servewatch.sources.scrape`. Transports (`servewatch.transport.contract`, a file) report `connect`, `dns`,
`timeout`, `protocol` and `too_large`; `sources.scrape.read_metrics` reports the rest.
"""

from __future__ import annotations

SOURCE_KINDS = ("health", "metrics", "process", "gpu", "log", "probe", "requests", "slots")

CONNECT = "connect"
DNS = "dns"                  # the server's host name could not be resolved (not "could not connect")
TIMEOUT = "timeout"
HTTP_STATUS = "http_status"
PROTOCOL = "protocol"
TOO_LARGE = "too_large"
TOO_MANY_SERIES = "too_many_series"
PARSE = "parse"
NO_ENGINE_METRICS = "no_engine_metrics"
FAILURE_KINDS = (CONNECT, DNS, TIMEOUT, HTTP_STATUS, PROTOCOL, TOO_LARGE, TOO_MANY_SERIES, PARSE, NO_ENGINE_METRICS)

# How a reader says each failure kind: the same words wherever one reaches a person (a status line, a diagnosis).
FAILURE_WORDS = {"connect": "could not connect", "dns": "host name not resolved", "timeout": "timed out",
                 "protocol": "broken HTTP answer", "too_large": "answer over the size bound",
                 "too_many_series": "too many series", "parse": "not Prometheus text", "no_engine_metrics": "no engine metrics"}


def failure_words(kind: str) -> str:
    """A failure kind as a reader says it: "connect" -> "could not connect", "http_503" -> "HTTP 503"."""
    if kind.startswith("http_"):
        return "HTTP " + kind.removeprefix("http_")
    return FAILURE_WORDS.get(kind, kind.replace("_", " "))
