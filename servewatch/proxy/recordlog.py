"""requests.jsonl for the proxy: one line per request, rotated by size, a bounded number of files kept.

A disk that fails (full, read-only, gone) never stops the proxy: the records that could not be written are
counted (`lost`, exported as servewatch_proxy_records_lost_total), one line says so on stderr when a run
of failures starts, and writing resumes by itself once the disk takes bytes again.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable

import orjson

_dumps = orjson.dumps
_NEWLINE = orjson.OPT_APPEND_NEWLINE


class RecordLog:
    def __init__(self, path: str, *, max_bytes: int = 64 * 2**20, keep: int = 3, what: str = "--records"):
        self.path = path
        self.what = what                  # how the user named the file (in the one line on failure)
        self.max_bytes = max_bytes
        self.keep = max(1, keep)
        self._file = open(path, "ab")     # noqa: SIM115 - closed by close(); raises at start, as asked
        self._size = self._file.tell()
        self._unflushed = 0               # records written into the buffer since its last flush
        self.written = 0
        self.rotations = 0
        self.lost = 0                     # records that did not reach the disk
        self.failing = False

    def write(self, record: dict) -> None:
        line = _dumps(record, option=_NEWLINE)
        try:
            if self._file is None:
                self._file = open(self.path, "ab")   # noqa: SIM115 - after a failure
                self._size = self._file.tell()
            if self._size + len(line) > self.max_bytes and self._size > 0:
                self._rotate()
            self._file.write(line)
        except OSError as exc:
            self._failed(exc, 1)
            return
        self._size += len(line)
        self._unflushed += 1
        self.written += 1

    def flush(self) -> None:
        if self._file is None:
            return
        try:
            self._file.flush()
        except OSError as exc:
            self._failed(exc, 0)
            return
        self._unflushed = 0
        if self.failing:
            self.failing = False
            print(f"servewatch proxy: {self.what} {self.path}: writing again ({self.lost} records lost so far)",
                  file=sys.stderr, flush=True)

    def _failed(self, exc: OSError, more: int) -> None:
        """The buffer's records and `more` are lost; the file is dropped (its buffer with it) and opened
        afresh at the next write."""
        self.lost += self._unflushed + more
        self._unflushed = 0
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass            # closing flushes the same buffer again: the same failure, already counted
        if not self.failing:
            self.failing = True
            print(f"servewatch proxy: {self.what} {self.path}: {exc.strerror or type(exc).__name__}; records are "
                  f"dropped and counted (servewatch_proxy_records_lost_total) until a write succeeds",
                  file=sys.stderr, flush=True)

    def _rotate(self) -> None:
        self._file.close()
        for i in range(self.keep - 1, 0, -1):
            older = f"{self.path}.{i}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{i + 1}")
        if self.keep > 1:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.remove(self.path)
        stale = f"{self.path}.{self.keep}"
        if os.path.exists(stale):
            os.remove(stale)
        self._file = open(self.path, "wb")   # noqa: SIM115
        self._size = 0
        self._unflushed = 0
        self.rotations += 1

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


def record_sink(log: RecordLog | None, telemetry, keep_text: bool = False) -> Callable:
    """What a proxy does with each request's record (Proxy's on_record): its line in the records file when
    it keeps one (with the prompt and completion text only with `keep_text`), then its metrics and span
    (servewatch.proxy.telemetry.Telemetry.observe, which never reads the text)."""
    observe = telemetry.observe
    if log is None:
        return observe
    write = log.write

    def on_record(ex, rec) -> None:
        write(rec.to_json(keep_text))
        observe(ex, rec)

    return on_record


async def flush_forever(log: RecordLog, every_s: float = 1.0) -> None:
    """The records file's buffer to disk every `every_s` (a task; cancelled at shutdown, which closes the log)."""
    while True:
        await asyncio.sleep(every_s)
        log.flush()
