"""What a sink is: something that hears a verdict fire and clear.

The recorder calls every sink off the event loop (in a worker thread), one call at a time per sink, so a
slow disk or a slow Alertmanager never delays a probe. A sink that raises is counted and watching goes
on (fail-open). The bundle writer is one implementation; an exporter or an alert client is another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.kinds import SOURCE_KINDS
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class Cleared:
    """A verdict that no longer holds: as it last held, when the detectors stopped supporting it, and
    the newest samples of the sources it rested on (the samples that ended it)."""

    verdict: Verdict
    t: float
    ended_by: tuple[Evidence, ...] = ()

    @property
    def duration_s(self) -> float:
        return max(0.0, self.t - self.verdict.onset)


@runtime_checkable
class Sink(Protocol):
    def on_fired(self, verdict: Verdict, window: Window, verdicts: Sequence[Verdict]) -> str | None:
        """A verdict started; `verdicts` is every verdict of that detection run. Returns the path of an
        artifact written for it (a bundle), if any."""

    def on_cleared(self, cleared: Cleared) -> None:
        """A verdict that fired has stopped holding."""

    def close(self) -> None:
        """Watching ended: flush and release."""


def ended_by(verdict: Verdict, window: Window) -> tuple[Evidence, ...]:
    """For each (source, field) the verdict's evidence named, the newest sample of that source now and
    the field's value there (None where the field cannot be read from it)."""
    from servewatch.detectors.series import engine_key

    out: list[Evidence] = []
    seen: set[tuple[str, str]] = set()
    for pointer in verdict.evidence:
        key = (pointer.source, pointer.field)
        samples = window.of(pointer.source) if pointer.source in SOURCE_KINDS else ()
        if key in seen or not samples:
            continue
        seen.add(key)
        sample = samples[-1]
        targets = [sample]
        engine = verdict.details.get("engine")
        for state in getattr(sample, "engines", ()) or ():
            if engine is None or engine_key(state.labels) == engine:
                targets.insert(0, state)
                break
        out.append(Evidence(pointer.source, sample.t, pointer.field, _field(targets, pointer.field)))
    return tuple(out)


def _field(objects, path: str):
    for obj in objects:
        value = obj
        for part in path.split("."):
            if "[" in part or value is None:
                value = None
                break
            value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
        if value is not None and isinstance(value, (int, float, str, bool)):
            return value
    return None


class CallbackSink:
    """A sink made of plain functions (small integrations and tests)."""

    def __init__(self, on_fired=None, on_cleared=None):
        self._fired, self._cleared = on_fired, on_cleared

    def on_fired(self, verdict, window, verdicts):
        return self._fired(verdict, window, verdicts) if self._fired else None

    def on_cleared(self, cleared) -> None:
        if self._cleared:
            self._cleared(cleared)

    def close(self) -> None:
        pass
