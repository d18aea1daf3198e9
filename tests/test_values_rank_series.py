"""Values of the rank series, servewatch/sinks/export/rank_series.py (issue 50): each rank's (role, rank, state)
row from a process sample, the cap, the label of a rank's axes, and what the two collectors export (names, help,
labels, value 1, the node view's age limit and its error counter). Samples are hand-built process trees."""

from __future__ import annotations

from types import SimpleNamespace

from servewatch.sinks.export import rank_series as R
from servewatch.sinks.export.exporter import label
from servewatch.timeline.samples import ProcessMember, ProcessSample

T0 = 1_800_000_000.0


def _tree(t=T0, *, tp1="stopped", alive=True, error=None, workers=2):
    members = [ProcessMember(100, 1.0, "api", "python3", "sleeping", ppid=1),
               ProcessMember(110, 2.0, "engine_core", "VLLM::EngineCore", "sleeping", ppid=100)]
    for i in range(workers):
        members.append(ProcessMember(111 + i, 3.0, "worker", f"VLLM::Worker_TP{i}",
                                     tp1 if i == 1 else "running", ppid=110))
    return ProcessSample(t=t, root_pid=100, root_create_time=1.0, alive=alive, members=tuple(members), error=error)


def _lab(value: str) -> str:
    return "L" + value          # marks what went through the label function


def test_constants():
    assert R.NAME == "servewatch_rank_state" and R.NODE_NAME == "servewatch_node_rank_state"
    assert R.MAX_RANKS == 64 and R.SAMPLE_MAX_AGE_S == 10.0
    assert R.HELP.startswith("1 for each engine rank of a target (from its process titles and parentage)")
    assert R.HELP.endswith("(R running, S sleeping, D uninterruptible, T stopped, Z zombie)")
    assert R.NODE_HELP.startswith("1 for each engine rank running on this node (`serve --node`")
    assert R.NODE_HELP.endswith("its role, its rank and its process state letter")


def test_rank_label():
    assert R.rank_label(()) == "none"
    assert R.rank_label((("TP", 1),)) == "TP1"
    assert R.rank_label((("DP", 1), ("TP", 0))) == "DP1_TP0"


def test_rank_rows_of_a_tree():
    assert R.rank_rows(_tree()) == [("engine_core", "none", "S"), ("worker", "TP0", "R"), ("worker", "TP1", "T")]
    assert R.rank_rows(None) == []
    assert R.rank_rows(_tree(alive=False)) == []
    assert R.rank_rows(_tree(error="gone")) == []


def test_rank_rows_are_capped_in_a_stable_order():
    rows = R.rank_rows(_tree(workers=70, tp1="running"))
    assert len(rows) == R.MAX_RANKS == 64
    assert rows[0] == ("engine_core", "none", "S")
    # sorted as strings: TP0, TP1, TP10 .. TP19, TP2, ...
    assert rows[1:4] == [("worker", "TP0", "R"), ("worker", "TP1", "R"), ("worker", "TP10", "R")]
    assert rows[-1] == sorted({("worker", f"TP{i}", "R") for i in range(70)})[62]
    assert len(R.rank_rows(_tree(workers=63))) == 64


def test_the_target_collector():
    asked = []

    def newest():
        asked.append(1)
        return [("a b", _tree()), ("gone", None)]

    c = R.RankCollector(newest, _lab)
    assert c.describe() == []
    [family] = c.collect()
    assert family.name == R.NAME and family.documentation == R.HELP and family.type == "gauge"
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"target": "La b", "role": "Lengine_core", "rank": "Lnone", "state": "LS"}, 1.0),
        ({"target": "La b", "role": "Lworker", "rank": "LTP0", "state": "LR"}, 1.0),
        ({"target": "La b", "role": "Lworker", "rank": "LTP1", "state": "LT"}, 1.0)]
    assert asked == [1]


def test_the_node_collector_exports_fresh_samples_with_the_engine_and_pod():
    engines = [(SimpleNamespace(engine="8000", pod_uid="uid-1"), _tree(T0)),
               (SimpleNamespace(engine="8001", pod_uid=None), _tree(T0 - 5.0, tp1="running", workers=1)),
               (SimpleNamespace(engine="8002", pod_uid=None), None)]
    c = R.NodeRankCollector("node 1", lambda: engines, _lab, errors=lambda: 3, clock=lambda: T0 + 5.0)
    assert c.describe() == []
    family, errors = c.collect()
    assert family.name == R.NODE_NAME and family.documentation == R.NODE_HELP and family.type == "gauge"
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"node": "Lnode 1", "engine": "8000", "pod_uid": "uid-1", "role": "Lengine_core", "rank": "Lnone",
          "state": "LS"}, 1.0),
        ({"node": "Lnode 1", "engine": "8000", "pod_uid": "uid-1", "role": "Lworker", "rank": "LTP0", "state": "LR"}, 1.0),
        ({"node": "Lnode 1", "engine": "8000", "pod_uid": "uid-1", "role": "Lworker", "rank": "LTP1", "state": "LT"}, 1.0),
        ({"node": "Lnode 1", "engine": "8001", "pod_uid": "none", "role": "Lengine_core", "rank": "Lnone",
          "state": "LS"}, 1.0),
        ({"node": "Lnode 1", "engine": "8001", "pod_uid": "none", "role": "Lworker", "rank": "LTP0", "state": "LR"}, 1.0)]
    assert errors.name == "servewatch_node_view_errors" and errors.type == "counter"
    assert errors.documentation == "Node-view cycles that failed (the last good view was kept)"
    assert [(s.name, s.value) for s in errors.samples] == [("servewatch_node_view_errors_total", 3.0)]


def test_the_node_collector_drops_samples_older_than_the_limit():
    engine = SimpleNamespace(engine="8000", pod_uid=None)
    now = [T0 + R.SAMPLE_MAX_AGE_S]
    c = R.NodeRankCollector("n", lambda: [(engine, _tree(T0))], label, clock=lambda: now[0])
    assert len(c.collect()[0].samples) == 3                     # exactly at the limit: kept
    other = SimpleNamespace(engine="8001", pod_uid=None)
    both = R.NodeRankCollector("n", lambda: [(engine, _tree(T0 - 1)), (other, _tree(T0))], label,
                               clock=lambda: now[0])
    assert {s.labels["engine"] for s in both.collect()[0].samples} == {"8001"}   # a stale one skipped, not the rest
    now[0] = T0 + R.SAMPLE_MAX_AGE_S + 0.001
    assert c.collect()[0].samples == []
    default = R.NodeRankCollector("n", lambda: [], label)
    assert [s.value for s in default.collect()[1].samples] == [0.0]   # no errors counted by default
    import time
    assert default.clock is time.time
