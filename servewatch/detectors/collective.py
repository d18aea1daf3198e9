"""collective_hang: ranks wait in a collective that another rank has not entered (or the ranks disagree about
the collective at one sequence number), as the collective sources say it: PyTorch's Flight Recorder dumps
and NCCL RAS, read from outside (servewatch.sources.flight_recorder, nccl_ras) and put on the timeline as
"collective" log events (servewatch.sources.collective_events).

Every rank alive, /health 200, zero tokens: the stacks tell it after the fact; these sources name the rank
behind and the collective. Neither is an oracle (RAS has said OK during PyTorch watchdog timeouts; the
Flight Recorder sees only collectives that pass through c10d), so the why line says which source named it
and whether the other agreed. Proven on a real two-rank gloo job (tests/collective/): rank 1 sleeping
before its 5th all_reduce, rank 0 waiting in it.
"""

from __future__ import annotations

from servewatch.detectors.verdict import INCIDENT, RESTART, Evidence, RunbookBranch, Thresholds, Verdict, VerdictSpec
from servewatch.timeline.ranks import rank_view, rank_words
from servewatch.timeline.samples import LogEvent
from servewatch.timeline.window import Window

NAME = "collective_hang"
KIND = "collective"
HANG_STATES = ("behind", "mismatch")
_WORDS = {"flight_recorder": "Flight Recorder", "ras": "RAS"}

RUNBOOK = RunbookBranch(
    meaning="Ranks of one engine wait in a collective (an all-reduce, a broadcast) that another rank has not "
            "entered, or the ranks issued different collectives at one sequence number. Every process is alive "
            "and /health may answer 200 while no request gets a token: a collective never completes until every "
            "rank of its group enters it.",
    check_next=(
        "The rank named behind: its stacks (`py-spy dump --pid PID`): where it is instead of the collective "
        "(a data-dependent branch, a host-side wait, a different collective).",
        "The bundle's Collectives table (from the Flight Recorder dumps): per process group, each rank's last "
        "completed and last entered collective; the dumps themselves (op and sizes per sequence number, with "
        "Python frames) stay where each rank wrote them (TORCH_FR_DUMP_TEMP_FILE + RANK).",
        "NCCL RAS (`echo status | nc localhost 28028` or `ncclras`): whether its per-rank counts agree, and "
        "whether a rank is unresponsive or dead; repeat the query: counts that move are not a hang.",
    ),
    expected_range="The ranks of a group enter each collective within milliseconds of each other; a RAS count "
                   "one behind that moves on at the next query is normal.",
    safe_action="Keep the bundle, the dumps and every rank's stacks, then restart the engine (every rank): a "
                "collective that one rank never enters does not complete, and the other ranks cannot leave it.",
    rollback="None needed: the restart is the recovery. If the same rank hangs at the same collective again, it "
             "is a bug of the engine or model code: pin the version and report it with the dumps.",
    restart_destroys="The KV and prefix caches, the in-flight requests, and the hung ranks' state (take the "
                     "dumps and stacks first).",
    by_cause={"behind": "A rank never entered the collective the others wait in.",
              "mismatch": "The ranks issued different collectives (or sizes) at one sequence number: a "
                          "desynchronised program, not a slow rank."},
)


def _observations(events: list[LogEvent], component: str) -> list[tuple[float, list[LogEvent]]]:
    by_t: dict[float, list[LogEvent]] = {}
    for e in events:
        if e.fields.get("component") == component:
            by_t.setdefault(e.t, []).append(e)
    return sorted(by_t.items())


def _hang(events: list[LogEvent]) -> LogEvent | None:
    for state in HANG_STATES:
        for e in events:
            if e.fields.get("state") == state:
                return e
    return None


def _same(a: LogEvent, b: LogEvent) -> bool:
    keys = ("state", "rank", "seq", "group")
    return all(a.fields.get(k) == b.fields.get(k) for k in keys)


def _onset(observations: list[tuple[float, list[LogEvent]]], newest: LogEvent) -> float:
    """The first observation of the trailing run of this source's observations that show the same hang."""
    onset = newest.t
    for t, events in reversed(observations):
        if any(_same(e, newest) for e in events):
            onset = t
        else:
            break
    return onset


def _int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _words(e: LogEvent) -> str:
    f = e.fields
    rank, seq, at = _int(f.get("rank")), _int(f.get("seq")), _int(f.get("behind_at"))
    group = f" in group {_int(f['group'])}" if _int(f.get("group")) is not None else ""
    op = f" ({f['op']})" if isinstance(f.get("op"), str) else ""
    if f.get("state") == "mismatch":
        return (f"ranks {_int(f.get('waiting_rank'))} and {rank} issued different collectives at sequence "
                f"{seq}{group}")
    if f.get("component") == "ras":
        return f"rank {rank} behind{group}: at collective count {at}, other ranks at {seq}{op}"
    waiting = _int(f.get("ranks_waiting")) or 1
    who = f"rank {_int(f.get('waiting_rank'))}" + (f" and {waiting - 1} more" if waiting > 1 else "")
    return (f"rank {rank} behind{group}: {who} waiting in collective {seq}{op}, rank {rank} last entered "
            f"{at if at is not None else 'none'}")


def _process(e: LogEvent, window: Window) -> str:
    """The rank named, joined by its PID to the rank model of the newest process sample: "; rank 1 is TP rank 1
    of 2 (TITLE, pid 812)". Empty when the event has no PID or the tree does not hold it."""
    pid = _int(e.fields.get("pid"))
    if pid is None or not window.process:
        return ""
    ranks = rank_view(window.process[-1])
    found = next((r for r in ranks if r.pid == pid), None)
    if found is not None:
        return f"; rank {_int(e.fields.get('rank'))} is {rank_words(found, ranks)}"
    member = next((m for m in window.process[-1].members if m.pid == pid), None)
    if member is None:
        return ""
    return f"; rank {_int(e.fields.get('rank'))} is pid {pid}" + (f" ({member.title})" if member.title else "")


def _other_says(component: str, events: list[LogEvent], hang: LogEvent) -> tuple[str, bool | None]:
    """The other source's newest word on it, and whether it agrees (None: not read)."""
    name = _WORDS[component]
    if not events:
        return f"{name}: not read", None
    rank = hang.fields.get("rank")
    for e in events:
        state = e.fields.get("state")
        if state in ("behind", "unresponsive", "dead") and e.fields.get("rank") == rank:
            return f"{name} agrees (rank {_int(rank)} {state})", True
    other = next((e for e in events if e.fields.get("state") in ("behind", "unresponsive", "dead", "mismatch")), None)
    if other is not None:
        return (f"{name} says otherwise: rank {_int(other.fields.get('rank'))} {other.fields.get('state')}", False)
    return f"{name} sees no rank behind", False


def detect(window: Window, config: Thresholds) -> list[Verdict]:
    events = [e for e in window.logs if e.kind == KIND]
    if not events:
        return []
    newest: dict[str, tuple[float, list[LogEvent]]] = {}
    for component in _WORDS:
        observations = _observations(events, component)
        if observations:
            newest[component] = observations[-1]
    found = None
    for component in ("flight_recorder", "ras"):
        if component in newest:
            hang = _hang(newest[component][1])
            if hang is not None:
                found = component, hang
                break
    if found is None:
        return []
    component, hang = found
    onset = _onset(_observations(events, component), hang)
    other = "ras" if component == "flight_recorder" else "flight_recorder"
    said, agrees = _other_says(other, newest.get(other, (0.0, []))[1], hang)
    why = f"{_words(hang)}{_process(hang, window)} — {_WORDS[component]}; {said}"
    evidence = [Evidence("log", hang.t, "collective.state", str(hang.fields.get("state")))]
    if onset != hang.t:
        evidence.insert(0, Evidence("log", onset, "collective.state", str(hang.fields.get("state"))))
    if agrees is not None:
        evidence.append(Evidence("log", newest[other][0], "collective.component", other))
    details: dict = {"cause": str(hang.fields.get("state")), "evidence": component,
                     "sources_disagree": agrees is False}
    for key in ("rank", "seq", "group", "behind_at"):
        if _int(hang.fields.get(key)) is not None:
            details[key] = _int(hang.fields.get(key))
    if isinstance(hang.fields.get("op"), str):
        details["op"] = hang.fields["op"]
    t = max(e.t for e in events)
    return [Verdict(NAME, t, onset, why, tuple(evidence), details)]


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

SETTINGS = ()
SPECS = (
    # Restart once the same rank has stayed behind at the same collective for 30 s of observations (a RAS count
    # one behind that moves on is a race, not a hang).
    VerdictSpec("collective_hang", detect, INCIDENT, "page",
                "ranks wait in a collective another rank has not entered (or the ranks issued different collectives)",
                RUNBOOK, ("log", "process"), labels=("cause",), action=RESTART, hold_s=30.0),
)
