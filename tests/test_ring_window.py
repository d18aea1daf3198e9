"""The ring's windows since a time (counted from the newer end where fewer are kept) and its newest sample of a kind:
the same samples, in the same order, as the whole window read by time (issue 54: a probe's check reads the last
seconds of a 600 s history every second)."""

from __future__ import annotations

import random

import pytest

from servewatch.timeline.ring import Ring
from servewatch.timeline.samples import HealthSample, ProcessSample


def health(t: float) -> HealthSample:
    return HealthSample(t=t, status=200, latency_s=0.001)


def by_time(ring: Ring, kind: str, since: float | None) -> tuple:
    """What a window since `since` holds of `kind`, by its definition: every sample at or after it, by time."""
    every = ring.window().of(kind)
    return every if since is None else tuple(s for s in every if s.t >= since)


@pytest.mark.parametrize("seed", range(6))
def test_a_window_since_any_time_holds_what_the_whole_window_holds_from_then(seed):
    rng = random.Random(seed)
    ring = Ring({"health": rng.choice((1, 2, 7, 64, 300)), "process": 5})
    times = [float(rng.randrange(0, 400)) for _ in range(rng.randrange(0, 700))]
    if seed % 2:
        times.sort()            # in order, as a source adds them; the others out of order now and then
    ring.extend(health(t) for t in times)
    for since in [None, -1.0, 0.0, 1e9, *(t + d for t in rng.sample(times, min(20, len(times))) for d in (-0.5, 0, 0.5))]:
        got = ring.window(since).health
        assert got == by_time(ring, "health", since), since
        assert all(a is b for a, b in zip(got, by_time(ring, "health", since)))
        newest = ring.newest("health", since)
        assert newest is (got[-1] if got else None)


def test_few_kept_of_many_come_from_the_newer_end():
    ring = Ring({"health": 300})
    ring.extend(health(float(t)) for t in range(300))
    assert [s.t for s in ring.window(since=296.5).health] == [297.0, 298.0, 299.0]
    assert [s.t for s in ring.window(since=2.0).health] == [float(t) for t in range(2, 300)]
    assert ring.window(since=150.0).health == ring.window().health[150:]
    assert ring.window(since=149.0).health == ring.window().health[149:]
    assert ring.window(since=300.0).health == () and ring.newest("health", since=300.0) is None
    assert ring.newest("process") is None and ring.newest("health").t == 299.0


def test_the_newest_of_samples_added_out_of_order_is_the_latest_in_time():
    ring = Ring({"process": 4})
    for t in (10.0, 30.0, 20.0):
        ring.add(ProcessSample(t=t, root_pid=1, root_create_time=None, alive=True))
    assert ring.newest("process").t == 30.0
    assert ring.newest("process", since=30.0).t == 30.0 and ring.newest("process", since=30.5) is None
    assert [s.t for s in ring.window().process] == [10.0, 20.0, 30.0]


def test_a_targets_live_process_is_its_newest_recent_one():
    from types import SimpleNamespace

    from servewatch.serve.fleet import TargetRun
    from servewatch.sinks.export.rank_series import SAMPLE_MAX_AGE_S
    from servewatch.watch.deployment import DeploymentRing

    ring = Ring({"process": 4})
    for t in (100.0, 90.0):
        ring.add(ProcessSample(t=t, root_pid=1, root_create_time=None, alive=True))
    run = SimpleNamespace(recorder=SimpleNamespace(ring=ring))
    assert TargetRun.live_process(run, 100.0 + SAMPLE_MAX_AGE_S).t == 100.0
    assert TargetRun.live_process(run, 100.5 + SAMPLE_MAX_AGE_S) is None
    deployment = SimpleNamespace(recorder=SimpleNamespace(ring=DeploymentRing([])))
    assert TargetRun.live_process(deployment, 100.0) is None
