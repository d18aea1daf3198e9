"""What a sink is: something that hears a verdict fire and clear — the one path every fired and cleared
verdict takes out of the recorder.

A sink is called off the event loop (in a worker thread), one call at a time per sink, so a slow disk or
a slow Alertmanager never delays a probe; a sink that raises is counted and watching goes on (fail-open).
A sink whose `on_loop` is true is the command's own reaction (printing a line, guard acting on the
server): it is called on the event loop after every other sink has been, so it sees the artifact they
wrote, and what it raises ends the run. The bundle writer is one sink; the exporter and the alert clients
are others (`registry` names the ones `serve` builds from its config).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline import kinds

if TYPE_CHECKING:
    from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class Fired:
    """A verdict that started, and the artifact a sink wrote for it (the incident bundle), if any — None
    for the sinks that run before one is written. Sinks also get the window the verdict was judged on
    and every verdict of that detection run; the recorder's kept record drops both."""

    verdict: Verdict
    bundle: str | None = None
    window: Window | None = field(default=None, compare=False, repr=False)
    verdicts: tuple[Verdict, ...] = field(default=(), compare=False, repr=False)


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
    def on_fired(self, fired: Fired) -> str | None:
        """A verdict started. Returns the path of an artifact written for it (a bundle), if any."""

    def on_cleared(self, cleared: Cleared) -> None:
        """A verdict that fired has stopped holding."""

    def close(self) -> None:
        """Watching ended: flush and release."""


def on_loop(sink: Sink) -> bool:
    """Whether the recorder calls `sink` on the event loop, after the others (see the module's words)."""
    return bool(getattr(sink, "on_loop", False))


def ended_by(verdict: Verdict, window: Window) -> tuple[Evidence, ...]:
    """For each (source, field) the verdict's evidence named, the newest sample of that source now and
    the field's value there (None where the field cannot be read from it)."""
    from servewatch.detectors.series import engine_key

    out: list[Evidence] = []
    seen: set[tuple[str, str]] = set()
    for pointer in verdict.evidence:
        key = (pointer.source, pointer.field)
        samples = window.of(pointer.source) if kinds.get(pointer.source) is not None else ()
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
    """A sink made of plain functions (small integrations, the commands' printing, tests); `on_loop=True`
    for a reaction that belongs on the event loop."""

    def __init__(self, on_fired=None, on_cleared=None, *, on_loop: bool = False):
        self._fired, self._cleared = on_fired, on_cleared
        self.on_loop = on_loop

    def on_fired(self, fired: Fired) -> str | None:
        return self._fired(fired) if self._fired else None

    def on_cleared(self, cleared: Cleared) -> None:
        if self._cleared:
            self._cleared(cleared)

    def close(self) -> None:
        pass
