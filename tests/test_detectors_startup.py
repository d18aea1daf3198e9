"""Startup stages and startup_stalled, replayed from real logs (a vLLM 0.32 CPU start, an SGLang 0.5.23
CPU start) at the times their own stamps give; health_loss stays quiet while a target starts."""

from __future__ import annotations

import re
import time
from pathlib import Path

from servewatch.detectors import DetectorConfig, evidence_window, run_detectors
from servewatch.detectors.evidence.stages import stages
from servewatch.sources.logs import parse_line
from servewatch.timeline.samples import HealthSample, LogEvent, ProcessMember, ProcessSample
from servewatch.timeline.window import Window

FIXTURES = Path(__file__).parent / "fixtures"
VLLM_LOG = FIXTURES / "vllm_real" / "startup_and_client_errors.log"
SGLANG_LOG = FIXTURES / "logs" / "sglang_cpu_server.log"
_VLLM_STAMP = re.compile(r" (\d\d-\d\d \d\d:\d\d:\d\d) \[")
_SGLANG_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def stamped(line: str, previous: float) -> float:
    match = _VLLM_STAMP.search(line)
    if match:
        return time.mktime(time.strptime("2026-" + match.group(1), "%Y-%m-%d %H:%M:%S"))
    match = _SGLANG_STAMP.search(line)
    if match:
        return time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
    return previous


def replay(path: Path, *, until: str | None = None) -> list[LogEvent]:
    """The log's events at the times its lines carry (a line without a stamp: the previous one's)."""
    events, t = [], 0.0
    for line in path.read_text().splitlines():
        t = stamped(line, t)
        if until is not None and until in line:
            events += parse_line(line, t)
            break
        events += parse_line(line, t)
    return events


def process(t: float, created: float, status: str = "running") -> ProcessSample:
    members = (ProcessMember(100, created, "api", "python3", "sleeping"),
               ProcessMember(101, created + 7, "engine_core", "VLLM::EngineCore", "sleeping"),
               ProcessMember(102, created + 14, "worker", "VLLM::Worker_TP0", status))
    return ProcessSample(t=t, root_pid=100, root_create_time=created, alive=True, members=members)


def watched(events: list[LogEvent], until: float, *, healthy_from: float | None = None, interval: float = 1.0,
            worker: str = "running", with_process: bool = True) -> list:
    """Health probes every `interval` from the first line (refused until `healthy_from`) and process samples."""
    start = events[0].t
    samples: list = list(events)
    t = start
    while t <= until:
        if healthy_from is not None and t >= healthy_from:
            samples.append(HealthSample(t, 200, 0.002))
        else:
            samples.append(HealthSample(t, None, None, "connect"))
        if with_process:
            samples.append(process(t + 0.01, start - 1, worker))
        t += interval
    return samples


def names_over_time(samples: list, config: DetectorConfig | None = None, step: float = 1.0) -> set[str]:
    """Every verdict the detectors give at any moment of the run (as the recorder asks them)."""
    ordered = sorted(samples, key=lambda s: s.t)
    seen: set[str] = set()
    end = ordered[-1].t
    t = ordered[0].t
    while t <= end + step:
        window = Window.from_samples([s for s in ordered if s.t <= t])
        seen |= {v.name for v in run_detectors(window, config or DetectorConfig())}
        t += step
    return seen


def test_the_real_vllm_start_is_a_sequence_of_stages_with_their_numbers():
    events = replay(VLLM_LOG)
    ready = next(e.t for e in events if e.fields.get("stage") == "ready")
    found = stages(Window.from_samples(watched(events, ready + 3, healthy_from=ready + 1)))
    assert [s.name for s in found] == ["process_up", "engine_start", "weights_loading", "weights_loaded",
                                       "compiling", "compiled", "kv_cache_size", "engine_ready", "api_listening",
                                       "ready", "health_ok"]
    by_name = {s.name: s for s in found}
    assert by_name["weights_loaded"].fields["seconds"] == 0.0
    assert by_name["kv_cache_size"].fields == {"tokens": 8192, "per_request": 512, "concurrency": 16.0}
    assert by_name["engine_ready"].fields["seconds"] == 20.1
    assert by_name["compiled"].t - by_name["compiling"].t == 20          # torch.compile on 2 cores
    assert by_name["health_ok"].t - by_name["process_up"].t == 38        # the real start: 37 s to ready


def test_a_normal_start_raises_no_verdict_at_any_moment():
    events = replay(VLLM_LOG, until="Application startup complete.")
    ready = events[-1].t
    assert names_over_time(watched(events, ready + 10, healthy_from=ready + 1)) == set()


def test_without_a_log_a_young_process_that_is_not_yet_healthy_is_starting_not_health_lost():
    events = replay(VLLM_LOG, until="Application startup complete.")
    samples = [s for s in watched(events, events[-1].t + 5, healthy_from=events[-1].t + 1)
               if not isinstance(s, LogEvent)]
    assert names_over_time(samples) == set()


def test_health_lost_after_the_target_was_healthy_is_still_health_loss():
    events = replay(VLLM_LOG, until="Application startup complete.")
    ready = events[-1].t
    samples = watched(events, ready + 20, healthy_from=ready + 1)
    samples = [s for s in samples if not (isinstance(s, HealthSample) and s.t > ready + 10)]
    samples += [HealthSample(ready + 10 + i, None, None, "connect") for i in range(1, 6)]
    assert "health_loss" in {v.name for v in run_detectors(Window.from_samples(samples), DetectorConfig())}


def test_a_long_running_target_never_healthy_in_the_window_is_health_loss():
    # attached to a server started two hours ago: not a start in progress
    t0 = 1_800_000_000.0
    samples = [HealthSample(t0 + i, None, None, "connect") for i in range(6)]
    samples += [process(t0 + i + 0.01, t0 - 7200) for i in range(6)]
    assert "health_loss" in {v.name for v in run_detectors(Window.from_samples(samples), DetectorConfig())}


def test_a_start_stopped_while_compiling_names_the_stage_once_its_bound_has_passed():
    events = replay(VLLM_LOG, until="Warming up model for the compilation")
    stopped_at = events[-1].t
    config = DetectorConfig()
    # the longest earlier gap is the imports' 8 s (process up → engine start): bound max(4 × 8, 120) s
    early = Window.from_samples(watched(events, stopped_at + 100, worker="stopped"))
    assert {v.name for v in run_detectors(early, config)} == set()
    late = Window.from_samples(watched(events, stopped_at + 125, worker="stopped"))
    verdict = {v.name: v for v in run_detectors(late, config)}["startup_stalled"]
    assert verdict.details["stage"] == "compiling" and verdict.details["bound_s"] == 120
    assert "stuck after compiling" in verdict.why and "compiling the model" in verdict.why
    assert "VLLM::Worker_TP0" in verdict.why                       # the stopped process is named
    assert "health_loss" not in {v.name for v in run_detectors(late, config)}


def test_the_bound_follows_the_earlier_stages():
    events = replay(VLLM_LOG, until="Warming up done.")           # compile took 20 s
    config = DetectorConfig(startup_stall_floor_s=10, startup_stall_k=2)
    window = Window.from_samples(watched(events, events[-1].t + 41))
    verdict = {v.name: v for v in run_detectors(window, config)}["startup_stalled"]
    assert verdict.details["bound_s"] == 40 and verdict.details["stage"] == "compiled"
    assert "sizing the KV cache" in verdict.why
    shorter = Window.from_samples(watched(events, events[-1].t + 38))
    assert "startup_stalled" not in {v.name for v in run_detectors(shorter, config)}


def test_a_start_stuck_longer_than_the_lookback_still_names_its_stage_and_a_bundle_keeps_it():
    events = replay(VLLM_LOG, until="Loading weights took")
    config = DetectorConfig()
    window = Window.from_samples(watched(events, events[-1].t + 600, interval=2.0))
    verdict = {v.name: v for v in run_detectors(window, config)}["startup_stalled"]
    assert verdict.details["stage"] == "weights_loaded"
    stored = evidence_window(window, config)
    assert min(e.t for e in stored.logs) == events[0].t        # the stage lines before the lookback are kept
    assert [v.why for v in run_detectors(stored, config)] == [v.why for v in run_detectors(window, config)]


def test_without_a_log_the_verdict_names_the_process_start():
    events = replay(VLLM_LOG, until="non-default args")
    samples = [s for s in watched(events, events[-1].t + 130) if not isinstance(s, LogEvent)]
    verdict = {v.name: v for v in run_detectors(Window.from_samples(samples), DetectorConfig())}["startup_stalled"]
    assert verdict.details["stage"] == "process_up" and "no startup line" in verdict.why


def test_a_startup_failure_is_left_to_process_exit():
    events = replay(VLLM_LOG, until="Loading weights took")
    failed = events[-1].t + 5
    failure = LogEvent(failed, "startup_failure", {"reason": "EngineCore failed to start."})
    samples = [s for s in watched([*events, failure], events[-1].t + 200)
               if not (isinstance(s, ProcessSample) and s.t > failed + 2)]
    samples += [ProcessSample(t=failed + 2 + i, root_pid=100, root_create_time=None, alive=False, exit_code=1,
                              error="no_such_process") for i in range(1, 190)]
    names = {v.name for v in run_detectors(Window.from_samples(samples), DetectorConfig())}
    assert "process_exit" in names and "startup_stalled" not in names


def test_the_real_sglang_start_has_its_stages_and_no_verdict():
    events = replay(SGLANG_LOG, until="The server is fired up")
    found = [s.name for s in stages(Window.from_samples(watched(events, events[-1].t + 2,
                                                                 healthy_from=events[-1].t + 1)))]
    assert found == ["process_up", "engine_start", "weights_loading", "weights_loaded", "kv_cache_size",
                     "engine_ready", "api_listening", "ready", "health_ok"]
    kv = next(s for s in stages(Window.from_samples(events)) if s.name == "kv_cache_size")
    assert kv.fields["tokens"] == 8192 and kv.fields["max_running"] == 2048
    # SGLang answers /health 503 from api_listening until its warm-up request is done
    listening = next(e.t for e in events if e.fields.get("stage") == "api_listening")
    samples = watched(events, events[-1].t + 5, healthy_from=events[-1].t + 1, with_process=False)
    samples = [HealthSample(s.t, 503, 0.01, "http_503") if isinstance(s, HealthSample) and listening <= s.t
               < events[-1].t + 1 else s for s in samples]
    assert names_over_time(samples) == set()


def test_a_young_server_that_has_generated_tokens_is_not_starting_even_with_health_timing_out():
    # A watch attached to a vLLM started 2 minutes ago, under a load that blocks its API loop: /health
    # times out for 200 s while its /metrics shows the tokens it generated. That is not a stuck start.
    from tests.timeline_builders import Timeline

    timeline = Timeline(interval=1.0, t0=1_800_000_000.0)
    for _ in range(200):
        timeline.tick(health=None, health_error="timeout", root_ct=1_800_000_000.0 - 120)
    names = {v.name for v in run_detectors(timeline.window(), DetectorConfig())}
    assert "startup_stalled" not in names
    assert "health_loss" in names


def test_a_watch_attached_to_an_old_process_judges_no_start_before_its_first_health_answer():
    # As in a drill on a real SGLang serving for 3 minutes: the new watch's first evaluation had one process
    # sample (the API server created 179 s before) and no /health answer yet; the log is read from its end,
    # so no startup line. That was called a start stuck past the 120 s floor.
    t = 1_800_000_000.0
    first = [process(t, created=t - 179.2)]
    assert "startup_stalled" not in {v.name for v in run_detectors(Window.from_samples(first), DetectorConfig())}
    # Nor at its first failed answer: whether it was healthy before the watch began is unknown, so the wait
    # counts from the first look — a stuck start once /health has failed for the 120 s floor since then.
    asked = first + [s for i in range(1, 122) for s in (HealthSample(t + i - 0.5, None, None, "timeout"),
                                                        process(t + i, created=t - 179.2))]
    assert "startup_stalled" not in {v.name for v in run_detectors(Window.from_samples(asked[:40]), DetectorConfig())}
    verdict = {v.name: v for v in run_detectors(Window.from_samples(asked), DetectorConfig())}["startup_stalled"]
    assert "for 121 s of watching (the process started 300 s ago)" in verdict.why, verdict.why
