"""Reading a real SGLang from outside, for the SGLang conformance cases: its /metrics summed per sample
name (one engine)."""

from __future__ import annotations

import time
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
