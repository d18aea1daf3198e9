"""What every source is: a kind, a cadence, and `poll()` that returns samples and never raises."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from servewatch.timeline.samples import Sample


class Source(Protocol):
    kind: str          # a source kind (servewatch.timeline.kinds)
    interval: float    # seconds between polls

    async def poll(self) -> Sequence[Sample]:
        """Zero or more samples, time-stamped when the answer arrived. Failures are samples too."""
