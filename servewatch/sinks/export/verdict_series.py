"""`servewatch_verdict_active` and `servewatch_verdicts_fired_total` for a fleet, as exposition text kept
per target and rewritten only when that target's verdicts change.

Every target carries one series of each per registered verdict (held at 0 until it fires, so `increase()`
sees the first firing): ~30 lines a target that almost never change. Formatted by `prometheus_client` at
each scrape of serve's /metrics they took 90 ms for 300 targets; here a scrape joins cached strings.
The text is what `prometheus_client` writes for the same Gauge and Counter (tests compare the two).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

ACTIVE = "servewatch_verdict_active"
FIRED = "servewatch_verdicts_fired_total"
ACTIVE_HELP = "1 while the verdict holds for the target, else 0"
FIRED_HELP = "Verdicts that started holding"


@dataclass
class _Target:
    active: dict[str, int] = field(default_factory=dict)        # verdict -> 0/1
    fired: dict[str, float] = field(default_factory=dict)       # verdict -> times fired
    text: tuple[str, str] | None = None                         # (active lines, fired lines), when current


class VerdictSeries:
    def __init__(self, severity_of):
        """`severity_of(verdict)` is the verdict's severity label. Label values must already be safe
        tokens (`exporter.label`): they are written as they are."""
        self.severity_of = severity_of
        self._targets: dict[str, _Target] = {}
        self._lock = threading.Lock()

    def add_target(self, target: str, verdicts) -> None:
        with self._lock:
            t = self._targets.setdefault(target, _Target())
            for name in verdicts:
                t.active.setdefault(name, 0)
                t.fired.setdefault(name, 0.0)
            t.text = None

    def remove_target(self, target: str) -> None:
        with self._lock:
            self._targets.pop(target, None)

    def set_active(self, target: str, verdict: str, active: bool, *, fired: bool = False) -> None:
        with self._lock:
            t = self._targets.setdefault(target, _Target())
            t.active[verdict] = 1 if active else 0
            t.fired.setdefault(verdict, 0.0)
            if fired:
                t.fired[verdict] += 1
            t.text = None

    def value(self, target: str, verdict: str) -> tuple[int, float] | None:
        with self._lock:
            t = self._targets.get(target)
            return None if t is None or verdict not in t.active else (t.active[verdict], t.fired[verdict])

    def exposition(self) -> str:
        with self._lock:
            blocks = [t.text or self._render(name, t) for name, t in self._targets.items()]
        return (f"# HELP {ACTIVE} {ACTIVE_HELP}\n# TYPE {ACTIVE} gauge\n" + "".join(b[0] for b in blocks)
                + f"# HELP {FIRED} {FIRED_HELP}\n# TYPE {FIRED} counter\n" + "".join(b[1] for b in blocks))

    def _render(self, target: str, t: _Target) -> tuple[str, str]:
        def labels(verdict: str) -> str:
            return f'{{severity="{self.severity_of(verdict)}",target="{target}",verdict="{verdict}"}}'

        t.text = ("".join(f"{ACTIVE}{labels(v)} {float(a)!r}\n" for v, a in t.active.items()),
                  "".join(f"{FIRED}{labels(v)} {float(n)!r}\n" for v, n in t.fired.items()))
        return t.text
