"""The built-in simulator as an in-process target (virtual time): health, /metrics and a process tree
read straight from a SimEngine, through the same sources and detectors as a real server."""

from __future__ import annotations

from servewatch import dialects
from servewatch.clock import Clock
from servewatch.timeline.samples import ProcessMember, ProcessSample
from servewatch.sources.probe import DEFAULT_DEADLINE_S
from servewatch.watch.targets import callable_sources


class SimProcessProbe:
    """What `--pid` would show for a simulated vLLM/SGLang: the API process, its engine core and worker
    while the engine lives; the engine children gone once it died; the exit code once it exited."""

    def __init__(self, engine, pid: int = 4000):
        self.engine = engine
        self.pid = pid
        self._titles = dialects.by_name(engine.config.dialect).engine_process_titles

    def snapshot(self, t: float) -> ProcessSample:
        from servewatch.sim import DEAD, EXITED

        engine = self.engine
        created = engine.started_at
        pid = self.pid + 10 * engine.restarts    # a crash loop's supervisor starts a new process
        if engine.state == EXITED:
            return ProcessSample(t=t, root_pid=pid, root_create_time=None, alive=False,
                                 exit_code=engine.exit_code, error="no_such_process")
        members = [ProcessMember(pid=pid, create_time=created, role="api", title="python3", status="sleeping")]
        if engine.state != DEAD:
            busy = engine.num_running > 0 and not engine.stalled
            for offset, (title, role) in enumerate(self._titles, start=1):
                members.append(ProcessMember(pid=pid + offset, create_time=created + offset, role=role,
                                             title=title, status="running" if busy else "sleeping"))
        return ProcessSample(t=t, root_pid=pid, root_create_time=created, alive=True, members=tuple(members))


def sim_health(engine):
    """GET /health against the simulator: its status, or a refused connection when nothing listens."""
    def get() -> int:
        status = engine.health()
        if not status:
            raise ConnectionRefusedError("nothing listens")
        return status
    return get


def sim_metrics(engine):
    def get() -> str:
        if not engine.health():
            raise ConnectionRefusedError("nothing listens")
        return engine.metrics_text()
    return get


class SimProber:
    """The active probe against the in-process engine: the same one-token request a real server gets,
    answered in the engine's (virtual) time."""

    def __init__(self, engine):
        self.engine = engine

    def __call__(self, deadline_s: float):
        from servewatch.sim import EngineDeadError, RequestRejected
        from servewatch.sources.probe import FAILED, PROMPT, UNAVAILABLE, ProbeAnswer

        engine = self.engine
        if not engine.health():
            return _Answered(ProbeAnswer(UNAVAILABLE, None, error="connect"))
        try:
            request = engine.submit(prompt=PROMPT, max_tokens=1, is_streaming=False, greedy=True)
        except EngineDeadError:
            return _Answered(ProbeAnswer(FAILED, 0.0, 500, error="http_500", at=engine.clock.now()))
        except RequestRejected as exc:
            return _Answered(ProbeAnswer(UNAVAILABLE, 0.0, 400, error="http_400", detail=str(exc)))
        return _SimAttempt(engine, request, deadline_s)


class _Answered:
    def __init__(self, answer):
        self._answer = answer

    def answer(self):
        return self._answer

    def cancel(self) -> None:
        pass


class _SimAttempt:
    def __init__(self, engine, request, deadline_s: float):
        self.engine, self.request, self.deadline_s = engine, request, deadline_s

    def answer(self):
        from servewatch.sources.probe import DEADLINE, FAILED, SERVED, ProbeAnswer

        request, now = self.request, self.engine.clock.now()
        if request.first_token_ts is not None and request.first_token_ts - request.arrival <= self.deadline_s:
            latency = request.first_token_ts - request.arrival
            return ProbeAnswer(SERVED, latency, 200, request.output_len, at=request.first_token_ts)
        if request.finished and request.output_len == 0:   # aborted (the engine died under it)
            return ProbeAnswer(FAILED, now - request.arrival, 200, 0, "no_token", at=now)
        if now - request.arrival >= self.deadline_s:
            self.cancel()
            return ProbeAnswer(DEADLINE, self.deadline_s, error="timeout", at=request.arrival + self.deadline_s)
        return None

    def cancel(self) -> None:
        if not self.request.finished:
            self.engine.abort(self.request)


class LogLines:
    """A text stream the simulator writes its log to (`SimEngine(..., log_stream=LogLines())`), kept in
    memory for `SimLogSource`."""

    def __init__(self):
        self.lines: list[str] = []
        self._partial = ""

    def write(self, text: str) -> int:
        parts = (self._partial + text).split("\n")
        self._partial = parts.pop()
        self.lines.extend(parts)
        return len(text)

    def flush(self) -> None:
        pass


class SimLogSource:
    """The simulator's log read in virtual time: the lines written since the last poll, parsed by the
    dialects' grammar like a tailed file."""

    kind = "log"

    def __init__(self, lines: LogLines, clock: Clock, interval: float):
        self._lines = lines
        self._clock = clock
        self.interval = interval
        self._read = 0

    async def poll(self) -> list:
        from servewatch.sources.logs import parse_line

        t = self._clock.now()
        new = self._lines.lines[self._read:]
        self._read += len(new)
        return [event for line in new for event in parse_line(line, t)]

    def close(self) -> None:
        pass


def sim_sources(engine, clock: Clock, interval: float, *, with_process: bool = True,
                probe_interval_s: float | None = None, probe_deadline: float | None = DEFAULT_DEADLINE_S,
                log_lines: LogLines | None = None) -> list:
    from servewatch.sources.probe import ProbeSource

    sources = callable_sources(clock, interval, health=sim_health(engine), metrics=sim_metrics(engine),
                               process_probe=SimProcessProbe(engine) if with_process else None,
                               slot_limit=engine.config.max_num_seqs)
    if probe_interval_s is not None:
        sources.append(ProbeSource(SimProber(engine), clock, probe_interval_s=probe_interval_s,
                                   deadline_s=probe_deadline, check_s=interval))
    if log_lines is not None:
        sources.append(SimLogSource(log_lines, clock, interval))
    return sources
