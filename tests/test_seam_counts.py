"""Issue 51: docs/site/architecture.md's table "Where a new engine, verdict, sink, source, fault or command goes" says
how many files each addition takes; each test here makes that addition (a toy) with the files and the one
registration line the table names, counts the files the toy's code lies in, checks it against the table's figure,
and checks the addition took: it shows where that kind of thing shows, and (for the registered ones) not without
its registration line."""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import re
import sys
from pathlib import Path

import pytest

from servewatch import dialects
from servewatch.clock import VirtualClock
from servewatch.bundle import layout, schemas, serialize
from servewatch.bundle.verify import verify_bundle
from servewatch.bundle.writer import BundleContext, BundleWriter
from servewatch.detectors import registry
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.drill import faults
from servewatch.drill.plan import single_fault_plan
from servewatch.sinks.delivery import registry as sinks
from servewatch.timeline import kinds
from servewatch.timeline.ring import Ring
from servewatch.timeline.window import Window
from servewatch.watch.recorder import Recorder
from servewatch.watch.targets import callable_sources
from tests import toy_verdict
from tests.sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_verdicts
from tests.test_sink_registry import ToyClient
from tests.toy_queue_sample import FIELDS, NAME, QueueSample
from tests.toy_queue_source import QueueSource
from tests.toyllm_dialect import ToyllmDialect

ROOT = Path(__file__).resolve().parent.parent


def table_files(row: str) -> int:
    """The figure in the table's "files" column for the row starting `| ROW |`."""
    text = (ROOT / "docs/site/architecture.md").read_text()
    match = re.search(rf"^\| {re.escape(row)} \| (\d+)\b", text, re.M)
    assert match, f"no row {row!r} in the architecture table"
    return int(match.group(1))


def files_of(*objects) -> set[str]:
    """The files the given classes and modules are written in, relative to the repository."""
    return {str(Path(inspect.getsourcefile(o)).resolve().relative_to(ROOT)) for o in objects}


@pytest.fixture
def queue():
    kinds.register(NAME, QueueSample, fields=FIELDS)        # the one line a new source kind adds
    try:
        yield
    finally:
        kinds.unregister(NAME)


READINGS = (QueueSample(100.25, 3, 1.5), QueueSample(101.25, 0, None, shedding=True),
            QueueSample(102.25, 7, float("inf"), error="timeout after 2 s"))


def test_a_source_kind_is_its_source_and_its_sample_with_one_line(queue, tmp_path):
    assert files_of(QueueSource, QueueSample) == {"tests/toy_queue_source.py", "tests/toy_queue_sample.py"}
    assert table_files("a source kind") == 2
    assert kinds.names()[-1] == NAME and QueueSource.kind == NAME

    # the window and the ring hold it by its kind
    base = stall_window(n=24, stalled_from=12)
    window = Window.from_samples([*base.samples(), *READINGS])
    assert window.of(NAME) == READINGS and window.end == base.end and len(window) == len(base) + 3
    assert window.since(101.0).of(NAME) == READINGS[1:]
    ring = Ring({NAME: 2})
    ring.extend(READINGS)
    assert ring.window().of(NAME) == READINGS[1:] and ring.overwritten[NAME] == 1

    # the bundle stores it field by field, counts it, verifies it, and reads it back as it was
    stored = serialize.sample_to_dict(READINGS[2])
    assert stored == {"source": NAME, "t": 102.25, "depth": 7, "oldest_s": "+Inf", "shedding": False,
                      "error": "timeout"}
    writer = BundleWriter(tmp_path, stderr=io.StringIO(), recompute=synthetic_recompute, max_file_bytes=8192,
                          max_sample_files=8)
    path = writer.write(window, synthetic_stall_verdicts(window),
                        BundleContext(target_url="http://127.0.0.1:8000", detector_config={"min_stall_s": 3.0},
                                      overwritten={NAME: 1}))
    assert verify_bundle(path, synthetic_recompute).verdicts_checked == 1
    incident = json.loads((path / layout.INCIDENT).read_bytes())
    assert incident["window"]["samples"][NAME] == 3 and incident["window"]["overwritten"][NAME] == 1
    back = [serialize.sample_from_dict(d) for name in incident["window"]["files"]
            for d in json.loads((path / name).read_bytes())["samples"] if d["source"] == NAME]
    assert back[:2] == list(READINGS[:2]) and back[2] == QueueSample(102.25, 7, float("inf"), error="timeout")

    # the schemas name it, and check its fields
    samples_schema = schemas.load("samples", registry.names(), dialects.identity_labels())
    enums, branches, counts = schemas.source_places(schemas.load("incident", registry.names(),
                                                                 dialects.identity_labels()))
    assert all(enum[-1] == NAME for enum in enums) and len(enums) == 2
    assert all(NAME in c for c in counts) and len(counts) == 2
    branch = schemas.source_places(samples_schema)[1][0][-1]["then"]
    assert branch["required"] == ["source", "t", "depth", "oldest_s", "shedding", "error"]
    assert branch["properties"]["depth"] == {"type": "integer", "minimum": 0}
    assert set(branch["properties"]) == {"source", "t", "depth", "oldest_s", "shedding", "error", "instance", "role"}

    # an evidence pointer may name it
    pointer = Evidence(NAME, 100.25, "depth", 3)
    assert serialize.evidence_to_dict(pointer)["source"] == NAME
    assert Verdict("v", 1.0, 0.0, "why", (pointer,)).evidence[0].source == NAME


def test_the_recorder_records_a_registered_kind_from_its_source(queue):
    clock = VirtualClock()
    start = clock.now()
    queue_source = QueueSource(clock, lambda: 2 if clock.now() - start >= 5.0 else 0, interval=1.0)
    sources = [*callable_sources(clock, 1.0, health=lambda: 200, metrics=lambda: "# no engine here\n"), queue_source]
    recorder = Recorder(sources, clock, history_s=60.0)
    asyncio.run(recorder.run_virtual(10.0))
    recorded = recorder.ring.window().of(NAME)
    assert [s.depth for s in recorded] == [0] * 5 + [2] * (len(recorded) - 5) and len(recorded) >= 10
    assert recorded[-1].oldest_s == pytest.approx(recorded[-1].t - recorded[5].t)
    assert recorder.ring.capacity[NAME] == recorder.ring.capacity["health"]


def test_a_source_kind_unregistered_is_nowhere():
    assert NAME not in kinds.names()
    with pytest.raises(TypeError, match="not a timeline sample"):
        serialize.sample_to_dict(READINGS[0])
    with pytest.raises(serialize.DecodeError, match="unknown sample source 'queue'"):
        serialize.sample_from_dict({"source": NAME, "t": 1.0, "depth": 1, "oldest_s": None, "shedding": False,
                                    "error": None})
    assert serialize.evidence_to_dict(Evidence(NAME, 1.0, "depth", 3))["source"] == "redacted"
    enums, branches, counts = schemas.source_places(schemas.load("incident", registry.names(),
                                                                 dialects.identity_labels()))
    assert not any(NAME in e for e in enums) and not any(NAME in c for c in counts) and len(branches[0]) == 8
    with pytest.raises(TypeError):
        Window.from_samples(READINGS)


def test_the_shipped_schemas_state_each_codec_as_the_built_in_fields_are_stored():
    """A registered kind's field is stated as the shipped files state a built-in field stored the same way."""
    document = schemas._shipped("samples")
    by_kind = {b["if"]["properties"]["source"]["const"]: b["then"]["properties"]
               for b in schemas.source_places(document)[1][0]}
    same = {kinds.TIME: by_kind["health"]["t"], kinds.NUMBER: by_kind["health"]["latency_s"],
            kinds.COUNT: by_kind["requests"]["in_flight"], kinds.INT: by_kind["health"]["status"],
            kinds.FLAG: by_kind["process"]["alive"], kinds.ERROR: by_kind["health"]["error"],
            kinds.TOKEN: by_kind["metrics"]["dialect"]}
    assert set(same) == set(kinds.CODECS)
    for codec, stated in same.items():
        assert schemas.CODEC_SCHEMA[codec] == stated, codec


def test_an_engine_is_one_module_and_one_line():
    assert files_of(ToyllmDialect) == {"tests/toyllm_dialect.py"}
    assert table_files("an engine") == 1
    assert dialects.by_name("toyllm") is None
    dialects.register(ToyllmDialect())                     # the one line
    try:
        assert dialects.by_name("toyllm").name == "toyllm"
        assert any(name.startswith("toyllm:") for name in dialects.wanted_families())
    finally:
        dialects.unregister("toyllm")


def test_a_verdict_is_one_module_and_one_line():
    assert files_of(toy_verdict) == {"tests/toy_verdict.py"}
    assert table_files("a verdict") == 1
    assert toy_verdict.NAME not in registry.names()
    registry.register_module(toy_verdict)                  # the one line
    try:
        assert toy_verdict.NAME in registry.names()
        enums = schemas.verdict_name_enums(schemas.load("incident", registry.names(), dialects.identity_labels()))
        assert enums and all(toy_verdict.NAME in enum for enum in enums)
    finally:
        registry.unregister_module(toy_verdict)


def test_a_live_sink_is_one_module_and_one_line(monkeypatch):
    assert files_of(ToyClient) == {"tests/test_sink_registry.py"}
    assert table_files("a live sink in `serve`") == 1
    monkeypatch.setattr(sinks, "_KINDS", dict(sinks._KINDS))   # the registration ends with the test
    assert "toy_count" not in sinks.sink_names()
    sinks.register_sink("toy_count", ToyClient, help="count at this URL")      # the one line
    assert sinks.sink_names()[-1] == "toy_count"


@pytest.fixture
def toy_nap(monkeypatch):
    monkeypatch.setattr(faults, "__path__", [*faults.__path__, str(ROOT / "tests" / "toy_faults")])
    try:
        yield
    finally:
        faults.FAULTS.pop("toy_nap", None)
        sys.modules.pop("servewatch.drill.faults.toy_nap", None)


def test_a_drill_fault_is_one_module(toy_nap):
    """Every fault is one module of drill/faults/ with one @register class, found without a list naming it."""
    modules = {Path(inspect.getsourcefile(cls)).stem for cls in faults.FAULTS.values()}
    assert len(modules) == len(faults.FAULTS) == len(faults.MODULES)     # one module per fault
    assert "toy_nap" not in faults.FAULTS
    assert faults.discover() == tuple(sorted([*faults.MODULES, "toy_nap"]))     # the module is all it takes
    toy = faults.FAULTS["toy_nap"]
    assert files_of(toy) == {"tests/toy_faults/toy_nap.py"}
    assert table_files("a drill fault") == len(files_of(toy)) == 1
    plan = single_fault_plan("toy_nap", "http://127.0.0.1:9", 4242, consent=True, role=None, hold_s=1.0)
    assert [step.kind for step in plan.steps] == ["toy_nap"]
