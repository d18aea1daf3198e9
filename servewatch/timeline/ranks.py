"""The rank model over process samples: which member of a target's process tree is which engine rank.

The titles are read by the dialects (`dialects.ranks.parse_title`, `Dialect.rank_of`); this module puts
those readings on the members of a `ProcessSample`, with the ranks inherited from ranked ancestors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servewatch import dialects
from servewatch.dialects.ranks import Axes
from servewatch.timeline.samples import ProcessMember, ProcessSample

# psutil's status words → the kernel's letters a person knows from ps/top.
STATE_LETTERS = {"running": "R", "sleeping": "S", "disk-sleep": "D", "stopped": "T", "tracing-stop": "t",
                 "zombie": "Z", "dead": "X", "idle": "I", "waking": "W", "parked": "P", "wake-kill": "K"}


@dataclass(frozen=True, slots=True)
class Rank:
    """One engine process as the rank model sees it."""

    member: ProcessMember
    kind: str                  # the dialect's kind: "engine_core", "worker", "coordinator", "scheduler", ...
    axes: Axes                 # its own title's ranks, then those inherited from ranked ancestors
    own_axes: Axes             # those its title states
    group: tuple[str, int | None]   # (kind, parent pid): the processes of one kind under one parent are siblings

    @property
    def pid(self) -> int:
        return self.member.pid

    @property
    def title(self) -> str:
        return self.member.title

    @property
    def state(self) -> str:
        return STATE_LETTERS.get(self.member.status, "?")

    def axis(self, name: str) -> int | None:
        return dict(self.axes).get(name)


def rank_of(title: str) -> tuple[str, Axes] | None:
    for dialect in dialects.registered():
        found = dialect.rank_of(title)
        if found is not None:
            return found
    return None


@dataclass(frozen=True, slots=True)
class Aim:
    """A request sent to one engine of a data-parallel server: that engine (its DP rank, as its `engine`
    label names it) and the request headers that route it there."""

    engine: str
    headers: tuple[tuple[str, str], ...]


def dp_aim(rank: Rank) -> Aim | None:
    """How to send a request to the engine of `rank`'s data-parallel rank, by the dialect whose title it bears
    (None when it has no DP rank, or the engine has no routing header)."""
    dp = rank.axis("DP")
    if dp is None:
        return None
    for dialect in dialects.registered():
        if dialect.rank_of(rank.title) is not None:
            return Aim(str(dp), ((dialect.dp_rank_header, str(dp)),)) if dialect.dp_rank_header else None
    return None


def dp_route(rank: Rank) -> dict[str, str]:
    """The request headers that send a request to the engine of `rank`'s data-parallel rank ({} for none)."""
    aim = dp_aim(rank)
    return dict(aim.headers) if aim is not None else {}


def dp_engines(sample: ProcessSample | None) -> tuple[Aim, ...]:
    """One aim per data-parallel engine the process sample shows, by DP rank, when it shows two or more that
    can be routed to; () otherwise (one engine: any request reaches it)."""
    aims: dict[str, Aim] = {}
    for rank in rank_view(sample):
        aim = dp_aim(rank)
        if aim is not None:
            aims.setdefault(aim.engine, aim)
    return tuple(aims[k] for k in sorted(aims, key=int)) if len(aims) > 1 else ()


def rank_view(sample: ProcessSample | None) -> tuple[Rank, ...]:
    """The ranked processes of one process sample (members with a title no engine claims are left out)."""
    if sample is None:
        return ()
    parsed = {m.pid: rank_of(m.title) for m in sample.members}
    by_pid = {m.pid: m for m in sample.members}
    out = []
    for m in sample.members:
        found = parsed[m.pid]
        if found is None:
            continue
        kind, own = found
        axes = list(own)
        have = {axis for axis, _ in axes}
        parent, seen = m.ppid, {m.pid}
        while parent is not None and parent in by_pid and parent not in seen:
            seen.add(parent)
            inherited = parsed.get(parent)
            if inherited is not None:
                for axis, n in inherited[1]:
                    if axis not in have:
                        axes.insert(0, (axis, n))
                        have.add(axis)
            parent = by_pid[parent].ppid
        out.append(Rank(m, kind, tuple(axes), own, (kind, m.ppid)))
    return tuple(out)


def siblings(rank: Rank, ranks: Sequence[Rank]) -> list[Rank]:
    """The other processes of its kind under the same parent (the other TP workers of one engine core)."""
    return [r for r in ranks if r.group == rank.group and r.pid != rank.pid]


def rank_words(rank: Rank, ranks: Sequence[Rank] = ()) -> str:
    """How a person names it: "TP rank 1 of 2 (VLLM::Worker_TP1, pid 812)", "DP rank 1 worker (VLLM::Worker,
    pid 907)", "the engine core (VLLM::EngineCore, pid 700)"."""
    group = [rank, *siblings(rank, ranks)]
    parts = []
    for axis, n in rank.axes:
        inherited = (axis, n) not in rank.own_axes
        of = ""
        if not inherited:
            peers = {dict(r.axes).get(axis) for r in group}
            if None not in peers and len(peers) > 1:
                of = f" of {len(peers)}"
        parts.append(f"{axis} rank {n}{of}")
    what = " ".join(parts)
    kind = rank.kind.replace("_", " ")
    if not parts:
        what = f"the {kind}"
    elif not rank.own_axes:
        what += f" {kind}"
    return f"{what} ({rank.title}, pid {rank.pid})"


def engine_ranks(ranks: Sequence[Rank], engine: str | None) -> list[Rank]:
    """The ranks of one data-parallel engine (its `engine` label is its DP rank); all without DP ranks or
    when the engine is not named."""
    if engine is None or not engine.isdigit() or not any(r.axis("DP") is not None for r in ranks):
        return list(ranks)
    return [r for r in ranks if r.axis("DP") == int(engine)]


def gpu_of(pid: int, gpu) -> tuple[int, int | None] | None:
    """(device index, device memory it holds) of the first GPU whose NVML process list has `pid`, from a
    GpuSample; None when no device lists it (no GPU, no NVML, or another PID namespace)."""
    if gpu is None or not gpu.available:
        return None
    for device in gpu.devices:
        for process in device.processes:
            if process.pid == pid:
                return device.index, process.memory_used_bytes
    return None


def gpus_of(pid: int, gpu) -> tuple:
    """Every device (GpuDevice) whose NVML process list has `pid`, from a GpuSample: the GPU(s) a rank holds;
    () when none lists it (no GPU, no NVML, or another PID namespace)."""
    if gpu is None or not gpu.available:
        return ()
    return tuple(device for device in gpu.devices if any(p.pid == pid for p in device.processes))


def rank_gpus(sample: ProcessSample | None, gpu) -> dict[int, tuple]:
    """pid -> the devices it holds, for every rank of a process sample (ranks on no device are left out)."""
    out = {}
    for rank in rank_view(sample):
        held = gpus_of(rank.pid, gpu)
        if held:
            out[rank.pid] = held
    return out
