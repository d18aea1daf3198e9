"""The simulator's scheduling model in virtual time: the seed-002 shapes, preemption by recompute,
prefix caching, chunked prefill, finish reasons and the roofline step times."""

from __future__ import annotations

import pytest

from servewatch.clock import VirtualClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.kvcache import BlockPool
from servewatch.sim.profiles import PROFILES
from servewatch.sim.roofline import step_seconds
from servewatch.sim.scheduler import Scheduler
from servewatch.sim.request import Request


def _closed_loop(engine: SimEngine, streams: int, seconds: float, prompt: int, out: int):
    """`streams` concurrent clients, each sending the next request when the last finished; returns the
    max running / waiting / KV usage seen at 0.5 s samples."""
    clock = engine.clock
    handles = [engine.submit(prompt_tokens=prompt, max_tokens=out, ignore_eos=True) for _ in range(streams)]
    peak = {"running": 0, "waiting": 0, "kv": 0.0}
    end = clock.now() + seconds
    while clock.now() < end:
        engine.run_until(clock.now() + 0.5)
        peak["running"] = max(peak["running"], engine.num_running)
        peak["waiting"] = max(peak["waiting"], engine.num_waiting)
        peak["kv"] = max(peak["kv"], engine.kv_usage)
        handles = [h if not h.finished else engine.submit(prompt_tokens=prompt, max_tokens=out, ignore_eos=True)
                   for h in handles]
    return peak


def _metric(engine: SimEngine, name: str) -> float:
    for line in engine.metrics_text().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def test_300_streams_pin_running_at_the_slot_limit_with_kv_below_half():
    engine = SimEngine(SimConfig(profile="rtx3060-7b", max_num_seqs=256, seed=2), VirtualClock())
    peak = _closed_loop(engine, streams=300, seconds=60, prompt=44, out=128)
    assert peak["running"] == 256
    assert engine.num_running == 256 and engine.num_waiting > 0
    assert _metric(engine, "vllm:num_requests_running") == 256
    assert _metric(engine, "vllm:num_requests_waiting") > 0
    assert peak["kv"] < 0.5
    assert _metric(engine, "vllm:num_preemptions_total") == 0   # out of slots, not memory


def test_small_kv_pool_preempts_and_fills_the_cache():
    engine = SimEngine(SimConfig(profile="rtx3060-7b", max_num_seqs=256, kv_tokens=8192, seed=2), VirtualClock())
    before = _metric(engine, "vllm:num_preemptions_total")
    peak = _closed_loop(engine, streams=300, seconds=30, prompt=200, out=512)
    preemptions = _metric(engine, "vllm:num_preemptions_total")
    assert preemptions > before + 10
    assert peak["kv"] > 0.95
    assert engine.num_running < 256 and engine.num_waiting > 0   # KV, not slots, binds


def test_sglang_counts_preemptions_as_retractions():
    engine = SimEngine(SimConfig(dialect="sglang", profile="rtx3060-7b", kv_tokens=8192, seed=2), VirtualClock())
    _closed_loop(engine, streams=300, seconds=20, prompt=200, out=512)
    assert _metric(engine, "sglang:num_retracted_requests_total") > 10
    assert _metric(engine, "sglang:token_usage") > 0.9


def test_preempted_request_returns_to_the_front_of_waiting_and_recomputes():
    pool = BlockPool(4)
    sched = Scheduler(pool=pool, block_size=4, max_num_seqs=8, max_batched_tokens=64, max_model_len=64)
    a = _request(0, prompt=6)
    b = _request(1, prompt=6)
    c = _request(2, prompt=4)
    for r in (a, b, c):
        sched.add(r, 0.0)
    plan = sched.schedule(0.0)                     # a: 2 blocks, b: 2 blocks, c does not fit
    assert [r.rid for r, _ in plan.scheduled] == [0, 1]
    sched.apply(plan, 1.0)
    assert a.output_len == 1 and b.output_len == 1 and a.num_computed == 6
    for t in (2.0, 3.0):                           # up to 8 tokens each still fit in 2 blocks
        plan = sched.schedule(t - 1)
        assert plan.preempted == []
        sched.apply(plan, t)
    plan = sched.schedule(3.0)                     # a needs a 3rd block: b (newest) is preempted
    assert plan.preempted == [b]
    assert list(sched.waiting)[:2] == [b, c]       # victim at the front
    assert b.num_computed == 0 and b.blocks == [] and b.preemptions == 1
    sched.apply(plan, 3.0)
    sched.abort(a, 3.0)                            # frees a's blocks; b is re-admitted first
    plan = sched.schedule(3.0)
    assert plan.admitted[0].request is b
    assert dict((r.rid, n) for r, n in plan.scheduled)[1] == b.num_tokens   # prompt + output recomputed


def test_prefix_cache_hits_for_a_repeated_prefix_and_misses_otherwise():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(profile="h100-8b", seed=1), clock)
    first = engine.submit(prompt_tokens=2905, max_tokens=8, ignore_eos=True, prefix_key="doc")
    engine.run_until(clock.now() + 1)
    again = engine.submit(prompt_tokens=2905, max_tokens=8, ignore_eos=True, prefix_key="doc")
    engine.run_until(clock.now() + 1)
    other = engine.submit(prompt_tokens=2905, max_tokens=8, ignore_eos=True, prefix_key="other")
    engine.run_until(clock.now() + 1)
    assert first.finished and again.finished and other.finished
    assert first.prefix_hit_tokens == 0
    assert again.prefix_hit_tokens == 2905 // 16 * 16
    assert other.prefix_hit_tokens == 0
    prefill_again = again.first_token_ts - again.scheduled_ts
    prefill_other = other.first_token_ts - other.scheduled_ts
    assert prefill_again < prefill_other


def test_text_prompts_share_blocks_by_content():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(profile="tiny-cpu", block_size=16), clock)
    system = " ".join(f"rule{i}" for i in range(40))
    engine.submit(prompt=system + " what is up", max_tokens=2)
    engine.run_until(clock.now() + 1)
    second = engine.submit(prompt=system + " something else entirely", max_tokens=2)
    engine.run_until(clock.now() + 1)
    assert second.prefix_hit_tokens >= 64


def test_chunked_prefill_respects_the_token_budget():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(profile="h100-8b", max_batched_tokens=512), clock)
    engine.submit(prompt_tokens=2000, max_tokens=4, ignore_eos=True)
    sizes = []
    while engine.num_running or engine.num_waiting:
        result = engine.step()
        sizes.append(result.plan.num_tokens)
    assert max(sizes) <= 512
    assert sizes[:4] == [512, 512, 512, 464]          # 2000 prompt tokens in four chunks
    assert sizes[4:] == [1, 1, 1]                      # then decode


def test_finish_reasons_stop_length_and_abort():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(profile="tiny-cpu", seed=5), clock)
    stops = [engine.submit(prompt_tokens=8, max_tokens=200) for _ in range(10)]
    lengths = [engine.submit(prompt_tokens=8, max_tokens=50, ignore_eos=True) for _ in range(3)]
    victim = engine.submit(prompt_tokens=8, max_tokens=500, ignore_eos=True)
    engine.run_until(clock.now() + 0.05)
    assert engine.abort(victim)
    engine.run_until(clock.now() + 5)
    assert {h.finish_reason for h in lengths} == {"length"}
    assert all(h.output_len == 50 for h in lengths)
    assert "stop" in {h.finish_reason for h in stops}
    assert all(h.output_len <= 200 for h in stops)
    assert victim.finish_reason == "abort" and 0 < victim.output_len < 500
    assert engine.kv_usage == 0.0


def test_token_times_and_listener_follow_each_step():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(profile="tiny-cpu"), clock)
    seen = []
    handle = engine.submit(prompt_tokens=8, max_tokens=64, ignore_eos=True, listener=lambda r: seen.append(r.output_len))
    engine.run_until(clock.now() + 1)
    assert handle.output_len == 64 and len(handle.token_times) == 64
    assert seen[-1] == 64 and len(seen) == 64
    gaps = [b - a for a, b in zip(handle.token_times, handle.token_times[1:])]
    assert all(g > 0 for g in gaps)


@pytest.mark.parametrize("profile,batch,expected,tolerance", [
    ("h100-8b", 1, 0.0045, 0.0003),        # seed 000: 4.48 ms/token at batch 1
    ("rtx3060-7b", 12, 0.016, 0.003),      # seed 002 normal: ITL 0.016 s
    ("rtx3060-7b", 256, 0.147, 0.02),      # seed 002 overload: ITL 0.147 s
])
def test_roofline_step_times_match_the_seeds(profile, batch, expected, tolerance):
    seconds = step_seconds(PROFILES[profile], tokens=batch, sequences=batch, context_tokens=batch * 100)
    assert abs(seconds - expected) <= tolerance


def test_tiny_cpu_profile_decodes_64_tokens_in_about_a_tenth_of_a_second():
    clock = VirtualClock()
    engine = SimEngine(SimConfig(profile="tiny-cpu"), clock)
    handle = engine.submit(prompt_tokens=10, max_tokens=64, ignore_eos=True)
    engine.run_until(clock.now() + 1)
    assert 0.07 <= handle.finished_ts - handle.arrival <= 0.13


def test_rejects_requests_longer_than_the_context():
    from servewatch.sim import RequestRejected
    engine = SimEngine(SimConfig(profile="tiny-cpu"), VirtualClock())
    with pytest.raises(RequestRejected, match="maximum context length is 2048"):
        engine.submit(prompt_tokens=2000, max_tokens=100)


def _request(rid: int, prompt: int) -> Request:
    return Request(rid=rid, arrival=0.0, prompt_len=prompt, max_tokens=100, ignore_eos=True, eos_at=None,
                   block_hashes=[], stream_seed=rid)


def _scenario(rate: float, prompt: int, out: int, seconds: float = 30.0, prefix_key=None) -> dict:
    """Poisson arrivals for `seconds`, then drain; averages and 0.5 s-sampled maxima (seed 002 §3)."""
    import random
    import statistics

    clock = VirtualClock()
    engine = SimEngine(SimConfig(profile="rtx3060-7b", seed=1), clock)
    rng = random.Random(7)
    start = clock.now()
    arrivals, t = [], start
    while True:
        t += rng.expovariate(rate)
        if t >= start + seconds:
            break
        arrivals.append(t)
    handles, peak = [], {"running": 0, "waiting": 0, "kv": 0.0}
    sample_at = start
    for at in arrivals + [start + seconds + 120]:
        while sample_at < at:
            engine.run_until(sample_at)
            peak = {"running": max(peak["running"], engine.num_running),
                    "waiting": max(peak["waiting"], engine.num_waiting), "kv": max(peak["kv"], engine.kv_usage)}
            sample_at += 0.5
        if at < start + seconds:
            engine.run_until(at)
            handles.append(engine.submit(prompt_tokens=prompt, max_tokens=out, ignore_eos=True, prefix_key=prefix_key))
    assert all(h.finished for h in handles)
    mean = statistics.mean
    return {"queue": mean(h.scheduled_ts - h.queued_ts for h in handles),
            "ttft": mean(h.first_token_ts - h.arrival for h in handles),
            "prefill": mean(h.first_token_ts - h.scheduled_ts for h in handles),
            "itl": mean((h.last_token_ts - h.first_token_ts) / (h.output_len - 1) for h in handles),
            "e2e": mean(h.finished_ts - h.arrival for h in handles), **peak}


def test_the_four_seed_002_scenarios_leave_four_signatures():
    normal = _scenario(2, 44, 128)
    overload = _scenario(14, 44, 128, seconds=60.0)
    long_prompt = _scenario(1, 2905, 64, prefix_key="same-document")
    long_output = _scenario(1, 44, 1024)
    # only overload queues, and it is out of slots, not memory
    assert overload["queue"] > 0.1 and overload["waiting"] > 0
    for calm in (normal, long_prompt, long_output):
        assert calm["queue"] == 0 and calm["waiting"] == 0
    assert overload["running"] == 256 and overload["kv"] < 0.5
    assert overload["itl"] > 5 * normal["itl"]
    # long output: the worst E2E with a normal TTFT
    assert long_output["e2e"] == max(s["e2e"] for s in (normal, overload, long_prompt, long_output))
    assert long_output["ttft"] < 0.2
    # a repeated long prompt is mostly served from the prefix cache
    assert long_prompt["prefill"] < 0.2
    assert normal["running"] < 20 and normal["kv"] < 0.05
