"""The KV connector's series and log lines (prefill/decode disaggregation, issue 52) mapped by the vLLM and SGLang
dialects onto EngineState.kv_transfer. The fixtures under tests/fixtures/pd_source/ are written from the installed
sources' exact formats (their README says so and from which files), until the lab pair's captures exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from servewatch.dialects import read_scrape
from servewatch.engine.state import KvTransfer
from servewatch.sources.logs import parse_line

FIXTURES = Path(__file__).parent / "fixtures" / "pd_source"


def _only(name: str) -> KvTransfer | None:
    scrape = read_scrape((FIXTURES / name).read_text())
    assert len(scrape.engines) == 1
    return scrape.engines[0].kv_transfer


def test_vllm_nixl_decode_waiting_for_kv():
    kv = _only("vllm_decode_nixl.metrics")
    assert kv == KvTransfer(role="decode", waiting_for_kv=1.0, fetch_in_progress=1.0, external_prompt_tokens=300.0,
                            local_prompt_tokens=0.0, transfers=1.0, bytes_transferred=196608.0,
                            failed_transfers=3.0, failed_notifications=1.0, expired=0.0)


def test_vllm_nixl_prefill_with_expired_leases():
    kv = _only("vllm_prefill_nixl.metrics")
    assert kv == KvTransfer(role="prefill", waiting_for_kv=0.0, external_prompt_tokens=0.0, local_prompt_tokens=600.0,
                            transfers=0.0, bytes_transferred=0.0, failed_transfers=0.0, failed_notifications=0.0,
                            expired=2.0)


def test_vllm_example_connector_consumer_is_a_decode_without_nixl_series():
    kv = _only("vllm_decode_example.metrics")
    assert (kv.role, kv.external_prompt_tokens, kv.local_prompt_tokens) == ("decode", 256.0, 44.0)
    assert (kv.transfers, kv.failed_transfers, kv.expired) == (None, None, None)


def test_vllm_without_a_connector_has_no_kv_transfer_side():
    scrape = read_scrape((FIXTURES / "vllm_plain.metrics").read_text())
    assert scrape.dialect == "vllm" and scrape.engines[0].kv_transfer is None


def test_sglang_decode_queues_are_totals_not_the_priority_breakdown():
    kv = _only("sglang_decode.metrics")
    assert kv == KvTransfer(role="decode", waiting_for_kv=5.0, failed_transfers=4.0, bootstrap_failed=0.0,
                            local_prompt_tokens=7.0)


def test_sglang_prefill_transfers_latency_count_and_bytes():
    kv = _only("sglang_prefill.metrics")
    assert kv == KvTransfer(role="prefill", prefill_queue=3.0, transfers=3.0, bytes_transferred=1.5 * 2**20,
                            failed_transfers=0.0, bootstrap_failed=1.0, local_prompt_tokens=300.0)


def test_sglang_unified_engine_has_no_kv_transfer_side():
    scrape = read_scrape((FIXTURES / "sglang_unified.metrics").read_text())
    assert scrape.dialect == "sglang" and scrape.engines[0].kv_transfer is None


def _events(name: str) -> list[tuple[str, dict]]:
    out = []
    for line in (FIXTURES / name).read_text().splitlines():
        out += [(event.kind, event.fields) for event in parse_line(line, 0.0)]
    return out


def test_vllm_connector_log_lines():
    events = _events("vllm_pd.log")
    kinds = [kind for kind, _ in events]
    assert kinds == ["stats", "kv_transfer_stats", "kv_transfer_failure", "kv_load_failed", "kv_expired",
                     "kv_external_hit"]
    stats, metrics, failure, failed, expired, _ = (fields for _, fields in events)
    assert (stats["deferred"], stats["kv_fetch_in_progress"], stats["waiting"]) == (1, 1, 1)
    assert (metrics["transfers"], metrics["failed"], metrics["expired"], metrics["p90_xfer_ms"]) == (2, 1, 0, 19870.25)
    assert failure["failure_type"] == "transfer_exception"
    assert (failed["requests"], failed["tokens"], failed["recovered"]) == (1, 300, False)
    assert expired["retrieved_by"] == 0


def test_sglang_connector_log_lines():
    events = _events("sglang_pd.log")
    assert [kind for kind, _ in events] == ["stats", "stats", "kv_timeout", "kv_transfer_failure",
                                            "kv_transfer_failure"]
    decode, prefill, _, transfer, bootstrap = (fields for _, fields in events)
    assert (decode["prealloc"], decode["transfer"]) == (2, 3)
    assert (prefill["bootstrap"], prefill["inflight"]) == (1, 2)
    assert {k: transfer[k] for k in ("side", "stage", "timeout_s", "poll")} == {
        "side": "decode", "stage": "transfer", "timeout_s": 300.0, "poll": "WaitingForInput"}
    assert (bootstrap["side"], bootstrap["stage"], bootstrap["poll"]) == ("prefill", "bootstrap", "Bootstrapping")


@pytest.mark.parametrize("name", ["vllm_pd.log", "sglang_pd.log"])
def test_connector_log_findings_keep_no_request_ids(name):
    """Numbers and the grammar's literals only: a request id, a bootstrap room or an engine id never survives."""
    for _, fields in _events(name):
        for value in fields.values():
            assert not isinstance(value, str) or not any(t in value for t in ("cmpl", "5c1e9d", "8812", "e1c0"))


def test_an_engine_with_a_connector_keeps_its_side_through_a_bundle():
    """serialize -> schema-valid JSON -> the same KvTransfer (so verify and recompute see what the recorder saw); an
    engine without a connector writes no kv_transfer, as bundles did before."""
    import json

    import jsonschema

    from servewatch.bundle import serialize
    from servewatch.bundle.schemas import load

    schema = load("samples", (), ("engine", "model_name"))
    engine_schema = {"$defs": schema["$defs"], "$ref": "#/$defs/engine"}
    decode = read_scrape((FIXTURES / "vllm_decode_nixl.metrics").read_text()).engines[0]
    plain = read_scrape((FIXTURES / "vllm_plain.metrics").read_text()).engines[0]
    written = json.loads(json.dumps(serialize.engine_to_dict(decode)))
    jsonschema.validate(written, engine_schema)
    assert written["kv_transfer"]["role"] == "decode"
    assert serialize.engine_from_dict(written).kv_transfer == decode.kv_transfer
    assert "kv_transfer" not in serialize.engine_to_dict(plain)
    assert serialize.engine_from_dict(serialize.engine_to_dict(plain)).kv_transfer is None


# --- the lab's real NIXL pair (tests/fixtures/pd/, captured by the lab; its README says how) ----------------------

REAL = Path(__file__).parent / "fixtures" / "pd"


def _real(name: str) -> KvTransfer | None:
    [engine] = read_scrape((REAL / name).read_text()).engines
    return engine.kv_transfer


def test_real_nixl_pair_after_one_transfer():
    decode = _real("kvboth-nixl-healthy-decode.metrics.txt")
    prefill = _real("kvboth-nixl-healthy-prefill.metrics.txt")
    assert decode == KvTransfer(role="decode", waiting_for_kv=0.0, fetch_in_progress=0.0, external_prompt_tokens=1063.0,
                                local_prompt_tokens=0.0, transfers=1.0, bytes_transferred=589824.0,
                                failed_transfers=0.0, failed_notifications=0.0, expired=0.0)
    # kv_both on both sides: the prefill's series cannot tell its role (the deployment says it)
    assert (prefill.role, prefill.local_prompt_tokens, prefill.external_prompt_tokens, prefill.transfers) == (
        None, 1063.0, 0.0, 0.0)


def test_real_nixl_bypass_decode_computes_while_the_prefill_is_unchanged():
    decode = _real("kvboth-nixl-bypass-decode.metrics.txt")
    assert (decode.local_prompt_tokens, decode.external_prompt_tokens, decode.transfers) == (1090.0, 1063.0, 1.0)
    assert _real("kvboth-nixl-bypass-prefill.metrics.txt") == _real("kvboth-nixl-healthy-prefill.metrics.txt")


def test_real_nixl_prefill_killed_decode_counts_the_failures():
    decode = _real("kvboth-nixl-prefill-killed-after-handshake-decode.metrics.txt")
    assert (decode.failed_transfers, decode.failed_notifications, decode.waiting_for_kv) == (2.0, 1.0, 0.0)
    events = [(e.kind, e.fields) for line in
              (REAL / "kvboth-nixl-prefill-killed-after-handshake-decode.log.txt").read_text().splitlines()
              for e in parse_line(line, 0.0) if e.kind != "startup"]
    assert events == [
        ("kv_transfer_failure", {"dialect": "vllm", "failure_type": "transfer_setup_failed"}),
        ("kv_load_failed", {"dialect": "vllm", "requests": 1, "tokens": 1068, "recovered": False}),
        ("kv_transfer_failure", {"dialect": "vllm", "failure_type": "notification_failed"}),
    ]


def test_real_decode_stats_line_carries_the_external_prefix_cache_hit_rate():
    stats = [e.fields for line in (REAL / "kvboth-nixl-healthy-decode.log.txt").read_text().splitlines()
             for e in parse_line(line, 0.0) if e.kind == "stats"]
    assert stats and {s["external_hit_pct"] for s in stats} == {100.0}


def test_the_simulated_decode_exposes_every_connector_family_the_real_one_does():
    """Same names and types for the P/D families (nixl_*, the KV fetch gauge, the external cache, by-source)."""
    import asyncio

    from prometheus_client.parser import text_string_to_metric_families

    from tests.pd_harness import pd_pair

    def pd_families(text: str) -> dict[str, str]:
        return {f.name: f.type for f in text_string_to_metric_families(text)
                if any(word in f.name for word in ("nixl", "kv_fetch", "external_prefix", "by_source", "by_reason"))}

    async def sim_text() -> str:
        async with pd_pair("vllm") as pair:
            return pair.decode.engine.metrics_text()

    real = pd_families((REAL / "kvboth-nixl-healthy-decode.metrics.txt").read_text())
    assert len([name for name in real if not name.endswith("_created")]) == 14
    assert pd_families(asyncio.run(sim_text())) == real
