"""Hand-built timelines for detector and recorder tests: one `tick` = one probe of each source."""

from __future__ import annotations

from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.timeline.samples import HealthSample, LogEvent, MetricsSample, ProcessMember, ProcessSample
from servewatch.timeline.window import Window

T0 = 1_800_000_000.0
ROOT_PID, ROOT_CT = 4242, T0 - 100.0
ENGINE = ProcessMember(pid=4243, create_time=T0 - 99.0, role="engine_core", title="VLLM::EngineCore", status="running")
WORKER = ProcessMember(pid=4244, create_time=T0 - 98.0, role="worker", title="VLLM::Worker_TP0", status="sleeping")
API = ProcessMember(pid=ROOT_PID, create_time=ROOT_CT, role="api", title="python3", status="sleeping")


class Timeline:
    def __init__(self, interval: float = 0.5, t0: float = T0, dialect: str = "vllm", with_process: bool = True):
        self.interval = interval
        self.t = t0
        self.dialect = dialect
        self.with_process = with_process
        self.samples: list = []
        self.steps = self.gen = self.prompt = self.preempt = 0.0
        self.itl = [0.0] * 4   # cumulative counts for edges (0.01, 0.025, 0.05, 0.1)

    def tick(self, *, health: int | None = 200, health_error: str | None = None, running: float = 4,
             waiting: float = 0, steps: float | None = None, gen: float | None = None, prompt: float = 0,
             preempt: float = 0, kv: float | None = 0.3, slot_limit: int | None = None, by_reason=None,
             metrics_error: str | None = None, members=(API, ENGINE, WORKER), alive: bool = True,
             root_ct: float = ROOT_CT, exit_code: int | None = None, itl_fast: float = 0, itl_slow: float = 0,
             itl_fast_s: float = 0.005, reset: bool = False) -> Timeline:
        """One probe round. Counters move by the given deltas; by default a busy engine steps once and
        makes `running` tokens per tick, an idle one does nothing."""
        busy = running > 0
        if reset:
            self.steps = self.gen = self.prompt = self.preempt = 0.0
        self.steps += (1 if busy else 0) if steps is None else steps
        self.gen += (running if busy else 0) if gen is None else gen
        self.prompt += prompt
        self.preempt += preempt
        self.itl = [c + itl_fast + (itl_slow if i > 0 else 0) for i, c in enumerate(self.itl)]
        t = self.t
        status_error = health_error if health is None else (None if 200 <= health < 300 else f"http_{health}")
        self.samples.append(HealthSample(t=t, status=health, latency_s=0.001 if health else None, error=status_error))
        if metrics_error:
            self.samples.append(MetricsSample(t=t + 0.01, dialect=None, naming=None, error=metrics_error))
        else:
            state = EngineState(
                dialect=self.dialect, naming=f"{self.dialect}-test", labels={"model_name": "m", "engine": "0"},
                running=running, waiting=waiting, waiting_by_reason=dict(by_reason or {}), slot_limit=slot_limit,
                kv_usage=kv, counters=Counters(prompt_tokens=self.prompt, generation_tokens=self.gen,
                                               preemptions=self.preempt, steps=self.steps),
                histograms={"itl": Histogram(edges=(0.01, 0.025, 0.05, 0.1), cumulative=tuple(self.itl),
                                             count=self.itl[-1],
                                             sum=self.itl[0] * itl_fast_s + (self.itl[-1] - self.itl[0]) * 0.04)})
            self.samples.append(MetricsSample(t=t + 0.01, dialect=self.dialect, naming=f"{self.dialect}-test",
                                              engines=(state,), scrape_s=0.01))
        if self.with_process:
            self.samples.append(ProcessSample(t=t + 0.02, root_pid=ROOT_PID,
                                              root_create_time=root_ct if alive else None,
                                              alive=alive, members=tuple(members) if alive else (),
                                              exit_code=exit_code, error=None if alive else "no_such_process"))
        self.t += self.interval
        return self

    def ticks(self, n: int, **kwargs) -> Timeline:
        for _ in range(n):
            self.tick(**kwargs)
        return self

    def log(self, kind: str, **fields) -> Timeline:
        self.samples.append(LogEvent(t=self.t, kind=kind, fields=fields))
        return self

    def window(self) -> Window:
        return Window.from_samples(self.samples)
