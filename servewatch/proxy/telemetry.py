"""The proxy's metrics (OpenTelemetry GenAI names as Prometheus histograms) and optional traces."""

from __future__ import annotations


class Telemetry:
    def __init__(self, *, otlp_endpoint: str | None = None, sample: float = 0.1):
        self.otlp_endpoint = otlp_endpoint
        self.sample = sample

    def observe(self, ex, rec) -> None:
        pass

    async def serve_metrics(self, proxy, host: str, port: int):
        raise OSError("not built yet")

    def close(self) -> None:
        pass
