"""The detectors' shortcuts give what the plain computation gives.

The split per engine and its columns are carried over from the window judged before (timeline/tracks.py);
detectors take cheap exits before full walks. Over a recorder-like run of real vLLM and SGLang scrapes
(counters moving, a stall, errors, a counter reset, two engines, SGLang), every window's verdicts equal
those of the same samples copied (new objects: nothing carried over), and every carried column equals
the column computed afresh. The shortcuts are checked against the straightforward definitions.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from servewatch.detectors import DetectorConfig, _recent, run_detectors
from servewatch.detectors import blindness, capacity, outcomes, progress
from servewatch.timeline import tracks
from servewatch.detectors.series import admitted
from servewatch.dialects import read_scrape
from servewatch.engine.histogram import delta
from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.engine.summary import summarize
from servewatch.timeline.ring import Ring
from servewatch.timeline.samples import HealthSample, MetricsSample
from servewatch.timeline.window import Window

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MOVING = re.compile(r"^([^#\s][^ ]*(?:_total|_bucket|_count|_sum)\{[^ ]*) (\S+)$", re.M)
FIVE_XX = 'http_requests_total{handler="/v1/completions",method="POST",status="5xx"}'
T0 = 1_800_000_000.0


def _text_at(text: str, step: int, errors: int | None = None) -> str:
    """The capture with every counter grown 0.1 % a step (and a 5xx counter when asked)."""
    moved = MOVING.sub(lambda m: f"{m[1]} {float(m[2]) * (1 + step / 1000):.10g}", text)
    return moved + (f"{FIVE_XX} {errors}\n" if errors is not None else "")


def _second_engine(state: EngineState) -> EngineState:
    return dataclasses.replace(state, labels={**state.labels, "engine": "1"},
                               counters=dataclasses.replace(state.counters))


def _scrapes():
    """(t, MetricsSample, health status) of a recorder's run at 2 s."""
    vllm = (FIXTURES / "vllm_real" / "kv_pressure_t1.prom").read_text()
    sglang = (FIXTURES / "sglang_real" / "metrics_busy.prom").read_text()
    for i in range(230):
        t = T0 + 2.0 * i
        if i == 95:
            yield t, MetricsSample(t=t, dialect=None, naming=None, error="timeout"), 200
            continue
        if i < 60:
            text = _text_at(vllm, i)                       # busy, KV full
        elif i < 95:
            text = _text_at(vllm, 59)                      # stalled
        elif i < 130:
            text = _text_at(vllm, i, errors=i - 95)        # 5xx
        elif i < 140:
            text = _text_at(vllm, i - 130)                 # counters went down: a restart
        elif i < 180:
            text = _text_at(vllm, i)                       # two engines below
        else:
            text = _text_at(sglang, i)
        scrape = read_scrape(text)
        engines = tuple(scrape.engines)
        if 140 <= i < 180:
            engines = engines + (_second_engine(engines[0]),)
        health = 503 if 170 <= i < 176 else 200
        yield t, MetricsSample(t=t, dialect=scrape.dialect, naming=scrape.naming, engines=engines,
                               scrape_s=0.01), health


def _copied(window: Window) -> Window:
    return dataclasses.replace(window, metrics=tuple(dataclasses.replace(m) for m in window.metrics),
                               health=tuple(dataclasses.replace(h) for h in window.health))


def _fresh_drops(columns) -> list[tuple[int, int]]:
    drops = []
    for i in range(1, len(columns[0])):
        for c, column in enumerate(columns):
            if column[i - 1] is not None and column[i] is not None and column[i] < column[i - 1]:
                drops.append((i, c))
                break
    return drops


def test_carried_over_windows_give_the_verdicts_and_columns_of_a_fresh_computation(monkeypatch):
    carried = []
    real_carry = tracks._carried_over
    monkeypatch.setattr(tracks, "_carried_over", lambda samples: carried.append(real_carry(samples)) or carried[-1])
    config = DetectorConfig()
    ring = Ring.for_history(600.0, {"metrics": 2.0, "health": 2.0})
    fired = set()
    for t, sample, status in _scrapes():
        ring.extend((HealthSample(t=t - 0.3, status=status, latency_s=0.002,
                                  error=None if status == 200 else f"http_{status}"), sample))
        window = ring.window()
        verdicts = run_detectors(window, config)
        assert verdicts == run_detectors(_copied(window), config), t
        fired.update(v.name for v in verdicts)

        recent = _recent(window, config)
        split = tracks.tracks(recent.metrics)
        assert {k: t.points for k, t in split.items()} == tracks._split(recent.metrics)
        assert list(split) == list(tracks._split(recent.metrics))      # the same order too
        for track in split.values():
            for name, argument in [*((n, None) for n in tracks.COLUMNS if n not in ("responses", "finished")),
                                   ("responses", "2xx"), ("responses", "5xx"), ("finished", "length")]:
                assert track.column(name, argument) == tracks.COLUMNS[name](track.points, argument), name
            assert track.counter_drops == _fresh_drops(track.counter_columns)
    assert {"alive_health_ok_no_progress", "server_errors", "target_restarted", "kv_pressure",
            "engine_dead"} <= fired
    assert sum(1 for c in carried if c is not None) > len(carried) // 2     # the carrying was exercised


# --- the shortcuts against their plain definitions -------------------------------------------------

COUNTS = st.lists(st.one_of(st.none(), st.integers(0, 50), st.floats(0, 1e6), st.just(math.nan)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(values=COUNTS)
def test_increase_is_the_plain_walk(values):
    got, want = outcomes.increase(values), outcomes.walked_increase(values)
    assert got == want or (math.isnan(got) and math.isnan(want))


def _plain_quiet_start(points) -> int:
    busy_from, last_move = None, None
    for i, (_, state) in enumerate(points):
        if not admitted(state):
            busy_from = None
            continue
        if busy_from is None:
            busy_from = i
        if i > 0 and progress.progress(state) != progress.progress(points[i - 1][1]):
            last_move = i
    return busy_from if last_move is None or last_move < busy_from else last_move


@settings(max_examples=300, deadline=None)
@given(ticks=st.lists(st.tuples(st.booleans(), st.integers(0, 2)), min_size=1, max_size=30))
def test_the_quiet_start_found_from_the_end_is_the_forward_walks(ticks):
    points = []
    for i, (busy, steps) in enumerate(ticks + [(True, ticks[-1][1])]):
        state = EngineState(dialect="vllm", naming="t", labels={}, running=1 if busy else 0, waiting=0,
                            counters=Counters(steps=float(steps)))
        points.append((MetricsSample(t=T0 + i, dialect="vllm", naming="t", engines=(state,)), state))
    assert progress._quiet_since(tracks.Track(points)) == _plain_quiet_start(points)


HISTOGRAM = st.tuples(st.lists(st.integers(0, 400), min_size=3, max_size=3), st.integers(0, 50))


@settings(max_examples=300, deadline=None)
@given(old=HISTOGRAM, new=HISTOGRAM, min_count=st.sampled_from([0.0, 1.0, 100.0]), other_edges=st.booleans())
def test_a_histogram_ruled_out_by_its_first_bucket_is_never_blind(old, new, min_count, other_edges):
    def histogram(spec, edges):
        buckets, above = spec
        cumulative = [float(sum(buckets[:i + 1])) for i in range(len(buckets))]
        return Histogram(edges=edges, cumulative=cumulative, count=cumulative[-1] + above, sum=1.0)

    before = histogram(old, (0.01, 0.025, 0.05))
    after = histogram(new, (0.01, 0.02, 0.05) if other_edges else (0.01, 0.025, 0.05))
    if blindness._surely_not_blind(after, before, min_count):
        diff = delta(after, before)
        assert diff is None or diff.count < min_count or not summarize("itl", diff).blind


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.tuples(st.floats(0, 5), st.floats(0, 1)), max_size=20),
       grace=st.sampled_from([0.0, 1.0, 5.0]))
def test_the_sustained_stretch_and_time_mean_are_the_plain_ones(values, grace):
    times, level = [], []
    t = T0
    for gap, value in values:
        t += gap
        times.append(t)
        level.append(value)
    hot = [value >= 0.5 for value in level]
    first = last = None
    boundary = times[-1] if times else 0.0
    for i in reversed(range(len(times))):
        if hot[i]:
            last = i if last is None else last
            first, boundary = i, times[i]
        elif boundary - times[i] >= grace:
            break
    assert capacity._sustained(times, hot, grace) == ((first, last) if last is not None else None)
    if len(times) >= 2 and times[-1] > times[0]:
        pairs = list(zip(times, level))
        plain = sum((t2 - t1) * v for (t1, v), (t2, _) in zip(pairs, pairs[1:])) / (times[-1] - times[0])
        assert capacity._time_mean(times, level) == plain
