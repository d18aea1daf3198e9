"""A real vLLM stall, recorded by `watch --pid --out`, replayed by `sim --replay` into a real Prometheus with the
rules `servewatch rules` writes and a real Alertmanager (scripts/replay_alerts.py): the stall alert pages, and the
report gives its delay beside the verdict the bundle recorded.

The worker is SIGSTOPped under four long completions (/health stays 200, the counters freeze), as the "worker
stall" fault of plans/short-vllm.yaml does. One vLLM startup, about a minute of recording and replay."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_cli import Watcher, bundles_under
from lab_observations import log_excerpt
from lab_scrape import wait_until
from lab_servers import start_ready
from lab_traffic import Traffic

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 0.5
STALL = "alive_health_ok_no_progress"
# What the alert's path adds to the recorded verdict: serve's scrape of the replay (one cadence), Prometheus's
# scrape of serve and its rule evaluation (one cadence each), Alertmanager's webhook; plus the allowance measured
# on the simulator's stall bundle (1.3 s over, tests/test_replay_alerts.py), doubled for a machine the engine loads.
ALLOWANCE_S = 3.0


def _tools_or_skip() -> None:
    missing = [name for name, names in (("prometheus", ("prometheus",)),
                                        ("alertmanager", ("prometheus-alertmanager", "alertmanager")))
               if not any(shutil.which(n) for n in names)]
    if not missing:
        return
    words = f"needs {', '.join(missing)} (Debian packages prometheus, prometheus-alertmanager), not installed"
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(words + "; under CI=true a missing tool fails the test", pytrace=False)
    pytest.skip(words)


def test_a_real_vllm_stall_bundle_replayed_into_prometheus_pages_near_the_recorded_verdict(lab, run_dir):
    _tools_or_skip()
    server = start_ready(lab, "alert-stall", max_num_seqs=8, kv_cache_memory_bytes=4 * 2**20, max_model_len=2048)
    out = run_dir / "stall-bundles"
    try:
        tree = server.process_tree()
        with Watcher(server.url, out, pid=tree.api_server, interval=INTERVAL) as watcher:
            traffic = Traffic(server.url, n=4, concurrency=4, max_tokens=1500, timeout_s=180).start()
            running = wait_until(server.url, lambda raw: raw.get("vllm:num_requests_running") >= 1, timeout_s=60)
            assert running is not None, "no request ran"
            stopped = time.monotonic()
            os.kill(tree.worker, signal.SIGSTOP)
            try:
                verdict = watcher.wait_for(STALL, 30, after=stopped)
            finally:
                os.kill(tree.worker, signal.SIGCONT)
            assert verdict is not None, watcher.describe()
            assert traffic.wait(200)
    finally:
        server.stop()
        lab.obs.save_text("alert_stall_server.log", log_excerpt(server.log_text(), max_lines=400))
    bundle = next((b for b in bundles_under(out) if f"-{STALL}-" in b.name), None)
    assert bundle is not None, [b.name for b in bundles_under(out)]

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "replay_alerts.py"), str(bundle),
                           "--slo", str(ROOT / "tests" / "rules" / "slo.yaml"), "--lead", "20", "--hold", "15",
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    stall = {a["alert"]: a for a in result["alerts"]}.get("ServewatchStall")
    lab.obs.say(f"replay alerts: a real vLLM stall bundle; servewatch's verdict {result['verdict_s']:.1f} s after the "
                f"onset (recorded), ServewatchStall "
                + (f"paged {stall['notified_s']:.1f} s after it (Prometheus firing at {stall['firing_s']:.1f} s)"
                   if stall and stall["notified_s"] is not None else "did not page")
                + f"; {len(result['not_pending'])} of {result['rules']} alerts never pending")
    lab.obs.record("replay_alerts", result)
    assert result["incident"] == STALL
    assert stall is not None and stall["notified_s"] is not None and stall["firing_s"] is not None, result["alerts"]
    assert result["verdict_s"] - INTERVAL <= stall["firing_s"] <= result["verdict_s"] + 3 * INTERVAL + ALLOWANCE_S
