"""Synthetic timelines for the sinks tests: a healthy start, then a health-green stall."""

from __future__ import annotations

from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.timeline.samples import (
    GpuSample,
    HealthSample,
    LogEvent,
    MetricsSample,
    ProcessMember,
    ProcessSample,
)
from servewatch.timeline.window import Window

T0 = 1_800_000_000.0
ITL_EDGES = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)


def engine(t_index: int, stalled_from: int, *, running: float = 4, model: str = "tiny",
           extra_labels: dict | None = None) -> EngineState:
    progressing = min(t_index, stalled_from)
    tokens = 100.0 * progressing
    itl_count = tokens
    return EngineState(
        dialect="vllm", naming="vllm-0.32",
        labels={"model_name": model, "engine": "0", **(extra_labels or {})},
        running=running, waiting=0.0, waiting_by_reason={"capacity": 0.0, "deferred": 0.0},
        slot_limit=16, kv_usage=0.25, kv_used_tokens=2048.0, kv_total_tokens=8192.0,
        counters=Counters(prompt_tokens=40.0 * progressing, generation_tokens=tokens, preemptions=0.0,
                          steps=float(25 * progressing), finished={"stop": float(progressing), "length": 0.0}),
        histograms={"itl": Histogram(edges=ITL_EDGES,
                                     cumulative=tuple(itl_count * min(1.0, 0.97 + 0.01 * i)
                                                      for i in range(len(ITL_EDGES))),
                                     count=itl_count, sum=itl_count * 0.009)},
    )


def stall_samples(n: int = 40, stalled_from: int = 20, interval: float = 0.5, *, canary: str | None = None):
    """Samples of a server that progresses, then stops at index `stalled_from` with health still 200."""
    samples = []
    pid_title = "VLLM::EngineCore" if canary is None else f"python3 -m vllm --prompt {canary}"
    model = "tiny" if canary is None else f"/models/{canary}/tiny"
    for i in range(n):
        t = T0 + i * interval
        samples.append(HealthSample(t=t, status=200, latency_s=0.002,
                                    error=None if canary is None or i % 7 else f"timeout {canary}"))
        samples.append(MetricsSample(t=t + 0.01, dialect="vllm", naming="vllm-0.32",
                                     engines=(engine(i, stalled_from, model=model),), scrape_s=0.01))
        samples.append(ProcessSample(t=t + 0.02, root_pid=4242, root_create_time=T0 - 100.0, alive=True,
                                     members=(ProcessMember(pid=4242, create_time=T0 - 100.0, role="api",
                                                            title="VLLM::APIServer" if canary is None else pid_title,
                                                            status="sleeping", rss_bytes=10_000_000, threads=12,
                                                            cpu_percent=3.0),
                                              ProcessMember(pid=4243, create_time=T0 - 99.0, role="engine_core",
                                                            title="VLLM::EngineCore", status="running",
                                                            rss_bytes=20_000_000, threads=30, cpu_percent=99.0))))
        if i % 10 == 0:
            samples.append(GpuSample(t=t + 0.03, available=False,
                                     error="unavailable" if canary is None else f"unavailable: {canary}"))
        if i % 5 == 0:
            fields = {"running": 4, "waiting": 0, "kv_pct": 25.0}
            if canary is not None:
                fields.update({"prompt": canary, "reason": canary + " extra", "message": canary})
            samples.append(LogEvent(t=t + 0.04, kind="stats", fields=fields))
    return samples


def stall_window(**kwargs) -> Window:
    return Window.from_samples(stall_samples(**kwargs))


def synthetic_stall_verdicts(window: Window, min_stall_s: float = 3.0) -> list[Verdict]:
    """A stand-in detector: running > 0, health 2xx, generation tokens flat for at least `min_stall_s`."""
    metrics = [m for m in window.metrics if m.engines]
    if not metrics or not window.health or not window.health[-1].ok:
        return []
    last = metrics[-1]
    if not last.engines[0].running:
        return []
    value = last.engines[0].counters.generation_tokens
    onset_sample = last
    for m in reversed(metrics):
        if m.engines[0].counters.generation_tokens != value:
            break
        onset_sample = m
    if last.t - onset_sample.t < min_stall_s:
        return []
    return [Verdict(
        name="alive_health_ok_no_progress", t=last.t, onset=onset_sample.t,
        why=f"health 200, running {last.engines[0].running:g}, generation tokens flat at {value:g} for "
            f"{last.t - onset_sample.t:.1f} s",
        evidence=(Evidence("metrics", onset_sample.t, "counters.generation_tokens", value),
                  Evidence("metrics", last.t, "counters.generation_tokens", value),
                  Evidence("health", window.health[-1].t, "status", window.health[-1].status)),
        details={"stall_s": last.t - onset_sample.t},
    )]


def synthetic_recompute(samples, config):
    return synthetic_stall_verdicts(Window.from_samples(samples), float(config.get("min_stall_s", 3.0)))


class Ticker:
    """One `tick` = one probe of health, metrics and the process tree; counters move by the given deltas."""

    def __init__(self, interval: float = 0.5, t0: float = T0):
        self.interval, self.t = interval, t0
        self.samples: list = []
        self.steps = self.gen = self.prompt = self.preempt = 0.0
        self.itl = [0.0] * len(ITL_EDGES)

    def tick(self, *, health: int | None = 200, health_error: str | None = None, running: float = 4,
             waiting: float = 0, gen: float | None = None, kv: float = 0.25, preempt: float = 0,
             root_pid: int = 4242, root_ct: float = T0 - 100.0, alive: bool = True, itl_fast: float = 0,
             n: int = 1, model: str = "tiny", title: str = "VLLM::EngineCore") -> Ticker:
        for _ in range(n):
            busy = running > 0
            step = 1.0 if busy and gen is None or (gen or 0) > 0 else 0.0
            self.steps += step
            self.gen += (running if busy else 0.0) if gen is None else gen
            self.prompt += 0.0
            self.preempt += preempt
            self.itl = [c + itl_fast for c in self.itl]
            t = self.t
            error = health_error if health is None else (None if 200 <= health < 300 else f"http_{health}")
            self.samples.append(HealthSample(t=t, status=health, latency_s=0.001 if health else None, error=error))
            state = EngineState(
                dialect="vllm", naming="vllm-0.32", labels={"model_name": model, "engine": "0"},
                running=running, waiting=waiting, slot_limit=16, kv_usage=kv,
                counters=Counters(prompt_tokens=self.prompt, generation_tokens=self.gen, preemptions=self.preempt,
                                  steps=self.steps),
                histograms={"itl": Histogram(edges=ITL_EDGES, cumulative=tuple(self.itl), count=self.itl[-1],
                                             sum=self.itl[-1] * 0.005)})
            self.samples.append(MetricsSample(t=t + 0.01, dialect="vllm", naming="vllm-0.32",
                                              engines=(state,), scrape_s=0.01))
            members = (ProcessMember(pid=root_pid, create_time=root_ct, role="api", title="python3",
                                     status="sleeping"),
                       ProcessMember(pid=root_pid + 1, create_time=root_ct + 1, role="engine_core", title=title,
                                     status="running"))
            self.samples.append(ProcessSample(t=t + 0.02, root_pid=root_pid,
                                              root_create_time=root_ct if alive else None,
                                              alive=alive, members=members if alive else (),
                                              error=None if alive else "no_such_process"))
            self.t += self.interval
        return self

    def window(self) -> Window:
        return Window.from_samples(self.samples)


def synthetic_stall_bundle(out):
    """A stall bundle of 24 samples written by the BundleWriter in files of 8 KiB at most (several sample files)."""
    import io

    from servewatch.bundle.writer import BundleContext, BundleWriter

    window = stall_window(n=24, stalled_from=12)
    writer = BundleWriter(out, stderr=io.StringIO(), recompute=synthetic_recompute, max_file_bytes=8192,
                          max_sample_files=8)
    path = writer.write(window, synthetic_stall_verdicts(window),
                        BundleContext(target_url="http://127.0.0.1:8000", detector_config={"min_stall_s": 3.0}))
    assert path is not None
    return path


def scenario(name: str, *, model: str = "tiny", title: str = "VLLM::EngineCore") -> Window:
    """A window on which the shipped detectors conclude `name`."""
    k = Ticker()
    common = {"model": model, "title": title}
    k.tick(n=20, **common)
    if name == "alive_health_ok_no_progress":
        k.tick(n=20, gen=0, **common)
    elif name == "engine_dead":
        k.tick(n=6, health=503, gen=0, **common)
    elif name == "health_loss":
        k.tick(n=6, health=None, health_error="connect", gen=0, running=0, **common)
    elif name == "overload":
        k.tick(n=30, running=16, waiting=9, **common)
    elif name == "kv_pressure":
        k.tick(n=20, kv=0.97, **common)
    elif name == "preemption":
        k.tick(n=6, preempt=2, **common)
    elif name == "target_restarted":
        k.tick(n=6, root_pid=5000, root_ct=T0 + 30, **common)
    elif name == "histogram_blind":
        k.tick(n=20, itl_fast=40, **common)
    else:
        raise ValueError(name)
    return k.window()
