"""A made-up source kind's sample, as a built-in kind's is at the end of servewatch/timeline/samples.py: the
dataclass, and the codec of each field a bundle stores. tests/test_seam_counts.py adds the kind with the one
registration line (`kinds.register(NAME, QueueSample, fields=FIELDS)`) and finds it in a window, the ring, a written
and verified bundle, the bundle's schemas and an evidence pointer; its source is tests/toy_queue_source.py."""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.timeline import kinds

NAME = "queue"


@dataclass(frozen=True, slots=True)
class QueueSample:
    t: float
    depth: int                     # requests queued in front of the server
    oldest_s: float | None         # age of the oldest (None with none queued)
    shedding: bool = False
    error: str | None = None


FIELDS = {"depth": kinds.COUNT, "oldest_s": kinds.NUMBER, "shedding": kinds.FLAG, "error": kinds.ERROR}
