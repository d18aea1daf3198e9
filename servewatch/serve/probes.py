"""Kubernetes probe answers for one target, from what servewatch knows about it (pure).

Both follow the action policy declared with the verdicts (each spec's action class and the evidence it waits
for, `servewatch.detectors.registry`):
- livez fails while a verdict of the `restart` class holds with its evidence (a sustained stall, a dead engine,
  a rank stalled with a probe unanswered, an idle wedge confirmed by two probes in a row): only a restart
  helps, and a kubelet on livez restarts the pod. Startup, a long prefill, a slow /health or an overload never
  fail it, so a kubelet never kills a replica that is loading or merely busy.
- node drain (`/node/drain`, for node-problem-detector): fails while any target on this serve holds a `drain`
  verdict with its evidence — the node, not the replica, is at fault.
- readyz fails as livez does, and also while a `drain` verdict holds (the hardware under the engine is at
  fault: take it out of the Service, do not restart it onto the same GPU), when the newest /health probe was
  not 2xx, or when the newest /metrics scrape failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servewatch.detectors import registry
from servewatch.detectors.verdict import DRAIN, RESTART, Verdict
from servewatch.kinds import failure_words


@dataclass(frozen=True)
class EndpointAnswer:
    ok: bool
    reason: str          # one line: "ok", or what failed with its numbers

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


def _failing(active: Sequence[Verdict], *classes: str, instance: str | None = None) -> EndpointAnswer | None:
    for verdict in active:
        if registry.acts(verdict, *classes) and registry.may_act_on(verdict.name, verdict.details, instance):
            return EndpointAnswer(False, f"{verdict.name} ({registry.action_for(verdict)}): {verdict.why}")
    return None


def livez(active: Sequence[Verdict], instance: str | None = None) -> EndpointAnswer:
    """`instance`: a deployment's instance this livez is of (None: a single target): only verdicts about its own
    side fail it (registry.may_act_on), so a dead prefill never fails decode's livez."""
    return _failing(active, RESTART, instance=instance) or EndpointAnswer(True, "ok")


def readyz(active: Sequence[Verdict], health_ok: bool | None, scrape_ok: bool | None,
           last_error: str | None, instance: str | None = None) -> EndpointAnswer:
    failing = _failing(active, RESTART, DRAIN, instance=instance)
    if failing is not None:
        return failing
    said = failure_words(last_error) if last_error else "no answer yet"    # "dns" -> "host name not resolved"
    if not health_ok:
        return EndpointAnswer(False, f"/health not 2xx ({said})")
    if not scrape_ok:
        return EndpointAnswer(False, f"/metrics scrape failed ({said})")
    return EndpointAnswer(True, "ok")


def newest_answers(window) -> tuple[bool | None, bool | None, str | None]:
    """(health_ok, scrape_ok, last_error) of one instance's window: its newest /health and /metrics answers, as
    readyz takes them for a target."""
    health = window.health[-1] if window.health else None
    scrape = window.metrics[-1] if window.metrics else None
    error = next((s.error for s in (health, scrape) if s is not None and s.error), None)
    if error is None and health is not None and not health.ok:
        error = f"HTTP {health.status}"
    return (health.ok if health else None, scrape.error is None if scrape else None, error)


def deployment_readyz(instances: Sequence[tuple[str, str, EndpointAnswer]]) -> EndpointAnswer:
    """A deployment's readiness from each instance's (name, role, readyz answer): not ready while no prefill is
    ready (decode alone would compute every prompt, or wait for KV that never comes) or no decode is ready."""
    for role in ("prefill", "decode"):
        mine = [(name, answer) for name, r, answer in instances if r == role]
        if not any(answer.ok for _, answer in mine):
            said = "; ".join(f"{name}: {answer.reason}" for name, answer in mine) or "none in the deployment"
            return EndpointAnswer(False, f"no {role} instance is ready ({said})")
    return EndpointAnswer(True, "ok")


def node_drain(active_by_target: Mapping[str, Sequence[Verdict]]) -> EndpointAnswer:
    """Whether this node should be drained: a `drain` verdict held with its evidence on any target here (one line
    per target: "NAME: verdict (drain): why")."""
    lines = [f"{name}: {failing.reason}" for name, active in sorted(active_by_target.items())
             if (failing := _failing(active, DRAIN)) is not None]
    return EndpointAnswer(not lines, "; ".join(lines) or "ok")
