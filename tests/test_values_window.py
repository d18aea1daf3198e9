"""timeline/window.py's `end` and `since` by value: every built-in kind, a registered kind and a deployment's
instances count, each kind sliced at its own samples' times (both read the built-in fields in one call, issue 54)."""

from __future__ import annotations

import pytest

from servewatch.timeline import kinds
from servewatch.timeline.samples import HealthSample, LogEvent, MetricsSample, ProbeSample
from servewatch.timeline.window import InstanceWindow, Window
from tests.toy_queue_sample import FIELDS, NAME, QueueSample


@pytest.fixture
def queue():
    kinds.register(NAME, QueueSample, fields=FIELDS)
    try:
        yield
    finally:
        kinds.unregister(NAME)


def _window() -> Window:
    return Window(health=(HealthSample(10.0, 200, 0.01), HealthSample(12.0, 200, 0.01)),
                  metrics=(MetricsSample(11.0, None, None), MetricsSample(13.0, None, None)),
                  logs=(LogEvent(9.0, "stats"),), probe=(ProbeSample(14.5, "served", 0.01, 3.0),))


def test_the_end_is_the_newest_sample_of_any_kind_or_instance(queue):
    assert Window().end is None and Window().start is None
    window = _window()
    assert window.end == 14.5 and window.start == 9.0
    assert Window(logs=(LogEvent(20.0, "stats"),)).end == 20.0          # the last built-in field counts
    queued = Window.of_kinds({"health": (HealthSample(10.0, 200, 0.01),), NAME: (QueueSample(30.0, 1, None),)})
    assert queued.end == 30.0 and queued.of(NAME)[0].depth == 1                  # a registered kind counts
    pair = Window(health=(HealthSample(10.0, 200, 0.01),),
                  instances=(InstanceWindow("p", "prefill", Window(probe=(ProbeSample(40.0, "served", 0.01, 3.0),))),))
    assert pair.end == 40.0


def test_since_slices_each_kind_at_its_own_times_and_keeps_the_instances_and_registered_kinds(queue):
    window = _window()
    later = window.since(12.0)
    assert [h.t for h in later.health] == [12.0] and [m.t for m in later.metrics] == [13.0]
    assert later.logs == () and [p.t for p in later.probe] == [14.5] and later.process == ()
    assert window.since(0.0) == window and window.since(0.0).health is window.health     # nothing cut: the same tuple
    queued = Window.of_kinds({NAME: (QueueSample(5.0, 1, None), QueueSample(15.0, 2, None))})
    assert [q.depth for q in queued.since(10.0).of(NAME)] == [2]
    assert queued.since(20.0).added == ()                                        # an emptied kind is left out
    pair = Window(instances=(InstanceWindow("d", "decode", window),))
    [instance] = pair.since(13.0).instances
    assert (instance.name, instance.role) == ("d", "decode") and [m.t for m in instance.window.metrics] == [13.0]
