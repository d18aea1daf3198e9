"""Nothing private leaves in a bundle or a summary: a canary planted everywhere a sample can carry text."""

from __future__ import annotations

import io
import os
from pathlib import Path

from servewatch.cli import main
from servewatch.bundle.writer import BundleContext, BundleWriter
try:  # tests/ imported as a package or as a plain directory
    from tests.sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_verdicts
except ModuleNotFoundError:
    from sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_verdicts

CANARY = "ZEBRA-CANARY-7731"
URL = f"http://operator:{CANARY}@127.0.0.1:8000/v1/{CANARY}/completions?api_key={CANARY}&q=1#{CANARY}"


def all_bytes(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_canary_everywhere_reaches_no_file_written(tmp_path):
    window = stall_window(canary=CANARY)
    raw = repr(list(window.samples()))
    assert raw.count(CANARY) > 50          # the canary really is in the titles, labels, errors and log fields
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    path = writer.write(window, synthetic_stall_verdicts(window), BundleContext(
        target_url=URL, detector_config={"min_stall_s": 3.0, "note": f"/home/{CANARY}"},
        target_versions={"vllm": CANARY + " /tmp/x", CANARY.lower(): "1.0"}, dialect=f"vllm {CANARY}"))
    assert path is not None
    md, html = tmp_path / "report.md", tmp_path / "report.html"
    assert main(["summarize", str(path), "--md", str(md), "--html", str(html)]) == 0

    written = all_bytes(tmp_path)
    assert len(written) == 5              # incident, manifest, one samples file, the two summaries
    for file, data in written.items():
        lowered = data.lower()
        assert CANARY.encode().lower() not in lowered, file
        assert b"operator" not in data and b"api_key" not in data and b"/v1/" not in data, file
        assert b"/models/" not in data and b"--prompt" not in data, file
    assert b"http://127.0.0.1:8000" in written[path / "incident.json"]


def test_bundle_files_are_private_to_the_owner(tmp_path):
    window = stall_window()
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    path = writer.write(window, synthetic_stall_verdicts(window), BundleContext())
    assert os.stat(path).st_mode & 0o077 == 0
    for file in path.iterdir():
        assert os.stat(file).st_mode & 0o177 == 0


def test_canary_prompts_through_the_simulator_and_recorder_reach_no_file(tmp_path):
    """Every prompt the built-in engine serves carries the canary; the recorder's bundles and their
    summaries must not, and the bundles must verify."""
    import asyncio

    from servewatch.clock import VirtualClock
    from servewatch.detectors import DetectorConfig, evidence_window
    from servewatch.sim import SimConfig, SimEngine
    from servewatch.bundle.verify import verify_bundle
    from servewatch.watch import Recorder
    from servewatch.sinks.base import CallbackSink
    from servewatch.watch.sim_target import sim_sources

    clock = VirtualClock()
    engine = SimEngine(SimConfig(seed=7), clock)
    engine.inject({"kind": "stall", "at": 20})
    config = DetectorConfig()
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO())

    def on_verdict(fired):
        return writer.write(evidence_window(fired.window, config), fired.verdicts,
                            BundleContext(target_url=URL, detector_config=config, trigger=fired.verdict))

    submitted = {"n": 0, "next": clock.now()}

    def advance(t):
        while submitted["next"] <= t:
            engine.run_until(submitted["next"])
            prompt = f"Tell me about {CANARY} number {submitted['n']} in detail"
            engine.submit(prompt_tokens=32, max_tokens=400, prompt=prompt, ignore_eos=True)
            submitted["n"] += 1
            submitted["next"] += 0.5
        engine.run_until(t)

    recorder = Recorder(sim_sources(engine, clock, 0.5), clock, history_s=120, config=config,
                        sinks=[CallbackSink(on_verdict)])
    asyncio.run(recorder.run_virtual(40.0, advance=advance))
    assert submitted["n"] >= 60 and writer.failures == 0
    bundles = writer.bundles()
    assert bundles and any("alive_health_ok_no_progress" in b.name for b in bundles)
    for i, bundle in enumerate(bundles):
        verify_bundle(bundle)
        assert main(["summarize", str(bundle), "--md", str(tmp_path / f"s{i}.md"),
                     "--html", str(tmp_path / f"s{i}.html")]) == 0
    written = all_bytes(tmp_path)
    assert len(written) >= 3 * len(bundles) + 2 * len(bundles)
    for file, data in written.items():
        assert CANARY.encode().lower() not in data.lower(), file
        assert b"api_key" not in data and b"/v1/" not in data, file
