"""One real SGLang 0.5.23 on CPU (8,192 KV tokens, context 2,048, 16 slots, the model served by its path)
through detection and inspect, 60 s idle, the log tail, the four load presets, a stopped scheduler and its
recovery, and last a killed scheduler (which ends it). The tests run in file order on one server; each is bounded by its own waits.
Every case also proves that SGLang never called a stubbed op of the test-only sgl_kernel stand-in."""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import time
from pathlib import Path

import pytest
from lab_cli import Watcher, assert_bundles_verify, cli_json
from lab_observations import log_excerpt
from lab_presets import assert_signature_shapes, run_presets, signature_lines
from lab_servers import assert_no_stand_in_call, start_ready
from lab_sglang import (
    RUNNING,
    STEPS,
    HealthProbes,
    kill_under_load,
    probe,
    scrape_sglang,
    stop_scheduler_on_running_work,
    wait_scrape,
)
from lab_timing import expect_stall
from lab_traffic import Traffic

from servewatch.clock import RealClock
from servewatch.dialects.sglang import HEALTH_CHECK_FAILED_LINES
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


# -- a stopped scheduler: a stall, not a death ---------------------------------------------------------

HEALTH_PATHS = ("/health", "/health_generate")
IN_FLIGHT_S = 1.0  # a step finished just before the stop reaches the HTTP process through the detokenizer
HOLD_S = 26.0      # past SGLang's own 20 s health-generation timeout, so its "Health check failed" line shows


def test_stopped_scheduler_is_a_stall_not_a_death_and_recovers(sglang_lab, server, sglang_run_dir):
    tree = server.process_tree()
    out = sglang_run_dir / "bundles"
    with Watcher(server.url, out, pid=server.pid, interval=0.5, log_file=server.log_path) as watcher:
        log_before = len(server.log_text())
        traffic = _traffic(server, sglang_lab, n=6, concurrency=6, max_tokens=1000, timeout_s=300).start()
        stopped_at, frozen = stop_scheduler_on_running_work(server.url, tree.engine_core)
        probes = HealthProbes(server.url, seconds=HOLD_S + 40)
        probes.start()
        try:
            # The stall verdict itself is required (health_loss fires whenever /health fails, so it
            # proves nothing about progress), within the threshold it reports plus two cadences.
            stall = expect_stall(watcher, after=stopped_at, cadence_s=0.5)
            health_failed_seen = _wait_log(server, HEALTH_CHECK_FAILED_LINES[0], since=log_before,
                                           until=stopped_at + HOLD_S + 10)
            time.sleep(max(0.0, stopped_at + HOLD_S - time.monotonic()))  # hold the stop for HOLD_S in all
            stopped_verdicts = watcher.verdicts(after=stopped_at)
        finally:
            resumed_at = time.monotonic()
            os.kill(tree.engine_core, signal.SIGCONT)
        healthy = _wait_healthy(server.url, timeout_s=60)
        assert traffic.wait(300), "the requests did not finish after SIGCONT"
        settle_until = time.monotonic() + 10
        while time.monotonic() < settle_until and watcher.proc.poll() is None:
            time.sleep(0.5)   # ten more seconds of watch after the recovery: does anything claim a death?
        probes.stop.set()
        probes.join(timeout=10)
        all_verdicts = watcher.verdicts(after=stopped_at)
    during = {path: probes.statuses(path, stopped_at, resumed_at) for path in HEALTH_PATHS}
    # Answers wholly inside the stop: asked once the last step before it had reached the HTTP process,
    # answered before SIGCONT. (A probe asked during the stop may be answered 200 after SIGCONT when the
    # VM freezes the client past the resume; that answer says nothing about the stop.)
    inside = {path: probes.answered_inside(path, stopped_at + IN_FLIGHT_S, resumed_at) for path in HEALTH_PATHS}
    firsts = {name: round(next(v.arrived for v in all_verdicts if v.name == name) - stopped_at, 2)
              for name in dict.fromkeys(v.name for v in all_verdicts)}
    sglang_lab.obs.record("scheduler_sigstop", {
        "held_s": round(resumed_at - stopped_at, 1), "running_when_stopped": frozen.get(RUNNING),
        "verdicts_first_after_s": firsts, "health_while_stopped": during, "health_answered_inside_stop": inside,
        "health_check_failed_line_after_s": round(health_failed_seen - stopped_at, 1) if health_failed_seen else None,
        "healthy_again_after_resume_s": round(healthy - resumed_at, 1) if healthy else None,
        "probe_timeline": probes.timeline(stopped_at)[:160], "statuses": sorted(set(map(str, traffic.result.statuses)))})
    sglang_lab.obs.say(
        f"scheduler SIGSTOP ({frozen.get(RUNNING):.0f} running, held {resumed_at - stopped_at:.0f} s): verdicts "
        f"{firsts}; /health {_tally(during['/health'])}, /health_generate {_tally(during['/health_generate'])} "
        f"(2 s client timeout); SGLang's 'Health check failed' line after "
        f"{(health_failed_seen - stopped_at) if health_failed_seen else float('nan'):.1f} s; /health 200 again "
        f"{(healthy - resumed_at) if healthy else float('nan'):.1f} s after SIGCONT")

    assert frozen.get(RUNNING) >= 1
    assert not [v.data for v in stopped_verdicts if v.name in DEATHS], "a paused SGLang was called dead"
    assert health_failed_seen is not None, "SGLang's own health check did not fail while its scheduler was stopped"
    assert healthy is not None, "SGLang did not answer /health and /health_generate with 200 after SIGCONT"
    assert traffic.result.statuses == [200] * 6, traffic.result.statuses
    assert traffic.result.completion_tokens == [1000] * 6
    assert not [v.data for v in all_verdicts if v.name in DEATHS], "after the recovery something claimed a death"
    # The health probes that gave up while the scheduler was stopped are counted aborted by SGLang:
    # the stall's symptom, not clients giving up on a serving engine.
    assert not [v.data for v in all_verdicts if v.name == "requests_aborted"], watcher.describe()
    assert len(inside["/health"]) >= 2, f"too few /health answers inside the stop to judge: {probes.timeline(stopped_at)}"
    assert not [status for statuses in inside.values() for status in statuses if status == 200], \
        f"a health route answered 200 while the scheduler was stopped: {probes.timeline(stopped_at)}"
    bundles = assert_bundles_verify(out)
    assert bundles, "the stall wrote no bundle"
    leaks = _bundle_files_containing(out, str(sglang_lab.model.path))
    assert leaks == [], f"the model path (SGLang's model_name label) is in {leaks}"
    sglang_lab.obs.say(f"privacy: {len(bundles)} bundles, the model path ({len(str(sglang_lab.model.path))} chars, "
                       "SGLang's model_name label) in none of their files")
    assert_no_stand_in_call(server)


def _wait_log(server, literal: str, *, since: int, until: float) -> float | None:
    """When `literal` first shows in the log after byte `since` (bounded by monotonic `until`)."""
    while time.monotonic() < until:
        if literal in server.log_text()[since:]:
            return time.monotonic()
        time.sleep(0.5)   # a file another process writes: nothing to wait on
    return None


def _wait_healthy(url: str, *, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if probe(url, "/health", 5.0) == 200 and probe(url, "/health_generate", 5.0) == 200:
            return time.monotonic()
        time.sleep(0.5)   # a remote server's state
    return None


def _tally(statuses: list) -> dict:
    tally: dict[str, int] = {}
    for status in statuses:
        tally[str(status)] = tally.get(str(status), 0) + 1
    return tally


def _bundle_files_containing(root: Path, needle: str) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        if needle.encode() in data:
            hits.append(str(path.relative_to(root)))
    return hits


# -- a killed scheduler: the engine is dead and the server exits (ends this server) -------------------

def test_killed_scheduler_is_engine_dead_then_process_exit(sglang_lab, server, sglang_run_dir):
    record = kill_under_load(sglang_lab, server, sglang_run_dir, server.process_tree().engine_core, "scheduler")
    assert any("Subprocess scheduler_0" in line for line in record["sglang_lines"]), record["sglang_lines"]
    assert_no_stand_in_call(server)
