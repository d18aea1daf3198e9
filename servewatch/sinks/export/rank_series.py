"""`servewatch_rank_state{target,role,rank,state}`: each engine rank's process state, from a target's newest
process sample (a target with a pid), through the rank model (`timeline.ranks`).

One series per rank, value 1, carrying its current state letter (R, S, D, T, t, Z, ...): a rank that changes
state changes series, so `servewatch_rank_state{state="T"} == 1` is "a rank is stopped now". Cardinality is
bounded: role is one of the dialects' rank kinds, rank is the title's rank suffix (e.g. "TP1", "DP1_TP0",
"none"), state one of a dozen letters, and at most MAX_RANKS series per target.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from servewatch.timeline.ranks import rank_view
from servewatch.timeline.samples import ProcessSample

NAME = "servewatch_rank_state"
HELP = ("1 for each engine rank of a target (from its process titles and parentage), labelled with its role, its "
        "rank and its process state letter (R running, S sleeping, D uninterruptible, T stopped, Z zombie)")
MAX_RANKS = 64
SAMPLE_MAX_AGE_S = 10.0     # an older process view is no state: its ranks are not exported (nor listed by serve's API)


def rank_label(axes) -> str:
    return "_".join(f"{axis}{n}" for axis, n in axes) or "none"


def rank_rows(sample: ProcessSample | None) -> list[tuple[str, str, str]]:
    """(role, rank, state) of each rank in a process sample, at most MAX_RANKS, in a stable order."""
    if sample is None or not sample.alive or sample.error is not None:
        return []
    rows = sorted({(r.kind, rank_label(r.axes), r.state) for r in rank_view(sample)})
    return rows[:MAX_RANKS]


class RankCollector:
    """At each /metrics scrape: `newest()` yields (target, newest process sample or None) for every target."""

    def __init__(self, newest: Callable[[], Iterable[tuple[str, ProcessSample | None]]], label: Callable[[str], str]):
        self.newest, self.label = newest, label

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(NAME, HELP, labels=["target", "role", "rank", "state"])
        for target, sample in self.newest():
            for role, rank, state in rank_rows(sample):
                family.add_metric([self.label(target), self.label(role), self.label(rank), self.label(state)], 1.0)
        return [family]


NODE_NAME = "servewatch_node_rank_state"
NODE_HELP = ("1 for each engine rank running on this node (`serve --node`: found by process titles, no URL), labelled "
             "with the node, the engine (the TCP port its API server listens on), the Kubernetes pod UID when it runs "
             "in a pod (join with kube_pod_info{uid}), its role, its rank and its process state letter")


class NodeRankCollector:
    """At each /metrics scrape: `newest()` yields (node engine, its newest process sample) for every engine the
    node view found (servewatch.serve.node)."""

    def __init__(self, node: str, newest: Callable[[], Iterable[tuple[object, ProcessSample | None]]],
                 label: Callable[[str], str], errors: Callable[[], int] = lambda: 0,
                 clock: Callable[[], float] = time.time):
        """A sample older than SAMPLE_MAX_AGE_S by `clock()` (the view kept after failed cycles) exports no rank."""
        self.node, self.newest, self.label, self.errors, self.clock = node, newest, label, errors, clock

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        family = GaugeMetricFamily(NODE_NAME, NODE_HELP, labels=["node", "engine", "pod_uid", "role", "rank", "state"])
        now = self.clock()
        for engine, sample in self.newest():
            if sample is None or now - sample.t > SAMPLE_MAX_AGE_S:
                continue
            for role, rank, state in rank_rows(sample):
                family.add_metric([self.label(self.node), engine.engine, engine.pod_uid or "none", self.label(role),
                                   self.label(rank), self.label(state)], 1.0)
        errors = CounterMetricFamily("servewatch_node_view_errors", "Node-view cycles that failed (the last good "
                                     "view was kept)", value=self.errors())
        return [family, errors]
