"""NCCL RAS, read from outside: a bounded client for the RAS thread every NCCL process runs (NCCL >= 2.24,
on by default; localhost:28028 or NCCL_RAS_ADDR), and parsers for both report formats NCCL documents
(docs/userguide/source/troubleshooting/ras.rst): the text report (2.24 on) and JSON (2.28.7 on).

The wire protocol is text lines (what `ncclras` sends): "CLIENT PROTOCOL 2" -> "SERVER PROTOCOL N";
"TIMEOUT S" -> "OK"; "SET FORMAT json" -> "OK" (2.28.7 on; an older NCCL answers otherwise and the text
report is read instead); "STATUS" -> the report, then the connection closes. Every step here is bounded:
the connect, each read, the whole exchange, and the report's size. A port held by something that is not
RAS is said in one line, as are a refused connection and a timeout.

RAS is evidence, not an oracle: it is known to say "OK" during some PyTorch watchdog timeouts
(NVIDIA/nccl#1730), and its counts race live collectives (a count one behind that moves on is normal).
"""

from __future__ import annotations

import json
import re
import socket
import time
from dataclasses import dataclass, field

PROTOCOL = 2
DEFAULT_ADDR = "localhost:28028"
MAX_REPORT_BYTES = 4 * 1024 * 1024
# The NCCL versions whose reports the parsers were written against (docs at NCCL 2.30.7): newer ones are
# read the same way and said to be unknown.
KNOWN_TEXT = ((2, 24), (2, 30))
KNOWN_JSON = ((2, 28), (2, 30))


class RasError(OSError):
    """The RAS service could not be read, in one line."""


@dataclass(frozen=True, slots=True)
class RasRank:
    rank: int
    pid: int | None = None
    host: str | None = None
    state: str = "ok"                    # ok | missing | unresponsive | dead
    counts: dict[str, int] | None = None  # per collective type (JSON), or {"operation": n} from the text report


@dataclass(frozen=True, slots=True)
class RasComm:
    ident: str                           # "#0-0" (text) or the hash (JSON)
    hash: str
    size: int | None
    ranks: tuple[RasRank, ...]
    errors: tuple[str, ...] = ()          # INCOMPLETE, MISMATCH, ERROR as RAS says them
    missing: tuple[int, ...] = ()
    groups: tuple[tuple[str, int, int], ...] = ()   # text: (op, how many ranks, count) as "N ranks have launched
                                                    # up to operation X" says it (outliers alone are named)

    def behind(self) -> tuple[str, str, int, tuple[int, ...], int] | None:
        """(op, the ranks ahead in words, their count, the ranks behind, their count) for the first op whose
        counts differ; None when none do."""
        ops = sorted({op for r in self.ranks if r.counts for op in r.counts} | {g[0] for g in self.groups})
        for op in ops:
            counted = [(r.rank, r.counts[op]) for r in self.ranks if r.counts and op in r.counts]
            listed = [(n, c) for o, n, c in self.groups if o == op]
            values = [c for _, c in counted] + [c for _, c in listed]
            if not values:
                continue
            top, lowest = max(values), min(values)
            if top == lowest:
                continue
            low = tuple(r for r, c in counted if c == lowest)
            if not low:
                continue                         # the lower count's ranks are not named: nothing to say who
            ahead = [r for r, c in counted if c == top]
            if ahead:
                words = _ranks(ahead)
            else:
                n = sum(n for n, c in listed if c == top)
                words = f"{n} rank{'s' if n != 1 else ''}"
            return op, words, top, low, lowest
        return None


@dataclass(frozen=True)
class RasReport:
    format: str                          # "text" or "json"
    nccl_version: str | None             # None: the report does not say (a text excerpt)
    known_version: bool
    comms: tuple[RasComm, ...]
    dead: tuple[tuple[int, str], ...] = ()          # (pid, host) of processes RAS considers dead
    unreached: tuple[tuple[int, str], ...] = ()     # (pid, host) missing from the data (unresponsive)
    notes: tuple[str, ...] = field(default=())
    table: tuple[tuple[int, int, str, str], ...] = ()   # text: (group, comms in it, status, errors) per row

    def version_words(self) -> str:
        if self.nccl_version is None:
            return "NCCL version not in the report"
        return f"NCCL {self.nccl_version}" + ("" if self.known_version else
                                              " (a RAS report format servewatch does not know; read as 2.30)")

    def why(self) -> str:
        """One line, e.g. "RAS: rank 3 of comm 0x… unresponsive; ranks 0–2 at collective 1,412, rank 3 at 1,411"."""
        parts = []
        for comm in self.comms:
            for rank in comm.ranks:
                if rank.state != "ok":
                    parts.append(f"rank {rank.rank} of comm {comm.hash or comm.ident} {rank.state}")
            lag = comm.behind()
            if lag is not None:
                op, ahead, top, low, lowest = lag
                what = "collective" if op == "operation" else op
                parts.append(f"{ahead} at {what} {top:,}, {_ranks(low)} at {lowest:,}"
                             + (f" (comm {comm.hash or comm.ident})" if len(self.comms) > 1 else ""))
            if comm.missing and not any(r.state != "ok" for r in comm.ranks):
                parts.append(f"comm {comm.hash or comm.ident}: no data from {_ranks(comm.missing)}")
        for pid, host in self.dead:
            parts.append(f"process {pid} on {host} considered dead")
        if not parts:
            if self.table:
                rows = ", ".join(f"{n} comm{'s' if n != 1 else ''} {status} {errors}"
                                 for _, n, status, errors in self.table)
                parts.append(f"{rows}; no rank behind")
            else:
                parts.append(f"{len(self.comms)} communicator{'s' if len(self.comms) != 1 else ''}, no rank behind"
                             if self.comms else "no communicator data")
        return f"RAS ({self.version_words()}): " + "; ".join(parts)


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}–{ranks[-1]}"
    return "ranks " + ", ".join(str(r) for r in ranks)


def _version_tuple(version: str) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def _known(version: str | None, bounds) -> bool:
    parsed = _version_tuple(version) if version else None
    return parsed is not None and bounds[0] <= parsed[:2] <= bounds[1]


# ── JSON (NCCL 2.28.7 on) ─────────────────────────────────────────────────────────────────────────


def parse_json(text: str) -> RasReport:
    try:
        doc = json.loads(text)
    except ValueError:
        raise RasError("RAS JSON report is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators", []), list):
        raise RasError("RAS JSON report without a communicators list")
    version = doc.get("nccl_version")
    comms, dead, unreached = [], [], []
    for raw in doc.get("communicators", []):
        ranks = []
        for r in raw.get("ranks", []) or []:
            counts = r.get("collective_counts")
            ranks.append(RasRank(rank=int(r.get("rank", -1)), pid=r.get("pid"), host=r.get("host"),
                                 counts={str(k): int(v) for k, v in counts.items()} if isinstance(counts, dict)
                                 else None))
        missing = []
        for r in raw.get("missing_ranks", []) or []:
            status = r.get("status") or {}
            state = "dead" if status.get("considered_dead") else (
                "unresponsive" if status.get("unresponsive") else "missing")
            ranks.append(RasRank(rank=int(r.get("rank", -1)), pid=r.get("pid"), host=r.get("host"), state=state))
            missing.append(int(r.get("rank", -1)))
            if state == "dead":
                dead.append((r.get("pid"), r.get("host")))
            elif state == "unresponsive":
                unreached.append((r.get("pid"), r.get("host")))
        comms.append(RasComm(ident=str(raw.get("hash", "")), hash=str(raw.get("hash", "")), size=raw.get("size"),
                             ranks=tuple(sorted(ranks, key=lambda x: x.rank)),
                             errors=("INCOMPLETE",) if missing else (), missing=tuple(sorted(missing))))
    notes = []
    timeouts = (doc.get("ras") or {}).get("timeouts_count")
    if timeouts:
        notes.append(f"{timeouts} RAS communication timeouts while gathering data")
    return RasReport(format="json", nccl_version=str(version) if version is not None else None,
                     known_version=_known(version, KNOWN_JSON), comms=tuple(comms),
                     dead=tuple(sorted(set(dead), key=str)), unreached=tuple(sorted(set(unreached), key=str)),
                     notes=tuple(notes))


# ── text (NCCL 2.24 on) ─────────────────────────────────────────────────────────────────────────────

_VERSION = re.compile(r"^NCCL version (\d+\.\d+\.\d+\S*)")
_COMM = re.compile(r"^#(\d+-\d+) \(([0-9a-fA-F]+)\) ([A-Z,]+)\s*$")
_PROCESS = re.compile(r"^\s+Process (\d+) on node (\S+) managing")
_RANK_LINE = re.compile(r"^\s+Rank (\d+) (?:--|has launched up to operation (\d+) --|has not launched any operations --)")
_GROUP_COUNT = re.compile(r"^\s+(\d+) ranks have launched up to operation (\d+)")
_GROUP_NONE = re.compile(r"^\s+(\d+) ranks have not launched any operations")
_DIFFERENT = re.compile(r"^\s+Communicator ranks have different (?:(\w+) )?operation counts")
_STATUS = re.compile(r"^\s+(\d+) ranks have status (\w+)")
_MISSING_RANKS = re.compile(r"^\s+The missing ranks?: ([\d, ]+)")
_TABLE_ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+\d+\s+\S+\s+\d+\s+\d+\s+([A-Z]+)\s+([A-Z,]+)\s*$")
_MISSING_FROM = re.compile(r"^\s+Missing communicator data from \d+ rank")


def parse_text(text: str) -> RasReport:
    version = None
    comms: list[RasComm] = []
    dead, unreached = [], []
    heading = None           # DEAD, INCOMPLETE, TIMEOUT (a job-level block) or None
    cur = None               # the communicator block being read: dict
    context = None           # ("count", op, value) | ("status", value) | ("missing",)
    notes = []
    table = []

    def close():
        nonlocal cur
        if cur is not None:
            comms.append(_text_comm(cur))
        cur = None

    for line in text.splitlines():
        if version is None and (m := _VERSION.match(line)):
            version = m.group(1)
            continue
        if m := _COMM.match(line):
            close()
            cur = {"ident": "#" + m.group(1), "hash": "0x" + m.group(2).lower(), "errors": m.group(3).split(","),
                   "ranks": {}, "missing": [], "groups": []}
            heading, context = None, None
            continue
        if line and not line.startswith(" "):
            if line.strip("=") and not line.startswith("="):
                close()
                heading = line.split()[0]
                context = None
            continue
        if cur is None:
            if heading == "Group" and (m := _TABLE_ROW.match(line)):
                table.append((int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)))
            elif (m := _PROCESS.match(line)) and heading in ("DEAD", "INCOMPLETE"):
                (dead if heading == "DEAD" else unreached).append((int(m.group(1)), m.group(2)))
            elif heading == "TIMEOUT" and line.strip():
                notes.append(line.strip())
            continue
        if m := _DIFFERENT.match(line):
            op = m.group(1)        # 2.26 on: per type ("AllReduce"); before: "collective", all types together
            context = ("count", op if op and op != "collective" else "operation", None)
        elif m := _GROUP_COUNT.match(line):
            context = ("count", context[1] if context and context[0] == "count" else "operation", int(m.group(2)))
            cur["groups"].append((context[1], int(m.group(1)), context[2]))
        elif m := _GROUP_NONE.match(line):
            context = ("count", context[1] if context and context[0] == "count" else "operation", 0)
            cur["groups"].append((context[1], int(m.group(1)), 0))
        elif m := _STATUS.match(line):
            context = ("status", m.group(2))
        elif _MISSING_FROM.match(line):
            context = ("missing",)
        elif m := _MISSING_RANKS.match(line):
            cur["missing"].extend(int(r) for r in m.group(1).replace(" ", "").split(",") if r)
        elif m := _RANK_LINE.match(line):
            rank = int(m.group(1))
            pid_m = re.search(r"process (\d+) on node (\S+)", line)
            entry = cur["ranks"].setdefault(rank, {"pid": None, "host": None, "counts": {}, "state": "ok"})
            if pid_m:
                entry["pid"], entry["host"] = int(pid_m.group(1)), pid_m.group(2)
            if context and context[0] == "count":
                if m.group(2) is not None:
                    entry["counts"][context[1]] = int(m.group(2))
                elif "has not launched" in line:
                    entry["counts"][context[1]] = 0
                elif context[2] is not None:
                    entry["counts"][context[1]] = context[2]
            elif context and context[0] == "missing":
                cur["missing"].append(rank)
    close()
    unreached_pids = {pid for pid, _ in unreached}
    dead_pids = {pid for pid, _ in dead}
    comms = [_mark(c, dead_pids, unreached_pids) for c in comms]
    return RasReport(format="text", nccl_version=version, known_version=_known(version, KNOWN_TEXT),
                     comms=tuple(comms), dead=tuple(dead), unreached=tuple(unreached), notes=tuple(notes),
                     table=tuple(table))


def _text_comm(cur: dict) -> RasComm:
    ranks = []
    for rank, e in sorted(cur["ranks"].items()):
        ranks.append(RasRank(rank=rank, pid=e["pid"], host=e["host"], counts=e["counts"] or None))
    # The text report names only the outliers of a count: a listed count below the rest implies the others
    # are at the group's top count; that is kept as the communicator's "others" below.
    return RasComm(ident=cur["ident"], hash=cur["hash"], size=None, ranks=tuple(ranks),
                   errors=tuple(cur["errors"]), missing=tuple(sorted(set(cur["missing"]))),
                   groups=tuple(cur["groups"]))


def _mark(comm: RasComm, dead_pids: set, unreached_pids: set) -> RasComm:
    ranks = []
    for r in comm.ranks:
        state = "dead" if r.pid in dead_pids else "unresponsive" if r.pid in unreached_pids else r.state
        if r.rank in comm.missing and state == "ok":
            state = "missing"
        ranks.append(RasRank(r.rank, r.pid, r.host, state, r.counts))
    known = {r.rank for r in ranks}
    ranks.extend(RasRank(rank=m, state="missing") for m in comm.missing if m not in known)
    return RasComm(comm.ident, comm.hash, comm.size, tuple(sorted(ranks, key=lambda x: x.rank)), comm.errors,
                   comm.missing, comm.groups)


def parse(report: str) -> RasReport:
    """Either format, by its first character."""
    return parse_json(report) if report.lstrip().startswith("{") else parse_text(report)


# ── the client ──────────────────────────────────────────────────────────────────────────────────────


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise RasError(f"RAS address {addr!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def query(addr: str = DEFAULT_ADDR, *, fmt: str = "json", connect_s: float = 1.0, total_s: float = 10.0,
          ras_timeout_s: int = 5, verbose: bool = False, max_bytes: int = MAX_REPORT_BYTES,
          clock=time.monotonic) -> RasReport:
    """One bounded STATUS query. Asks for JSON (falling back to text where NCCL predates it). Raises
    RasError with one line: refused, timed out, not RAS, too large."""
    host, port = split_addr(addr)
    deadline = clock() + total_s
    try:
        sock = socket.create_connection((host, port), timeout=connect_s)
    except TimeoutError:
        raise RasError(f"RAS at {addr}: no connection within {connect_s:g} s") from None
    except ConnectionRefusedError:
        raise RasError(f"RAS at {addr}: connection refused (RAS off, NCCL < 2.24, or no NCCL process)") from None
    except OSError as exc:
        raise RasError(f"RAS at {addr}: could not connect ({type(exc).__name__})") from None
    with sock:
        reader = _Lines(sock, deadline, clock, addr)
        reader.send(f"CLIENT PROTOCOL {PROTOCOL}\n")
        hello = reader.line()
        if not hello.upper().startswith("SERVER PROTOCOL "):
            raise RasError(f"RAS at {addr}: the port answers, but not as NCCL RAS (something else holds it)")
        reader.send(f"TIMEOUT {int(ras_timeout_s)}\n")
        if reader.line().strip().upper() != "OK":
            raise RasError(f"RAS at {addr}: TIMEOUT refused")
        notes = []
        if fmt == "json":
            reader.send("SET FORMAT json\n")
            if reader.line().strip().upper() != "OK":
                notes.append("RAS has no JSON format (NCCL < 2.28.7): the text report was read")
        reader.send(("VERBOSE " if verbose else "") + "STATUS\n")
        body = reader.rest(max_bytes)
    report = parse(body.decode("utf-8", "replace"))
    return RasReport(report.format, report.nccl_version, report.known_version, report.comms, report.dead,
                     report.unreached, report.notes + tuple(notes), report.table)


class _Lines:
    def __init__(self, sock: socket.socket, deadline: float, clock, addr: str):
        self.sock, self.deadline, self.clock, self.addr = sock, deadline, clock, addr
        self.buf = b""

    def _left(self) -> float:
        left = self.deadline - self.clock()
        if left <= 0:
            raise RasError(f"RAS at {self.addr}: no answer within the time bound")
        return left

    def send(self, text: str) -> None:
        self.sock.settimeout(self._left())
        try:
            self.sock.sendall(text.encode())
        except OSError as exc:
            raise RasError(f"RAS at {self.addr}: write failed ({type(exc).__name__})") from None

    def _recv(self) -> bytes:
        self.sock.settimeout(self._left())
        try:
            return self.sock.recv(65536)
        except TimeoutError:
            raise RasError(f"RAS at {self.addr}: no answer within the time bound") from None
        except OSError as exc:
            raise RasError(f"RAS at {self.addr}: read failed ({type(exc).__name__})") from None

    def line(self, limit: int = 4096) -> str:
        while b"\n" not in self.buf:
            if len(self.buf) > limit:
                raise RasError(f"RAS at {self.addr}: the port answers, but not as NCCL RAS (something else holds it)")
            chunk = self._recv()
            if not chunk:
                raise RasError(f"RAS at {self.addr}: closed the connection mid-handshake")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode("utf-8", "replace")

    def rest(self, max_bytes: int) -> bytes:
        out = bytearray(self.buf)
        while True:
            if len(out) > max_bytes:
                raise RasError(f"RAS at {self.addr}: report over {max_bytes:,} bytes: not read")
            chunk = self._recv()
            if not chunk:
                return bytes(out)
            out += chunk
