"""Values of a bundle read back for its reports, servewatch/bundle/incident.py (issue 50): the series and markers a
report charts (a deployment's decode instance first), the instances read back, the words of a deployment, of a
verdict's side at fault and of its details, the start's stage table (times from the start and between stages), the
newest process tree, the ranks' collective positions, the newest log lines and the window's latency histograms.
Incidents are built from hand-made samples; load_incident reads a bundle written by the recorder's writer."""

from __future__ import annotations

from array import array

import pytest

from servewatch.bundle import incident as I
from servewatch.bundle.incident import Incident
from servewatch.detectors.verdict import Verdict
from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.timeline.samples import HealthSample, LogEvent, MetricsSample, ProcessMember, ProcessSample

T0 = 1_800_000_000.0


def _inc(samples=(), verdicts=(), meta=None, instances=()):
    return Incident("b", meta or {"window": {"start_t": T0}, "target": {}}, tuple(samples), tuple(verdicts),
                    tuple(instances))


def _metrics(t, waiting, engines=None):
    state = EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=1, waiting=waiting,
                        counters=Counters(generation_tokens=10))
    return MetricsSample(t, "vllm", "vllm-0.32", engines if engines is not None else (state,))


def test_series_and_timelines_of_one_target_and_of_a_deployment():
    one = _inc([_metrics(T0, 2), _metrics(T0 + 1, 5)])
    assert [p[1] for p in one.series["waiting"]] == [2, 5]
    assert one.timelines == [(None, one.series)]
    pre, dec = [_metrics(T0, 1)], [_metrics(T0, 7), _metrics(T0 + 1, 8)]
    pair = _inc(instances=[("prefill p:1", tuple(pre)), ("decode d:2", tuple(dec))])
    assert [p[1] for p in pair.series["waiting"]] == [7, 8]             # the decode instance's
    assert [(who, [p[1] for p in s["waiting"]]) for who, s in pair.timelines] == [("prefill p:1", [1]),
                                                                              ("decode d:2", [7, 8])]
    no_decode = _inc(instances=[("prefill p:1", tuple(pre)), ("prefill q:3", tuple(dec))])
    assert [p[1] for p in no_decode.series["waiting"]] == [1]           # none is decode: the first


def test_markers_are_the_verdicts():
    v = Verdict("overload", T0 + 9, T0 + 4, "why")
    [m] = _inc(verdicts=[v]).markers
    assert (m.t, m.onset, m.label) == (T0 + 9, T0 + 4, "overload")


def test_load_incident_reads_the_samples_verdicts_and_instances(monkeypatch):
    from servewatch.bundle import serialize

    samples = [HealthSample(T0, 200, 0.01), _metrics(T0 + 1, 3), _metrics(T0 + 2, 4)]
    dicts = [serialize.sample_to_dict(s) for s in samples]
    dicts[1]["instance"], dicts[2]["instance"] = "p:1", "d:2"
    v = Verdict("overload", T0 + 2, T0 + 1, "why", details={"engine": "engine=0"})
    meta = {"verdicts": [serialize.verdict_to_dict(v)],
            "target": {"deployment": [{"role": "prefill", "name": "p:1"}, {"role": "decode", "name": "d:2"}]}}
    seen = []
    monkeypatch.setattr(I, "load_bundle", lambda path: seen.append(path) or (meta, dicts))
    inc = I.load_incident("/x/y/bundle-1")
    assert str(seen[0]) == "/x/y/bundle-1" and inc.name == "bundle-1" and inc.meta is meta
    assert [type(s).__name__ for s in inc.samples] == ["HealthSample", "MetricsSample", "MetricsSample"]
    assert inc.samples[1].engines[0].waiting == 3
    assert [(x.name, x.t, x.onset, x.details) for x in inc.verdicts] == [("overload", T0 + 2, T0 + 1,
                                                                         {"engine": "engine=0"})]
    assert [(who, [s.engines[0].waiting for s in ss]) for who, ss in inc.instances] == [("prefill p:1", [3]),
                                                                                      ("decode d:2", [4])]
    meta["target"] = {}
    assert I.load_incident("/b").instances == ()


def test_load_incident_of_a_written_bundle(tmp_path):
    from tests.test_collective_verdict_everywhere import _bundle

    path, verdicts = _bundle(tmp_path)
    inc = I.load_incident(path)
    assert inc.name == path.name
    assert [v.name for v in inc.verdicts] == [v.name for v in verdicts] == ["collective_hang"]
    assert inc.instances == () and len(inc.samples) > 0


def test_deployment_words():
    assert I.deployment_words({"target": {}}) is None
    assert I.deployment_words({"target": {"deployment": []}}) is None
    assert I.deployment_words({"target": {"deployment": [{"role": "prefill", "name": "10.0.0.8:8100"},
                                                         {"role": "decode", "name": "10.0.0.9:8200"}]}}) == \
        "prefill 10.0.0.8:8100, decode 10.0.0.9:8200"


def _v(name, **details):
    return Verdict(name, T0, T0, "why", details=details)


def test_fault_words():
    assert I.fault_words(_v("overload", instance="d:2", role="decode")) == \
        "decode d:2: its own verdict, about that instance alone"
    assert I.fault_words(_v("overload", instance="d:2")) is None         # no role: not an instance's
    assert I.fault_words(_v("overload", role="decode")) is None
    assert I.fault_words(_v("no_such_verdict")) is None
    assert I.fault_words(_v("kv_transfer_stall", prefill="p:1", decode="d:2", act_on="p:1", prefill_state="silent")) \
        == "prefill p:1 (silent): the side to restart; decode d:2 is not acted on"
    assert I.fault_words(_v("kv_transfer_stall", prefill="p:1", decode="d:2", act_on="d:2", decode_state=3)) \
        == "decode d:2: the side to restart; prefill p:1 is not acted on"
    assert I.fault_words(_v("kv_transfer_stall", decode="d:2", act_on="d:2")) == "decode d:2: the side to restart"
    assert I.fault_words(_v("kv_transfer_stall", decode="d:2", act_on="z:9")) == \
        "instance z:9: the side to restart; decode d:2 is not acted on"
    assert I.fault_words(_v("kv_expired", prefill="p:1", decode="d:2", decode_state="waiting", act_on=None)) == \
        "neither side is restarted (prefill p:1, decode d:2 (waiting)): a person decides"
    assert I.fault_words(_v("pd_bypass", prefill=5)) == \
        "neither side is restarted (no instance named): a person decides"


def test_detail_words():
    assert I.detail_words("engine", "engine=0") == "engine 0"
    assert I.detail_words("engine", 3) == "3"
    assert I.detail_words("x", None) == "unknown"
    assert I.detail_words("x", True) == "yes" and I.detail_words("x", False) == "no"
    assert I.detail_words("x", 1234.5) == "1,234.5"
    assert I.detail_words("x", 2.0) == "2"
    assert I.detail_words("x", 0.12345) == "0.123"
    assert I.detail_words("x", 10.0) == "10"
    assert I.detail_words("x", [1, "a"]) == "1, a" and I.detail_words("x", ()) == "none"
    assert I.detail_words("x", 7) == "7"


def _start(t, stage, **fields):
    return LogEvent(t, "startup", {"stage": stage, "dialect": "vllm", **fields})


def test_stage_rows_from_the_start():
    samples = [_start(T0, "process_up"), _start(T0 + 2.04, "weights_loaded", seconds=1.5),
               _start(T0 + 5.0, "kv_cache_size", tokens=1000, concurrency=2.5), _start(T0 + 6.0, "custom_stage"),
               HealthSample(T0 + 1, 503, 0.01), HealthSample(T0 + 8.26, 200, 0.01)]
    assert I.stage_rows(_inc(samples)) == [
        ("process up", 0.0, 0.0, "–"),
        ("weights loaded", 2.0, 2.0, "took 1.5 s"),
        ("KV cache sized", 5.0, 3.0, "2.5x concurrency at that length, 1,000 tokens"),
        ("custom stage", 6.0, 1.0, "–"),
        ("first /health 200", 8.3, 2.3, "–")]
    assert I.STAGE_HEADERS == ("stage", "at (s from the start)", "since the previous stage (s)", "the log said")


def test_a_health_200_at_the_first_ask_is_no_stage():
    samples = [_start(T0, "process_up"), _start(T0 + 2, "weights_loaded"), HealthSample(T0 + 3, 200, 0.01)]
    assert [r[0] for r in I.stage_rows(_inc(samples))] == ["process up", "weights loaded"]
    failed_first = [_start(T0, "process_up"), _start(T0 + 2, "weights_loaded"), HealthSample(T0 + 1, 503, 0.01),
                    HealthSample(T0 + 3, 200, 0.01)]
    assert [r[0] for r in I.stage_rows(_inc(failed_first))] == ["process up", "weights loaded", "first /health 200"]
    only_up = [_start(T0, "process_up"), HealthSample(T0 + 3, 200, 0.01)]
    assert I.stage_rows(_inc(only_up)) == []                             # one stage left: no table
    two = [_start(T0, "process_up"), HealthSample(T0 + 1, 503, 0.01), HealthSample(T0 + 3, 200, 0.01)]
    assert [r[:3] for r in I.stage_rows(_inc(two))] == [("process up", 0.0, 0.0), ("first /health 200", 3.0, 3.0)]
    assert I.stage_rows(_inc([])) == []
    assert I.STAGE_WORDS["health_ok"] == "first /health 200" and len(I.STAGE_WORDS) == 13
    assert I.STAGE_WORDS["graphs_captured"] == "graphs captured" and I.STAGE_WORDS["api_listening"] == "API listening"


def test_process_rows_of_the_newest_tree():
    old = ProcessSample(T0, 100, 1.0, True, (ProcessMember(100, 1.0, "api", "python3", "sleeping"),))
    members = (ProcessMember(100, 1.0, "api", "python3", "sleeping", 3 * 2**20 + 2**19, 30, 2.5),
               ProcessMember(110, 2.0, "worker", "VLLM::Worker_TP0", "running", None, None, None))
    new = ProcessSample(T0 + 5, 100, 1.0, True, members)
    assert I.process_rows(_inc([old, new, HealthSample(T0 + 6, 200, 0.01)])) == (T0 + 5, [
        ("100", "api", "python3", "sleeping", 3.5, 30, 2.5),
        ("110", "worker", "VLLM::Worker_TP0", "running", None, None, None)])
    gone = ProcessSample(T0 + 7, 100, 1.0, False, ())
    assert I.process_rows(_inc([new, gone])) == (T0 + 7, [("100", "root", "–", "gone", None, None, None)])
    assert I.process_rows(_inc([HealthSample(T0, 200, 0.01)])) == (None, [])
    assert I.PROCESS_HEADERS == ("pid", "role", "title", "status", "RSS (MiB)", "threads", "CPU %")
    assert I.LOG_HEADERS == ("time (s)", "kind", "fields")


def _pos(t, group, rank, completed, entered, op="all_reduce"):
    return LogEvent(t, "collective", {"state": "position", "group": group, "rank": rank, "completed": completed,
                                      "entered": entered, "op": op})


def test_collective_rows_of_the_newest_collection():
    samples = [_pos(T0, 0, 0, 1, 1), _pos(T0 + 5, 1, 1, 4, 4), _pos(T0 + 5, 0, 1, 4.0, 5),
               _pos(T0 + 5, 0, 0, 4, 5, op=7), LogEvent(T0 + 5, "collective", {"state": "behind", "rank": 3}),
               LogEvent(T0 + 6, "stats", {"state": "position"}),
               LogEvent(T0 + 5, "collective", {"state": "position", "group": "g", "rank": True})]
    assert I.collective_rows(_inc(samples)) == (T0 + 5, [
        ("0", "0", "4", "5", ""), ("0", "1", "4", "5", "all_reduce"), ("1", "1", "4", "4", ""),
        ("–", "–", "–", "–", "")])
    assert I.collective_rows(_inc([LogEvent(T0, "collective", {"state": "behind"})])) == (None, [])
    assert I.COLLECTIVE_HEADERS == ("group", "rank", "last completed", "last entered", "waiting in")
    assert I._whole(3.9) == "3" and I._whole(False) == "–" and I._whole("1") == "–" and I._whole(None) == "–"


def test_log_rows_the_newest_from_the_window_start():
    logs = [LogEvent(T0 + i + 0.12345, "engine_dead" if i == 24 else "stats", {"running": i}) for i in range(25)]
    inc = _inc([*logs, HealthSample(T0, 200, 0.01)])
    rows = I.log_rows(inc)
    assert len(rows) == 20 and rows[0] == (5.123, "stats", "5 running")
    assert rows[-1] == (24.123, "engine dead", "24 running")
    assert I.log_rows(inc, limit=2) == [(23.123, "stats", "23 running"), (24.123, "engine dead", "24 running")]
    no_start = _inc(logs[:1], meta={"window": {"start_t": None}, "target": {}})
    assert I.log_rows(no_start) == [(round(T0 + 0.12345, 3), "stats", "0 running")]


def _hist(counts, total):
    return Histogram((0.1, 1.0), array("d", counts), counts[-1] + 1, total)


def _engine(labels, **histograms):
    return EngineState("vllm", "vllm-0.32", labels, histograms=histograms)


def test_latency_histograms_of_the_window():
    a = {"engine": "0", "model_name": "m"}
    b = {"engine": "1"}
    first = MetricsSample(T0, "vllm", "vllm-0.32", (_engine(a, ttft=_hist([1, 2], 1.0), e2e=_hist([0, 1], 2.0),
                                                            custom=_hist([0, 0], 0.0)),
                                                    _engine(b, ttft=_hist([0, 1], 0.5))))
    last = MetricsSample(T0 + 10, "vllm", "vllm-0.32", (_engine(a, ttft=_hist([3, 5], 4.0), e2e=_hist([0, 1], 2.0),
                                                                 custom=_hist([1, 1], 0.5)),
                                                        _engine(b, ttft=_hist([0, 1], 0.5)),
                                                        _engine({}, itl=_hist([1, 1], 0.1))))
    got = I.latency_histograms(_inc([first, HealthSample(T0 + 5, 200, 0.01), last]))
    assert [(name, kind) for name, kind, _ in got] == [("engine=0", "ttft"), ("engine=0", "custom")]
    ttft = got[0][2]
    assert list(ttft.cumulative) == [2.0, 3.0] and ttft.count == 3 and ttft.sum == pytest.approx(3.0)
    assert got[1][2].count == 1
    # a counter reset in between: no histogram
    reset = MetricsSample(T0 + 20, "vllm", "vllm-0.32", (_engine(a, ttft=_hist([0, 0], 0.0)),))
    assert I.latency_histograms(_inc([first, reset])) == []
    # kinds in HISTOGRAM_KINDS order within an engine
    order = MetricsSample(T0 + 10, "vllm", "vllm-0.32", (_engine(b, queue=_hist([1, 3], 1.0), ttft=_hist([1, 3], 1.0),
                                                                 itl=_hist([1, 3], 1.0)),))
    start = MetricsSample(T0, "vllm", "vllm-0.32", (_engine(b, queue=_hist([0, 1], 0.0), ttft=_hist([0, 1], 0.0),
                                                            itl=_hist([0, 1], 0.0)),))
    assert [k for _, k, _ in I.latency_histograms(_inc([start, order]))] == ["ttft", "itl", "queue"]


def test_the_survivors_of_the_first_run():
    # neither side is the one acted on: both named, joined by "and"
    assert I.fault_words(_v("kv_transfer_stall", prefill="p:1", decode="d:2", act_on="z:9")) == \
        "instance z:9: the side to restart; prefill p:1 and decode d:2 is not acted on"
    # a /health asked at the start's own moment that failed: the 200 after it is a stage
    samples = [_start(T0, "process_up"), _start(T0 + 2, "weights_loaded"), HealthSample(T0, 503, 0.01),
               HealthSample(T0 + 3, 200, 0.01)]
    assert [r[0] for r in I.stage_rows(_inc(samples))] == ["process up", "weights loaded", "first /health 200"]
    # RSS in MiB to one decimal
    member = ProcessMember(1, 1.0, "api", "p", "running", int(3.123 * 2**20))
    assert I.process_rows(_inc([ProcessSample(T0, 1, 1.0, True, (member,))]))[1][0][4] == 3.1
    # the newest collection is the newest position's time, with one position only
    samples = [_pos(T0, 0, 0, 1, 1), _pos(T0 + 5, 0, 0, 2, 2), _pos(T0 + 9, 0, 1, 3, 4)]
    assert I.collective_rows(_inc(samples)) == (T0 + 9, [("0", "1", "3", "4", "all_reduce")])
    # rows sorted by group and rank only: two positions of one rank keep their order
    samples = [_pos(T0, 0, 0, 5, 5), _pos(T0, 0, 0, 3, 3)]
    assert [r[2] for r in I.collective_rows(_inc(samples))[1]] == ["5", "3"]
    # an engine's name: its labels but the model's, joined by ","; "engine" with none
    a = {"engine": "0", "tp": "1", "model_name": "m"}
    first = MetricsSample(T0, "vllm", "v", (_engine(a, ttft=_hist([0, 1], 0.5)), _engine({}, ttft=_hist([0, 1], 0.5))))
    last = MetricsSample(T0 + 1, "vllm", "v", (_engine(a, ttft=_hist([1, 2], 1.0)), _engine({}, ttft=_hist([1, 2], 1.0))))
    assert [name for name, _, _ in I.latency_histograms(_inc([first, last]))] == ["engine", "engine=0,tp=1"]
