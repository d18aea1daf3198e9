"""The log tail: new lines of the engine's log file → typed LogEvents by the dialects' grammar.

An event holds parsed numbers and fixed literals from the grammar only — never the line's text (a log
line can carry paths, prompts or request ids). A line's time is when we read it: engine log stamps
have no year or zone.
"""

from __future__ import annotations

import asyncio

import os
import re

from servewatch.clock import Clock
from servewatch.dialects import sglang, vllm
from servewatch.dialects.vllm import startup_failure_numbers
from servewatch.timeline.samples import LogEvent

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_BYTES_PER_POLL = 1 * 2**20
MAX_LINE_BYTES = 64 * 1024
_SGLANG_WATCHDOG_COMPONENTS = ("Scheduler", "TokenizerManager", "DetokenizerManager", "DataParallelController")


def _numbers(match: re.Match, names: dict[str, type]) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for name, kind in names.items():
        value = match.group(name)
        if value is not None:
            out[name] = kind(value.replace(",", ""))
    return out


def _message(line: str) -> str:
    line = _ANSI.sub("", line).rstrip("\r\n")
    for prefix in (vllm.LOG_PREFIX, sglang.LOG_PREFIX):
        match = prefix.match(line)
        if match:
            return match.group("msg")
    return line


def parse_line(line: str, t: float) -> list[LogEvent]:
    """The events one log line carries (usually none)."""
    msg = _message(line)
    if not msg:
        return []

    match = vllm.STATS_LINE.search(msg)
    if match:
        fields = _numbers(match, {"engine": int, "prompt_tps": float, "gen_tps": float, "running": int,
                                  "waiting": int, "deferred": int, "preemptions": int, "kv_pct": float,
                                  "prefix_hit_pct": float})
        events = [LogEvent(t, "stats", {"dialect": "vllm", **fields})]
        if fields.get("preemptions"):
            events.append(LogEvent(t, "preemption", {"dialect": "vllm", "count": fields["preemptions"]}))
        return events
    match = sglang.DECODE_LINE.search(msg)
    if match:
        fields = _numbers(match, {"running": int, "tokens": int, "token_usage": float, "gen_tps": float, "queue": int})
        return [LogEvent(t, "stats", {"dialect": "sglang", "batch": "decode", **fields})]
    match = sglang.PREFILL_LINE.search(msg)
    if match:
        fields = _numbers(match, {"new_seq": int, "new_tokens": int, "cached_tokens": int, "token_usage": float,
                                  "running": int, "queue": int})
        return [LogEvent(t, "stats", {"dialect": "sglang", "batch": "prefill", **fields})]
    match = sglang.RETRACTION_LINE.search(msg)
    if match:
        return [LogEvent(t, "retraction", {"dialect": "sglang",
                                           **_numbers(match, {"retracted": int, "tokens_gained": int})})]
    match = vllm.KV_CACHE_SIZE_LINE.search(msg)
    if match:
        return [LogEvent(t, "startup", {"dialect": "vllm", "stage": "kv_cache_size",
                                        **_numbers(match, {"tokens": int, "per_request": int, "concurrency": float})})]
    match = vllm.WORKER_DIED_LINE.search(msg)
    if match:
        fields: dict = {"dialect": "vllm", "reason": "Worker proc died unexpectedly"}
        code = match.group("code")
        if code and code.lstrip("-").isdigit():
            fields["exit_code"] = int(code)
        return [LogEvent(t, "engine_dead", fields)]
    match = sglang.WATCHDOG_LINE.search(msg)
    if match:
        fields = {"dialect": "sglang", "reason": "watchdog timeout", "timeout_s": float(match.group("timeout"))}
        if match.group("component") in _SGLANG_WATCHDOG_COMPONENTS:
            fields["component"] = match.group("component")
        return [LogEvent(t, "error", fields)]
    for dialect in (vllm, sglang):
        for literal in dialect.STARTUP_FAILURE_LINES:
            if literal in msg:
                return [LogEvent(t, "startup_failure", {"dialect": dialect.NAME, "reason": literal,
                                                        **startup_failure_numbers(msg)})]
        for literal in dialect.ENGINE_DEAD_LINES:
            if literal in msg:
                return [LogEvent(t, "engine_dead", {"dialect": dialect.NAME, "reason": literal})]
    match = vllm.OOM_LINE.search(msg)
    if match:
        fields = {"dialect": "vllm", "reason": "out of memory"}
        if match.group("mib"):
            fields["mib"] = float(match.group("mib")) * (1024 if match.group("unit") == "GiB" else 1)
        return [LogEvent(t, "error", fields)]
    for literal in sglang.OOM_LINES:
        if literal in msg:
            return [LogEvent(t, "error", {"dialect": "sglang", "reason": literal})]
    for dialect in (vllm, sglang):
        if dialect.READY_LINE in msg:
            return [LogEvent(t, "startup", {"dialect": dialect.NAME, "stage": "ready"})]
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
