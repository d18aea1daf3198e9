"""Read a raw vLLM scrape with prometheus_client's own parser: an independent reference for servewatch."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Raw:
    text: str
    at: float                     # time.monotonic() when the answer arrived
    values: dict[str, float]      # sample name (labels dropped: one engine) -> value

    def get(self, name: str) -> float:
        return self.values[name]


def parse_raw(text: str) -> dict[str, float]:
    """Sample name -> value for the single engine; histogram buckets keyed as name{le=X}."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("vllm:") or sample.name.endswith("_created"):
                continue
            key = sample.name
            if "le" in sample.labels:
                key = f"{sample.name}{{le={sample.labels['le']}}}"
            elif "reason" in sample.labels:
                key = f"{sample.name}{{reason={sample.labels['reason']}}}"
            elif "finished_reason" in sample.labels:
                key = f"{sample.name}{{finished_reason={sample.labels['finished_reason']}}}"
            values[key] = sample.value
    return values


_KEY_LABEL = re.compile(r'\b(le|reason|finished_reason)="([^"]*)"')


def parse_light(text: str) -> dict[str, float]:
    """The same keys as parse_raw, by a plain line scan: cheap enough to run while vLLM saturates the
    CPU (this process then gets a sliver of it; prometheus_client's parser took seconds there)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        head, _, value = line.rpartition(" ")
        name, brace, labels = head.partition("{")
        if name.endswith("_created"):
            continue
        match = _KEY_LABEL.search(labels) if brace else None
        key = f"{name}{{{match[1]}={match[2]}}}" if match else name
        values[key] = float(value)
    return values


def scrape(url: str, timeout_s: float = 15.0, *, reference: bool = False) -> Raw:
    """One /metrics body; `reference=True` reads it with prometheus_client (the independent check)."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as response:
        text = response.read(16 * 2**20).decode("utf-8")
    at = time.monotonic()
    return Raw(text, at, parse_raw(text) if reference else parse_light(text))


def health(url: str, timeout_s: float = 2.0) -> int | str:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout_s) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        return type(exc).__name__


def first_bucket_fraction(new: Raw, old: Raw, family: str, le: str) -> tuple[float, float]:
    """(observations in the window, fraction of them in the first bucket) from two scrapes."""
    count = new.get(f"{family}_count") - old.get(f"{family}_count")
    first = new.get(f"{family}_bucket{{le={le}}}") - old.get(f"{family}_bucket{{le={le}}}")
    return count, (first / count if count else 0.0)


class WaitLog:
    """What the last bounded wait saw, for assertion messages."""
    last: Raw | None = None
    errors: list[str] = []
    scrapes: int = 0


def wait_until(url: str, predicate, *, timeout_s: float, every_s: float = 0.5) -> Raw | None:
    """Scrape (bounded) until predicate(raw) holds; the matching scrape, or None at the deadline."""
    deadline = time.monotonic() + timeout_s
    WaitLog.errors, WaitLog.scrapes, WaitLog.last = [], 0, None
    while time.monotonic() < deadline:
        started = time.monotonic()
        try:
            raw = scrape(url)
        except OSError as exc:
            WaitLog.errors.append(f"{type(exc).__name__} after {time.monotonic() - started:.1f} s")
            raw = None
        WaitLog.scrapes += 1
        if raw is not None:
            WaitLog.last = raw
            if predicate(raw):
                return raw
        time.sleep(every_s)  # polling a remote server: there is no event to wait on
    return None
