"""What both dialects' metrics share: a bulk-observable histogram, label helpers, the recorder hooks,
and rendering through prometheus_client with a private CollectorRegistry.

Histograms and counters are plain numbers here (observing a value n times is one call, which keeps a
256-sequence decode step cheap); each dialect's collector turns them into prometheus_client Metric
families at scrape time, so the text is written by the same library vLLM and SGLang use.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString


class Hist:
    """A classic histogram: per-bucket counts ('le' semantics), sum and count."""

    __slots__ = ("edges", "counts", "sum", "count")

    def __init__(self, edges: Sequence[float]):
        self.edges = tuple(float(e) for e in edges)
        self.counts = [0] * (len(self.edges) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.edges, value)] += n
        self.sum += value * n
        self.count += n

    def cumulative(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for edge, c in zip(self.edges, self.counts):
            running += c
            out.append((_le(edge), running))
        out.append(("+Inf", self.count))
        return out


def _le(edge: float) -> str:
    return floatToGoString(edge)


def sorted_labels(*parts: Mapping[str, str]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for part in parts:
        merged.update(part)
    return {k: merged[k] for k in sorted(merged)}


def counter(name: str, help_text: str, series: Iterable[tuple[Mapping[str, str], float]],
            created: float | None) -> Metric:
    """A counter family; `name` without `_total`. With `created`, a `_created` sample per series."""
    metric = Metric(name, help_text, "counter")
    rows = list(series)
    for labels, value in rows:
        metric.add_sample(name + "_total", dict(labels), float(value))
    if created is not None:
        for labels, _ in rows:
            metric.add_sample(name + "_created", dict(labels), created)
    return metric


def gauge(name: str, help_text: str, series: Iterable[tuple[Mapping[str, str], float]]) -> Metric:
    metric = Metric(name, help_text, "gauge")
    for labels, value in series:
        metric.add_sample(name, dict(labels), float(value))
    return metric


def histogram(name: str, help_text: str, series: Iterable[tuple[Mapping[str, str], Hist]],
              created: float | None, *, sum_first: bool = False) -> Metric:
    """A histogram family. vLLM order: buckets, count, sum, created. SGLang's multiprocess
    order (`sum_first`): sum, buckets, count; labels sorted with `le` in place."""
    metric = Metric(name, help_text, "histogram")
    rows = list(series)
    for labels, h in rows:
        if sum_first:
            metric.add_sample(name + "_sum", dict(labels), h.sum)
        for le, c in h.cumulative():
            metric.add_sample(name + "_bucket", sorted_labels(labels, {"le": le}), float(c))
        metric.add_sample(name + "_count", dict(labels), float(h.count))
        if not sum_first:
            metric.add_sample(name + "_sum", dict(labels), h.sum)
    if created is not None:
        for labels, _ in rows:
            metric.add_sample(name + "_created", dict(labels), created)
    return metric


class _Collector:
    def __init__(self, families):
        self._families = families

    def collect(self):
        return self._families()


def make_registry(collect_engine, *, with_process: bool) -> CollectorRegistry:
    """A private registry: (optionally) the default process/platform/GC collectors, then the
    engine's families produced by `collect_engine()` at each scrape."""
    registry = CollectorRegistry(auto_describe=False)
    if with_process:
        from prometheus_client import gc_collector, platform_collector, process_collector
        gc_collector.GCCollector(registry=registry)
        platform_collector.PlatformCollector(registry=registry)
        process_collector.ProcessCollector(registry=registry)
    registry.register(_Collector(collect_engine))
    return registry


def render(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode("utf-8")


class HttpStats:
    """Per-handler HTTP counts, the subset of prometheus-fastapi-instrumentator vLLM exposes."""

    HIGHR_EDGES = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5,
                   10, 30, 60)
    HANDLER_EDGES = (0.1, 0.5, 1)
    EXCLUDED = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")

    def __init__(self, created: float):
        self.created = created
        self.requests: dict[tuple[str, str, str], int] = {}
        self.highr = Hist(self.HIGHR_EDGES)
        self.by_handler: dict[tuple[str, str], Hist] = {}
        self.sizes: dict[str, list[float]] = {}   # handler -> [req count, req bytes, resp count, resp bytes]

    def observe(self, handler: str, method: str, status: int, seconds: float,
                request_bytes: int = 0, response_bytes: int = 0) -> None:
        if handler in self.EXCLUDED:
            return
        key = (handler, method, f"{status // 100}xx")
        self.requests[key] = self.requests.get(key, 0) + 1
        self.highr.observe(seconds)
        self.by_handler.setdefault((handler, method), Hist(self.HANDLER_EDGES)).observe(seconds)
        size = self.sizes.setdefault(handler, [0, 0.0, 0, 0.0])
        size[0] += 1
        size[1] += request_bytes
        size[2] += 1
        size[3] += response_bytes

    def families(self) -> list[Metric]:
        out = [counter("http_requests", "Total number of requests by method, status and handler.",
                       ((sorted_labels({"handler": h, "method": m, "status": s}), n)
                        for (h, m, s), n in self.requests.items()), self.created)]
        for name, text, idx in (
            ("http_request_size_bytes", "Content length of incoming requests by handler. Only value of header "
             "is respected. Otherwise ignored. No percentile calculated. ", 0),
            ("http_response_size_bytes", "Content length of outgoing responses by handler. Only value of header "
             "is respected. Otherwise ignored. No percentile calculated. ", 2),
        ):
            metric = Metric(name, text, "summary")
            for handler, size in self.sizes.items():
                metric.add_sample(name + "_count", {"handler": handler}, float(size[idx]))
                metric.add_sample(name + "_sum", {"handler": handler}, float(size[idx + 1]))
            for handler in self.sizes:
                metric.add_sample(name + "_created", {"handler": handler}, self.created)
            out.append(metric)
        out.append(histogram("http_request_duration_highr_seconds", "Latency with many buckets but no API "
                             "specific labels. Made for more accurate percentile calculations. ",
                             [({}, self.highr)], self.created))
        out.append(histogram("http_request_duration_seconds", "Latency with only few buckets by handler. Made "
                             "to be only used if aggregation by handler is important. ",
                             ((sorted_labels({"handler": h, "method": m}), hist)
                              for (h, m), hist in self.by_handler.items()), self.created))
        return out
