"""Kubernetes probe answers for one target, from what servewatch knows about it (pure).

livez fails only when restarting the server is the right move: a sustained stall (health green, no
token moving with work admitted) or a dead engine. Startup, a long prefill, a slow /health or an
overload never fail it, so a kubelet never kills a replica that is loading or merely busy.
readyz follows health: the newest /health probe was 2xx, the newest /metrics scrape succeeded, and
livez passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servewatch.detectors import registry
from servewatch.detectors.verdict import Verdict

LIVENESS_FAILURES = registry.LIVENESS_FAILURES   # declared with the verdicts
assert all(registry.spec(name) for name in LIVENESS_FAILURES), "a liveness verdict is not registered"


@dataclass(frozen=True)
class ProbeAnswer:
    ok: bool
    reason: str          # one line: "ok", or what failed with its numbers

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


def livez(active: Sequence[Verdict]) -> ProbeAnswer:
    for verdict in active:
        if verdict.name in LIVENESS_FAILURES:
            return ProbeAnswer(False, f"{verdict.name}: {verdict.why}")
    return ProbeAnswer(True, "ok")


def readyz(active: Sequence[Verdict], health_ok: bool | None, scrape_ok: bool | None,
           last_error: str | None) -> ProbeAnswer:
    live = livez(active)
    if not live.ok:
        return live
    if not health_ok:
        return ProbeAnswer(False, f"/health not 2xx ({last_error or 'no answer yet'})")
    if not scrape_ok:
        return ProbeAnswer(False, f"/metrics scrape failed ({last_error or 'no answer yet'})")
    return ProbeAnswer(True, "ok")
