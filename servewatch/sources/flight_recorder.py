"""PyTorch Flight Recorder dumps, read from outside: which rank is behind in a collective, and which ranks
disagree about the collective at one sequence number.

A process run with TORCH_FR_BUFFER_SIZE > 0 keeps a ring of its c10d collectives (sequence number, op,
sizes, state). Its JSON dump (torch's `_dump_fr_trace_json`; format version "2.x") is an object with
`version`, `pg_config` (group name -> desc and ranks), `pg_status` (group name -> last enqueued /
started / completed sequence numbers) and `entries`, each with `collective_seq_id`, `profiling_name`
("gloo:all_reduce", "nccl:broadcast"), `process_group` ([name, desc]), `input_sizes`, `output_sizes`,
`state` ("scheduled", "started", "completed"), `retired` and `is_p2p`. A dump does not name its own
rank: the caller says whose it is (the rank suffix of TORCH_FR_DUMP_TEMP_FILE, or the process's RANK).

Only JSON is read. A pickle dump (`_dump_fr_trace`, the NCCL watchdog's default file) is never
unpickled: `parse_dump` refuses it in one line that says how to get JSON. Nothing here imports torch.

What an entry means, per rank: it *entered* a collective when the entry exists (the rank issued it);
it *completed* it when the entry is retired or its state is "completed"; it *started* it when the state
is "started" or "completed" (gloo records no start: its entries stay "scheduled" until retired).

The dump trigger is the documented pipe: TORCH_NCCL_DEBUG_INFO_PIPE_FILE + RANK + ".pipe", a FIFO the
process reads; a write asks for a dump into TORCH_FR_DUMP_TEMP_FILE + RANK. `request_dump` writes one
byte, never blocking (a pipe with no reader is said, not waited on); `read_dump` reads a bounded file.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MAX_DUMP_BYTES = 32 * 1024 * 1024     # a 20,000-entry ring is ~20 MB of JSON; larger is refused, said
KNOWN_VERSIONS = ("2.",)             # format versions whose fields are read as above (torch 2.5–2.13: "2.x")
PICKLE_WORDS = ("a pickle dump is not read (servewatch never unpickles): take the JSON one, "
                "torch._C._distributed_c10d._dump_fr_trace_json(), or the debug server's JSON endpoint")


class DumpError(ValueError):
    """A dump that cannot be read, in one line."""


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int                     # collective_seq_id (p2p ops: p2p_seq_id)
    op: str                      # "all_reduce", "broadcast" (the backend prefix dropped)
    backend: str                 # "gloo", "nccl", "" when the name has none
    input_sizes: tuple
    output_sizes: tuple
    state: str
    retired: bool
    p2p: bool

    @property
    def completed(self) -> bool:
        return self.retired or self.state == "completed"

    @property
    def started(self) -> bool:
        return self.state in ("started", "completed")


@dataclass(frozen=True, slots=True)
class GroupTrace:
    name: str                    # the process group's name in the dump ("0", "1", ...)
    desc: str                    # "default_pg", "undefined", an engine's own
    ranks: tuple[int, ...] | None
    entries: tuple[Entry, ...]   # collectives only (not p2p), by sequence number
    status: dict                 # pg_status as dumped: the recorder's own counters (may lag the entries)


@dataclass(frozen=True, slots=True)
class Dump:
    version: str
    comm_lib_version: str
    groups: dict[str, GroupTrace]
    known_version: bool


def _tuple(value) -> tuple:
    if isinstance(value, list):
        return tuple(_tuple(v) for v in value)
    return value


def parse_dump(data: bytes) -> Dump:
    """One rank's JSON dump. Raises DumpError with one line: a pickle, too large, not JSON, no entries."""
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(f"dump of {len(data):,} bytes is over the {MAX_DUMP_BYTES:,}-byte bound: not read")
    if data[:1] == b"\x80":
        raise DumpError(PICKLE_WORDS)
    try:
        doc = json.loads(data)
    except UnicodeDecodeError:
        raise DumpError("not a Flight Recorder JSON dump (not UTF-8 text)") from None
    except ValueError:
        raise DumpError("not a Flight Recorder JSON dump (not valid JSON)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list):
        raise DumpError("not a Flight Recorder JSON dump (no entries list)")
    version = str(doc.get("version", ""))
    config = doc.get("pg_config") if isinstance(doc.get("pg_config"), dict) else {}
    status = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
    by_group: dict[str, list[Entry]] = {}
    descs: dict[str, str] = {}
    for raw in doc.get("entries", []):
        if not isinstance(raw, dict):
            continue
        pg = raw.get("process_group") or ["", ""]
        name = str(pg[0]) if pg else ""
        descs.setdefault(name, str(pg[1]) if len(pg) > 1 else "")
        backend, _, op = str(raw.get("profiling_name", "")).rpartition(":")
        p2p = bool(raw.get("is_p2p", False))
        seq = raw.get("p2p_seq_id" if p2p else "collective_seq_id")
        if not isinstance(seq, int) or p2p:
            continue                       # p2p ops are sequenced per peer pair: not compared across a group
        by_group.setdefault(name, []).append(Entry(
            seq=seq, op=op, backend=backend, input_sizes=_tuple(raw.get("input_sizes", [])),
            output_sizes=_tuple(raw.get("output_sizes", [])), state=str(raw.get("state", "")),
            retired=bool(raw.get("retired", False)), p2p=p2p))
    groups = {}
    for name in sorted(set(by_group) | set(status)):
        groups[name] = GroupTrace(
            name=name, desc=descs.get(name) or _desc(config, name), ranks=_ranks(config, name),
            entries=tuple(sorted(by_group.get(name, []), key=lambda e: e.seq)),
            status=status.get(name, {}) if isinstance(status.get(name), dict) else {})
    return Dump(version=version, comm_lib_version=str(doc.get("comm_lib_version", "")), groups=groups,
                known_version=version.startswith(KNOWN_VERSIONS))


def collectives_held(dump: Dump) -> int:
    """How many collectives a dump holds (over its groups): more than 0 is evidence that the rank records."""
    return sum(len(g.entries) for g in dump.groups.values())


def _desc(config: dict, name: str) -> str:
    entry = config.get(name)
    return str(entry.get("desc", "")) if isinstance(entry, dict) else ""


def _ranks(config: dict, name: str) -> tuple[int, ...] | None:
    entry = config.get(name)
    if not isinstance(entry, dict) and len(config) == 1:
        entry = next(iter(config.values()))    # gloo's default group is configured under "" (torch 2.13)
    if not isinstance(entry, dict):
        return None
    try:
        ranks = json.loads(str(entry.get("ranks", "")))
    except ValueError:
        return None
    return tuple(int(r) for r in ranks) if isinstance(ranks, list) else None


# ── the analysis ────────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Position:
    """Where one rank is in one group."""

    rank: int
    completed: int | None        # the last collective it completed
    started: int | None          # the last one it started (None: its backend records no start, or none)
    entered: int | None          # the last one it issued
    pending_op: str | None       # the op of `entered` when not completed (it is waiting in it)


@dataclass(frozen=True, slots=True)
class Mismatch:
    seq: int
    by_rank: dict[int, str]      # rank -> "all_reduce [[1024]]"

    def words(self) -> str:
        return f"collective {self.seq}: " + ", ".join(f"rank {r} {w}" for r, w in sorted(self.by_rank.items()))


@dataclass(frozen=True, slots=True)
class GroupFinding:
    group: str
    desc: str
    positions: tuple[Position, ...]
    behind: tuple[int, ...] = ()          # ranks that have not entered the collective others wait in
    waiting: tuple[int, ...] = ()         # ranks waiting in it
    seq: int | None = None                # the collective the waiting ranks are in
    op: str | None = None
    mismatches: tuple[Mismatch, ...] = ()
    missing: tuple[int, ...] = ()         # members of the group with no dump

    def why(self) -> str:
        label = f"group {self.group}" + (f" ({self.desc})" if self.desc else "")
        parts = []
        if self.behind:
            at = {p.rank: p for p in self.positions}
            behind = ", ".join(f"rank {r} at {_at(at[r])}" for r in self.behind)
            waiting = ", ".join(str(r) for r in self.waiting)
            parts.append(f"{label}: {behind} — behind; rank{'s' if len(self.waiting) > 1 else ''} {waiting} "
                         f"waiting in collective {self.seq} ({self.op})")
        if self.mismatches:
            parts.append(f"{label}: mismatch at " + "; ".join(m.words() for m in self.mismatches[:3]))
        if not parts:
            done = {p.completed for p in self.positions}
            parts.append(f"{label}: ranks agree, last completed collective "
                         f"{'/'.join(str(d) for d in sorted(done, key=lambda v: -1 if v is None else v))}")
        if self.missing:
            parts.append(f"{label}: no dump from rank{'s' if len(self.missing) > 1 else ''} "
                         f"{', '.join(str(r) for r in self.missing)}")
        return "; ".join(parts)


def _at(position: Position) -> str:
    if position.entered is None:
        return "no collective"
    if position.pending_op is None:
        return f"collective {position.entered} (completed)"
    return f"collective {position.entered} ({position.pending_op}, not completed)"


@dataclass(frozen=True)
class Analysis:
    groups: tuple[GroupFinding, ...]
    notes: tuple[str, ...] = field(default=())    # unknown versions, empty dumps: said, not guessed

    @property
    def behind(self) -> tuple[tuple[str, int, int | None], ...]:
        """(group, rank, seq) for each rank behind."""
        return tuple((g.group, r, g.seq) for g in self.groups for r in g.behind)

    @property
    def mismatched(self) -> bool:
        return any(g.mismatches for g in self.groups)

    def why(self) -> str:
        lines = [g.why() for g in self.groups if g.behind or g.mismatches]
        return "Flight Recorder: " + ("; ".join(lines) if lines else
                                      "; ".join(g.why() for g in self.groups) or "no collectives recorded")


def _describe(entry: Entry) -> str:
    shapes = ",".join("x".join(str(d) for d in shape) if isinstance(shape, tuple) else str(shape)
                      for shape in entry.input_sizes)
    return f"{entry.op} [{shapes}]"


def _position(rank: int, trace: GroupTrace | None) -> Position:
    if trace is None or not trace.entries:
        return Position(rank, None, None, None, None)
    last = trace.entries[-1]
    completed = max((e.seq for e in trace.entries if e.completed), default=None)
    started = max((e.seq for e in trace.entries if e.started), default=None)
    return Position(rank, completed, started, last.seq, None if last.completed else last.op)


def analyse(dumps: Mapping[int, Dump]) -> Analysis:
    """Per process group, where each rank is; the ranks behind; ops or sizes that differ at one sequence."""
    notes = [f"rank {r}: Flight Recorder format {d.version or '(none)'} is not one servewatch knows; read as 2.x"
             for r, d in sorted(dumps.items()) if not d.known_version]
    names = sorted({name for d in dumps.values() for name in d.groups})
    findings = []
    for name in names:
        traces = {r: d.groups.get(name) for r, d in sorted(dumps.items())}
        members = next((t.ranks for t in traces.values() if t is not None and t.ranks), None)
        ranks = sorted(set(members) & set(dumps)) if members else sorted(dumps)
        missing = tuple(sorted(set(members) - set(dumps))) if members else ()
        positions = tuple(_position(r, traces.get(r)) for r in ranks)
        desc = next((t.desc for t in traces.values() if t is not None and t.desc), "")
        frontier = max((p.entered for p in positions if p.entered is not None), default=None)
        waiting = tuple(p.rank for p in positions if p.entered == frontier and p.pending_op is not None)
        behind: tuple[int, ...] = ()
        seq = op = None
        if frontier is not None and waiting:
            behind = tuple(p.rank for p in positions if p.entered is None or p.entered < frontier)
            if behind:
                seq = frontier
                op = next(p.pending_op for p in positions if p.rank == waiting[0])
        findings.append(GroupFinding(group=name, desc=desc, positions=positions, behind=behind,
                                     waiting=waiting if behind else (), seq=seq, op=op,
                                     mismatches=_mismatches(traces), missing=missing))
    return Analysis(groups=tuple(findings), notes=tuple(notes))


def _mismatches(traces: Mapping[int, GroupTrace | None]) -> tuple[Mismatch, ...]:
    by_seq: dict[int, dict[int, Entry]] = {}
    for rank, trace in traces.items():
        for entry in trace.entries if trace is not None else ():
            by_seq.setdefault(entry.seq, {})[rank] = entry
    found = []
    for seq, entries in sorted(by_seq.items()):
        if len(entries) < 2:
            continue
        kinds = {(e.op, e.input_sizes) for e in entries.values()}
        if len(kinds) > 1:
            found.append(Mismatch(seq, {r: _describe(e) for r, e in entries.items()}))
    return tuple(found)


# ── the trigger and the files ───────────────────────────────────────────────────────────────────────


def pipe_path(pipe_prefix: str, rank: int) -> str:
    return f"{pipe_prefix}{rank}.pipe"


def dump_path(dump_prefix: str, rank: int) -> str:
    return f"{dump_prefix}{rank}"


def request_dump(pipe: str) -> str | None:
    """Ask one rank for a dump by writing a byte to its pipe, never blocking. None when asked; else why not,
    in one line (no such pipe, not a pipe, no process reading it, the pipe full)."""
    try:
        if not stat.S_ISFIFO(os.stat(pipe).st_mode):
            return "the dump trigger is not a pipe: not written"
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return "no dump trigger pipe (the process has not made it)"
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return "no process reads the dump trigger pipe: not written"
        return f"dump trigger pipe not opened ({errno.errorcode.get(exc.errno, exc.errno)})"
    try:
        os.write(fd, b"1")
    except BlockingIOError:
        return "the dump trigger pipe is full (a request is already pending)"
    except OSError as exc:
        return f"dump trigger pipe not written ({errno.errorcode.get(exc.errno, exc.errno)})"
    finally:
        os.close(fd)
    return None


def _identity(path: str) -> tuple | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns, info.st_size)


def read_dump(path: str, *, unlike: tuple | None = None, max_bytes: int = MAX_DUMP_BYTES) -> bytes | None:
    """A dump file's bytes, when it exists and is not the file `unlike` identified (inode, mtime, size)
    before the request: a dump left from an earlier request is not this one. Bounded."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if unlike is not None and (info.st_ino, info.st_mtime_ns, info.st_size) == unlike:
        return None
    if info.st_size > max_bytes:
        raise DumpError(f"dump of {info.st_size:,} bytes is over the {max_bytes:,}-byte bound: not read")
    with open(path, "rb") as f:
        return f.read(max_bytes + 1)


@dataclass(frozen=True)
class Collected:
    dumps: dict[int, Dump]
    failures: dict[int, str]       # rank -> one line
    seconds: float                 # from the requests to the last dump read


def collect(ranks: Mapping[int, tuple[str, str]], *, timeout_s: float = 5.0, poll_s: float = 0.05,
            clock=time.monotonic, pause=time.sleep) -> Collected:
    """Ask each rank (rank -> (pipe, dump file)) for a dump and read what arrives within `timeout_s`."""
    t0 = clock()
    before = {rank: _identity(dump) for rank, (_, dump) in ranks.items()}
    failures = {}
    for rank, (pipe, _) in sorted(ranks.items()):
        why = request_dump(pipe)
        if why is not None:
            failures[rank] = why
    dumps: dict[int, Dump] = {}
    pending = [r for r in sorted(ranks) if r not in failures]
    unparsed: dict[int, str] = {}     # a file still being written (torch's own writer writes in place)
    while pending:
        for rank in list(pending):
            try:
                data = read_dump(ranks[rank][1], unlike=before[rank])
                if data is not None:
                    dumps[rank] = parse_dump(data)
                    pending.remove(rank)
            except DumpError as exc:
                if str(exc).startswith("not a Flight Recorder JSON dump"):
                    unparsed[rank] = str(exc)
                    continue
                failures[rank] = str(exc)
                pending.remove(rank)
        if pending and clock() - t0 >= timeout_s:
            for rank in pending:
                failures[rank] = unparsed.get(rank) or f"no dump within {timeout_s:g} s of the request"
            break
        if pending:
            pause(poll_s)
    return Collected(dumps=dumps, failures=failures, seconds=clock() - t0)


def analyse_files(paths: Sequence[tuple[int, str]]) -> tuple[Analysis, dict[int, str]]:
    """The analysis of dump files given as (rank, path); ranks whose file could not be read, with why."""
    dumps, failures = {}, {}
    for rank, path in paths:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_DUMP_BYTES + 1)
            dumps[rank] = parse_dump(data)
        except OSError as exc:          # the system's words: "Is a directory", "No such file or directory"
            failures[rank] = f"{path}: not read ({exc.strerror or 'unreadable'})"
        except DumpError as exc:
            failures[rank] = str(exc)
    return analyse(dumps), failures
