"""One test per detector condition that nothing else pinned down: each fails when its condition is removed.

- engine_dead: an engine-death log line counts for log_evidence_s (30 s) after it was read, no longer;
- not_serving: with queued (or running) work frozen it leaves the verdict to the stall detector;
- client_errors: at least client_error_min 4xx in the window, however large their share;
- client_errors' "inputs over the maximum length" cause: bodies over BYTES_PER_TOKEN bytes × the length;
- preemption: a counter reset is not negative pressure; the deltas on both sides of it add up.
"""

import pytest
from tests.test_detectors_outcomes import T0 as OUTCOMES_T0
from tests.test_detectors_outcomes import series, verdicts, vllm_text
from tests.timeline_builders import Timeline

from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.detectors.outcomes import BYTES_PER_TOKEN
from servewatch.timeline.samples import DEADLINE, LogEvent, ProbeSample


def by_name(window, config=None):
    return {v.name: v for v in run_detectors(window, config or DetectorConfig())}


# --- engine_dead: the 30 s a death log line counts for ---------------------------------------------

@pytest.mark.parametrize("ticks_after, dead", [(60, True), (62, False)])
def test_an_engine_death_line_counts_for_log_evidence_s_after_it_was_read(ticks_after, dead):
    # Everything else says the engine is fine: /health 200, its processes alive, its counters moving.
    tl = Timeline().ticks(10, running=4).log("engine_dead", reason="EngineDeadError")
    read_at = tl.t
    tl.ticks(ticks_after, running=4)
    age = tl.window().end - read_at
    assert (age <= DetectorConfig().log_evidence_s) is dead        # 29.5 s / 30.5 s old at the window's end
    verdicts_ = by_name(tl.window())
    assert ("engine_dead" in verdicts_) is dead
    if dead:
        assert "1 engine-death log line(s) (EngineDeadError)" in verdicts_["engine_dead"].why


# --- not_serving leaves frozen admitted work to the stall verdict -------------------------------------

def _failed_probes(tl: Timeline, every: int = 10, **tick) -> Timeline:
    """Ticks with a one-token probe that got nothing within its 4 s deadline every `every` ticks."""
    for i in range(40):
        tl.tick(**tick)
        if i % every == every - 1:
            tl.samples.append(ProbeSample(t=tl.t, outcome=DEADLINE, latency_s=None, deadline_s=4.0, error="timeout"))
    return tl


@pytest.mark.parametrize("frozen", [dict(running=0, waiting=3), dict(running=2, waiting=0)],
                         ids=["queued", "running"])
def test_not_serving_leaves_frozen_admitted_work_to_the_stall_verdict(frozen):
    tl = _failed_probes(Timeline().ticks(10, running=2), steps=0, gen=0, **frozen)
    found = by_name(tl.window())
    assert "alive_health_ok_no_progress" in found
    assert "not_serving" not in found


def test_not_serving_fires_on_the_same_frozen_counters_with_nothing_admitted():
    tl = _failed_probes(Timeline().ticks(10, running=2), steps=0, gen=0, running=0, waiting=0)
    found = by_name(tl.window())
    assert "not_serving" in found and "running 0, waiting 0" in found["not_serving"].why
    assert "alive_health_ok_no_progress" not in found


# --- client_errors: the minimum count ---------------------------------------------------------------

@pytest.mark.parametrize("errors, fires", [(4, False), (5, True)])
def test_client_errors_needs_client_error_min_errors_however_large_their_share(errors, fires):
    assert DetectorConfig().client_error_min == 5
    texts = [vllm_text(ok=10, client=0), vllm_text(ok=11, client=errors)]     # 4 (or 5) of 5 (6): 80 %+
    found = verdicts(series(texts))
    assert ("client_errors" in found) is fires
    if fires:
        assert found["client_errors"].details["errors"] == errors


# --- client_errors' input_too_long cause: bytes per token -------------------------------------------

def _rejected_bodies_of(mean_bytes: int) -> list:
    """40 rejected requests whose bodies average `mean_bytes`, 5 served at the earlier 100-byte mean, and
    the startup line saying the model takes 512 tokens."""
    texts = [vllm_text(ok=10 + i, client=8 * i, body_bytes=1000 + mean_bytes * 8 * i + 100 * i, bodies=10 + 9 * i)
             for i in range(6)]
    return series(texts) + [LogEvent(OUTCOMES_T0 - 60, "startup", {"stage": "kv_cache_size", "tokens": 8192,
                                                                    "per_request": 512, "concurrency": 16.0})]


@pytest.mark.parametrize("mean_bytes, cause", [(3 * 512, "invalid_request"), (BYTES_PER_TOKEN * 512 + 60, "input_too_long")])
def test_bodies_count_as_over_the_maximum_length_only_past_bytes_per_token_times_it(mean_bytes, cause):
    # 1,536 bytes is 3 bytes a token of 512: longer than 512 characters, yet not surely over 512 tokens.
    verdict = verdicts(_rejected_bodies_of(mean_bytes))["client_errors"]
    assert verdict.details["cause"] == cause
    assert f"averaged ~{mean_bytes:,} bytes" in verdict.why


# --- preemption: deltas across a counter reset ------------------------------------------------------

def test_preemption_adds_the_deltas_on_both_sides_of_a_counter_reset():
    tl = Timeline().ticks(4, running=4).tick(running=4, preempt=5).tick(running=4, preempt=3)   # 0 → 5 → 8
    tl.tick(running=4, reset=True).tick(running=4, preempt=2).ticks(2, running=4)             # → 0 → 2
    verdict = by_name(tl.window())["preemption"]
    assert verdict.details["delta"] == 5 + 3 + 2       # the fall 8 → 0 is a restart, not -8 preemptions
    assert "+10 preemptions" in verdict.why
