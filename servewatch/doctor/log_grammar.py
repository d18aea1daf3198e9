"""Log grammar the postmortem needs beyond what servewatch.sources.logs.parse_line reads: the engine-neutral
part (Python tracebacks, the uvicorn server in front of the engines, stamps, signal numbers), and the
questions it asks every registered dialect's `RecordGrammar` (`servewatch.dialects.base`).

Every function returns parsed numbers and fixed literals only, never the line's free text: a log line
can carry prompts, request ids or paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from servewatch import dialects
from servewatch.dialects.base import Dialect, StatsReading

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# uvicorn's own lines: "INFO:     Shutting down"
_UVICORN = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(?P<msg>.*)$")


@dataclass(frozen=True, slots=True)
class Line:
    """One log line split into its prefix and message. `process` is the writer ("APIServer",
    "EngineCore", "Worker", "scheduler" ...) when the prefix names it; `stamp` as written (may lack a year)."""

    dialect: str | None
    process: str | None
    pid: int | None
    level: str | None
    stamp: str | None
    msg: str
    prefixed: bool            # the line had an engine prefix (a bare line may continue a traceback)


def split(raw: str) -> Line:
    """By the first dialect whose current prefix reads the line, else by the first whose older ones do."""
    text = ANSI.sub("", raw).rstrip("\r\n")
    registered = dialects.registered()
    for dialect in registered:
        match = dialect.log_prefix.match(text) if dialect.log_prefix is not None else None
        if match:
            return _prefixed(dialect, match)
    for dialect in registered:
        for prefix in dialect.record_grammar.older_prefixes:
            match = prefix.match(text)
            if match:
                return _prefixed(dialect, match)
    match = _UVICORN.match(text)
    if match:
        return Line(None, None, None, match["level"], None, match["msg"], False)
    return Line(None, None, None, None, None, text, False)


def _prefixed(dialect: Dialect, match: re.Match) -> Line:
    parts = match.groupdict()
    pid = parts.get("pid")
    return Line(dialect.name, parts.get("process"), int(pid) if pid else None, parts.get("level"), parts.get("ts"),
                parts["msg"], True)


# --- year-less stamps ------------------------------------------------------------------------------
# A stamp may be "%m-%d %H:%M:%S", with no year or zone. Such times are laid on an assumed leap year (so
# 02-29 parses) and a month going backwards (12-31 → 01-01) moves to the next year.
ASSUMED_YEAR = 2000


# A stamp of minutes.seconds.milliseconds.microseconds since the process started ("0.15.196.315"), as a C++ server's
# logger writes it: a clock of its own, with no date.
ELAPSED_STAMP = re.compile(r"^(?P<minutes>\d+)\.(?P<seconds>\d\d)\.(?P<ms>\d{3})\.(?P<us>\d{3})$")


class StampClock:
    """Turns stamps into seconds since the first stamp seen, crossing a new year when the month goes back."""

    def __init__(self) -> None:
        self.first: datetime | None = None
        self.last: datetime | None = None
        self.year = ASSUMED_YEAR
        self.first_elapsed: float | None = None

    def seconds(self, stamp: str | None) -> float | None:
        if not stamp:
            return None
        since_start = ELAPSED_STAMP.match(stamp)
        if since_start:        # the process's own clock: seconds since its first stamp here
            t = (int(since_start["minutes"]) * 60 + int(since_start["seconds"]) + int(since_start["ms"]) / 1e3
                 + int(since_start["us"]) / 1e6)
            if self.first_elapsed is None:
                self.first_elapsed = t
            return round(t - self.first_elapsed, 6)
        try:
            if len(stamp) > 14:           # "2026-11-30 13:51:14": the year is stated
                when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
            else:
                when = datetime.strptime(f"{self.year}-{stamp}", "%Y-%m-%d %H:%M:%S")
                if self.last is not None and when < self.last and when.month < self.last.month:
                    self.year += 1
                    when = when.replace(year=self.year)
        except ValueError:
            return None
        if self.first is None:
            self.first = when
        self.last = when if self.last is None or when > self.last else self.last
        return (when - self.first).total_seconds()


# --- tracebacks --------------------------------------------------------------------------------------
TRACEBACK_START = "Traceback (most recent call last):"
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>[\w<>.]+)')
# "torch.OutOfMemoryError: CUDA out of memory. ..." / "RuntimeError: cancelled" / "KeyboardInterrupt"
EXCEPTION_LINE = re.compile(r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Warning"
                            r"|Timeout))(?::\s|$)")
# The multiprocessing header that precedes a child's bare traceback: "Process EngineCore:"
CHILD_PROCESS_HEADER = re.compile(r"^Process (?P<process>[A-Za-z][\w:.-]*):$")


def engine_frame(path: str, function: str) -> str | None:
    """'package.module.function' for a frame inside a registered engine's package; None otherwise. Only
    the module path from the package down is kept: the install location is the user's."""
    packages = {package for dialect in dialects.registered() for package in dialect.record_grammar.packages}
    parts = path.replace("\\", "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in packages and i < len(parts) - 1:
            module = "/".join(parts[i:])
            if module.endswith(".py"):
                module = module[:-3]
            if not re.fullmatch(r"[\w/]+", module) or not re.fullmatch(r"[\w<>.]+", function):
                return None
            return module.replace("/", ".") + "." + function
    return None


def is_engine_process(process: str | None) -> bool:
    """Whether a line prefix's process name is an engine's (not its API server's)."""
    return bool(process) and any(process.startswith(name) or name in process for dialect in dialects.registered()
                                 for name in dialect.record_grammar.engine_processes)


# --- out of memory -----------------------------------------------------------------------------------
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def oom_details(msg: str) -> dict[str, float | int]:
    """Bytes requested (and the device's total and free bytes when stated) of an OOM message."""
    for dialect in dialects.registered():
        pattern = dialect.record_grammar.oom_details
        match = pattern.search(msg) if pattern is not None else None
        if match:
            break
    else:
        return {}
    out: dict[str, float | int] = {}
    for name in ("requested", "total", "free"):
        if match[name] is not None and match[f"{name}_unit"] in _UNITS:
            out[f"{name}_bytes"] = float(match[name]) * _UNITS[match[f"{name}_unit"]]
    if match["device"] is not None:
        out["device"] = int(match["device"])
    return out


def is_oom_exception(exception: str) -> bool:
    return any(name in exception for dialect in dialects.registered() for name in dialect.record_grammar.oom_exceptions)


def is_oom_message(msg: str) -> bool:
    return any(literal in msg for dialect in dialects.registered() for literal in dialect.record_grammar.oom_literals)


def known_startup_failure(msg: str) -> str | None:
    """The engine's own startup-failure message, rebuilt from the grammar, when the line is one with the
    numbers that make it useful."""
    for dialect in dialects.registered():
        for kind, fields in dialect.parse_log_message(msg):
            if kind == "startup_failure" and len(fields) > 1:
                return dialect.describe_startup_failure(fields)
    return None


# --- stats, startup, settings --------------------------------------------------------------------------

def record_stats(msg: str) -> tuple[Dialect, StatsReading] | None:
    for dialect in dialects.registered():
        reading = dialect.record_stats(msg)
        if reading is not None:
            return dialect, reading
    return None


def startup_stage(msg: str) -> tuple[str, re.Match] | None:
    for dialect in dialects.registered():
        for name, pattern in dialect.record_grammar.startup_stages:
            match = pattern.search(msg)
            if match:
                return name, match
    return None


def settings(msg: str) -> dict[str, float | int]:
    """The launch settings a settings line states."""
    found: dict[str, float | int] = {}
    for dialect in dialects.registered():
        grammar = dialect.record_grammar
        if grammar.settings_marker is not None and grammar.settings_marker in msg:
            for name, pattern, kind in grammar.settings:
                match = pattern.search(msg)
                if match:
                    found[name] = kind(match["value"])
    return found


# --- signals, shutdown, watchdogs, exits -----------------------------------------------------------------
UVICORN_SHUTDOWN_LINES = ("Shutting down", "Application shutdown complete.")
API_EXIT_LINE = re.compile(r"Finished server process \[\d+\]")          # uvicorn
SIGNAL_NUMBERS = {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT", 6: "SIGABRT", 11: "SIGSEGV", 3: "SIGQUIT"}


def signals(msg: str) -> list[str]:
    return [match["signal"].upper() for dialect in dialects.registered()
            for pattern in dialect.record_grammar.signal_lines if (match := pattern.search(msg))]


def shutdown_literals(msg: str) -> list[str]:
    lines = (*(line for dialect in dialects.registered() for line in dialect.record_grammar.shutdown_lines),
             *UVICORN_SHUTDOWN_LINES)
    return [literal for literal in lines if literal in msg]


def force_killed(msg: str) -> str | None:
    """The process a force-kill line names."""
    for dialect in dialects.registered():
        pattern = dialect.record_grammar.force_kill_line
        match = pattern.search(msg) if pattern is not None else None
        if match:
            return match["process"]
    return None


def exit_code(msg: str) -> int | None:
    for dialect in dialects.registered():
        for pattern in dialect.record_grammar.exit_code_lines:
            match = pattern.search(msg)
            if match:
                return int(match["code"])
    return None


def forced_stop(msg: str) -> int | None:
    """The exit status a forced-stop line announces (a stop signal repeated during the stop), else None."""
    for dialect in dialects.registered():
        for literal, code in dialect.record_grammar.forced_stop_lines:
            if literal in msg:
                return code
    return None


def timeout_literals(msg: str) -> list[str]:
    return [pattern.pattern.replace("\\", "") for dialect in dialects.registered()
            for pattern in dialect.record_grammar.timeout_lines if pattern.search(msg)]


def api_process(dialect_name: str | None, process: str | None) -> str | None:
    """The API server's name for its exit line: the engine's own name for it where it has one."""
    dialect = dialects.by_name(dialect_name)
    return (dialect.record_grammar.api_process if dialect else None) or process
