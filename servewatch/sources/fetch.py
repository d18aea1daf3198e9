"""One bounded read of a text source for one-shot commands: a URL (timeout + size bound) or a file."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request

from servewatch.errors import BodyTooLarge, SourceUnavailable


def read_source(source: str, *, timeout_s: float = 5.0, max_bytes: int = 16 * 2**20) -> bytes:
    if source.startswith(("http://", "https://")):
        return fetch_url(source, timeout_s=timeout_s, max_bytes=max_bytes)
    return read_file(source, max_bytes=max_bytes)


def fetch_url(url: str, *, timeout_s: float, max_bytes: int) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (http only)
            declared = response.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise BodyTooLarge(f"{url}: body of {int(declared):,} bytes exceeds the {max_bytes:,}-byte bound")
            body = response.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        raise SourceUnavailable(f"{url}: HTTP {exc.code}") from None
    except (socket.timeout, TimeoutError):
        raise SourceUnavailable(f"{url}: no answer within {timeout_s:g} s") from None
    except urllib.error.URLError as exc:
        raise SourceUnavailable(f"{url}: {_reason(exc.reason)}") from None
    except (ConnectionError, OSError) as exc:
        raise SourceUnavailable(f"{url}: {_reason(exc)}") from None
    if len(body) > max_bytes:
        raise BodyTooLarge(f"{url}: body exceeds the {max_bytes:,}-byte bound")
    return body


def read_file(path: str, *, max_bytes: int) -> bytes:
    try:
        size = os.path.getsize(path)
        if size > max_bytes:
            raise BodyTooLarge(f"{path}: {size:,} bytes exceeds the {max_bytes:,}-byte bound")
        with open(path, "rb") as handle:
            return handle.read(max_bytes + 1)
    except OSError as exc:
        raise SourceUnavailable(f"{path}: {exc.strerror or exc}") from None


def _reason(reason) -> str:
    if isinstance(reason, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    return str(getattr(reason, "strerror", None) or reason)
