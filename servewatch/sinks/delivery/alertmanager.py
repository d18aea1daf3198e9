"""Alertmanager delivery: firing and resolved verdicts posted to an Alertmanager (v2 API); `AlertSink` is the
per-target sink of any delivery client (the webhook's too, `delivery.webhook`). Posts go through `Delivery`
(`delivery.post`: a background thread, retried with backoff, never blocking the recorder).

An Alertmanager alert carries labels alertname (the verdict), target and severity (from the verdict
registry), and annotations: summary (the verdict's one-line meaning), description (the verdict's why
line, with its numbers) and safe_action (the runbook's safe action). Firing alerts are re-sent every
minute with endsAt four minutes ahead, as Prometheus does, so an Alertmanager restart loses nothing and
an abandoned alert resolves by itself.
"""

from __future__ import annotations

import json
import threading
import time

from servewatch.detectors import registry
from servewatch.sinks.delivery.post import Delivery
from servewatch.bundle.serialize import safe_token
from servewatch.clock import iso8601

RESEND_S = 60.0


def _labels(target: str, verdict) -> dict:
    """An alert's labels for a firing (its own action class, registry.action_for) or a verdict name (its spec's)."""
    name = verdict if isinstance(verdict, str) else verdict.name
    spec = registry.spec(name)
    action = registry.action_of(name) if isinstance(verdict, str) else registry.action_for(verdict)
    return {"alertname": safe_token(name, "other"), "target": safe_token(target, "other"),
            "severity": spec.severity if spec else "info", "action": action}


def _annotations(verdict) -> dict:
    spec = registry.spec(verdict.name)
    out = {"description": verdict.why}
    if spec is not None:
        out["summary"] = spec.summary
        out["safe_action"] = spec.runbook.safe_action
    return out


class AlertmanagerClient:
    """One per process; `sink(target)` gives each target's sink."""

    def __init__(self, url: str, *, resend_s: float = RESEND_S, on_give_up=None, **delivery):
        self._lock = threading.Lock()
        self._firing: dict[tuple[str, str], tuple[dict, int]] = {}    # (target, verdict) -> (alert, holders)
        self.resend_s = resend_s
        self.delivery = Delivery(url.rstrip("/") + "/api/v2/alerts", "alertmanager", periodic=self._resend,
                                 period_s=resend_s, on_give_up=on_give_up, **delivery)

    def sink(self, target: str) -> "AlertSink":
        return AlertSink(self, target)

    def fire(self, target: str, verdict) -> None:
        alert = {"labels": _labels(target, verdict), "annotations": _annotations(verdict),
                 "startsAt": iso8601(verdict.onset), "endsAt": iso8601(time.time() + 4 * self.resend_s)}
        key = (target, verdict.name)
        with self._lock:
            _, holders = self._firing.get(key, (None, 0))
            self._firing[key] = (alert, holders + 1)
            if holders:
                return          # the same alert already fires (the verdict holds on another engine)
        self.delivery.submit(json.dumps([alert]).encode())

    def resolve(self, target: str, cleared) -> None:
        key = (target, cleared.verdict.name)
        with self._lock:
            alert, holders = self._firing.get(key, (None, 0))
            if holders > 1:
                self._firing[key] = (alert, holders - 1)
                return
            self._firing.pop(key, None)
        resolved = {"labels": _labels(target, cleared.verdict), "annotations": _annotations(cleared.verdict),
                    "startsAt": iso8601(cleared.verdict.onset), "endsAt": iso8601(max(cleared.t, cleared.verdict.onset))}
        self.delivery.submit(json.dumps([resolved]).encode())

    def _resend(self) -> list[bytes]:
        ends = iso8601(time.time() + 4 * self.resend_s)
        with self._lock:
            alerts = [{**alert, "endsAt": ends} for alert, _ in self._firing.values()]
        return [json.dumps(alerts).encode()] if alerts else []

    def close(self) -> None:
        self.delivery.close()


class AlertSink:
    def __init__(self, client, target: str):
        self.client, self.target = client, target

    def on_fired(self, fired):
        self.client.fire(self.target, fired.verdict)
        return None

    def on_cleared(self, cleared) -> None:
        self.client.resolve(self.target, cleared)

    def close(self) -> None:
        """The client is shared by the fleet and closed once, by its owner."""
