"""Telemetry replay (`servewatch sim --replay BUNDLE`): a bundle's scrapes rendered back as the engine's own
/metrics read back to the very state stored; counters that keep rising across loops; the held end; and a live
`watch --replay` on a replayed stall bundle from the demo that fires the bundle's own verdicts at the bundle's
own times (within the recorder's cadence plus a measured allowance)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from servewatch import dialects
from servewatch.bundle.serialize import engine_to_dict
from servewatch.clock import parse_iso8601
from servewatch.exposition.parser import parse
from servewatch.sim import replay
from tests.processes import stop

ROOT = Path(__file__).resolve().parents[1]
# Beyond the recorder's cadence, the most a replayed verdict's time may differ from the stored one: the replay
# serves the newest stored scrape at or before the moment (up to one cadence old), the watcher polls at its own
# phase, and its stall threshold follows the cadence it measures. Measured on this 2-core machine (2026-12-05,
# load average ~7 from other work, three runs of each dialect): the stall fired +0.06 to +0.89 s from the stored
# time (onset +0.06 to +0.39 s), engine_dead and process_exit +0.05 to +0.47 s; the allowance is the worst excess
# over the cadence (0.39 s) with room for a busier machine.
ALLOWANCE_S = 1.0
LEAD_S = 12.0          # the replay starts this long (bundle seconds) before the first stored verdict's onset


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def bundles(request, tmp_path_factory) -> dict[str, Path]:
    from servewatch.cli import main

    out = tmp_path_factory.mktemp(f"demo-{request.param}")
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["demo", "--fast", "--dialect", request.param, "--out", str(out)]) == 0
    found = {}
    for path in sorted((out / "bundles").iterdir()):
        name = re.sub(r"-[0-9a-f]{8}$", "", path.name.split("Z-", 1)[1])
        found.setdefault(name, path)
    return found


def test_every_stored_scrape_renders_as_the_engines_own_text_that_reads_back_to_the_stored_state(bundles):
    checked = 0
    for path in bundles.values():
        telemetry = replay.load(path)
        for scrape in telemetry.metrics:
            if scrape.error is not None or not scrape.engines:
                continue
            text = replay.render_engines(scrape.engines)
            dialect = dialects.by_name(scrape.engines[0].dialect)
            assert all(line.startswith(("#", dialect.name + ":", "http_")) for line in text.splitlines())
            families = parse(text)
            assert dialect.detect(families) == scrape.engines[0].naming
            again = dialect.read(families, scrape.engines[0].naming)
            for stored, read in zip(scrape.engines, again, strict=True):
                read.slot_limit = stored.slot_limit          # from the process's flags, never from /metrics
                assert engine_to_dict(read) == engine_to_dict(stored)
            checked += 1
    assert checked > 500


def test_a_looped_replay_keeps_every_counter_rising_and_its_rates_as_recorded(bundles):
    telemetry = replay.load(bundles["alive_health_ok_no_progress"])
    now = [0.0]
    playhead = replay.Playhead(telemetry, speed=1.0, loop=True, clock=lambda: now[0])
    dialect = dialects.by_name(telemetry.dialect)
    cadence = telemetry.cadence
    previous = None
    steps = []
    for i in range(int(2.5 * telemetry.period / cadence)):
        now[0] = i * cadence
        text, _ = playhead.metrics_text()
        families = parse(text)
        engine = dialect.read(families, dialect.detect(families))[0]
        values = replay._counter_items(engine)
        if previous is not None:
            falling = {k: (previous[k], v) for k, v in values.items() if k in previous and v < previous[k]}
            assert not falling, (i, falling)
            steps.append(values["generation_tokens"] - previous["generation_tokens"])
        previous = values
    assert playhead.position(now[0]).loop == 2
    per_loop = int(telemetry.period / cadence)
    # the step across each loop boundary is the recording's last step, not a jump and not a reset
    recorded_last_step = steps[per_loop - 2]
    assert steps[per_loop - 1] == recorded_last_step
    assert steps[2 * per_loop - 1] == recorded_last_step


def test_after_its_end_a_replay_holds_the_last_recorded_state(bundles):
    telemetry = replay.load(bundles["engine_dead"])
    now = [0.0]
    playhead = replay.Playhead(telemetry, speed=4.0, clock=lambda: now[0])
    now[0] = (telemetry.end - telemetry.start) / 4.0 + 60.0
    position = playhead.position()
    assert position.held and position.b == telemetry.end
    assert telemetry.health_at(position.b) == telemetry.health[-1]


def test_the_playhead_moves_speed_bundle_seconds_a_second_from_its_start(bundles):
    telemetry = replay.load(bundles["alive_health_ok_no_progress"])
    now = [100.0]
    playhead = replay.Playhead(telemetry, speed=4.0, start_offset=30.0, clock=lambda: now[0])
    assert playhead.position().b == telemetry.start + 30.0
    now[0] += 10.0
    assert playhead.position().b == pytest.approx(telemetry.start + 70.0)
    assert playhead.real_time_of(telemetry.start + 70.0) == pytest.approx(now[0])
    for speed, start in ((0.0, 0.0), (-1.0, 0.0), (1.0, telemetry.period + 1)):
        with pytest.raises(replay.ReplayError):
            replay.Playhead(telemetry, speed=speed, start_offset=start)


def test_replay_flags_without_a_bundle_are_one_line_and_exit_2():
    done = subprocess.run([sys.executable, "-m", "servewatch", "sim", "--speed", "2", "--port", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "go with --replay BUNDLE" in done.stderr and "Traceback" not in done.stderr


def test_a_bad_bundle_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "incident.json").write_text("{}")
    done = subprocess.run([sys.executable, "-m", "servewatch", "sim", "--replay", str(tmp_path), "--port", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--replay" in done.stderr and "Traceback" not in done.stderr


def _start_replay(bundle: Path, start: float, speed: float = 1.0) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--replay", str(bundle), "--port", "0",
                             "--start", f"{start:.3f}", "--speed", str(speed)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not match:
        stop(proc)
        raise AssertionError(f"sim --replay printed no address: {line!r}")
    return proc, f"http://127.0.0.1:{match.group(1)}"


def replay_and_watch(bundle: Path, interval: float, seconds_after: float) -> tuple[list[dict], dict, float]:
    """Replay `bundle` from LEAD_S before its first verdict and watch it with --replay; (fired verdicts with
    their times in bundle seconds, the bundle's incident, the watch's real duration)."""
    telemetry = replay.load(bundle)
    onset = min(float(v["onset"]) for v in telemetry.verdicts)
    start = max(0.0, onset - LEAD_S - telemetry.start)
    sim, url = _start_replay(bundle, start)
    try:
        with urllib.request.urlopen(url + "/_sim/replay", timeout=5) as response:
            asked = time.time()
            state = json.loads(response.read())
        duration = (telemetry.end - telemetry.start - state["elapsed_s"]) + seconds_after
        watch = subprocess.run([sys.executable, "-m", "servewatch", "watch", url, "--replay", str(bundle), "--json",
                                "--interval", str(interval), "--no-probe", "--duration", f"{duration:.1f}"],
                               cwd=ROOT, capture_output=True, text=True, timeout=duration + 60)
    finally:
        stop(sim)
    assert watch.returncode == 0, watch.stderr[-2000:]

    def bundle_time(stamp: str) -> float:
        return telemetry.start + state["elapsed_s"] + (parse_iso8601(stamp) - asked)

    fired = [{"name": e["verdict"], "t": bundle_time(e["t"]), "onset": bundle_time(e["onset"])}
             for e in map(json.loads, watch.stdout.splitlines()) if e.get("event") == "fired"]
    return fired, telemetry.incident, duration


# Each live replay runs in real time (about 30 s): one verdict kind per dialect keeps the fast suite fast, and
# between them both dialects' renderings and both kinds (a stall, a death) are replayed live.
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("bundles", "kind"), [("vllm", "alive_health_ok_no_progress"), ("sglang", "process_exit")],
                         indirect=["bundles"])
def test_watch_on_a_replayed_bundle_fires_the_bundles_own_verdicts_at_its_times(bundles, kind):
    bundle = bundles[kind]
    interval = replay.load(bundle).cadence
    fired, incident, _ = replay_and_watch(bundle, interval, seconds_after=2 * interval + ALLOWANCE_S)
    bound = interval + ALLOWANCE_S
    # Every stored verdict is matched by onset; the bundle's trigger (the verdict it was written for) also by
    # its firing time. The others a bundle holds were restated when it was written (bundle.layout.restate).
    stored = incident["verdicts"]
    assert stored
    for verdict in stored:
        same = [f for f in fired if f["name"] == verdict["name"]]
        assert same, (verdict["name"], fired)
        closest = min(same, key=lambda f: abs(f["t"] - float(verdict["t"])))
        print(f"{verdict['name']}: fired {closest['t'] - float(verdict['t']):+.3f} s from the stored time, "
              f"onset {closest['onset'] - float(verdict['onset']):+.3f} s")
        assert abs(closest["onset"] - float(verdict["onset"])) <= bound
        if verdict["name"] == incident["trigger"]["verdict"]:
            assert abs(closest["t"] - float(verdict["t"])) <= bound
        else:   # restated by the bundle's writer from the window it stored: at its end, not at the firing
            assert closest["t"] <= float(verdict["t"]) + bound
    # nothing fired that the recording did not imply: each replayed kind is a stored one, or one the stored
    # samples imply (verify's recomputation of the whole window)
    implied = {v.name for v in replay_implied(bundle)}
    assert {f["name"] for f in fired} <= {v["name"] for v in stored} | implied, fired


def replay_implied(bundle: Path):
    """The verdicts the detectors draw from the bundle's stored samples (what `verify` recomputes)."""
    from servewatch.bundle.recompute import detectors_recompute
    from servewatch.bundle.serialize import sample_from_dict
    from servewatch.bundle.verify import load_bundle

    incident, samples = load_bundle(bundle)
    return detectors_recompute([sample_from_dict(d) for d in samples], incident["detector_config"])
