"""The bundle writer: layout, privacy modes, atomicity, rotation, size cap, fail-open."""

from __future__ import annotations

import errno
import io
import json
import math
import os
import stat

import pytest

from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.bundle import layout, serialize
from servewatch.bundle.writer import BUNDLE_NAME, TMP_PREFIX, BundleContext, BundleWriter, pin, pinned
from servewatch.bundle.verify import verify_bundle
from servewatch.timeline.samples import HealthSample, LogEvent
from servewatch.timeline.window import Window
try:  # tests/ imported as a package or as a plain directory
    from tests.sinks_synthetic import stall_samples, stall_window, synthetic_recompute, synthetic_stall_verdicts
except ModuleNotFoundError:
    from sinks_synthetic import stall_samples, stall_window, synthetic_recompute, synthetic_stall_verdicts

CONFIG = {"min_stall_s": 3.0}


def write(tmp_path, window=None, verdicts=None, **writer_kwargs):
    window = window or stall_window()
    verdicts = synthetic_stall_verdicts(window) if verdicts is None else verdicts
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute, **writer_kwargs)
    path = writer.write(window, verdicts, BundleContext(target_url="http://127.0.0.1:8000",
                                                       detector_config=CONFIG))
    return writer, path


def test_bundle_layout_modes_and_manifest(tmp_path):
    writer, path = write(tmp_path)
    assert path is not None and BUNDLE_NAME.match(path.name)
    assert "alive_health_ok_no_progress" in path.name
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    names = sorted(os.listdir(path))
    assert names == ["incident.json", "manifest.json", "samples-000.json"]
    for name in names:
        assert stat.S_IMODE(os.stat(path / name).st_mode) == 0o600
    manifest = json.loads((path / "manifest.json").read_bytes())
    assert set(manifest["files"]) == {"incident.json", "samples-000.json"}
    for name, digest in manifest["files"].items():
        assert layout.sha256((path / name).read_bytes()) == digest
    assert layout.manifest_self_digest_ok((path / "manifest.json").read_bytes(), manifest["manifest_sha256"])
    incident = json.loads((path / "incident.json").read_bytes())
    assert incident["target"]["url"] == "http://127.0.0.1:8000"
    assert incident["trigger"]["verdict"] == "alive_health_ok_no_progress"
    assert incident["window"]["samples"]["health"] == 40
    assert incident["detector_config"] == CONFIG
    assert incident["verdicts"][0]["evidence"][0]["source"] == "metrics"
    assert verify_bundle(path, synthetic_recompute).verdicts_checked == 1
    assert writer.failures == 0 and writer.bundles_written == 1
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(TMP_PREFIX)]


def test_samples_round_trip_exactly():
    samples = list(stall_window().samples())
    back = [serialize.sample_from_dict(json.loads(json.dumps(serialize.sample_to_dict(s)))) for s in samples]
    assert back == samples


def test_free_text_is_reduced_to_allow_listed_tokens():
    from servewatch.engine.state import EngineState
    from servewatch.timeline.samples import GpuSample, ProcessMember, ProcessSample

    assert serialize.sample_to_dict(GpuSample(t=1.0, available=False, error="unavailable: no NVIDIA driver"))[
        "error"] == "unavailable"
    member = ProcessMember(pid=1, create_time=1.0, role="api", status="running",
                           title="/opt/venv/bin/python3 -m vllm.entrypoints.openai.api_server --model /models/x")
    d = serialize.sample_to_dict(ProcessSample(t=1.0, root_pid=1, root_create_time=1.0, alive=True, members=(member,)))
    assert d["members"][0]["title"] == "python3"
    engine = EngineState(dialect="vllm", naming="vllm-0.32",
                         labels={"model_name": "/models/org/Qwen2.5-7B", "engine": "0", "request_id": "abc"})
    assert serialize.engine_to_dict(engine)["labels"] == {"engine": "0", "model_name": "Qwen2.5-7B"}
    log = serialize.sample_to_dict(LogEvent(t=1.0, kind="error", fields={
        "exception": "torch.OutOfMemoryError", "mib": 112.0, "prompt": "tell me a secret", "reason": "two words"}))
    assert log["fields"] == {"exception": "torch.OutOfMemoryError", "mib": 112.0}


def test_non_finite_numbers_round_trip():
    samples = [HealthSample(t=1.0, status=200, latency_s=math.inf),
               LogEvent(t=2.0, kind="stats", fields={"kv_pct": -math.inf, "running": 3})]
    encoded = json.loads(layout.encode([serialize.sample_to_dict(s) for s in samples]))
    assert encoded[0]["latency_s"] == "+Inf"
    back = [serialize.sample_from_dict(d) for d in encoded]
    assert back == samples
    nan = serialize.sample_from_dict(serialize.sample_to_dict(HealthSample(t=1.0, status=None, latency_s=math.nan)))
    assert math.isnan(nan.latency_s)


@pytest.mark.parametrize("url, expected", [
    ("http://127.0.0.1:8000/v1/completions?api_key=SECRET#frag", "http://127.0.0.1:8000"),
    ("https://user:pw@example.com/metrics", "https://example.com:443"),
    ("http://[::1]:9000/health", "http://[::1]:9000"),
    ("localhost:8001", "http://localhost:8001"),
    ("ftp://example.com/x", None),
    ("", None),
])
def test_target_url_is_reduced_to_scheme_host_port(url, expected):
    assert serialize.target_url(url) == expected


def test_incident_id_is_hmac_keyed_per_process():
    a = layout.incident_id("engine_dead", 12.5, "http://h:1", key=b"k1")
    assert a == layout.incident_id("engine_dead", 12.5, "http://h:1", key=b"k1")
    assert a != layout.incident_id("engine_dead", 12.5, "http://h:1", key=b"k2")
    assert a != layout.incident_id("engine_dead", 12.6, "http://h:1", key=b"k1")
    assert a != layout.incident_id("overload", 12.5, "http://h:1", key=b"k1")
    assert len(a) == 32 and int(a, 16) >= 0
    # the default key is this process's random key, not a constant
    assert layout.incident_id("engine_dead", 12.5, "http://h:1") != layout.incident_id(
        "engine_dead", 12.5, "http://h:1", key=bytes(32))


def test_rotation_keeps_the_newest(tmp_path):
    writer = BundleWriter(tmp_path / "out", keep=3, stderr=io.StringIO(), recompute=synthetic_recompute)
    window = stall_window()
    verdicts = synthetic_stall_verdicts(window)
    paths = [writer.write(window, verdicts, BundleContext(created_t=window.end + 60 * i)) for i in range(5)]
    assert all(paths)
    left = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert left == sorted(p.name for p in paths[2:])
    assert writer.bundles() == paths[2:]


def test_a_pinned_bundle_outlives_every_rotation_and_the_others_still_rotate(tmp_path):
    writer = BundleWriter(tmp_path / "out", keep=2, stderr=io.StringIO(), recompute=synthetic_recompute)
    window = stall_window()
    verdicts = synthetic_stall_verdicts(window)
    first = writer.write(window, verdicts, BundleContext(created_t=window.end))
    assert pin(tmp_path / "out", first.name) is None
    later = [writer.write(window, verdicts, BundleContext(created_t=window.end + 60 * i)) for i in range(1, 6)]
    assert writer.bundles() == [first, *later[-2:]]
    assert pinned(tmp_path / "out") == {first.name}
    assert verify_bundle(first, synthetic_recompute).verdicts_checked == 1   # the pin changed nothing inside it
    assert pin(tmp_path / "out", "../../etc") == "'../../etc' is not a bundle name"


def test_same_incident_twice_gets_distinct_directories(tmp_path):
    writer = BundleWriter(tmp_path / "out", keep=5, stderr=io.StringIO(), recompute=synthetic_recompute)
    window = stall_window()
    verdicts = synthetic_stall_verdicts(window)
    first = writer.write(window, verdicts, BundleContext(created_t=window.end))
    second = writer.write(window, verdicts, BundleContext(created_t=window.end))
    assert first != second and first.exists() and second.exists()
    assert json.loads((first / "incident.json").read_bytes())["incident_id"] == \
        json.loads((second / "incident.json").read_bytes())["incident_id"]


def test_split_into_parts_under_the_cap_without_thinning(tmp_path):
    writer, path = write(tmp_path, max_file_bytes=16 * 1024, max_sample_files=16)
    incident = json.loads((path / "incident.json").read_bytes())
    assert len(incident["window"]["files"]) > 1
    assert incident["window"]["thinned"]["applied"] is False
    for name in os.listdir(path):
        assert (path / name).stat().st_size <= 16 * 1024
    assert verify_bundle(path, synthetic_recompute).verdicts_checked == 1


def test_thinning_is_deterministic_recorded_and_keeps_evidence(tmp_path):
    window = stall_window(n=400, stalled_from=380)
    verdicts = synthetic_stall_verdicts(window)
    _, path = write(tmp_path / "a", window, verdicts, max_file_bytes=16 * 1024, max_sample_files=2)
    _, again = write(tmp_path / "b", window, verdicts, max_file_bytes=16 * 1024, max_sample_files=2)
    incident = json.loads((path / "incident.json").read_bytes())
    thinned = incident["window"]["thinned"]
    assert thinned["applied"] is True and thinned["method"] == "drop_oldest_unreferenced"
    assert thinned["samples_before"] == len(window) > thinned["samples_after"] == sum(
        incident["window"]["samples"].values())
    for name in os.listdir(path):
        assert (path / name).stat().st_size <= 16 * 1024
    assert (path / "samples-000.json").read_bytes() == (again / "samples-000.json").read_bytes()
    stored = [s for f in incident["window"]["files"]
              for s in json.loads((path / f).read_bytes())["samples"]]
    kept = {(s["source"], s["t"]) for s in stored}
    assert all((e.source, e.t) in kept for v in verdicts for e in v.evidence)
    assert min(s["t"] for s in stored) > window.start        # the oldest went first
    assert max(s["t"] for s in stored) == window.end          # the newest stayed
    assert verify_bundle(path, synthetic_recompute).verdicts_checked == 1


def test_on_demand_bundle_without_verdicts(tmp_path):
    _, path = write(tmp_path, verdicts=[])
    incident = json.loads((path / "incident.json").read_bytes())
    assert incident["trigger"] == {"verdict": "on_demand", "onset": incident["window"]["end_t"]}
    assert "on_demand" in path.name
    assert verify_bundle(path, lambda samples, config: []).verdicts_checked == 0


def test_fail_open_when_out_dir_is_a_file_then_reported_in_next_bundle(tmp_path):
    blocker = tmp_path / "out"
    blocker.write_text("not a directory")
    err = io.StringIO()
    writer = BundleWriter(blocker, stderr=err)
    window = stall_window()
    verdicts = synthetic_stall_verdicts(window)
    assert writer.write(window, verdicts, BundleContext()) is None
    assert writer.write(window, verdicts, BundleContext()) is None
    assert writer.failures == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("servewatch: incident bundle not written (2 failure(s)")
    blocker.unlink()
    path = writer.write(window, verdicts, BundleContext())
    assert path is not None
    assert json.loads((path / "incident.json").read_bytes())["writer"]["write_failures"] == 2


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_fail_open_on_disk_errors_leaves_nothing_half_written(tmp_path, monkeypatch, code):
    err = io.StringIO()
    writer = BundleWriter(tmp_path / "out", stderr=err)
    window = stall_window()
    calls = {"n": 0}
    real_write = os.write

    def failing_write(fd, data):
        calls["n"] += 1
        if calls["n"] == 2:      # the first file went through, the second hits the error
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", failing_write)
    assert writer.write(window, synthetic_stall_verdicts(window), BundleContext()) is None
    monkeypatch.setattr(os, "write", real_write)
    assert writer.failures == 1
    assert os.strerror(code) in err.getvalue()
    assert list((tmp_path / "out").iterdir()) == []      # no partial bundle, no temp dir


def test_writer_never_raises_on_garbage(tmp_path):
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    assert writer.write([object()], [], BundleContext()) is None
    assert writer.write(stall_window(), [Verdict("engine_dead", 1.0, 0.0, "x", (Evidence("health", 1.0, "status", None),
                                                                                 ))], None) is not None
    assert writer.failures == 1


def test_context_versions_and_ring_drops_are_recorded(tmp_path):
    window = stall_window()
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    path = writer.write(window, synthetic_stall_verdicts(window), BundleContext(
        target_url="http://127.0.0.1:8000", dialect="vllm", naming="vllm-0.32",
        target_versions={"vllm": "0.32.0", "torch": "2.13.0+cpu", "bad key!": "1", "evil": "1.0 rm -rf /"},
        overwritten={"health": 7}))
    incident = json.loads((path / "incident.json").read_bytes())
    assert incident["target"]["versions"] == {"torch": "2.13.0+cpu", "vllm": "0.32.0"}
    assert incident["target"]["generation"] == "vllm-0.32"
    assert incident["window"]["overwritten"]["health"] == 7


def test_window_from_stored_samples_equals_the_original(tmp_path):
    window = stall_window()
    _, path = write(tmp_path, window)
    stored = json.loads((path / "samples-000.json").read_bytes())["samples"]
    assert Window.from_samples(serialize.sample_from_dict(d) for d in stored) == window


def test_raw_samples_variant_accepts_an_iterable(tmp_path):
    samples = stall_samples(n=30, stalled_from=10)
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    path = writer.write(samples, synthetic_stall_verdicts(Window.from_samples(samples)), BundleContext())
    assert path is not None and verify_bundle(path, synthetic_recompute).verdicts_checked == 1


def test_log_reasons_keep_grammar_literals_only():
    from servewatch.dialects import vllm

    literal = vllm.ENGINE_DEAD_LINES[0]
    d = serialize.sample_to_dict(LogEvent(t=1.0, kind="engine_dead", fields={"reason": literal, "dialect": "vllm"}))
    assert d["fields"] == {"dialect": "vllm", "reason": literal}
    d = serialize.sample_to_dict(LogEvent(t=1.0, kind="error", fields={"reason": "the user asked about zebras"}))
    assert d["fields"] == {}


def test_verdicts_with_mixed_values_round_trip():
    verdict = Verdict(name="engine_dead", t=5.0, onset=4.0, why="health 503 since 4.0 s",
                      evidence=(Evidence("process", 4.0, "alive", True), Evidence("health", 5.0, "status", 503),
                                Evidence("log", 4.5, "reason", "EngineDeadError"),
                                Evidence("metrics", 4.0, "running", None)),
                      details={"process_known": False, "engine": "engine=0", "quiet_s": 1.5, "n": 3,
                               "level": float("inf")})
    stored = json.loads(layout.encode(serialize.verdict_to_dict(verdict)))
    assert serialize.verdict_from_dict(stored) == verdict
    log = LogEvent(t=1.0, kind="stats", fields={"ok": True, "running": 3, "dialect": "vllm"})
    assert serialize.sample_from_dict(json.loads(layout.encode(serialize.sample_to_dict(log)))) == log


def test_verdict_text_keeps_endpoints_and_units_but_not_paths_or_urls():
    text = "/health 200, 12 tokens/s (/metrics) on /models/secret via http://h:1/v1?k=v user@host C:\\x"
    assert serialize.scrub_text(text) == ("/health 200, 12 tokens/s (/metrics) on [redacted] via [redacted] "
                                          "[redacted] [redacted]")


def test_a_retired_setting_in_a_stored_config_is_read_and_ignored_and_an_unknown_one_refused():
    """Bundles of earlier versions stored `engine_dead_status` (now the dialect's health_dead_status): verify's
    recomputation ignores it; a name no version knows still fails closed, in one line naming it."""
    from servewatch.bundle.recompute import detectors_recompute
    from servewatch.detectors import DetectorConfig
    from servewatch.errors import BundleInvalid

    stored = {**DetectorConfig().to_dict(), "engine_dead_status": 503}
    assert list(detectors_recompute([], stored)) == []
    with pytest.raises(BundleInvalid, match="detector_config: unknown field 'no_such_setting'"):
        detectors_recompute([], {**DetectorConfig().to_dict(), "no_such_setting": 1})
