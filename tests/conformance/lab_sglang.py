"""Reading a real SGLang from outside, for the SGLang conformance cases: its /metrics summed per sample
name (one engine), its two health routes, and stopping its scheduler while requests really run."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
from lab_cli import Watcher, assert_bundles_verify
from lab_observations import log_excerpt
from lab_signals import status_within
from lab_timing import SHUTDOWN_LOG_WAIT_S, check_within
from lab_traffic import Traffic

RUNNING = "sglang:num_running_reqs"
STEPS = "sglang:cuda_graph_passes_total"        # sum over modes = forward passes


@dataclass(frozen=True)
class SglangRaw:
    text: str
    at: float
    values: dict[str, float]      # sample name -> value summed over labels; buckets as name{le=X}

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)


def parse_sglang(text: str) -> dict[str, float]:
    """A plain line scan (cheap while SGLang saturates both cores), summing each sample name over its
    labels; histogram buckets keep their edge. One engine, so the sum is that engine's value."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("sglang:"):
            continue
        head, _, value = line.rpartition(" ")
        name, brace, labels = head.partition("{")
        key = name
        if brace and name.endswith("_bucket"):
            le = labels.split('le="', 1)[1].split('"', 1)[0]
            key = f"{name}{{le={le}}}"
        values[key] = values.get(key, 0.0) + float(value)
    return values


def scrape_sglang(url: str, timeout_s: float = 15.0) -> SglangRaw:
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as response:
        text = response.read(16 * 2**20).decode("utf-8")
    return SglangRaw(text, time.monotonic(), parse_sglang(text))


def probe(url: str, path: str, timeout_s: float = 2.0) -> int | str:
    try:
        with urllib.request.urlopen(url.rstrip("/") + path, timeout=timeout_s) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        return "timeout" if "timed out" in str(exc) else type(exc).__name__


def wait_scrape(url: str, predicate, *, timeout_s: float, every_s: float = 0.25) -> SglangRaw | None:
    """Scrape (bounded) until predicate(raw) holds; the matching scrape, or None at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            raw = scrape_sglang(url)
        except OSError:
            raw = None
        if raw is not None and predicate(raw):
            return raw
        time.sleep(every_s)  # polling a remote server: there is no event to wait on
    return None


def wait_steady_steps(url: str, *, span_s: float = 1.5, timeout_s: float = 90.0) -> SglangRaw | None:
    """Requests running and forward passes counted across span_s seconds (SGLang publishes its
    scheduler gauges and pass counters when it logs a batch, so they move in steps)."""
    first = wait_scrape(url, lambda r: r.get(RUNNING) >= 1 and r.get(STEPS) > 0, timeout_s=timeout_s)
    if first is None:
        return None
    return wait_scrape(url, lambda r: r.at - first.at >= span_s and r.get(RUNNING) >= 1
                       and r.get(STEPS) > first.get(STEPS), timeout_s=timeout_s)


def stop_scheduler_on_running_work(url: str, scheduler: int, tries: int = 3) -> tuple[float, SglangRaw]:
    """SIGSTOP the scheduler while requests run: (stopped_at, scrape while stopped). A stop that finds
    nothing running is undone at once and tried again."""
    for _ in range(tries):
        moving = wait_steady_steps(url)
        assert moving is not None, "the requests never kept SGLang's scheduler stepping"
        os.kill(scheduler, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            assert status_within(scheduler, psutil.STATUS_STOPPED, timeout_s=2.0) == psutil.STATUS_STOPPED
            frozen = scrape_sglang(url)
        except BaseException:
            os.kill(scheduler, signal.SIGCONT)
            raise
        if frozen.get(RUNNING) >= 1:
            return stopped_at, frozen
        os.kill(scheduler, signal.SIGCONT)
    raise AssertionError(f"nothing running at {tries} stops of the scheduler")


@dataclass(frozen=True)
class ProbeAnswer:
    asked: float          # monotonic, when the request was sent
    answered: float       # monotonic, when its answer (or the client timeout) came back
    path: str
    status: int | str     # HTTP status, "timeout" or an error class name


class HealthProbes(threading.Thread):
    """/health and /health_generate, each with a 2 s client timeout, one round a second (bounded):
    what a load balancer or an orchestrator's probe saw meanwhile. Each answer keeps when it was asked
    and when it came back, so a test can tell an answer given while a process was stopped from one a
    frozen VM delivered after the process was resumed."""

    def __init__(self, url: str, seconds: float, timeout_s: float = 2.0):
        super().__init__(name="health-probes", daemon=True)
        self.url, self.seconds, self.timeout_s = url, seconds, timeout_s
        self.points: list[ProbeAnswer] = []
        self.stop = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.is_set() and time.monotonic() - started < self.seconds:
            for path in ("/health", "/health_generate"):
                asked = time.monotonic()
                status = probe(self.url, path, self.timeout_s)
                self.points.append(ProbeAnswer(asked, time.monotonic(), path, status))
            self.stop.wait(1.0)

    def statuses(self, path: str, start: float, end: float) -> list[int | str]:
        """Every answer to probes of `path` asked between start and end."""
        return [p.status for p in self.points if p.path == path and start <= p.asked <= end]

    def answered_inside(self, path: str, start: float, end: float) -> list[int | str]:
        """Answers to probes of `path` both asked after `start` and answered before `end`: what the
        server said wholly inside that stretch."""
        return [p.status for p in self.points if p.path == path and start <= p.asked and p.answered <= end]

    def timeline(self, since: float) -> list[tuple[float, float, str, int | str]]:
        return [(round(p.asked - since, 1), round(p.answered - since, 1), p.path, p.status) for p in self.points]


# -- an engine process SIGKILLed under load: what SGLang did and what servewatch said ------------------

SGLANG_CRASH_LINES = ("crashed with exit code -9", "SIGQUIT received")   # SGLang's own subprocess watchdog
# ...and its crash handling before it kills its own tree (it waits for CUDA coredumps of a scheduler that
# still runs: 60 s after a killed detokenizer, on a CPU-only machine too).
SGLANG_CRASH_HANDLING_LINES = ("seconds for CUDA coredumps", "kill_process_tree called")


def kill_under_load(lab, server, run_dir, pid: int, what: str, *, exit_within_s: float = 60.0) -> dict:
    """SIGKILL `pid` (an SGLang engine process) while six requests run, under `watch --pid --log-file`:
    engine_dead, process_exit with the main process's real exit status (SGLang's own watchdog takes the
    server down within `exit_within_s`), SGLang's own lines, /health meanwhile. Records and prints the
    figures under `what`; asserts what servewatch claims."""
    out = run_dir / "bundles"
    with Watcher(server.url, out, pid=server.pid, interval=0.5, log_file=server.log_path) as watcher:
        traffic = Traffic(server.url, model=str(lab.model.path), n=6, concurrency=6, max_tokens=1500,
                          timeout_s=120).start()
        assert wait_steady_steps(server.url) is not None, "the requests never kept the scheduler stepping"
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        probes = HealthProbes(server.url, seconds=15, timeout_s=1.0)
        probes.start()
        dead = watcher.wait_for("engine_dead", timeout_s=30, after=killed)
        # SGLang's main process is our child: kept a zombie until the watcher saw it go, so its exit
        # status stays readable from outside the way a supervisor's would.
        code = server.wait_exit_keep_zombie(exit_within_s)
        exit_seen = time.monotonic()
        exited = watcher.wait_for("process_exit", timeout_s=30, after=killed)
        server.wait_exit(5)
        probes.stop.set()
        probes.join(timeout=10)
        traffic.wait(60)
        verdicts = watcher.verdicts(after=killed)
        described = watcher.describe()
    log = server.log_text()
    lab.obs.save_text(f"{what}_sigkill.log", log_excerpt(log[-20000:]))
    own_lines = [line.split("] ", 1)[-1][:160] for line in log.splitlines()
                 if any(literal in line for literal in SGLANG_CRASH_LINES + SGLANG_CRASH_HANDLING_LINES)]
    firsts = {name: round(next(v.arrived for v in verdicts if v.name == name) - killed, 2)
              for name in dict.fromkeys(v.name for v in verdicts)}
    record = {"main_exit_code": code, "main_exit_after_s": round(exit_seen - killed, 1), "sglang_lines": own_lines,
              "verdicts_first_after_s": firsts, "probe_timeline": probes.timeline(killed)[:60],
              "request_statuses": sorted(set(map(str, traffic.result.statuses)))}
    lab.obs.record(f"{what}_sigkill", record)
    lab.obs.say(f"{what} SIGKILL: SGLang logged {own_lines}; main process exit code {code} after "
                f"{exit_seen - killed:.1f} s; verdicts {firsts}; /health "
                f"{sorted(set(str(p.status) for p in probes.points))}; requests {sorted(set(map(str, traffic.result.statuses)))}")
    assert code is not None, f"SGLang's main process did not exit after its {what} died"
    assert dead is not None, f"no engine_dead; {described}"
    assert exited is not None, f"no process_exit; {described}"
    # A process gone is seen at the next process sample (two 0.5 s cadences), and where a log is read it
    # waits up to shutdown_log_wait_s (2 s by default) for a shutdown line before it counts as a death
    # (an engine's own death line counts at once): 0.3-0.5 s measured, 1.5 s for SGLang's detokenizer.
    check_within("engine_dead after the kill", dead.arrived - killed, 2 * 0.5 + SHUTDOWN_LOG_WAIT_S, since=killed)
    assert dead.arrived <= exited.arrived
    assert "alive_health_ok_no_progress" not in firsts, f"a dead {what} was called a stall: {firsts}"
    stored = incident_verdict(exited, "process_exit")
    assert stored is not None, "process_exit wrote no bundle"
    real = {"exit_code": code, "exit_signal": None} if code >= 0 else {"exit_code": None, "exit_signal": -code}
    assert {k: stored["details"].get(k) for k in real} == real, (stored["details"], code)
    assert traffic.result.completion_tokens != [1500] * 6, "the killed requests were not cut"
    assert_bundles_verify(out)
    return record


def incident_verdict(line, name: str) -> dict | None:
    """The verdict `name` as stored in the bundle a verdict line points to."""
    bundle = line.data.get("bundle")
    if not bundle:
        return None
    incident = json.loads((Path(bundle) / "incident.json").read_text(encoding="utf-8"))
    return next((v for v in incident["verdicts"] if v["name"] == name), None)
