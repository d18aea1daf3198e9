"""Build the recorder's sources for a target: over HTTP (a real server) or in-process (callables,
e.g. the simulator in virtual time)."""

from __future__ import annotations

from collections.abc import Callable

from servewatch import dialects
from servewatch.clock import Clock
from servewatch.exposition.parser import DEFAULT_MAX_SERIES
from servewatch.sources.gpu import GpuSource, NvmlProbe
from servewatch.sources.health import HealthSource
from servewatch.sources.http import http_transport, in_process_transport
from servewatch.sources.logs import LogTail
from servewatch.sources.metrics import MetricsSource
from servewatch.sources.probe import DEFAULT_DEADLINE_S, HttpProber, ProbeSource
from servewatch.sources.process import ProcessSource
from servewatch.sources.slots import MAX_BYTES as SLOTS_MAX_BYTES, EngineSlotsSource
from servewatch.sources.urls import base_url, metrics_url  # noqa: F401 (imported from here too)


def health_timeout(interval: float) -> float:
    return min(10.0, max(2.0, 4 * interval))


def metrics_timeout(interval: float) -> float:
    """A saturated API server can take seconds to answer a scrape; that must not count as a failure."""
    return min(30.0, max(5.0, 10 * interval))


def gpu_interval(interval: float) -> float:
    return max(5.0, 5 * interval)


def http_sources(transport, url: str, clock: Clock, interval: float, *, process_probe=None, slot_limit=None,
                 log_file: str | None = None, gpu: bool = True, health_path: str = "/health",
                 metrics_path: str = "/metrics", probe_interval_s: float | None = None,
                 probe_deadline: float | None = DEFAULT_DEADLINE_S,
                 say=None) -> list:
    """`transport`: a `transport.contract.Transport` (one keep-alive pool per server for health and metrics);
    `probe_interval_s` (seconds) turns the active probe on; `say` prints its one-line complaints."""
    base = base_url(url)
    metrics = MetricsSource(http_transport(transport, base + metrics_path, timeout_s=metrics_timeout(interval),
                                           max_series=DEFAULT_MAX_SERIES),
                            clock, interval, slot_limit=slot_limit)
    sources = [
        HealthSource(http_transport(transport, base + health_path, timeout_s=health_timeout(interval),
                                    max_bytes=64 * 1024), clock, interval),
        metrics,
        # The slot picture, once a scrape names an engine whose dialect lists its slots (Dialect.slots_path); a
        # listing that may wait on the engine's loop is bounded like /metrics.
        EngineSlotsSource(lambda path: http_transport(transport, base + path, timeout_s=metrics_timeout(interval),
                                                      max_bytes=SLOTS_MAX_BYTES),
                          clock, interval, lambda: dialects.by_name(metrics.dialect)),
    ]
    if probe_interval_s is not None:
        sources.append(ProbeSource(HttpProber(transport, base, clock), clock, probe_interval_s=probe_interval_s,
                                   deadline_s=probe_deadline, check_s=interval, say=say))
    return sources + _local_sources(clock, interval, process_probe, log_file, gpu)


def callable_sources(clock: Clock, interval: float, *, health: Callable[[], object],
                     metrics: Callable[[], object], process_probe=None, slot_limit=None,
                     log_file: str | None = None, gpu: bool = False) -> list:
    """In-process target: `health()` returns a status (or raises when "down"), `metrics()` the text."""
    sources = [HealthSource(in_process_transport(health), clock, interval),
               MetricsSource(in_process_transport(metrics), clock, interval, slot_limit=slot_limit)]
    return sources + _local_sources(clock, interval, process_probe, log_file, gpu)


def _local_sources(clock, interval, process_probe, log_file, gpu) -> list:
    sources = []
    if process_probe is not None:
        sources.append(ProcessSource(process_probe, clock, interval))
    if gpu:
        sources.append(GpuSource(NvmlProbe(), clock, gpu_interval(interval), check_every=min(interval, 1.0)))
    if log_file is not None:
        sources.append(LogTail(log_file, clock, interval))
    return sources
