"""overload read from the engine's own stats lines when /metrics answers are starved: a real vLLM's
lines (tests/fixtures/vllm_real/small_slots_server.log, 4 slots under 32 in flight) through the log
source's parser, beside scrapes that time out."""

from datetime import datetime, timezone
from pathlib import Path

import pytest
from tests.timeline_builders import T0, Timeline

from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.sources.logs import parse_line

LOG = Path(__file__).parent / "fixtures" / "vllm_real" / "small_slots_server.log"
QUEUED = [line for line in LOG.read_text(encoding="utf-8").splitlines() if "Waiting: 2" in line]
IDLE = "(APIServer pid=5246) INFO 11-29 15:52:40 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 " \
       "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, CPU KV cache " \
       "usage: 0.0%, Prefix cache hit rate: 0.0%"
STALLED = QUEUED[0].replace("Avg prompt throughput: 83.3", "Avg prompt throughput: 0.0").replace(
    "Avg generation throughput: 143.8", "Avg generation throughput: 0.0")


def overloads(window, config=None):
    return [v for v in run_detectors(window, config or DetectorConfig()) if v.name == "overload"]


def starved(lines, *, seconds=20, metrics_error="timeout", waiting_scraped=0):
    """Three good scrapes (an idle engine, slot limit 4), then `seconds` of /metrics that times out (one
    error sample a tick) while the log says what the engine does, a stats line a second."""
    tl = Timeline(interval=1.0).ticks(3, running=0, waiting=0, slot_limit=4, kv=0.0)
    for i in range(seconds):
        tl.samples.extend(parse_line(lines[i % len(lines)], tl.t + 0.3))
        tl.tick(running=4, waiting=waiting_scraped, slot_limit=4, kv=0.1, metrics_error=metrics_error)
    return tl


def test_the_queue_is_read_from_vllms_stats_lines_while_metrics_times_out():
    assert len(QUEUED) >= 10, "the fixture holds the queued stretch"
    tl = starved(QUEUED)
    [verdict] = overloads(tl.window())
    assert verdict.details["engine"] == "engine=0"              # the key of the same engine's scrapes
    assert verdict.details["cause"] == "slots"
    assert verdict.details["running"] == 4 and verdict.details["waiting"] >= 24
    assert verdict.details["seen_in"] == "log"
    assert verdict.details["sustained_s"] >= DetectorConfig().overload_sustain_s
    clock = datetime.fromtimestamp(verdict.t, tz=timezone.utc).strftime("%H:%M:%S")
    assert f"from vLLM's own stats line at {clock} UTC" in verdict.why
    silent = verdict.details["metrics_silent_s"]
    last_good_scrape, last_line = T0 + 2.01, tl.t - 1.0 + 0.3
    assert silent == pytest.approx(last_line - last_good_scrape)
    assert f"/metrics did not answer for {silent:.0f} s" in verdict.why
    assert "running 4 = slot limit 4" in verdict.why           # the slot limit the scrapes knew
    assert {e.source for e in verdict.evidence} == {"log"}
    assert verdict.onset < verdict.t


def test_no_verdict_before_the_sustain_time():
    assert overloads(starved(QUEUED, seconds=9).window()) == []


def test_a_queue_behind_an_engine_that_computes_nothing_is_not_overload():
    assert overloads(starved([STALLED], seconds=20).window()) == []


def test_an_idle_engine_is_not_overloaded():
    assert overloads(starved([IDLE], seconds=20).window()) == []


def test_scrapes_that_answer_decide_and_the_log_does_not_add_a_second_verdict():
    # /metrics answers every second and sees no queue: the log's queue is not believed over it.
    assert overloads(starved(QUEUED, seconds=20, metrics_error=None, waiting_scraped=0).window()) == []
    # /metrics answers and sees the queue: one verdict, from the scrapes.
    [verdict] = overloads(starved(QUEUED, seconds=20, metrics_error=None, waiting_scraped=20).window())
    assert "seen_in" not in verdict.details
    assert {e.source for e in verdict.evidence} == {"metrics"}


def test_the_silence_must_last_overload_metrics_silent_s():
    config = DetectorConfig(overload_metrics_silent_s=60.0)
    assert overloads(starved(QUEUED, seconds=20).window(), config) == []


def test_a_bundle_of_it_verifies_offline(tmp_path):
    import dataclasses
    import io

    from servewatch.detectors import evidence_window
    from servewatch.bundle.writer import BundleContext, BundleWriter
    from servewatch.bundle.verify import verify_bundle

    config = DetectorConfig()
    window = starved(QUEUED).window()
    verdicts = run_detectors(window, config)
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO())
    path = writer.write(evidence_window(window, config), verdicts,
                        BundleContext(target_url="http://127.0.0.1:8000", detector_config=dataclasses.asdict(config)))
    assert path is not None and writer.failures == 0
    assert "overload" in {v.name for v in verdicts}
    assert verify_bundle(path).verdicts_checked == len(verdicts)


def test_one_verdict_when_the_scrapes_saw_the_queue_before_they_went_silent():
    tl = Timeline(interval=1.0).ticks(3, running=0, waiting=0, slot_limit=4, kv=0.0)
    for i in range(30):
        tl.samples.extend(parse_line(QUEUED[i % len(QUEUED)], tl.t + 0.3))
        tl.tick(running=4, waiting=24, slot_limit=4, kv=0.1, metrics_error="timeout" if i >= 15 else None)
    [verdict] = overloads(tl.window())
    assert {e.source for e in verdict.evidence} == {"metrics"}


# --- a watcher frozen for a minute reads a minute of stats lines at once ---------------------------------

def _stamped(line: str, second: int) -> str:
    """A fixture line restamped at 15:52:00 + `second` (the server's clock)."""
    minute, sec = divmod(second, 60)
    return line.replace(line[line.index("11-29 "):line.index(" [loggers")], f"11-29 15:{52 + minute:02d}:{sec:02d}")


def _tail_reads(path, clock, lines):
    import asyncio

    with open(path, "a", encoding="utf-8") as log:
        log.write("".join(line + "\n" for line in lines))
    return asyncio.run(_poll(path, clock))


_TAILS = {}


async def _poll(path, clock):
    from servewatch.sources.logs import LogTail

    tail = _TAILS.setdefault(str(path), LogTail(str(path), clock, 1.0, from_start=True))
    return await tail.poll()


def test_each_line_keeps_its_own_second_when_a_frozen_watcher_reads_a_minute_at_once(tmp_path):
    from servewatch.clock import VirtualClock

    path, clock = tmp_path / "vllm.log", VirtualClock(T0)
    first = _tail_reads(path, clock, [_stamped(QUEUED[0], 0)])
    assert [e.t for e in first] == [T0]
    clock.set(T0 + 61.0)                                                   # frozen for a minute
    burst = _tail_reads(path, clock, [_stamped(QUEUED[i % len(QUEUED)], i) for i in range(1, 61)])
    assert [e.t for e in burst] == [T0 + i for i in range(1, 61)]         # not all at T0 + 61
    clock.set(T0 + 62.0)
    behind = _stamped(QUEUED[0], 0).replace("15:52:00", "14:52:00")    # the server's zone moved an hour back
    assert [e.t for e in _tail_reads(path, clock, [behind])] == [T0 + 62.0]    # re-anchored at its reading
    clock.set(T0 + 63.0)
    ahead = _stamped(QUEUED[0], 0).replace("15:52:00", "16:52:00")      # and an hour forward
    assert [e.t for e in _tail_reads(path, clock, [ahead])] == [T0 + 63.0]     # never later than its reading


def test_overload_from_a_minute_of_lines_read_at_once_after_a_freeze(tmp_path):
    from servewatch.clock import VirtualClock
    from servewatch.timeline.samples import MetricsSample

    path, clock = tmp_path / "vllm.log", VirtualClock(T0 + 3.0)
    tl = Timeline(interval=1.0).ticks(3, running=0, waiting=0, slot_limit=4, kv=0.0)   # then nothing for 63 s:
    tl.samples += _tail_reads(path, clock, [_stamped(IDLE, 0)])
    clock.set(T0 + 66.0)
    tl.samples += _tail_reads(path, clock, [_stamped(QUEUED[i % len(QUEUED)], i) for i in range(1, 63)])
    tl.samples.append(MetricsSample(t=T0 + 66.0, dialect=None, naming=None, error="timeout"))
    [verdict] = overloads(tl.window())
    assert verdict.details["cause"] == "slots" and verdict.details["sustained_s"] >= 50
    assert verdict.t == T0 + 3.0 + 62 and verdict.details["metrics_silent_s"] == pytest.approx(62 + 3.0 - 2.01)
    assert "/metrics did not answer for 63 s" in verdict.why


def test_a_first_reading_after_a_freeze_is_anchored_by_its_newest_line(tmp_path):
    """A real starved watcher read its first 20 stats lines in one poll, 19 s after they began: timed by
    the reading alone they all sat at one instant, and the 16 s queue in them lasted 0 s."""
    from servewatch.clock import VirtualClock

    path, clock = tmp_path / "vllm.log", VirtualClock(T0 + 20.0)
    burst = _tail_reads(path, clock, [_stamped(QUEUED[i % len(QUEUED)], i) for i in range(20)])
    assert [e.t for e in burst] == [T0 + 1.0 + i for i in range(20)]


def test_lines_are_timed_by_when_the_read_came_back_not_when_it_was_asked_for(tmp_path):
    """A starved watcher's read in a worker thread came back 30 s after it was asked for: anchored on the
    asking, a real run's stats lines sat 25 s before the traffic that filled them had started."""
    import asyncio

    from servewatch.clock import VirtualClock
    from servewatch.sources.logs import LogTail

    path, clock = tmp_path / "vllm.log", VirtualClock(T0)
    path.write_text("".join(_stamped(QUEUED[i % len(QUEUED)], i) + "\n" for i in range(20)), encoding="utf-8")
    tail = LogTail(str(path), clock, 1.0, from_start=True)
    read = tail._read

    def slow_read():
        clock.advance(30.0)          # the worker thread ran 30 s later (the data is read then)
        return read()

    tail._read = slow_read
    events = asyncio.run(tail.poll())
    assert [e.t for e in events] == [T0 + 30.0 - 19 + i for i in range(20)]
