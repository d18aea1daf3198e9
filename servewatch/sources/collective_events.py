"""What the collective sources saw, as timeline log events (kind "collective") a detector reads from a window
and a bundle keeps: numbers and fixed tokens only (ranks, sequence numbers, counts, the op's name).

One event per observation and source: component "flight_recorder" or "ras"; state "behind", "mismatch",
"unresponsive", "dead" or "agree". For "behind": `rank` (the first rank behind), `ranks_behind`, `waiting_rank`
(the first waiting), `ranks_waiting`, `seq` (the collective the waiting ranks are in; for RAS the count the
ranks ahead reached), `behind_at` (where the rank behind is), `group` when the group's name is a number, `op`,
`pid` when the rank named is a known process of the watched tree (joined to the rank model by the detector).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from servewatch.sources.flight_recorder import Analysis
from servewatch.sources.nccl_ras import RasReport
from servewatch.timeline.samples import LogEvent

KIND = "collective"
_OP = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,39}$")


def _op(op: str | None) -> str | None:
    return op if op and _OP.match(op) else None


def _group(name: str) -> dict:
    return {"group": int(name)} if name.isdigit() else {}


def _pid(pids: Mapping[int, int] | None, rank: int) -> dict:
    pid = (pids or {}).get(rank)
    return {"pid": pid} if isinstance(pid, int) else {}


def from_flight_recorder(analysis: Analysis, t: float, pids: Mapping[int, int] | None = None) -> list[LogEvent]:
    """`pids`: rank -> the process whose dump it was (the rank model joins it by PID to a process title)."""
    events = []
    for g in analysis.groups:
        at = {p.rank: p for p in g.positions}
        if g.behind:
            fields = {"component": "flight_recorder", "state": "behind", "rank": g.behind[0],
                      "ranks_behind": len(g.behind), "waiting_rank": g.waiting[0], "ranks_waiting": len(g.waiting),
                      "seq": g.seq, **_group(g.group), **_pid(pids, g.behind[0])}
            if at[g.behind[0]].entered is not None:
                fields["behind_at"] = at[g.behind[0]].entered
            if _op(g.op):
                fields["op"] = g.op
            events.append(LogEvent(t, KIND, fields))
        for m in g.mismatches[:1]:
            ranks = sorted(m.by_rank)
            fields = {"component": "flight_recorder", "state": "mismatch", "seq": m.seq, "rank": ranks[-1],
                      "waiting_rank": ranks[0], **_group(g.group), **_pid(pids, ranks[-1])}
            events.append(LogEvent(t, KIND, fields))
    if not events and analysis.groups:
        events.append(LogEvent(t, KIND, {"component": "flight_recorder", "state": "agree"}))
    return events


def from_ras(report: RasReport, t: float, local: Callable[[int | None, str | None], bool] | None = None
             ) -> list[LogEvent]:
    """`local(pid, host)`: whether RAS's (pid, host) of a rank is a process of the watched tree on this host;
    those ranks' events carry the pid (the rank model joins it to a process title)."""
    events = []
    for comm in report.comms:
        pids = {r.rank: r.pid for r in comm.ranks if local is not None and local(r.pid, r.host)}
        for rank in comm.ranks:
            if rank.state in ("unresponsive", "dead"):
                events.append(LogEvent(t, KIND, {"component": "ras", "state": rank.state, "rank": rank.rank,
                                                 **_pid(pids, rank.rank)}))
        lag = comm.behind()
        if lag is not None:
            op, _, top, low, lowest = lag
            fields = {"component": "ras", "state": "behind", "rank": low[0], "ranks_behind": len(low),
                      "seq": top, "behind_at": lowest, **_pid(pids, low[0])}
            if _op(op) and op != "operation":
                fields["op"] = op
            events.append(LogEvent(t, KIND, fields))
    if not events and (report.comms or report.table):
        events.append(LogEvent(t, KIND, {"component": "ras", "state": "agree"}))
    return events


def positions(analysis: Analysis, t: float, *, limit: int = 256) -> list[LogEvent]:
    """Where each rank is in each group, as the dumps said it (state "position"): the bundle's bounded copy of
    the dumps (numbers only; a dump's frames and paths are never kept). At most `limit` events."""
    events = []
    for g in analysis.groups:
        for p in g.positions:
            if len(events) >= limit:
                return events
            fields = {"component": "flight_recorder", "state": "position", "rank": p.rank, **_group(g.group)}
            for key, value in (("completed", p.completed), ("started", p.started), ("entered", p.entered)):
                if value is not None:
                    fields[key] = value
            if _op(p.pending_op):
                fields["op"] = p.pending_op
            events.append(LogEvent(t, KIND, fields))
    return events
