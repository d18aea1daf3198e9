"""Fire once when a condition starts, re-arm when it clears; and say once when its evidence first holds (the
action policy's: how long it must hold, how many probes must agree, `detectors.verdict.VerdictSpec`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from servewatch.detectors import registry, verdict_key
from servewatch.detectors.verdict import Verdict


@dataclass(frozen=True, slots=True)
class Update:
    fired: tuple[Verdict, ...]      # conditions that started with this detection run
    cleared: tuple[Verdict, ...]    # conditions that ended (each as it last held)
    evidenced: tuple[Verdict, ...] = ()   # conditions whose evidence holds for the first time (fired now or before)


class Latch:
    def __init__(self):
        self._active: dict[tuple, Verdict] = {}
        self._evidenced: set[tuple] = set()

    @property
    def active(self) -> tuple[Verdict, ...]:
        return tuple(self._active.values())

    def update(self, verdicts: Iterable[Verdict]) -> Update:
        current: dict[tuple, Verdict] = {}
        fired = []
        for verdict in verdicts:
            key = verdict_key(verdict)
            if key in current:
                continue
            current[key] = verdict
            if key not in self._active:
                fired.append(verdict)
        cleared = tuple(verdict for key, verdict in self._active.items() if key not in current)
        self._active = current
        self._evidenced &= set(current)
        evidenced = []
        for key, verdict in current.items():
            if key not in self._evidenced and registry.evidence_holds(verdict):
                self._evidenced.add(key)
                evidenced.append(verdict)
        return Update(tuple(fired), cleared, tuple(evidenced))
