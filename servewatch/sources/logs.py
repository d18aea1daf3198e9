"""The log tail: new lines of the engine's log file → typed LogEvents by the dialects' grammar.

An event holds parsed numbers and fixed literals from the grammar only — never the line's text (a log
line can carry paths, prompts or request ids).

An event's time is when its line was written, on our clock: engine log stamps have no zone (vLLM's no
year either), so a tail maps a line's own stamp onto our clock by the smallest gap it has seen between a
stamp and the reading of its line (a line is never read before it is written), and never later than the
reading. A watcher starved of CPU for a minute reads a minute of stats lines at once: each keeps its own
second. A line without a stamp the dialect can read is timed by its reading.
"""

from __future__ import annotations

import asyncio
import os
import re
from datetime import datetime, timezone

from servewatch import dialects
from servewatch.clock import Clock
from servewatch.timeline.samples import LogEvent

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_BYTES_PER_POLL = 1 * 2**20
MAX_LINE_BYTES = 64 * 1024


def _message(line: str) -> tuple[str, list, float | None]:
    """The line's message without the engine's prefix, the dialects to try (the prefix's owner first), and
    the prefix's own stamp as seconds (read as if UTC; None when there is none to read)."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    candidates = list(dialects.registered())
    for dialect in candidates:
        match = dialect.log_prefix.match(line) if dialect.log_prefix is not None else None
        if match:
            candidates.remove(dialect)
            return match.group("msg"), [dialect, *candidates], _stamp(dialect, match)
    return line, candidates, None


def _stamp(dialect, match: re.Match) -> float | None:
    text, form = match.groupdict().get("ts"), dialect.log_clock_format
    if not text or not form:
        return None
    if "%Y" not in form:                 # a leap year, so that 02-29 reads
        text, form = f"2000-{text}", f"%Y-{form}"
    try:
        return datetime.strptime(text, form).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


class LineClock:
    """A log's own stamps mapped onto our clock (see the module's docstring)."""

    RESET_S = 1800.0    # a stamp this much further behind than before: the zone or the year changed

    def __init__(self):
        self.offset: float | None = None

    def read(self, stamps: list[float], read_t: float) -> None:
        """What one reading at `read_t` of lines with these stamps tells: its newest line was written at the
        latest when it was read (a burst read after a freeze is anchored by its newest line, not its oldest)."""
        if not stamps:
            return
        seen = read_t - max(stamps)
        if self.offset is None or seen < self.offset or seen - self.offset > self.RESET_S:
            self.offset = seen

    def time(self, stamp: float | None, read_t: float) -> float:
        if stamp is None or self.offset is None:
            return read_t
        return min(read_t, stamp + self.offset)


def _read_line(line: str) -> tuple[float | None, str | None, list]:
    """(the line's own stamp, the dialect whose grammar read it, its findings)."""
    msg, candidates, stamp = _message(line)
    if msg:
        for dialect in candidates:
            found = dialect.parse_log_message(msg)
            if found:
                return stamp, dialect.name, found
    return stamp, None, []


def parse_line(line: str, t: float) -> list[LogEvent]:
    """The events one log line carries (usually none), by the first dialect whose grammar reads it, at `t`."""
    _, name, found = _read_line(line)
    return [LogEvent(t, kind, {"dialect": name, **fields}) for kind, fields in found]


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
        self.clock = LineClock()

    async def poll(self) -> list[LogEvent]:
        try:
            chunk = await asyncio.to_thread(self._read)   # a stuck disk or NFS must not stop the probes
        except OSError as exc:
            t = self._clock.now()
            self._opened = True  # a file that appears later is read from its start
            self._close()
            if self._missing_reported:
                return []
            self._missing_reported = True
            return [LogEvent(t, "unavailable", {"error": "no_such_file" if isinstance(exc, FileNotFoundError)
                                                else "unreadable"})]
        # When the lines were read, not when the read was asked for: a starved watcher's read in a worker
        # thread can come back tens of seconds later (a real one: 30 s), and the lines' times anchor on it.
        t = self._clock.now()
        self._missing_reported = False
        read = []
        for line in self._lines(chunk):
            self.lines_read += 1
            read.append(_read_line(line.decode("utf-8", errors="replace")))
        self.clock.read([stamp for stamp, _, _ in read if stamp is not None], t)
        events: list[LogEvent] = []
        for stamp, name, found in read:
            for kind, fields in found:
                event = LogEvent(self.clock.time(stamp, t), kind, {"dialect": name, **fields})
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
