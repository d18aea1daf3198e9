"""A third engine whose identity labels are its own (`replica`, not vLLM's or SGLang's): two replicas of it
stay two engines in a bundle, in verify's recomputation and in serve's exported verdicts, because the
bundle's label allow-list and its schemas derive from every registered dialect's identity labels."""

from __future__ import annotations

import io
import json

import pytest

from servewatch import dialects
from servewatch.detectors import DetectorConfig, evidence_window, run_detectors
from servewatch.bundle.writer import BundleContext, BundleWriter
from servewatch.sinks.base import Fired
from servewatch.sinks.export.exporter import FleetExporter
from servewatch.bundle.verify import verify_bundle
from servewatch.timeline.samples import HealthSample, MetricsSample
from servewatch.timeline.window import Window
from tests.toy_dialect import ToyDialect

STALL = "alive_health_ok_no_progress"


@pytest.fixture
def toy():
    dialects.register(ToyDialect())
    yield
    dialects.unregister("toy")


def scrape(tokens_a: int, tokens_b: int) -> str:
    lines = ["# TYPE toy_busy_requests gauge", "# TYPE toy_tokens_out counter", "# TYPE toy_steps counter"]
    for replica, tokens in (("a", tokens_a), ("b", tokens_b)):
        lines += [f'toy_busy_requests{{replica="{replica}"}} 3',
                  f'toy_tokens_out_total{{replica="{replica}"}} {tokens}',
                  f'toy_steps_total{{replica="{replica}"}} {tokens // 4}']
    return "\n".join(lines) + "\n"


def window(stalled: str) -> Window:
    """60 s at 1 s: both replicas move for 20 s, then `stalled` ("a", "b" or "ab") stops."""
    samples = []
    for i in range(60):
        moved = min(i, 20)
        tokens = {r: (moved if r in stalled else i) * 40 for r in "ab"}
        read = dialects.read_scrape(scrape(tokens["a"], tokens["b"]))
        samples += [HealthSample(1000.0 + i, 200, 0.01),
                    MetricsSample(1000.0 + i + 0.1, read.dialect, read.naming, tuple(read.engines), 0.01)]
    return Window.from_samples(samples)


def record(tmp_path, stalled: str):
    config = DetectorConfig()
    w = window(stalled)
    verdicts = [v for v in run_detectors(w, config) if v.name == STALL]
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO())
    path = writer.write(evidence_window(w, config), verdicts,
                        BundleContext(target_url="http://127.0.0.1:9/", detector_config=config, trigger=verdicts[0]))
    assert path is not None, writer.last_failure
    return path, verdicts


def test_identity_labels_of_every_registered_dialect_are_the_bundles(toy):
    assert "replica" in dialects.identity_labels()
    dialects.unregister("toy")
    assert "replica" not in dialects.identity_labels()
    dialects.register(ToyDialect())


def test_two_replicas_stay_two_engines_in_a_bundle_and_in_verify(toy, tmp_path):
    path, verdicts = record(tmp_path, stalled="a")
    assert [v.details.get("engine") for v in verdicts] == ["replica=a"]      # b still moves: not stalled
    stored = [s for part in sorted(path.glob("samples-*.json")) for s in json.loads(part.read_text())["samples"]]
    engines = {json.dumps(e["labels"]) for s in stored if s["source"] == "metrics" for e in s["engines"]}
    assert engines == {'{"replica": "a"}', '{"replica": "b"}'}
    checked = verify_bundle(path)            # the schema lets the toy's label in; recomputation finds a alone
    assert checked.verdicts_checked == 1


def test_a_bundle_of_two_stalled_replicas_verifies_with_both(toy, tmp_path):
    path, verdicts = record(tmp_path, stalled="ab")
    assert sorted(v.details.get("engine") for v in verdicts) == ["replica=a", "replica=b"]
    assert verify_bundle(path).verdicts_checked == 2


def test_serve_exports_a_verdict_until_the_last_replica_clears(toy):
    exporter = FleetExporter()
    verdicts = [v for v in run_detectors(window("ab"), DetectorConfig()) if v.name == STALL]
    assert len({v.details["engine"] for v in verdicts}) == 2
    for verdict in verdicts:
        exporter.sink("toy-target").on_fired(Fired(verdict))
    exporter.cleared("toy-target", STALL)
    assert _active(exporter) == 1.0        # replica b still stalls
    exporter.cleared("toy-target", STALL)
    assert _active(exporter) == 0.0


def _active(exporter) -> float:
    for line in exporter.exposition().decode().splitlines():
        if line.startswith("servewatch_verdict_active{") and 'target="toy-target"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no servewatch_verdict_active series for the target")
