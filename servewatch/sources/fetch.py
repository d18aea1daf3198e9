"""The bytes of one scrape for a one-shot command (`inspect`): a URL through the same bounded fetch the
recorder uses, or a file, under the same byte bound and failure kinds (`sources.scrape`; the answer is
then read by `scrape.read_metrics`). A failure raises ScrapeFailed: one line naming the source."""

from __future__ import annotations

import asyncio

from servewatch.sources.scrape import CONNECT, TOO_LARGE, ScrapeFailed, ScrapeFailure


def read_source(source: str, *, timeout_s: float = 5.0, max_bytes: int,
                max_series: int | None = None) -> tuple[int, bytes]:
    """(HTTP status, body) of a URL (a base URL means its /metrics), or (200, contents) of a file; ScrapeFailed when unreachable,
    too slow, over `max_bytes`, or (a URL's body, refused while it arrives) over `max_series`."""
    if "://" in source:         # a URL (http or https only: servewatch.transport.urls says why not)
        from servewatch.sources.urls import metrics_url
        from servewatch.transport.urls import resolve

        resolve(source)
        return fetch_url(metrics_url(source), timeout_s=timeout_s, max_bytes=max_bytes, max_series=max_series)
    return 200, read_file(source, max_bytes=max_bytes)


def fetch_url(url: str, *, timeout_s: float, max_bytes: int, max_series: int | None = None) -> tuple[int, bytes]:
    from servewatch.sources.http import FetchResponse, fetch
    from servewatch.transport.contract import Http1Transport

    async def once():
        transport = Http1Transport(keep_alive=False)
        try:
            return await fetch(transport, url, timeout_s=timeout_s, max_bytes=max_bytes, max_series=max_series)
        finally:
            await transport.close()

    answer = asyncio.run(once())
    if not isinstance(answer, FetchResponse):
        raise ScrapeFailed(url, answer)
    return answer.status, answer.body


def read_file(path: str, *, max_bytes: int) -> bytes:
    from servewatch.sources.http import too_large_detail

    try:
        with open(path, "rb") as handle:
            body = handle.read(max_bytes + 1)
    except OSError as exc:
        raise ScrapeFailed(path, ScrapeFailure(CONNECT, detail=exc.strerror or type(exc).__name__)) from None
    if len(body) > max_bytes:
        raise ScrapeFailed(path, ScrapeFailure(TOO_LARGE, detail=too_large_detail(max_bytes)))
    return body
