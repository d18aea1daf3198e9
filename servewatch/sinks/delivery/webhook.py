"""Webhook delivery: fired and cleared verdicts as plain JSON events, one POST each, through `Delivery`
(`delivery.post`), worded with the Alertmanager alert's labels and annotations."""

from __future__ import annotations

import json

from servewatch.clock import iso8601
from servewatch.sinks.delivery.alertmanager import AlertSink, _annotations, _labels
from servewatch.sinks.delivery.post import Delivery


class WebhookClient:
    """Plain JSON events, one POST each: {"event": "fired"|"cleared", "target", "verdict", "severity",
    "why", "onset", "t", "safe_action"}."""

    def __init__(self, url: str, *, on_give_up=None, **delivery):
        self.delivery = Delivery(url, "webhook", on_give_up=on_give_up, **delivery)

    def sink(self, target: str) -> AlertSink:
        return AlertSink(self, target)

    def fire(self, target: str, verdict) -> None:
        self._send("fired", target, verdict, verdict.t)

    def resolve(self, target: str, cleared) -> None:
        self._send("cleared", target, cleared.verdict, cleared.t)

    def _send(self, event: str, target: str, verdict, t: float) -> None:
        labels = _labels(target, verdict.name)
        body = {"event": event, "target": labels["target"], "verdict": labels["alertname"],
                "severity": labels["severity"], "why": verdict.why, "onset": iso8601(verdict.onset), "t": iso8601(t),
                **({"safe_action": a} if (a := _annotations(verdict).get("safe_action")) else {})}
        self.delivery.submit(json.dumps(body).encode())

    def close(self) -> None:
        self.delivery.close()
