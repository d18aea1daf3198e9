"""A deployment's incident bundle (issue 52): when a pair verdict fires while a prefill/decode pair is watched as one
target, the bundle holds both instances' evidence — each sample named by its instance (host:port) and role, never a
URL path — `verify` recomputes its verdicts from them, and `summarize` says which side was at fault."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from pathlib import Path

import aiohttp
import pytest

from servewatch.bundle.incident import load_incident
from servewatch.bundle.summarize import render_markdown
from servewatch.bundle.verify import verify_bundle
from servewatch.clock import RealClock
from servewatch.detectors import DetectorConfig
from servewatch.errors import BundleInvalid
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.server import build_app
from servewatch.sinks.bundle_sink import bundle_sink
from servewatch.transport.contract import Http1Transport
from servewatch.watch.deployment import build, members_from
from servewatch.watch.options import RecordingOptions
from tests.pd_harness import REMOTE_DECODE
from tests.serve_harness import _site, sim_target

PROMPT = "hello world " * 40
INTERVAL = 0.2
CONFIG = DetectorConfig(kv_stall_s=2.0, pd_window_s=10.0, pd_bypass_min_tokens=200.0)
DEADLINE_S = 20.0          # the stall's bound (2 s) plus the scrape cadence and a loaded machine's allowance


def _bundles(out: Path, name: str) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir() and f"-{name}-" in p.name) if out.exists() else []


async def _stalled_prefill_bundle(out: Path):
    """A prefill that answers its step and then goes silent (its server closed), decode waiting for the KV: the
    deployment recorder with a bundle sink, as `watch --prefill --decode --out` builds it."""
    engine = SimEngine(SimConfig(max_num_seqs=8, dialect="vllm", pd_role="prefill", kv_lease_seconds=300.0),
                       RealClock())
    runner, prefill_url = await _site(build_app(engine))
    stepping = asyncio.create_task(engine.run_realtime())
    host, _, port = prefill_url.removeprefix("http://").rpartition(":")
    engine.pd.host, engine.pd.port = host, int(port)
    transport = Http1Transport()
    try:
        async with sim_target(dialect="vllm", pd_role="decode", kv_wait_timeout=60.0) as decode, \
                aiohttp.ClientSession() as session:
            members = members_from([prefill_url], [decode.url])
            sink = bundle_sink(str(out), None, CONFIG)
            recorder = build(members, RecordingOptions(url="", interval=INTERVAL, probe=False, detectors=CONFIG),
                             transport, RealClock(), sinks=[sink])
            sink.recorder = recorder
            task = asyncio.create_task(recorder.run(None))
            try:
                model = decode.engine.config.model_name
                async with session.post(prefill_url + "/v1/completions", json={
                        "model": model, "prompt": PROMPT, "max_tokens": 1,
                        "kv_transfer_params": dict(REMOTE_DECODE)}) as response:
                    params = (await response.json())["kv_transfer_params"]
                await runner.cleanup()
                stepping.cancel()
                waiting = asyncio.create_task(_post(session, decode.url, {
                    "model": model, "prompt": PROMPT, "max_tokens": 4, "kv_transfer_params": params}))
                end = time.monotonic() + DEADLINE_S
                while not _bundles(out, "kv_transfer_stall") and time.monotonic() < end:
                    await asyncio.sleep(0.05)
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
            finally:
                recorder.stop()
                await asyncio.gather(task, return_exceptions=True)
            return prefill_url.removeprefix("http://"), decode.url.removeprefix("http://")
    finally:
        await transport.close()
        await runner.cleanup()
        stepping.cancel()
        await asyncio.gather(stepping, return_exceptions=True)


async def _post(session, url: str, body: dict):
    with contextlib.suppress(Exception):
        async with session.post(url + "/v1/completions", json=body) as response:
            await response.read()


@pytest.fixture(scope="module")
def stall_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("pd-bundles")
    prefill, decode = asyncio.run(asyncio.wait_for(_stalled_prefill_bundle(out), 90))
    found = _bundles(out, "kv_transfer_stall")
    assert found, f"no kv_transfer_stall bundle in {DEADLINE_S} s; written: {[p.name for p in out.iterdir()]}"
    return found[0], prefill, decode


def test_a_pair_verdicts_bundle_holds_both_instances_by_role_and_verifies(stall_bundle):
    path, prefill, decode = stall_bundle
    verified = verify_bundle(path)
    stall = [v for v in verified.incident["verdicts"] if v["name"] == "kv_transfer_stall"]
    assert len(stall) == 1 and stall[0]["details"]["act_on"] == prefill and stall[0]["details"]["decode"] == decode
    assert verified.verdicts_checked == len(verified.incident["verdicts"]) >= 1
    target = verified.incident["target"]
    assert target["deployment"] == [{"name": prefill, "role": "prefill"}, {"name": decode, "role": "decode"}]
    assert target["url"] is None
    by_instance: dict[tuple, set] = {}
    for sample in verified.samples:
        by_instance.setdefault((sample["instance"], sample["role"]), set()).add(sample["source"])
    # each instance's own timeline slice: its health and its /metrics, named by instance and role
    assert by_instance == {(prefill, "prefill"): {"health", "metrics"}, (decode, "decode"): {"health", "metrics"}}
    # the evidence the verdict points at is stored: decode's waiting gauge and the prefill's failing /health
    stored = {(s["source"], s["t"], s["instance"]) for s in verified.samples}
    assert any(e["source"] == "health" and ("health", e["t"], prefill) in stored for e in stall[0]["evidence"])
    assert any(e["field"] == "kv_transfer.waiting_for_kv" and ("metrics", e["t"], decode) in stored
               for e in stall[0]["evidence"])


def test_a_pair_bundle_names_no_url_path(stall_bundle):
    path, _, _ = stall_bundle
    for file in path.iterdir():
        text = file.read_text()
        assert "http://" not in text and "/v1/" not in text, file.name


def test_a_pair_bundle_with_an_instance_moved_to_the_other_side_fails_verify(stall_bundle, tmp_path):
    """A sample whose role is changed no longer recomputes (or no longer matches the deployment): verify says so."""
    import shutil

    from servewatch.bundle.layout import manifest_bytes, sha256, MANIFEST

    path, prefill, _ = stall_bundle
    forged = tmp_path / path.name
    shutil.copytree(path, forged)
    for part in sorted(forged.glob("samples-*.json")):
        doc = json.loads(part.read_text())
        for sample in doc["samples"]:
            if sample["instance"] == prefill:
                sample["role"] = "decode"
        part.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    files = {p.name: p.read_bytes() for p in forged.iterdir() if p.name != MANIFEST}
    (forged / MANIFEST).write_bytes(manifest_bytes({n: sha256(b) for n, b in files.items()}))
    with pytest.raises(BundleInvalid, match="role"):
        verify_bundle(forged)


def test_summarize_says_the_side_at_fault(stall_bundle):
    path, prefill, decode = stall_bundle
    text = render_markdown(load_incident(path))
    assert f"- deployment: prefill {prefill}, decode {decode}" in text
    assert (f"**Side at fault:** prefill {prefill} (silent): the side to restart; decode {decode} is not acted on"
            in text)
    # each instance's own timeline, not the two interleaved: the prefill's /health fails, decode's stays 2xx
    prefill_rows = text.split(f"### prefill {prefill}\n", 1)[1].split("###", 1)[0]
    decode_rows = text.split(f"### decode {decode}\n", 1)[1].split("###", 1)[0]
    assert "| health (1 = 2xx) | 0 | 1 | 0 |" in prefill_rows and "| health (1 = 2xx) | 1 | 1 | 1 |" in decode_rows


def test_the_html_page_charts_each_instance_and_says_the_side_at_fault(stall_bundle):
    from servewatch.bundle.report_html import render_incident_page

    path, prefill, decode = stall_bundle
    page = render_incident_page(load_incident(path))
    assert f"timeline of prefill {prefill} in {path.name}" in page
    assert f"timeline of decode {decode} in {path.name}" in page
    assert f"prefill {prefill} (silent): the side to restart; decode {decode} is not acted on" in page


def test_watch_out_on_a_deployment_writes_each_instances_bundle_under_its_own_id(tmp_path):
    """`watch --prefill URL --decode URL --out DIR`: both instances unreachable fire health_loss at the same times;
    each firing gets its own bundle and incident id (the instance is part of what the id is of), each verifies."""
    import subprocess
    import sys

    from tests.test_watch_command import free_port

    out = tmp_path / "out"
    prefill, decode = (f"127.0.0.1:{free_port()}" for _ in range(2))
    result = subprocess.run([sys.executable, "-m", "servewatch", "watch", "--prefill", f"http://{prefill}",
                             "--decode", f"http://{decode}", "--out", str(out), "--duration", "3", "--interval",
                             "0.2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    found = _bundles(out, "health_loss")
    ids = [re.fullmatch(r"incident-\d{8}T\d{6}Z-health_loss-([0-9a-f]{8})", p.name) for p in found]
    assert len(found) == 2 and all(ids) and ids[0][1] != ids[1][1], [p.name for p in found]   # no "-2" twin
    about = set()
    for path in found:
        verified = verify_bundle(path)
        assert verified.incident["target"]["deployment"] == [{"name": prefill, "role": "prefill"},
                                                             {"name": decode, "role": "decode"}]
        about |= {v["details"]["instance"] for v in verified.incident["verdicts"]}
    assert about == {prefill, decode}


def test_serve_out_writes_a_pair_targets_bundles_with_both_instances(tmp_path):
    """serve's config with a pair target and --out: the pair's bundles go to out/NAME, each verifies and lists the
    deployment (serve wrote none for a pair target before)."""
    import signal
    import subprocess
    import sys

    from tests.test_watch_command import free_port

    prefill, decode = (f"127.0.0.1:{free_port()}" for _ in range(2))
    config = tmp_path / "serve.yaml"
    config.write_text(f"targets:\n  - name: pair-a\n    prefill: [http://{prefill}]\n    decode: [http://{decode}]\n")
    out = tmp_path / "out"
    serve = subprocess.Popen([sys.executable, "-m", "servewatch", "serve", "--config", str(config), "--out", str(out),
                              "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60       # serve's start, its default interval and three failed health probes each
        while len(_bundles(out / "pair-a", "health_loss")) < 2 and time.monotonic() < end and serve.poll() is None:
            time.sleep(0.1)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=30)
    found = _bundles(out / "pair-a", "health_loss")
    assert len(found) == 2, serve.stderr.read()[-2000:]
    for path in found:
        verified = verify_bundle(path)
        assert verified.incident["target"]["deployment"] == [{"name": prefill, "role": "prefill"},
                                                             {"name": decode, "role": "decode"}]
        assert {s["instance"] for s in verified.samples} == {prefill, decode}


def test_diagnose_reads_a_pair_bundle_as_its_decode_instance_never_the_two_interleaved(stall_bundle, capsys):
    from servewatch.cli import main

    path, prefill, decode = stall_bundle
    incident = load_incident(path)
    who, samples = incident.main_instance
    assert who == f"decode {decode}" and samples == dict(incident.instances)[who]
    assert 0 < len(samples) < len(incident.samples)
    assert all(s in dict(incident.instances)[who] for s in samples)
    code = main(["diagnose", str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1), out
    assert out["sources"] == [f"bundle: decode {decode}'s {len(samples)} samples (prefill {prefill} not mixed in; "
                              f"servewatch summarize shows each instance)"]
