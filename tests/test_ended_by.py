"""A cleared verdict's `ended_by` names the newest sample of every source its evidence rested on: every
kind of sample the timeline has, the active probe included (a not_serving verdict clears on a probe)."""

from __future__ import annotations

from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.sinks.base import ended_by
from servewatch.timeline.samples import DEADLINE, SERVED, HealthSample, ProbeSample
from servewatch.kinds import SOURCE_KINDS as KINDS
from servewatch.timeline.window import Window


def test_a_not_serving_verdict_clears_with_its_probe_evidence():
    wedged = ProbeSample(t=10.0, outcome=DEADLINE, latency_s=None, deadline_s=5.0)
    served = ProbeSample(t=20.0, outcome=SERVED, latency_s=0.05, deadline_s=5.0, status=200, tokens=1)
    window = Window(health=(HealthSample(t=19.0, status=200, latency_s=0.01),), probe=(wedged, served))
    verdict = Verdict("not_serving", 10.0, 5.0, "a one-token probe got no token",
                      (Evidence("probe", 10.0, "outcome", DEADLINE), Evidence("health", 9.0, "status", 200)), {})
    assert ended_by(verdict, window) == (Evidence("probe", 20.0, "outcome", SERVED),
                                         Evidence("health", 19.0, "status", 200))


def test_every_kind_of_sample_can_end_a_verdict():
    """No list of its own: each kind the timeline knows is read (a sample of each, a pointer to each)."""
    window = Window(probe=(ProbeSample(t=1.0, outcome=SERVED, latency_s=0.1, deadline_s=5.0),),
                    health=(HealthSample(t=1.0, status=200, latency_s=0.01),))
    for kind in KINDS:
        verdict = Verdict("x", 1.0, 1.0, "", (Evidence(kind, 1.0, "t", None),), {})
        expected = (Evidence(kind, 1.0, "t", 1.0),) if window.of(kind) else ()
        assert ended_by(verdict, window) == expected, kind
