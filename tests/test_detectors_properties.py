"""Properties `verify` relies on, over random timelines: verdicts depend only on the samples (not on
their order of arrival or object identity), and the evidence window gives the very same verdicts."""

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from servewatch.detectors import evidence_window, run_detectors
from servewatch.timeline.window import Window
from tests.timeline_builders import API, ENGINE, Timeline

TICK = st.fixed_dictionaries({
    "running": st.sampled_from([0, 0, 2, 8, 16]),
    "waiting": st.sampled_from([0, 0, 0, 3, 20]),
    "moving": st.booleans(),
    "kv": st.sampled_from([0.1, 0.5, 0.85, 0.95]),
    "preempt": st.sampled_from([0, 0, 0, 1]),
    "health": st.sampled_from([200, 200, 200, 200, 503, None]),
    "engine_gone": st.booleans(),
    "itl_fast": st.sampled_from([0, 50]),
})


def build(ticks, interval):
    tl = Timeline(interval=interval)
    for tick in ticks:
        tl.tick(running=tick["running"], waiting=tick["waiting"], kv=tick["kv"], preempt=tick["preempt"],
                steps=None if tick["moving"] else 0, gen=None if tick["moving"] else 0,
                health=tick["health"], health_error=None if tick["health"] else "connect",
                members=(API,) if tick["engine_gone"] else (API, ENGINE), slot_limit=16, itl_fast=tick["itl_fast"])
    return tl


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(TICK, st.integers(1, 40)), min_size=1, max_size=12),
       interval=st.sampled_from([0.5, 1.0, 2.0]), seed=st.integers(0, 10_000))
def test_verdicts_depend_only_on_the_samples(runs, interval, seed):
    ticks = [tick for tick, n in runs for _ in range(n)]
    tl = build(ticks, interval)
    window = tl.window()
    verdicts = run_detectors(window)

    shuffled = list(tl.samples)
    random.Random(seed).shuffle(shuffled)
    copied = [dataclasses.replace(s) for s in shuffled]   # new objects, arrival order lost
    assert run_detectors(Window.from_samples(copied)) == verdicts
    assert run_detectors(evidence_window(window)) == verdicts
    for verdict in verdicts:
        assert verdict.onset <= verdict.t and verdict.why and "\n" not in verdict.why
        for evidence in verdict.evidence:
            assert any(s.t == evidence.t for s in window.of(evidence.source))
