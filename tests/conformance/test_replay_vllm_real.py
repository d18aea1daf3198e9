"""Fast replay of what the conformance suite recorded on a real vLLM 0.32.0 (tests/fixtures/vllm_real).

No engine needed: these check servewatch's reading of real scrapes and real log lines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servewatch.dialects import read_scrape
from servewatch.dialects import vllm as dialect

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_real"
PROMS = sorted(REAL.glob("*.prom"))
LOG_LINE_PREFIX = dialect.LOG_PREFIX


def _engine(name: str):
    scrape = read_scrape((REAL / name).read_text(encoding="utf-8"))
    assert scrape.dialect == "vllm" and scrape.naming == "vllm-0.32"
    assert len(scrape.engines) == 1
    return scrape.engines[0]


def _observations() -> dict:
    return json.loads((REAL / "observations.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", PROMS, ids=[p.name for p in PROMS])
def test_every_recorded_scrape_reads_as_one_tiny_vllm_engine(path):
    engine = _engine(path.name)
    assert engine.labels == {"model_name": "tiny", "engine": "0"}
    assert engine.kv_total_tokens == 8192
    assert engine.counters.steps is not None and engine.counters.generation_tokens is not None


@pytest.mark.parametrize("path", PROMS, ids=[p.name for p in PROMS])
def test_the_suites_light_scan_reads_what_prometheus_client_reads(path):
    from lab_scrape import parse_light, parse_raw

    text = path.read_text(encoding="utf-8")
    assert parse_light(text) == parse_raw(text)


def test_recorded_kv_pressure_shows_full_kv_and_new_preemptions():
    t0, t1 = _engine("kv_pressure_t0.prom"), _engine("kv_pressure_t1.prom")
    assert t1.kv_usage >= 0.9
    assert t1.counters.preemptions > t0.counters.preemptions
    assert t1.waiting > 0


def test_recorded_stall_has_admitted_work():
    engine = _engine("stall_sigstop.prom")
    assert engine.running >= 1


def test_recorded_overload_is_pinned_at_four_slots_with_kv_to_spare():
    engine = _engine("overload_slots.prom")
    assert engine.running == 4 and engine.waiting >= 8 and engine.kv_usage < 0.9


def test_paths_in_fixtures_are_neutral():
    for path in REAL.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "/root/" not in text and "servewatch-conformance-" not in text, path.name
        assert not re.search(r"\.cache/servewatch", text), path.name


def test_every_periodic_stats_line_matches_the_dialect_grammar():
    text = (REAL / "default_server.log").read_text(encoding="utf-8")
    stats = [line for line in text.splitlines() if "Avg prompt throughput" in line]
    assert len(stats) >= 20
    for line in stats:
        prefix = LOG_LINE_PREFIX.match(line)
        assert prefix and prefix["process"] == "APIServer", line
        assert dialect.STATS_LINE.search(prefix["msg"]), line
    devices = {dialect.STATS_LINE.search(line)["device"] for line in stats}
    assert devices == {"CPU"}


def test_kv_cache_size_line_matches_the_flags():
    text = (REAL / "default_server.log").read_text(encoding="utf-8")
    match = next(m for m in map(dialect.KV_CACHE_SIZE_LINE.search, text.splitlines()) if m)
    assert match["tokens"] == "8,192" and match["per_request"] == "2,048" and float(match["concurrency"]) == 4.0


def test_startup_failure_log_carries_a_known_failure_literal():
    text = (REAL / "startup_failure_undersized_kv.log").read_text(encoding="utf-8")
    assert any(literal in text for literal in dialect.STARTUP_FAILURE_LINES)
    assert _observations()["undersized_kv"]["exit_code"] == 1


def test_engine_death_log_carries_engine_dead_literals():
    text = (REAL / "engine_death_by_worker_sigkill.log").read_text(encoding="utf-8")
    assert sum(literal in text for literal in dialect.ENGINE_DEAD_LINES) >= 2
    observed = _observations()["worker_sigkill"]
    assert observed["api_server_exit_code"] is not None
