"""collective_hang wherever a verdict goes: a bundle with one verifies (verify recomputes it from the stored
"collective" events, and a forged rank fails), the Markdown and HTML reports show it with the ranks' positions,
serve's exporter exports it, `servewatch rules` alerts on it and the dashboard plots it. The events are the ones
the live source puts on the timeline from the real gloo dumps (tests/fixtures/flight_recorder/)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from servewatch.bundle import layout
from servewatch.bundle.incident import load_incident
from servewatch.bundle.report_html import render_incident_page
from servewatch.bundle.summarize import render_markdown
from servewatch.bundle.verify import verify_bundle
from servewatch.bundle.writer import BundleContext, BundleWriter
from servewatch.cli import main
from servewatch.detectors import DetectorConfig, evidence_window, run_detectors
from servewatch.sinks.base import Fired
from servewatch.sinks.export.exporter import FleetExporter
from servewatch.sources import collective_events, flight_recorder as fr
from servewatch.timeline.samples import HealthSample
from servewatch.timeline.window import Window

FIXTURES = Path(__file__).parent / "fixtures" / "flight_recorder"


def _window() -> Window:
    dumps = {r: fr.parse_dump((FIXTURES / f"gloo_behind_rank{r}.json").read_bytes()) for r in (0, 1)}
    analysis = fr.analyse(dumps)
    samples = [HealthSample(float(t), 200, 0.01) for t in range(20)]
    samples += collective_events.from_flight_recorder(analysis, 15.0) + collective_events.positions(analysis, 15.0)
    return Window.from_samples(samples)


def _bundle(tmp_path):
    config = DetectorConfig()
    window = _window()
    verdicts = run_detectors(window, config)
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO())
    path = writer.write(evidence_window(window, config), verdicts,
                        BundleContext(target_url="http://127.0.0.1:8000", detector_config=config,
                                      trigger=verdicts[0] if verdicts else None))
    assert path is not None, writer.last_failure
    return path, verdicts


def test_verify_recomputes_collective_hang_from_the_bundle(tmp_path, capsys):
    path, verdicts = _bundle(tmp_path)
    assert [v.name for v in verdicts] == ["collective_hang"]
    assert verify_bundle(path).verdicts_checked == 1
    assert main(["verify", str(path)]) == 0
    assert capsys.readouterr().out.startswith("OK ")


def test_a_forged_rank_behind_fails_verify(tmp_path, capsys):
    path, _ = _bundle(tmp_path)
    incident = json.loads((path / "incident.json").read_bytes())
    for name in incident["window"]["files"]:
        document = json.loads((path / name).read_bytes())
        for sample in document["samples"]:
            if sample["source"] == "log" and sample["fields"].get("state") == "behind":
                sample["fields"]["rank"] = 0
        (path / name).write_bytes(layout.encode(document))
    hashes = {n: layout.sha256((path / n).read_bytes()) for n in os.listdir(path) if n != "manifest.json"}
    (path / "manifest.json").write_bytes(layout.manifest_bytes(hashes))
    assert main(["verify", str(path)]) == 1
    assert "does not follow from the stored samples" in capsys.readouterr().err


def test_the_reports_show_the_verdict_and_the_ranks_positions(tmp_path):
    path, _ = _bundle(tmp_path)
    incident = load_incident(path)
    markdown = render_markdown(incident)
    html = render_incident_page(incident)
    why = "rank 1 behind in group 0: rank 0 waiting in collective 5 (all_reduce), rank 1 last entered 4"
    for text in (markdown, html):
        assert "collective_hang" in text
        assert "A rank never entered the collective the others wait in." in text     # the runbook's cause
    assert why in markdown and why in html
    assert "| 0 | 0 | 4 | 5 | all_reduce |" in markdown and "| 0 | 1 | 4 | 4 |  |" in markdown
    assert "Collectives (Flight Recorder)" in html


def test_serve_exports_it():
    exporter = FleetExporter()
    exporter.add_target("tp2")
    (verdict,) = run_detectors(_window(), DetectorConfig())
    exporter.sink("tp2").on_fired(Fired(verdict))
    values = {(s.name, s.labels.get("verdict")): s.value
              for family in text_string_to_metric_families(exporter.exposition().decode()) for s in family.samples
              if s.labels.get("target") == "tp2"}
    assert values[("servewatch_verdict_active", "collective_hang")] == 1
    assert values[("servewatch_verdicts_fired_total", "collective_hang")] == 1


def test_rules_alert_on_it_and_the_dashboard_plots_it(tmp_path, capsys):
    slo = Path(__file__).parent / "rules" / "slo.yaml"
    assert main(["rules", "--slo", str(slo), "--out", str(tmp_path / "rules.yaml")]) == 0
    rules = (tmp_path / "rules.yaml").read_text()
    assert "alert: ServewatchCollectiveHang" in rules
    assert 'servewatch_verdict_active{verdict="collective_hang"} == 1' in rules
    assert main(["dashboard", "--out", str(tmp_path / "dash.json")]) == 0
    exprs = [t["expr"] for p in json.loads((tmp_path / "dash.json").read_text())["panels"] for t in p.get("targets", [])]
    assert 'servewatch_verdict_active{verdict="collective_hang"}' in exprs
