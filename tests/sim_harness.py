"""Drive the in-process simulator with a deterministic open-loop workload under the recorder, in
virtual time (no sleeps)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from servewatch.clock import VirtualClock
from servewatch.detectors import DetectorConfig
from servewatch.sim import EngineDeadError, RequestFailed, RequestRejected, SimConfig, SimEngine
from servewatch.watch import Recorder
from servewatch.watch.sim_target import LogLines, sim_sources


BODY_BYTES, BYTES_PER_PROMPT_TOKEN = 60, 5      # a completion request's JSON body, as the HTTP layer counts it


@dataclass(frozen=True)
class Phase:
    duration: float
    rate: float = 0.0              # requests per second (Poisson); 0 = idle
    prompt_tokens: int = 44
    max_tokens: int = 128


class Workload:
    def __init__(self, engine: SimEngine, phases: list[Phase], seed: int = 1):
        self.engine = engine
        self.rng = random.Random(seed)
        self.phases = []
        t = engine.clock.now()
        for phase in phases:
            self.phases.append((t, t + phase.duration, phase))
            t += phase.duration
        self.end = t
        self.submitted = 0
        self.rejected = 0
        self._next = self._arrival_after(engine.clock.now())

    def _phase_at(self, t):
        for start, end, phase in self.phases:
            if start <= t < end:
                return start, end, phase
        return None

    def _arrival_after(self, t: float) -> float | None:
        while True:
            current = self._phase_at(t)
            if current is None:
                return None
            start, end, phase = current
            if phase.rate <= 0:
                t = end
                continue
            nxt = t + self.rng.expovariate(phase.rate)
            if nxt < end:
                return nxt
            t = end

    def _answered_at_finish(self, request_bytes: int):
        def on_token(request) -> None:
            if request.finish_reason is not None:
                self.engine.record_response(200, request_bytes=request_bytes)
        return on_token

    def advance(self, t: float) -> None:
        engine = self.engine
        while self._next is not None and self._next <= t:
            engine.run_until(self._next)
            _, _, phase = self._phase_at(self._next)
            body = BODY_BYTES + BYTES_PER_PROMPT_TOKEN * phase.prompt_tokens
            try:
                # the HTTP layer counts a streamed 200 once the stream has ended, as vLLM's middleware does
                engine.submit(prompt_tokens=phase.prompt_tokens, max_tokens=phase.max_tokens, ignore_eos=True,
                              listener=self._answered_at_finish(body))
                self.submitted += 1
            except (RequestRejected, RequestFailed) as exc:
                prompt_tokens = getattr(exc, "prompt_tokens", phase.prompt_tokens)
                engine.record_response(exc.status, request_bytes=BODY_BYTES + BYTES_PER_PROMPT_TOKEN * prompt_tokens)
                self.rejected += 1
            except EngineDeadError:
                engine.record_response(500, request_bytes=body)
                self.rejected += 1
            self._next = self._arrival_after(self._next)
        engine.run_until(t)


def run(phases: list[Phase], *, interval: float = 0.5, faults: tuple[tuple[float, dict], ...] = (),
        config: SimConfig | None = None, detector_config: DetectorConfig | None = None, history: float = 600.0,
        with_process: bool = True, seed: int = 1, probe: tuple[float, float] | None = None,
        with_log: bool = False, on_recorder=None):
    """Run the workload under the recorder; faults are (seconds after start, fault json); `probe` is
    (interval, deadline) of the active probe (None: off); `on_recorder(recorder)` before it runs. Returns
    (recorder, engine, start time)."""
    clock = VirtualClock()
    lines = LogLines() if with_log else None
    engine = SimEngine(config or SimConfig(seed=seed), clock, log_stream=lines)
    start = clock.now()
    for at, fault in faults:
        engine.inject({**fault, "at": at})
    workload = Workload(engine, phases, seed=seed)
    every, deadline = probe if probe is not None else (None, 10.0)
    recorder = Recorder(sim_sources(engine, clock, interval, with_process=with_process, probe_interval_s=every,
                                    probe_deadline=deadline, log_lines=lines), clock,
                        history_s=history, config=detector_config)
    if on_recorder is not None:
        on_recorder(recorder)
    asyncio.run(recorder.run_virtual(workload.end - start, advance=workload.advance))
    return recorder, engine, start


def fired(recorder, start: float) -> list[tuple[str, float]]:
    """(verdict, seconds after start when it fired) in firing order."""
    return [(f.verdict.name, round(f.verdict.t - start, 2)) for f in recorder.fired]
