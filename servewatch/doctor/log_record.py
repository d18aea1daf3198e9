"""A server's log read as a medical record: the stats timeline, the startup stages, the tracebacks and the
events around the death. Pure: lines in, a LogRecord out; nothing from a line's free text is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from servewatch import dialects
from servewatch.dialects.base import StatsReading
from servewatch.doctor import log_grammar as g
from servewatch.sources.logs import parse_line

MAX_FRAMES = 400          # per traceback: a runaway stack must not grow without bound


@dataclass(frozen=True, slots=True)
class StatsPoint:
    t: float
    clock: str                     # the stamp as the log wrote it
    source: str                    # "stats line" | "stats line without an engine number" | "engine dump at death" | "decode batch" | "prefill batch"
    running: int | None = None
    waiting: int | None = None
    kv_pct: float | None = None
    prompt_tps: float | None = None
    gen_tps: float | None = None
    preemptions: int | None = None
    prefix_hit_pct: float | None = None


@dataclass(frozen=True, slots=True)
class StartupStage:
    name: str
    t: float | None
    clock: str | None
    seconds: float | None
    numbers: dict = field(default_factory=dict)


@dataclass(slots=True)
class Traceback:
    process: str | None
    t: float | None
    clock: str | None
    exception: str | None = None           # the exception's type name, e.g. "torch.OutOfMemoryError"
    engine_frames: list[str] = field(default_factory=list)   # module.function of frames inside an engine
    frames: int = 0
    complete: bool = False                 # ended with its exception line
    numbers: dict = field(default_factory=dict)              # e.g. OOM bytes
    known_message: str | None = None       # an engine message rebuilt from the grammar (startup failures)

    @property
    def innermost_engine_frame(self) -> str | None:
        return self.engine_frames[-1] if self.engine_frames else None

    @property
    def is_oom(self) -> bool:
        return bool(self.exception) and g.is_oom_exception(self.exception) \
            or "requested_bytes" in self.numbers


@dataclass(frozen=True, slots=True)
class Event:
    t: float | None
    clock: str | None
    kind: str        # engine_dead | signal | shutdown | forced_stop | api_exit | force_kill | timeout | watchdog | oom | error | startup_failure | retraction
    process: str | None
    fields: dict = field(default_factory=dict)


@dataclass
class LogRecord:
    dialect: str | None = None
    lines: int = 0
    recognised: int = 0                    # lines with an engine prefix or an engine literal
    first_clock: str | None = None
    last_clock: str | None = None
    duration_s: float | None = None
    stats: list[StatsPoint] = field(default_factory=list)
    startup: list[StartupStage] = field(default_factory=list)
    ready_t: float | None = None
    ready_clock: str | None = None
    tracebacks: list[Traceback] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    settings: dict = field(default_factory=dict)    # max_num_seqs, gpu_memory_utilization, ... as the log states them
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    stats_namings: set[str] = field(default_factory=set)


class _Reader:
    def __init__(self) -> None:
        self.record = LogRecord()
        self.clock = g.StampClock()
        self.t: float | None = None
        self.stamp: str | None = None
        self.open: dict[object, Traceback] = {}
        self.bare_process: str | None = None      # "Process EngineCore:" names the bare traceback that follows

    def feed(self, raw: str) -> None:
        rec = self.record
        rec.lines += 1
        line = g.split(raw)
        if line.stamp:
            t = self.clock.seconds(line.stamp)
            if t is not None:
                self.t, self.stamp = t, line.stamp
                rec.first_clock = rec.first_clock or line.stamp
                rec.last_clock = line.stamp
                rec.duration_s = t
        if line.dialect and rec.dialect is None:
            rec.dialect = line.dialect
        known = line.prefixed
        msg = line.msg
        key = (line.process, line.pid) if line.prefixed else "bare"
        process = line.process if line.prefixed else None
        if not line.prefixed:
            header = g.CHILD_PROCESS_HEADER.match(msg)
            if header:
                self.bare_process = header["process"]
                return
        if self._traceback(key, process if line.prefixed else self.bare_process, msg):
            rec.recognised += 1
            return
        known = self._engine_line(line, msg, process) or known
        if known:
            rec.recognised += 1

    # --- tracebacks --------------------------------------------------------------------------------
    def _traceback(self, key, process, msg: str) -> bool:
        stripped = msg.strip()
        if stripped == g.TRACEBACK_START:
            self._close(key)
            self.open[key] = Traceback(process, self.t, self.stamp)
            return True
        tb = self.open.get(key)
        frame = g.FRAME.match(msg)
        if tb is not None and frame:
            tb.frames += 1
            name = g.engine_frame(frame["path"], frame["function"])
            if name and len(tb.engine_frames) < MAX_FRAMES:
                tb.engine_frames.append(name)
            return True
        exception = g.EXCEPTION_LINE.match(msg)
        if exception and not msg.startswith((" ", "\t")):
            if tb is None:
                if not exception["type"].endswith(("Error", "Exception", "Interrupt")):
                    return False
                tb = Traceback(process, self.t, self.stamp)
                self.record.tracebacks.append(tb)
            else:
                del self.open[key]
                self.record.tracebacks.append(tb)
            tb.exception = exception["type"]
            tb.complete = True
            tb.numbers.update(g.oom_details(msg))
            tb.known_message = g.known_startup_failure(msg)
            if tb.known_message is None and g.is_oom_message(msg) and "requested_bytes" in tb.numbers:
                tb.known_message = "out of memory"
            return False            # the exception line may also carry a literal parse_line knows
        if tb is not None and (msg.startswith((" ", "\t")) or not stripped):
            return True             # source lines and carets of the open traceback
        return False

    def _close(self, key) -> None:
        tb = self.open.pop(key, None)
        if tb is not None:
            self.record.tracebacks.append(tb)    # complete stays False: it ended without its exception line

    def finish(self) -> LogRecord:
        for key in list(self.open):
            self._close(key)
        self.record.tracebacks.sort(key=lambda tb: (tb.t is None, tb.t or 0.0))
        return self.record

    # --- everything else ------------------------------------------------------------------------------
    def _engine_line(self, line: g.Line, msg: str, process: str | None) -> bool:
        rec, t, clock = self.record, self.t, self.stamp
        known = False
        found = g.record_stats(msg)
        if found:
            dialect, reading = found
            self._stats(t or 0.0, clock, reading, dialect.name)
            return True
        stage = g.startup_stage(msg)
        if stage:
            name, match = stage
            numbers = {k: _number(v) for k, v in match.groupdict().items() if v is not None and k != "seconds"}
            seconds = _float(match.groupdict().get("seconds"))
            rec.startup.append(StartupStage(name, t, clock, seconds, numbers))
            if "tokens" in numbers:
                rec.kv_cache_tokens = int(numbers["tokens"])
            if "max_running" in numbers:
                rec.settings.setdefault("max_running_requests", int(numbers["max_running"]))
            known = True
        rec.settings.update(g.settings(msg))
        for signal in g.signals(msg):
            rec.events.append(Event(t, clock, "signal", process, {"signal": signal}))
            known = True
        for literal in g.shutdown_literals(msg):
            rec.events.append(Event(t, clock, "shutdown", process, {"literal": literal}))
            known = True
        if g.API_EXIT_LINE.search(msg):
            rec.events.append(Event(t, clock, "api_exit", g.api_process(rec.dialect, process), {}))
            known = True
        target = g.force_killed(msg)
        if target:
            rec.events.append(Event(t, clock, "force_kill", process, {"target": target}))
        code = g.exit_code(msg)
        if code is not None:
            rec.events.append(Event(t, clock, "exit_code", process, {"exit_code": code}))
        forced = g.forced_stop(msg)
        if forced is not None:
            rec.events.append(Event(t, clock, "forced_stop", process, {"exit_code": forced}))
            known = True
        for literal in g.timeout_literals(msg):
            rec.events.append(Event(t, clock, "timeout", process, {"literal": literal}))
            known = True
        for event in parse_line(msg, t or 0.0):
            known = True
            self._event(event, process, clock)
        return known

    def _event(self, event, process, clock) -> None:
        rec, f = self.record, event.fields
        if event.kind == "stats":
            dialect = dialects.by_name(f.get("dialect"))
            reading = dialect.stats_reading(f) if dialect else None
            if reading is not None:
                self._stats(event.t, clock, reading, dialect.name)
            rec.dialect = rec.dialect or f.get("dialect")
        elif event.kind == "startup" and f.get("stage") == "ready":
            if rec.ready_t is None:
                rec.ready_t, rec.ready_clock = event.t, clock
                rec.startup.append(StartupStage("ready", event.t, clock, event.t, {}))
        elif event.kind == "startup" and f.get("stage") == "kv_cache_size":
            rec.kv_cache_tokens = f.get("tokens")
            rec.max_concurrency = f.get("concurrency")
            rec.startup.append(StartupStage("KV sizing", event.t, clock, None,
                                            {k: f[k] for k in ("tokens", "per_request", "concurrency") if k in f}))
        elif event.kind in ("engine_dead", "startup_failure", "retraction", "preemption"):
            if not _repeat(rec.events, event.kind, f):
                rec.events.append(Event(event.t, clock, event.kind, process, dict(f)))
        elif event.kind == "error":
            # Only an out-of-memory error is one: a failed decode, a full KV cache retried with a smaller batch or
            # a failed health check is kept as an error, not read as a death by OOM.
            reason = str(f.get("reason", ""))
            kind = "watchdog" if reason == "watchdog timeout" else \
                "oom" if "out of memory" in reason.lower() or g.is_oom_message(reason) else "error"
            if not _repeat(rec.events, kind, f):
                rec.events.append(Event(event.t, clock, kind, process, dict(f)))

    def _stats(self, t: float, clock: str | None, reading: StatsReading, dialect: str) -> None:
        rec = self.record
        rec.stats.append(StatsPoint(t, clock or "", reading.source, **reading.values))
        if reading.naming is not None:       # a shape that names its naming names the engine
            rec.stats_namings.add(reading.naming)
            rec.dialect = rec.dialect or dialect


def _repeat(events: list[Event], kind: str, fields: dict) -> bool:
    return any(e.kind == kind and e.fields == fields for e in events)


def _float(text: str | None) -> float | None:
    return None if text is None else float(text)


def _number(text: str) -> float | int:
    return int(text) if text.isdigit() else float(text)


def read_record(lines: Iterable[str]) -> LogRecord:
    """The record of one log (rotated parts already joined, oldest first)."""
    reader = _Reader()
    for raw in lines:
        reader.feed(raw)
    return reader.finish()


__all__ = ["Event", "LogRecord", "StartupStage", "StatsPoint", "Traceback", "read_record"]
