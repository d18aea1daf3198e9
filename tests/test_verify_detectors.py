"""`verify` with the shipped detectors: every verdict kind recomputes from its bundle; forgeries do not."""

from __future__ import annotations

import io
import json
import os

import pytest

from servewatch.cli import main
from servewatch.detectors import DetectorConfig, evidence_window, run_detectors
from servewatch.errors import BundleInvalid
from servewatch.bundle import layout
from servewatch.bundle.writer import BundleContext, BundleWriter
from servewatch.bundle.verify import verify_bundle
try:  # tests/ imported as a package or as a plain directory
    from tests.sinks_synthetic import scenario
except ModuleNotFoundError:
    from sinks_synthetic import scenario

KINDS = ["alive_health_ok_no_progress", "engine_dead", "health_loss", "overload", "kv_pressure", "preemption",
         "target_restarted", "histogram_blind"]


def record(tmp_path, window, config=None, **writer_kwargs):
    config = config or DetectorConfig()
    verdicts = run_detectors(window, config)
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), **writer_kwargs)
    path = writer.write(evidence_window(window, config), verdicts,
                        BundleContext(target_url="http://127.0.0.1:8000/v1?x=1", detector_config=config,
                                      trigger=verdicts[0] if verdicts else None))
    assert path is not None, writer.last_failure
    return path, verdicts


@pytest.mark.parametrize("kind", KINDS)
def test_each_verdict_kind_recomputes_from_its_bundle(tmp_path, kind, capsys):
    path, verdicts = record(tmp_path, scenario(kind))
    assert kind in [v.name for v in verdicts]
    result = verify_bundle(path)
    assert result.verdicts_checked == len(verdicts) >= 1
    assert main(["verify", str(path)]) == 0
    assert capsys.readouterr().out.startswith("OK ")


def test_stored_config_is_used_for_recomputation(tmp_path):
    window = scenario("alive_health_ok_no_progress")
    path, _ = record(tmp_path, window, DetectorConfig(stall_floor_s=5.0))
    assert json.loads((path / "incident.json").read_bytes())["detector_config"]["stall_floor_s"] == 5.0
    verify_bundle(path)
    # Edit the stored threshold so the stall no longer qualifies, reseal every hash: recomputation rejects it.
    incident = json.loads((path / "incident.json").read_bytes())
    incident["detector_config"]["stall_floor_s"] = 60.0
    (path / "incident.json").write_bytes(layout.encode(incident))
    _reseal(path)
    with pytest.raises(BundleInvalid, match="does not follow from the stored samples"):
        verify_bundle(path)


def _reseal(path):
    hashes = {n: layout.sha256((path / n).read_bytes()) for n in os.listdir(path) if n != "manifest.json"}
    (path / "manifest.json").write_bytes(layout.manifest_bytes(hashes))


def test_forged_progress_defeats_the_stall_verdict(tmp_path, capsys):
    path, _ = record(tmp_path, scenario("alive_health_ok_no_progress"))
    incident = json.loads((path / "incident.json").read_bytes())
    for name in incident["window"]["files"]:
        document = json.loads((path / name).read_bytes())
        for i, sample in enumerate(s for s in document["samples"] if s["source"] == "metrics"):
            sample["engines"][0]["counters"]["generation_tokens"] = float(4 * i)
            sample["engines"][0]["counters"]["steps"] = float(i)
        (path / name).write_bytes(layout.encode(document))
    _reseal(path)
    assert main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "verdict alive_health_ok_no_progress" in err and "does not follow" in err


def test_private_strings_in_live_verdicts_are_restated_from_stored_samples(tmp_path):
    """A model path and a command line in the live samples: stored verdicts derive from allow-listed samples."""
    window = scenario("alive_health_ok_no_progress", model="/srv/private/ZEBRA-CANARY-7731/model",
                      title="/opt/venv/bin/python -m vllm --api-key ZEBRA-CANARY-7731")
    path, _ = record(tmp_path, window)
    for name in os.listdir(path):
        assert b"ZEBRA-CANARY-7731" not in (path / name).read_bytes()
    assert verify_bundle(path).verdicts_checked == 1


def test_thinned_bundle_still_verifies(tmp_path):
    window = scenario("alive_health_ok_no_progress")
    path, _ = record(tmp_path, window, max_file_bytes=8192, max_sample_files=2)
    incident = json.loads((path / "incident.json").read_bytes())
    assert incident["window"]["thinned"]["applied"] is True
    assert verify_bundle(path).verdicts_checked == 1
