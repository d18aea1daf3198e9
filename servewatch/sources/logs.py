"""The log tail: new lines of the engine's log file → typed LogEvents by the dialects' grammar.

An event holds parsed numbers and fixed literals from the grammar only — never the line's text (a log
line can carry paths, prompts or request ids). A line's time is when we read it: engine log stamps
have no year or zone.
"""

from __future__ import annotations

import asyncio
import os
import re

from servewatch import dialects
from servewatch.clock import Clock
from servewatch.timeline.samples import LogEvent

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_BYTES_PER_POLL = 1 * 2**20
MAX_LINE_BYTES = 64 * 1024


def _message(line: str) -> tuple[str, list]:
    """The line's message without the engine's prefix, and the dialects to try (the prefix's owner first)."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    candidates = list(dialects.registered())
    for dialect in candidates:
        match = dialect.log_prefix.match(line) if dialect.log_prefix is not None else None
        if match:
            candidates.remove(dialect)
            return match.group("msg"), [dialect, *candidates]
    return line, candidates


def parse_line(line: str, t: float) -> list[LogEvent]:
    """The events one log line carries (usually none), by the first dialect whose grammar reads it."""
    msg, candidates = _message(line)
    if not msg:
        return []
    for dialect in candidates:
        found = dialect.parse_log_message(msg)
        if found:
            return [LogEvent(t, kind, {"dialect": dialect.name, **fields}) for kind, fields in found]
    return []


class LogTail:
    """Follows one file: new complete lines since the last poll, bounded per poll; survives rotation
    and truncation; a missing file is one "unavailable" event, not an error."""

    kind = "log"

    def __init__(self, path: str, clock: Clock, interval: float, *, from_start: bool = False,
                 max_bytes_per_poll: int = MAX_BYTES_PER_POLL):
        self._path = path
        self._clock = clock
        self.interval = interval
        self._from_start = from_start
        self._max = max_bytes_per_poll
        self._handle = None
        self._inode = None
        self._opened = False
        self._partial = b""
        self._missing_reported = False
        self.lines_read = 0
        self.lines_dropped = 0   # over MAX_LINE_BYTES

    async def poll(self) -> list[LogEvent]:
        t = self._clock.now()
        try:
            chunk = await asyncio.to_thread(self._read)   # a stuck disk or NFS must not stop the probes
        except OSError as exc:
            self._opened = True  # a file that appears later is read from its start
            self._close()
            if self._missing_reported:
                return []
            self._missing_reported = True
            return [LogEvent(t, "unavailable", {"error": "no_such_file" if isinstance(exc, FileNotFoundError)
                                                else "unreadable"})]
        self._missing_reported = False
        events: list[LogEvent] = []
        for line in self._lines(chunk):
            self.lines_read += 1
            for event in parse_line(line.decode("utf-8", errors="replace"), t):
                if events and events[-1].kind == event.kind and events[-1].fields == event.fields:
                    continue  # one traceback repeats the same death many times
                events.append(event)
        return events

    def _read(self) -> bytes:
        stat = os.stat(self._path)
        if self._handle is None or stat.st_ino != self._inode or stat.st_size < self._handle.tell():
            first_open = not self._opened
            self._close()
            self._handle = open(self._path, "rb")  # noqa: SIM115 - kept open between polls
            self._inode = stat.st_ino
            self._opened = True
            if first_open and not self._from_start:
                self._handle.seek(0, os.SEEK_END)   # history before watching is not ours; new files are
        return self._handle.read(self._max)

    def _lines(self, chunk: bytes) -> list[bytes]:
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial = b""
            self.lines_dropped += 1
        kept = [line for line in lines if len(line) <= MAX_LINE_BYTES]
        self.lines_dropped += len(lines) - len(kept)
        return kept

    def _close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._handle = None
        self._inode = None
        self._partial = b""

    def close(self) -> None:
        self._close()
