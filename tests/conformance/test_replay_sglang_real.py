"""Fast replay of what a real SGLang 0.5.23 on CPU exposed and logged (tests/fixtures/sglang_real, paths
rewritten to /models/tiny and /opt/sglang-venv). No engine needed.

The simulator's SGLang /metrics is held against the real capture here: every family the real server
exposed, with the same type and label names.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from servewatch.clock import RealClock
from servewatch.dialects import read_scrape
from servewatch.dialects import sglang as dialect
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.server import build_app
from servewatch.sources.logs import parse_line

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_real"
PROMS = ("metrics_idle.prom", "metrics_busy.prom", "metrics_after.prom")
LOGS = ("server.log", "server_run2.log")


def _shapes(text: str) -> dict[str, tuple[str, frozenset[str], str]]:
    """Family name -> (type, label names except le over all its samples, HELP)."""
    shapes = {}
    for family in text_string_to_metric_families(text):
        labels = frozenset(k for sample in family.samples for k in sample.labels if k != "le")
        shapes[family.name] = (family.type, labels, family.documentation)
    return shapes


def _real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


# -- the simulator against the real exposition ----------------------------------------------------

async def _sim_metrics_after_traffic() -> str:
    """`servewatch sim --dialect sglang`'s app on a loopback port: the probes and requests the real
    capture saw (/health, /health_generate, completions), then /metrics."""
    engine = SimEngine(SimConfig(dialect="sglang", profile="tiny-cpu", seed=5), RealClock())
    runner = web.AppRunner(build_app(engine), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    loop_task = asyncio.create_task(engine.run_realtime())
    try:
        timeout = aiohttp.ClientTimeout(total=20)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=timeout) as http:
            for path in ("/health", "/health_generate"):
                async with http.get(path) as response:
                    assert response.status == 200
            body = {"model": engine.config.model_name, "prompt": "the same prefix for all of them", "max_tokens": 8}
            for _ in range(3):
                async with http.post("/v1/completions", json=body) as response:
                    assert response.status == 200
                    await response.read()
            async with http.get("/metrics") as response:
                return await response.text()
    finally:
        await runner.cleanup()
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop_task


@pytest.fixture(scope="module")
def sim_text() -> str:
    return asyncio.run(asyncio.wait_for(_sim_metrics_after_traffic(), timeout=60))


def test_sim_exposes_every_real_family_with_the_same_type_labels_and_help(sim_text):
    real, sim = _shapes(_real("metrics_after.prom")), _shapes(sim_text)
    matching = sorted(name for name, shape in real.items() if sim.get(name) == shape)
    fraction = len(matching) / len(real)
    differing = {name: (shape, sim.get(name)) for name, shape in real.items() if sim.get(name) != shape}
    print(f"sim vs real SGLang 0.5.23: {len(matching)}/{len(real)} families match ({fraction:.0%})")
    assert len(real) == 83
    assert differing == {}, f"{len(matching)}/{len(real)} match; real vs sim: {differing}"
    assert set(sim) - set(real) <= {"sglang:num_aborted_requests", "sglang:num_retracted_requests"}


def test_sim_exposition_has_no_process_families_and_every_name_prefixed(sim_text):
    names = _shapes(sim_text)
    assert names and all(name.startswith("sglang:") for name in names)


# -- servewatch reading the real capture -------------------------------------------------------------

@pytest.mark.parametrize("name", PROMS)
def test_every_real_scrape_reads_as_one_sglang_0_5_23_engine(name):
    text = _real(name)
    scrape = read_scrape(text)
    assert (scrape.dialect, scrape.naming) == ("sglang", "sglang-0.5.23")
    assert len(scrape.engines) == 1
    engine = scrape.engines[0]
    raw = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
           if not s.labels.get("le") and "is_streaming" not in s.labels}
    assert engine.running == raw["sglang:num_running_reqs"]
    assert engine.waiting == raw["sglang:num_queue_reqs"]
    assert engine.kv_usage == raw["sglang:token_usage"]
    assert engine.kv_total_tokens == raw["sglang:max_total_num_tokens"] == 8192


def test_busy_capture_shows_the_running_requests_and_a_gen_throughput_of_zero():
    engine = read_scrape(_real("metrics_busy.prom")).engines[0]
    assert engine.running >= 1
    # gen_throughput moves only when a Decode line is logged: a busy scrape can read 0.0.
    busy = {s.name: s.value for f in text_string_to_metric_families(_real("metrics_busy.prom")) for s in f.samples}
    assert busy["sglang:gen_throughput"] == 0.0


def test_families_that_appear_only_after_traffic():
    idle, after = _shapes(_real("metrics_idle.prom")), _shapes(_real("metrics_after.prom"))
    assert set(after) - set(idle) == {"sglang:inter_token_latency_seconds", "sglang:cached_tokens"}


def test_model_name_label_carries_the_model_path():
    """Why the privacy allow-list matters on SGLang: the label value is the filesystem path."""
    assert 'model_name="/models/tiny"' in _real("metrics_idle.prom")


# -- the real log lines -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", LOGS)
def test_every_prefill_and_decode_line_of_the_real_log_is_a_stats_event(name):
    lines = _real(name).splitlines()
    batch_lines = [line for line in lines if "Prefill batch" in line or "Decode batch" in line]
    assert batch_lines and all("cpu graph:" in line for line in batch_lines)
    events = [e for line in batch_lines for e in parse_line(line, 0.0)]
    assert [e.kind for e in events] == ["stats"] * len(batch_lines)
    assert [e.fields["batch"] for e in events] == ["prefill" if "Prefill" in ln else "decode" for ln in batch_lines]


def test_decode_line_fields_with_cpu_and_cuda_graph():
    line = ("[2026-11-30 13:51:57] Decode batch, #running-req: 20, #token: 949, token usage: 0.12, cpu graph: False, "
            "gen throughput (token/s): 40.15, #queue-req: 0")
    for text in (line, line.replace("cpu graph", "cuda graph")):
        [event] = parse_line(text, 1.0)
        assert event.fields == {"dialect": "sglang", "batch": "decode", "running": 20, "tokens": 949,
                                "token_usage": 0.12, "gen_tps": 40.15, "queue": 0}


def test_prefill_line_fields_with_cpu_and_cuda_graph():
    line = ("[2026-11-30 13:51:56] Prefill batch, #new-seq: 12, #new-token: 268, #cached-token: 0, token usage: 0.03, "
            "#running-req: 1, #queue-req: 0, #pending-token: 0, cpu graph: False, input throughput (token/s): 7878.72")
    for text in (line, line.replace("cpu graph", "cuda graph")):
        [event] = parse_line(text, 1.0)
        assert event.fields == {"dialect": "sglang", "batch": "prefill", "new_seq": 12, "new_tokens": 268,
                                "cached_tokens": 0, "token_usage": 0.03, "running": 1, "queue": 0}


def test_a_failed_health_generation_is_not_an_engine_death():
    """Seen on a real 0.5.23 whose scheduler was stopped for 12 s: it recovered after SIGCONT."""
    line = ("[2026-11-30 14:02:11] Health check failed. Server couldn't get a response from detokenizer for last "
            "20 seconds. tic start time: 14:01:51. last_heartbeat time: 14:01:50")
    events = parse_line(line, 0.0)
    assert [(e.kind, e.fields.get("reason")) for e in events] == [("error", "health check failed")]
    assert any(literal in line for literal in dialect.HEALTH_CHECK_FAILED_LINES)
    assert not any(literal in line for literal in dialect.ENGINE_DEAD_LINES)


def test_a_crashed_child_is_an_engine_death():
    line = "[2026-11-30 14:05:02] Subprocess scheduler_0 (pid=4242) crashed with exit code -9. Triggering SIGQUIT..."
    assert [e.kind for e in parse_line(line, 0.0)] == ["engine_dead"]
