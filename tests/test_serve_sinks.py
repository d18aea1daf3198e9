"""serve's sinks without a fleet: the exporter keeps one gauge per registered verdict and holds it at 1
while any engine still has the verdict; deliveries never block, say an outage once, give up counted;
the webhook posts one JSON event per fired and cleared verdict."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from servewatch.detectors import registry
from servewatch.detectors.verdict import Verdict
from servewatch.sinks.delivery.webhook import WebhookClient
from servewatch.sinks.base import Cleared, Fired, Sink
from servewatch.sinks.delivery.post import Delivery
from servewatch.sinks.export.exporter import FleetExporter


def value(exporter, name, **labels):
    for family in text_string_to_metric_families(exporter.exposition().decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def test_exporter_gauges_follow_fired_and_cleared_per_engine():
    exporter = FleetExporter()
    exporter.add_target("sim-a")
    sink = exporter.sink("sim-a")
    assert isinstance(sink, Sink)
    for spec in registry.specs():
        assert value(exporter, "servewatch_verdict_active", target="sim-a", verdict=spec.name,
                     severity=spec.severity) == 0
    engine0 = Verdict("kv_pressure", 10.0, 5.0, "why", details={"engine": "engine=0"})
    engine1 = Verdict("kv_pressure", 10.0, 6.0, "why", details={"engine": "engine=1"})
    sink.on_fired(Fired(engine0))
    sink.on_fired(Fired(engine1))
    assert value(exporter, "servewatch_verdict_active", target="sim-a", verdict="kv_pressure", severity="ticket") == 1
    assert value(exporter, "servewatch_verdicts_fired_total", target="sim-a", verdict="kv_pressure") == 2
    sink.on_cleared(Cleared(engine0, 12.0))
    assert value(exporter, "servewatch_verdict_active", target="sim-a", verdict="kv_pressure") == 1
    sink.on_cleared(Cleared(engine1, 13.0))
    assert value(exporter, "servewatch_verdict_active", target="sim-a", verdict="kv_pressure") == 0
    exporter.remove_target("sim-a")
    assert value(exporter, "servewatch_verdict_active", target="sim-a") is None


def test_a_label_value_that_is_not_a_token_is_never_exported():
    exporter = FleetExporter()
    exporter.add_target("/home/user/secret prompt")
    assert value(exporter, "servewatch_target_up", target="other") == 0
    assert b"secret" not in generate_latest(exporter.registry)


def test_an_unreachable_endpoint_never_blocks_is_said_once_and_counted(capsys):
    gave_up = threading.Event()
    delivery = Delivery("http://127.0.0.1:1/api/v2/alerts", "alertmanager", timeout_s=1.0, attempts=2,
                        first_backoff_s=0.01, on_give_up=gave_up.set)
    started = time.monotonic()
    for _ in range(3):
        delivery.submit(b"[]")
    assert time.monotonic() - started < 0.5          # submitting never waits on the network
    assert gave_up.wait(20)
    delivery.close()
    assert delivery.delivered == 0 and delivery.given_up >= 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "alertmanager" in line]
    assert lines == ["servewatch serve: alertmanager http://127.0.0.1:1/api/v2/alerts: unreachable "
                     "(connection refused); retrying with backoff, watching continues"]


def test_webhook_posts_one_event_per_fired_and_cleared():
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = WebhookClient(f"http://127.0.0.1:{server.server_port}/hook")
        sink = client.sink("sim-a")
        verdict = Verdict("engine_dead", 20.0, 18.0, "/health 503 for 2.0 s")
        sink.on_fired(Fired(verdict))
        sink.on_cleared(Cleared(verdict, 25.0))
        client.close()
    finally:
        server.shutdown()
    assert [(e["event"], e["verdict"], e["target"], e["severity"]) for e in received] == [
        ("fired", "engine_dead", "sim-a", "page"), ("cleared", "engine_dead", "sim-a", "page")]
    assert received[0]["why"] == "/health 503 for 2.0 s" and received[0]["safe_action"]


def test_the_cached_verdict_series_are_the_text_prometheus_client_writes_for_the_same_state():
    from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics

    disable_created_metrics()
    exporter = FleetExporter()
    reference = CollectorRegistry()
    active = Gauge("servewatch_verdict_active", "1 while the verdict holds for the target, else 0",
                   ["target", "verdict", "severity"], registry=reference)
    fired = Counter("servewatch_verdicts_fired", "Verdicts that started holding",
                    ["target", "verdict", "severity"], registry=reference)
    for target in ("sim-a", "10.0.0.7:8000"):
        exporter.add_target(target)
        for spec in registry.specs():
            active.labels(target, spec.name, spec.severity).set(0)
            fired.labels(target, spec.name, spec.severity)
    for _ in range(3):                    # fired three times, held now
        exporter.fired("sim-a", "kv_pressure")
        exporter.cleared("sim-a", "kv_pressure")
    exporter.fired("sim-a", "kv_pressure")
    active.labels("sim-a", "kv_pressure", "ticket").set(1)
    fired.labels("sim-a", "kv_pressure", "ticket").inc(4)
    exporter.remove_target("10.0.0.7:8000")
    for spec in registry.specs():
        active.remove("10.0.0.7:8000", spec.name, spec.severity)
        fired.remove("10.0.0.7:8000", spec.name, spec.severity)

    ours = exporter.verdicts.exposition()
    theirs = generate_latest(reference).decode()
    assert sorted(ours.splitlines()) == sorted(theirs.splitlines())
    assert "10.0.0.7" not in ours and 'verdict="kv_pressure"} 4.0' in ours
