"""The demo in real time: `servewatch sim` as a real server process on loopback, the load generator
driving it over HTTP, the recorder watching health, /metrics, the process tree and the log — exactly
what a user would run against vLLM — and faults injected through the simulator's admin endpoint."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

from servewatch.clock import RealClock
from servewatch.demo.plan import CLEARED_BY_SERVEWATCH, PROBE_DEADLINE_S, PROBE_INTERVAL_S, REALTIME_SLOTS, Phase
from servewatch.demo.result import PhaseResult
from servewatch.demo.serverside import blindness_findings, health_answers
from servewatch.errors import ServewatchError
from servewatch.sinks.base import CallbackSink, Fired
from servewatch.transport.contract import Failed, HttpRequest
from servewatch.watch.recorder import Recorder

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
WAIT_TICK_S = 0.1
PHASE_GAP_S = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sim(dialect: str, seed: int, log_file: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "servewatch", "sim", "--host", "127.0.0.1", "--port", str(port),
           "--dialect", dialect, "--seed", str(seed), "--log-file", str(log_file), "--log-stats-interval", "2",
           "--max-num-seqs", str(REALTIME_SLOTS)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


async def _get_status(transport, url: str, timeout_s: float = 2.0) -> int | None:
    got = await transport.send(HttpRequest("GET", url, timeout_s=timeout_s, max_bytes=64 * 1024))
    return got.status


async def wait_ready(transport, url: str, proc: subprocess.Popen) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    while loop.time() < deadline:
        if proc.poll() is not None:
            raise ServewatchError(f"the built-in engine exited during startup (code {proc.returncode})")
        if await _get_status(transport, url + "/health") == 200:
            return
        await asyncio.sleep(WAIT_TICK_S)
    raise ServewatchError(f"the built-in engine did not become ready within {READY_TIMEOUT_S:.0f} s")


async def inject(transport, url: str, fault: dict) -> None:
    got = await transport.send(HttpRequest("POST", url + "/_sim/fault", timeout_s=5.0, max_bytes=64 * 1024,
                                           body=json.dumps(fault).encode()))
    failed = got if isinstance(got, Failed) else got.failure()
    if failed is not None:
        raise ServewatchError(f"fault injection {fault['kind']}: {failed.detail}")


class _Tracker:
    def __init__(self):
        self.current: PhaseResult | None = None

    def on_fired(self, fired: Fired) -> None:
        if self.current is not None:
            self.current.fired.append(fired)


def run_realtime(plan: list[Phase], *, dialect: str, seed: int, interval: float, sink, detector_config,
                 listeners=(), on_phase=lambda p: None, log_dir: Path) -> list[PhaseResult]:
    return asyncio.run(_run(plan, dialect, seed, interval, sink, detector_config, listeners, on_phase,
                            Path(log_dir)))


async def _run(plan, dialect, seed, interval, sink, detector_config, listeners, on_phase, log_dir):
    from servewatch.sources.process import PsutilProbe
    from servewatch.transport.contract import Http1Transport
    from servewatch.watch.targets import http_sources

    log_file = log_dir / "engine.log"
    log_file.write_text("")
    proc, url = start_sim(dialect, seed, log_file)
    tracker = _Tracker()
    results: list[PhaseResult] = []
    clock = RealClock()
    try:
        async with Http1Transport() as transport:
            await wait_ready(transport, url, proc)
            probe = PsutilProbe(proc.pid, exit_status=proc.poll)
            sources = http_sources(transport, url, clock, interval, process_probe=probe,
                                   slot_limit=probe.slot_limit() or REALTIME_SLOTS, log_file=str(log_file),
                                   probe_interval_s=PROBE_INTERVAL_S, probe_deadline=PROBE_DEADLINE_S)
            recorder = Recorder(sources, clock, history_s=1800.0, config=detector_config,
                                sinks=[*([sink] if sink is not None else []),
                                       *(CallbackSink(on_fired, on_loop=True)
                                         for on_fired in [tracker.on_fired, *listeners])],
                                tool="demo")
            if sink is not None:
                sink.target, sink.recorder = url, recorder
            watching = asyncio.create_task(recorder.run())
            await asyncio.sleep(PHASE_GAP_S)
            try:
                for i, phase in enumerate(plan):
                    result = PhaseResult(phase=phase, start=clock.now())
                    tracker.current = result
                    results.append(result)
                    on_phase(result)
                    await _phase(transport, url, phase, result, seed + i, interval, recorder, clock)
                    result.end = clock.now()
                    window = recorder.ring.window()
                    metrics = [m for m in window.metrics if result.start <= m.t <= result.end]
                    result.summary["server_blindness"] = blindness_findings(metrics)
                    since = result.fault_at if result.fault_at is not None else result.start
                    result.health = health_answers([h for h in window.health if since <= h.t <= result.end])
                    if proc.poll() is not None:
                        break
                    await asyncio.sleep(PHASE_GAP_S)
            finally:
                recorder.stopped = True
                await asyncio.gather(watching, return_exceptions=True)
    finally:
        _stop(proc)
    return results


async def _phase(transport, url, phase: Phase, result: PhaseResult, seed: int, interval: float, recorder, clock):
    from servewatch.load.runner import run_load_async
    from servewatch.load.scenarios import PRESETS, LoadConfig

    config = LoadConfig(url=url, scenario=phase.name if phase.name in PRESETS else "custom", rate=phase.rate,
                        duration_s=phase.duration_s, prompt_tokens=phase.prompt_tokens,
                        output_tokens=phase.output_tokens, metrics_interval_s=interval, seed=seed,
                        prompt_pool=1 if phase.shared_prompt else 256, request_timeout_s=120.0,
                        idle_timeout_s=60.0, connect_timeout_s=2.0)
    load = asyncio.create_task(run_load_async(config))
    if phase.is_fault:
        await asyncio.sleep(phase.fault_after_s)
        result.fault_at = clock.now()
        await inject(transport, url, phase.fault)
        deadline = result.fault_at + phase.wait_for_verdicts_s
        while clock.now() < deadline and not _all_fired(result):
            await asyncio.sleep(WAIT_TICK_S)
        if phase.fault.get("kind") in CLEARED_BY_SERVEWATCH:
            await inject(transport, url, {"kind": "clear"})
            result.cleared_at = clock.now()
    outcome = await load
    result.records = outcome.records
    result.summary = dict(outcome.summary)


def _all_fired(result: PhaseResult) -> bool:
    names = {f.verdict.name for f in result.fired}
    return all(name in names for name in result.phase.expect)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
