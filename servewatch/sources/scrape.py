"""One /metrics scrape for every reader (`inspect`, `watch`, the load generator's server view): the
bounds it runs under, how an answer becomes engine states, and the one vocabulary of its failures.

A scrape is bounded in time (each transport's timeout), in bytes (`max_bytes`) and in series
(`max_series`: sample lines, counted before any parsing and no further than the bound). A failed
scrape is a `ScrapeFailure` whose `kind` is one of `KINDS`:

    connect            no connection, or it broke before any answer (refused, reset, TLS);
                       for a file, it could not be opened
    dns                the server's host name could not be resolved
    timeout            no complete answer within the time bound
    http_status        an answer other than 200 (recorded as "http_<status>", e.g. "http_503")
    protocol           a malformed or cut HTTP answer (status line, headers, chunking, closed mid-body)
    too_large          the body, or one of its lines, is over the byte bound
    too_many_series    the body holds more series than the series bound
    parse              the body is not Prometheus / OpenMetrics text (or not UTF-8)
    no_engine_metrics  valid text without any engine's families (e.g. vLLM run with --disable-log-stats)

Transports (the one contract, `servewatch.transport.contract`, and a file) report the first five kinds,
`too_large`, and `too_many_series` when the request carries the series bound (`sources.http.get_request`: a
body over it is refused while it arrives, looked at from 256 KiB on and at each doubling, never held whole);
`read_metrics` reports the rest and counts every body it reads whole. A failure's
`detail` is one short line for a terminal: it never enters a bundle, only `label` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servewatch.errors import BodyTooLarge, ExpositionError, ServewatchError, TooManySeries
from servewatch.exposition.parser import DEFAULT_MAX_BYTES, DEFAULT_MAX_SERIES, bounded_text
from servewatch.kinds import (CONNECT, DNS, FAILURE_KINDS as KINDS, HTTP_STATUS, NO_ENGINE_METRICS, PARSE,  # noqa: F401
                              PROTOCOL, TIMEOUT, TOO_LARGE, TOO_MANY_SERIES)   # the kinds, re-exported for readers


@dataclass(frozen=True, slots=True)
class ScrapeBounds:
    max_bytes: int = DEFAULT_MAX_BYTES
    max_series: int = DEFAULT_MAX_SERIES


@dataclass(frozen=True, slots=True)
class ScrapeFailure:
    kind: str                       # one of KINDS
    elapsed_s: float | None = None  # from asking to failing, when the transport measured it
    detail: str = ""                # one short line for a terminal; never stored
    status: int | None = None       # the HTTP status, for http_status

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown scrape failure kind {self.kind!r}")

    @property
    def label(self) -> str:
        """The word recorded in a sample's `error` field."""
        return f"http_{self.status}" if self.kind == HTTP_STATUS and self.status is not None else self.kind


class ScrapeFailed(ServewatchError):
    """A one-shot scrape that failed: `failure` says how, str() says what and where in one line."""

    def __init__(self, source: str, failure: ScrapeFailure):
        self.failure = failure
        super().__init__(f"{source}: {failure.detail or failure.kind.replace('_', ' ')}")


def http_status_failure(status: int, elapsed_s: float | None = None) -> ScrapeFailure:
    return ScrapeFailure(HTTP_STATUS, elapsed_s, f"HTTP {status}", status)


def read_metrics(status: int, body: bytes | str, bounds: ScrapeBounds = ScrapeBounds(), *,
                 elapsed_s: float | None = None, read_scrape: Callable | None = None):
    """One answer to a /metrics request → the dialects' `Scrape` (with at least one engine), or a
    ScrapeFailure. Never raises for anything the body holds.

    `read_scrape(text, max_bytes=)`: text → Scrape; the dialects' by default.
    """
    if read_scrape is None:
        from servewatch.dialects import read_scrape

    def failed(kind: str, detail: str) -> ScrapeFailure:
        return ScrapeFailure(kind, elapsed_s, detail)

    if status != 200:
        return http_status_failure(status, elapsed_s)
    try:
        text = bounded_text(body, bounds.max_bytes, bounds.max_series)
        scrape = read_scrape(text, max_bytes=bounds.max_bytes)
    except BodyTooLarge as error:
        return failed(TOO_LARGE, str(error))
    except TooManySeries as error:
        return failed(TOO_MANY_SERIES, str(error))
    except ExpositionError as error:
        return failed(PARSE, str(error))
    except Exception as error:  # noqa: BLE001 - whatever the body holds, a bad scrape is a failure, not a crash
        return failed(PARSE, f"unreadable exposition ({type(error).__name__})")
    if scrape.dialect is None or not scrape.engines:
        return failed(NO_ENGINE_METRICS, "no known engine's metrics in the exposition")
    return scrape
