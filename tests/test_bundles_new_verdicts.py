"""Bundles of the new verdicts (a start hung at a stage, an error storm, a crash loop) from the simulator
under the recorder: every bundle verifies (schema, hashes, recomputed verdicts), and the report shows the
startup stage table."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from servewatch.clock import VirtualClock
from servewatch.detectors import DetectorConfig
from servewatch.sim import SimConfig, SimEngine
from servewatch.bundle import report_html
from servewatch.bundle.writer import BundleWriter
from servewatch.bundle.incident import load_incident
from servewatch.bundle.summarize import render_markdown
from servewatch.bundle.verify import verify_bundle
from servewatch.watch import Recorder
from servewatch.sinks.bundle_sink import BundleSink
from servewatch.watch.sim_target import LogLines, sim_sources
from tests.sim_harness import Phase, Workload


def record(tmp_path, phases, config: SimConfig, faults=()):
    clock = VirtualClock()
    lines = LogLines()
    engine = SimEngine(config, clock, log_stream=lines)
    for at, fault in faults:
        engine.inject({**fault, "at": at})
    detector_config = DetectorConfig()
    sink = BundleSink(BundleWriter(tmp_path, clock=clock), "http://127.0.0.1:8000", detector_config)
    recorder = Recorder(sim_sources(engine, clock, 0.5, log_lines=lines), clock, config=detector_config, sinks=[sink])
    sink.recorder = recorder
    workload = Workload(engine, phases)
    asyncio.run(recorder.run_virtual(workload.end - clock.now(), advance=workload.advance))
    return recorder


@pytest.mark.parametrize("config, faults, verdict", [
    (SimConfig(profile="tiny-cpu", startup_seconds=40, faults=("startup-hang@compiling",)), (), "startup_stalled"),
    (SimConfig(), ((20, {"kind": "error-storm", "status": 500}),), "server_errors"),
    (SimConfig(startup_seconds=5, faults=("crash-loop:every=10s",)), (), "crash_loop"),
])
def test_the_new_verdicts_bundles_verify(tmp_path, config, faults, verdict):
    recorder = record(tmp_path, [Phase(170, rate=2)], config, faults)
    bundles = {f.verdict.name: f.bundle for f in recorder.fired}
    assert verdict in bundles and Path(bundles[verdict]).is_dir()
    for path in bundles.values():
        if Path(path).is_dir():              # the writer keeps the newest bundles only
            assert verify_bundle(path).verdicts_checked >= 1
    stored = next(v for v in load_incident(bundles[verdict]).verdicts if v.name == verdict)
    assert "[redacted]" not in stored.why     # its words (rates, stages, causes) survive the bundle's scrubbing


def test_the_report_of_a_hung_start_has_its_stage_table(tmp_path):
    config = SimConfig(profile="tiny-cpu", startup_seconds=40, faults=("startup-hang@compiling",))
    recorder = record(tmp_path, [Phase(150)], config)
    incident = load_incident(next(f.bundle for f in recorder.fired if f.verdict.name == "startup_stalled"))
    markdown = render_markdown(incident)
    assert "## Startup stages" in markdown
    table = markdown.split("## Startup stages", 1)[1]
    assert table.index("| process up |") < table.index("| weights loaded |") < table.index("| compiling |")
    assert "took 0.01 s" in table                           # "Loading weights took 0.01 seconds"
    html = report_html.render_incident_page(incident)
    assert "<h3>Startup stages</h3>" in html and "compiling" in html
