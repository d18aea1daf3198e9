"""Reading the log files a postmortem is given: rotated parts in order, gzip, bounded lines, and a clear
error for a file that is not a text log. The only I/O of the postmortem."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path

from servewatch.errors import ServewatchError
from servewatch.sources.logs import MAX_LINE_BYTES

SNIFF_BYTES = 8192
_ROTATION = re.compile(r"\.(?P<n>\d+)(?:\.gz)?$")


def rotation_order(paths: list[str]) -> list[str]:
    """Oldest first: `server.log.2.gz`, `server.log.1`, `server.log` (logrotate numbers older parts higher)."""
    def key(path: str) -> tuple[int, int]:
        match = _ROTATION.search(path)
        return (0, -int(match["n"])) if match else (1, 0)
    return sorted(paths, key=key)


def _open(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")  # noqa: SIM115


def check_text(path: str) -> None:
    """Raise one line for a missing, unreadable, empty or binary file."""
    try:
        with _open(path) as f:
            head = f.read(SNIFF_BYTES)
    except FileNotFoundError:
        raise ServewatchError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ServewatchError(f"{path}: a directory, not a log file") from None
    except (OSError, EOFError) as exc:
        raise ServewatchError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    if not head:
        raise ServewatchError(f"{path}: empty file: nothing to conclude")
    if b"\x00" in head:
        raise ServewatchError(f"{path}: binary data (NUL bytes in the first {len(head)} bytes), not a text log")


def read_lines(paths: list[str]) -> Iterator[str]:
    """Every line of every part, oldest part first; lines over the tail's bound are skipped."""
    for path in rotation_order(paths):
        check_text(path)
        with _open(path) as f:
            for raw in f:
                if len(raw) > MAX_LINE_BYTES:
                    continue
                yield raw.decode("utf-8", errors="replace")
