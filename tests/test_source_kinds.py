"""One list of source kinds (`servewatch.kinds.SOURCE_KINDS`): the window, the ring, the evidence pointers,
the bundle's tags, counts and schemas all read it, and a sample of each kind goes through all of them."""

from __future__ import annotations

import json
from importlib import resources

from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.kinds import SOURCE_KINDS
from servewatch.bundle import serialize
from servewatch.sinks.base import ended_by
from servewatch.timeline.ring import Ring
from servewatch.timeline.samples import (GpuSample, HealthSample, LogEvent, MetricsSample, ProbeSample,
                                         ProcessSample, RequestsSample, SlotsSample, SlotView)
from servewatch.dialects.base import Slot
from servewatch.timeline.window import Window, kind_of

ONE_OF_EACH = (HealthSample(1.0, 200, 0.01), MetricsSample(2.0, None, None, error="timeout"),
               ProcessSample(3.0, 42, 1.0, True), GpuSample(4.0, False, error="unavailable"),
               LogEvent(5.0, "stats", {"level": "INFO"}),
               ProbeSample(6.0, "served", 0.2, 10.0, 200, 1),
               RequestsSample(7.0, 2, 1, 3.0, 2.5, 2.5, 0.4, 20, 0.5, {"ok": 5}),
               SlotsSample(8.0, (SlotView(Slot(0, True, 2048, 40, 30, 10, 0, 7), 1.5), SlotView(Slot(1, False), None)),
                           0.01))


def test_a_sample_of_each_kind_travels_by_its_kind():
    assert tuple(kind_of(s) for s in ONE_OF_EACH) == SOURCE_KINDS
    window = Window.from_samples(ONE_OF_EACH)
    assert [window.of(kind) for kind in SOURCE_KINDS] == [(s,) for s in ONE_OF_EACH]
    ring = Ring({kind: 4 for kind in SOURCE_KINDS})
    for sample in ONE_OF_EACH:
        ring.add(sample)
    assert len(ring.window()) == len(SOURCE_KINDS)
    for sample, kind in zip(ONE_OF_EACH, SOURCE_KINDS):
        stored = serialize.sample_to_dict(sample)
        assert stored["source"] == kind
        assert serialize.sample_from_dict(stored) == sample


def test_every_kind_can_be_evidence_and_end_a_verdict():
    window = Window.from_samples(ONE_OF_EACH)
    fields = {"health": "status", "metrics": "error", "process": "alive", "gpu": "available", "log": "kind",
              "probe": "outcome", "requests": "in_flight", "slots": "busy"}
    verdict = Verdict("v", 6.0, 0.0, "why", tuple(Evidence(kind, 0.0, fields[kind], None) for kind in SOURCE_KINDS))
    ended = ended_by(verdict, window)
    assert [e.source for e in ended] == list(SOURCE_KINDS)
    assert [e.value for e in ended] == [200, "timeout", True, False, "stats", "served", 2, 1]
    assert [serialize.evidence_to_dict(e)["source"] for e in verdict.evidence] == list(SOURCE_KINDS)


def test_the_schemas_list_the_same_kinds():
    def schema(name):
        return json.loads(resources.files("servewatch.bundle").joinpath("schema", f"{name}.schema.json").read_text())

    samples, incident = schema("samples"), schema("incident")
    assert samples["properties"]["samples"]["items"]["properties"]["source"]["enum"] == list(SOURCE_KINDS)
    assert incident["$defs"]["sample"]["properties"]["source"]["enum"] == list(SOURCE_KINDS)
    assert incident["$defs"]["verdict"]["properties"]["evidence"]["items"]["properties"]["source"]["enum"] == \
        list(SOURCE_KINDS)
    for counts in ("samples", "overwritten"):
        assert set(incident["properties"]["window"]["properties"][counts]["properties"]) == set(SOURCE_KINDS)
