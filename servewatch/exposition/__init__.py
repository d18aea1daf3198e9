"""Prometheus text 0.0.4 / OpenMetrics text parsing."""

from servewatch.exposition.model import Family, Sample

__all__ = ["Family", "Sample"]
