"""Reading a real SGLang from outside, for the SGLang conformance cases: its /metrics summed per sample
name (one engine), its two health routes, steady steps, and /health answers over time."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass


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
