"""One real SGLang 0.5.23 on CPU (8,192 KV tokens, context 2,048, 16 slots, the model served by its path)
through detection and inspect, 60 s idle, the log tail and the four load presets. The tests run in file order on
one server; each is bounded by its own waits. Every case also proves that SGLang never called a stubbed op of the
test-only sgl_kernel stand-in. (The stopped scheduler and the killed scheduler are faults of plans/short-sglang.yaml.)"""

from __future__ import annotations

import asyncio
import time

import pytest
from lab_cli import cli_json
from lab_observations import log_excerpt
from lab_presets import assert_signature_shapes, run_presets, signature_lines
from lab_servers import assert_no_stand_in_call, start_ready
from lab_sglang import (
    RUNNING,
    STEPS,
    scrape_sglang,
    wait_scrape,
)
from lab_traffic import Traffic

from servewatch.clock import RealClock
from servewatch.sources.logs import LogTail

pytestmark = [pytest.mark.sglang, pytest.mark.timeout(600)]

KV_TOKENS = 8192
SLOTS = 16
DEATHS = ("engine_dead", "process_exit")
STALLS = ("alive_health_ok_no_progress", "health_loss")


@pytest.fixture(scope="module")
def server(sglang_lab):
    server = start_ready(sglang_lab, "sglang", max_total_tokens=KV_TOKENS, context_length=2048,
                                max_running_requests=SLOTS)
    yield server
    server.stop()
    sglang_lab.obs.save_text("sglang_server.log", log_excerpt(server.log_text(), max_lines=1500))
    assert_no_stand_in_call(server)


def _traffic(server, lab, **kwargs) -> Traffic:
    # Served by its path, SGLang names the model by that path.
    return Traffic(server.url, model=str(lab.model.path), **kwargs)


# -- detection and inspect vs the raw scrape -------------------------------------------------------

def test_detected_and_inspect_agrees_with_raw_scrape(sglang_lab, server, sglang_run_dir):
    traffic = _traffic(server, sglang_lab, n=4, concurrency=4, max_tokens=32).start()
    assert traffic.wait(120)
    assert traffic.result.statuses == [200] * 4, traffic.result.statuses
    assert traffic.result.completion_tokens == [32] * 4
    quiet = wait_scrape(server.url, lambda r: r.get(RUNNING) == 0, timeout_s=30)
    assert quiet is not None
    before = scrape_sglang(server.url)
    report = cli_json("inspect", server.url + "/metrics", "--json", timeout_s=60)
    after = scrape_sglang(server.url)
    (path := sglang_run_dir / "after_traffic.prom").write_text(after.text)
    sglang_lab.obs.save_text("after_traffic.prom", after.text)
    # Idle, the engine's numbers stay; SGLang's own HTTP and CPU-time counters move with every scrape,
    # and fwd_occupancy reads NaN on CPU.
    engine_keys = [k for k in after.values if not k.startswith(("sglang:http_", "sglang:process_cpu",
                                                                "sglang:scheduler_")) and after.values[k] == after.values[k]]
    assert {k: before.values.get(k) for k in engine_keys} == {k: after.values[k] for k in engine_keys}, \
        "the idle server's engine numbers moved during the check"
    raw = after.values

    assert (report["dialect"], report["generation"]) == ("sglang", "sglang-0.5.23")
    assert len(report["engines"]) == 1
    engine = report["engines"][0]
    assert engine["running"] == raw[RUNNING] == 0
    assert engine["waiting"] == raw["sglang:num_queue_reqs"] == 0
    assert engine["kv_usage"] == raw["sglang:token_usage"]
    assert engine["kv_used_tokens"] == raw["sglang:kv_used_tokens"]
    assert engine["kv_total_tokens"] == raw["sglang:max_total_num_tokens"] == KV_TOKENS
    counters = engine["counters"]
    # Tokenizer counters carry is_streaming: the engine's value is their sum.
    assert counters["generation_tokens"] == raw["sglang:generation_tokens_total"] >= 4 * 32
    assert counters["prompt_tokens"] == raw["sglang:prompt_tokens_total"] > 0
    assert counters["steps"] == raw[STEPS] > 0
    assert counters["finished"]["all"] == raw["sglang:num_requests_total"] >= 4
    assert counters["preemptions"] == raw.get("sglang:num_retracted_requests_total")
    histograms = {}
    for kind, family in (("ttft", "sglang:time_to_first_token_seconds"), ("itl", "sglang:inter_token_latency_seconds"),
                         ("e2e", "sglang:e2e_request_latency_seconds"), ("queue", "sglang:queue_time_seconds"),
                         ("tpot", "sglang:request_time_per_output_token_seconds")):
        if f"{family}_count" not in raw:   # ITL: SGLang observes it for streamed requests only
            assert kind not in engine["histograms"], kind
            histograms[kind] = "absent"
            continue
        summary = engine["histograms"][kind]
        assert summary["count"] == raw[f"{family}_count"] > 0, kind
        assert summary["mean_s"] == pytest.approx(raw[f"{family}_sum"] / raw[f"{family}_count"], rel=1e-9)
        first = raw[f"{family}_bucket{{le={_le(summary['first_bucket_le'])}}}"]
        assert summary["first_bucket_fraction"] == pytest.approx(first / raw[f"{family}_count"])
        histograms[kind] = {"count": summary["count"], "first_bucket_le": summary["first_bucket_le"],
                            "first_bucket_fraction": round(summary["first_bucket_fraction"], 3),
                            "blind": summary["blind"]}
    sglang_lab.obs.record("inspect_histograms", histograms)
    sglang_lab.obs.say("inspect: sglang-0.5.23, running/queue/token usage/KV tokens/counters equal the raw scrape; "
                       + "; ".join(f"{k} {v['first_bucket_fraction']:.0%} ≤ {v['first_bucket_le']} s"
                                   f"{' (blind)' if v['blind'] else ''}" if isinstance(v, dict) else f"{k} {v}"
                                   for k, v in histograms.items()))
    # The same numbers from the file as from the URL.
    assert cli_json("inspect", str(path), "--json", timeout_s=60)["engines"][0]["counters"] == counters
    assert_no_stand_in_call(server)


def _le(edge: float) -> str:
    return repr(float(edge))


# -- the log tail -------------------------------------------------------------------------------------

def test_log_tail_turns_prefill_and_decode_lines_into_events(sglang_lab, server):
    tail = LogTail(str(server.log_path), RealClock(), 0.5)

    async def follow() -> list:
        await tail.poll()                      # opens the file at its end: only lines from now on
        traffic = _traffic(server, sglang_lab, n=8, concurrency=8, max_tokens=128).start()
        events = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            events += [e for e in await tail.poll() if e.kind == "stats"]
            batches = {e.fields["batch"] for e in events}
            if traffic.done.is_set() and {"prefill", "decode"} <= batches:
                break
            await asyncio.sleep(0.5)           # the tail's own cadence
        assert traffic.result.statuses == [200] * 8, traffic.result.statuses
        return events

    events = asyncio.run(follow())
    prefill = [e.fields for e in events if e.fields["batch"] == "prefill"]
    decode = [e.fields for e in events if e.fields["batch"] == "decode"]
    sglang_lab.obs.say(f"log tail: {len(prefill)} prefill and {len(decode)} decode events from 8 x 128 tokens; "
                       f"decode peak running {max((d['running'] for d in decode), default=0)}")
    assert prefill and decode, f"prefill {len(prefill)}, decode {len(decode)}"
    assert all(e["dialect"] == "sglang" for e in prefill + decode)
    assert sum(p["new_seq"] for p in prefill) >= 8
    assert max(d["running"] for d in decode) >= 1 and all(d["gen_tps"] >= 0 for d in decode)
    assert "cpu graph: False" in server.log_text()   # the CPU build's wording, where GPU logs say "cuda graph"
    assert_no_stand_in_call(server)


# -- the four load presets' signature shapes ---------------------------------------------------------

# Sized for SGLang on 2 CPU cores with the tiny model (measured here: 16 streams decoded 440-1,500
# tokens/s by the machine's load): overload's 40 req/s x 128 tokens is 3-10 x that, long enough to keep
# all 16 slots busy between SGLang's gauge updates (it publishes them when it logs a batch); the
# long-output requests take 11-20 s in all.
PRESET_RUNS = {
    "normal": ("--scenario", "normal", "--requests", "8"),
    "overload": ("--scenario", "overload", "--requests", "64", "--rate", "40"),
    "long-prompt": ("--scenario", "long-prompt", "--requests", "4", "--prompt-tokens", "1500"),
    "long-output": ("--scenario", "long-output", "--requests", "4"),
}


def test_load_presets_give_their_signature_shapes(sglang_lab, server, sglang_run_dir):
    rows = run_presets(server.url, PRESET_RUNS, sglang_run_dir, tokenizer=sglang_lab.model.path)
    sglang_lab.obs.record("signatures", rows)
    for line in signature_lines(rows):
        sglang_lab.obs.say(line)
    assert_signature_shapes(rows, slots=SLOTS)
    assert_no_stand_in_call(server)
