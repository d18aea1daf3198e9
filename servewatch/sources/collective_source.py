"""The collective sources, live: NCCL RAS read on a slow cadence, and every rank's Flight Recorder dump
collected at once when a stall or a rank verdict is pending (or when asked, before guard kills), put on the
timeline as "collective" log events (servewatch.sources.collective_events) so `collective_hang` fires from it.

- Discovery: from the process tree's /proc/PID/environ (servewatch.sources.collective_env), said once at the
  first poll in one line ("collectives: RAS: ...; Flight Recorder: ..."), and read again every 30 s, or (at
  most every 5 s) while something is pending: ranks spawned after the start are found then.
- RAS: every `ras_every_s` (30 s) and at once when something is pending, only where a rank has NCCL loaded
  with RAS on; bounded connect (1 s) and whole exchange (`ras_total_s`). A port held by something that is
  not RAS, a refused connection, a timeout: said in one line, once per kind of failure.
- Flight Recorder: each rank's documented dump trigger (the pipe) written without blocking (O_NONBLOCK), the
  dump read bounded in size (flight_recorder.MAX_DUMP_BYTES) and time (`dump_timeout_s`), analysed; a rank
  with no pipe, a pipe that would block, a dump too large, a process not ours: one line each.
- What a bundle keeps: the events only (numbers and fixed tokens: ranks, sequence numbers, the op's name),
  including each rank's position per group ("position": last completed and entered collective), bounded to
  MAX_POSITIONS. A dump itself holds Python frames with file paths: it stays where torch wrote it (the
  rank's TORCH_FR_DUMP_TEMP_FILE), never copied into a shareable bundle.

All blocking work (reading /proc, the pipe, the dump files, the RAS socket) runs in a worker thread, on the
source's own task: the recorder's other sources keep their cadence.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from servewatch.sources import collective_env, collective_events, flight_recorder, nccl_ras
from servewatch.timeline.samples import LogEvent

RAS_EVERY_S = 30.0            # the slow cadence of RAS reads when nothing is pending
REDUMP_S = 30.0               # one round of dumps per pending condition, at most this often
DUMP_TIMEOUT_S = 5.0          # from the pipe writes to the last dump read
RAS_TOTAL_S = 5.0             # one RAS exchange, connect to the end of the report
MAX_POSITIONS = 256           # position events kept per collection (rank x group)
MAX_RANKS = 64                # processes asked for a dump per collection
REDISCOVER_S = 5.0            # the tree's environments read again at most this often, and only when needed


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    create_time: float | None


def _create_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone or not readable: no identity
        return None


def _uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f.read(65536).splitlines():
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def not_ours(pid: int, pipe: str, expected_create_time: float | None) -> str | None:
    """Why the dump trigger of `pid` must not be written (None: it may): the process is not the one
    discovered (its PID reused), or the pipe belongs to another user than the process runs as."""
    if expected_create_time is not None:
        now = _create_time(pid)
        if now is None or abs(now - expected_create_time) > 0.01:
            return f"pid {pid} is no longer the process discovered (gone or its PID reused): not written"
    uid = _uid(pid)
    try:
        owner = os.stat(pipe).st_uid
    except OSError:
        return None                           # no pipe: said by request_dump
    if uid is not None and owner != uid:
        return f"pid {pid}: its dump trigger pipe belongs to another user than the process: not written"
    return None


class CollectiveSource:
    """A timeline source of "collective" log events for the ranks under `root` (or the given `pids`)."""

    kind = "log"

    def __init__(self, clock, interval: float, *, root: int | None = None, pids: Iterable[int] = (),
                 tool: str = "watch", pending: Callable[[], bool] | None = None,
                 proven: Callable[[], bool] = lambda: True, ras_every_s: float = RAS_EVERY_S,
                 redump_s: float = REDUMP_S, dump_timeout_s: float = DUMP_TIMEOUT_S,
                 ras_total_s: float = RAS_TOTAL_S, say: Callable[[str], None] | None = None,
                 proc: str = "/proc"):
        if root is None and not pids:
            raise ValueError("a collective source needs a root process or the ranks' PIDs")
        self.clock, self.interval, self.root, self.pids, self.tool = clock, interval, root, tuple(pids), tool
        self._pending = pending
        self.proven = proven                  # the root's identity proof holds (watch/guard); the rest is checked here
        self.ras_every_s, self.redump_s = ras_every_s, redump_s
        self.dump_timeout_s, self.ras_total_s = dump_timeout_s, ras_total_s
        self.say = say or (lambda line: print(f"servewatch {tool}: {line}", file=sys.stderr, flush=True))
        self.proc = proc
        self._ring = None
        self._suspicion = None
        self._restart_pending: Callable[[], bool] | None = None
        self._local_names: set[str] | None = None
        self._lock = asyncio.Lock()
        self._forced = False
        self._said: set[str] = set()          # one-line failures said once each
        self._created: dict[int, float | None] = {}
        self._ranks: tuple[collective_env.RankEnv, ...] | None = None
        self._discovered_t = 0.0
        self.discovery: str | None = None
        self.last_dump_t: float | None = None
        self.last_ras_t: float | None = None
        self.last_collected: flight_recorder.Collected | None = None
        self.last_analysis: flight_recorder.Analysis | None = None
        self.collections = 0
        self.ras_reads = 0

    # --- the recorder's hooks ------------------------------------------------------------------------

    def bind_timeline(self, ring, suspicion=None, reads: str | None = None) -> None:
        """The recorder's ring and, from the detectors' layer, when a rank began to look stalled (`reads`: the
        kind suspicion needs, as the recorder tells every source; this source asks it only while a collective
        waits, so it keeps no shortcut)."""
        self._ring, self._suspicion = ring, suspicion

    def bind_verdicts(self, restart_pending: Callable[[], bool]) -> None:
        """The recorder's word on whether a verdict only a restart helps holds (a stall, a stalled rank)."""
        self._restart_pending = restart_pending

    def force(self) -> None:
        """The next poll collects the dumps and reads RAS whatever is pending (guard, before a kill)."""
        self._forced = True

    def pending(self) -> bool:
        """A stall or rank verdict is pending: the caller's predicate, else a verdict only a restart helps holds
        (the recorder says), a rank the process view shows stalled (detectors.ranks.suspicion), or a probe
        that got no token within its deadline."""
        if self._pending is not None:
            return bool(self._pending())
        if self._restart_pending is not None and self._restart_pending():
            return True
        if self._ring is None:
            return False
        window = self._ring.window()
        if self._suspicion is not None and self._suspicion(window) is not None:
            return True
        return bool(window.probe) and window.probe[-1].outcome in ("deadline", "failed")

    # --- polling ---------------------------------------------------------------------------------------

    async def poll(self) -> list[LogEvent]:
        async with self._lock:
            loop = asyncio.get_running_loop()
            forced, self._forced = self._forced, False
            now = self.clock.now()
            if self._ranks is None:
                self._ranks, self._discovered_t = await loop.run_in_executor(None, self._discover), now
                self.discovery = collective_env.summary(self._ranks)
                self.say(f"collectives: {self.discovery}")
            pending = forced or self.pending()
            since = now - self._discovered_t
            if forced or (pending and since >= REDISCOVER_S) or since >= self.ras_every_s:
                # read again when something is to be done, else on the slow cadence: ranks spawned (or gone)
                self._ranks, self._discovered_t = await loop.run_in_executor(None, self._discover), now
            ras_due = self.last_ras_t is None or now - self.last_ras_t >= self.ras_every_s
            ranks = self._ranks
            events: list[LogEvent] = []
            fr_ranks = [r for r in ranks if r.readable and r.dump_wanted]
            dump_due = self.last_dump_t is None or now - self.last_dump_t >= self.redump_s
            if fr_ranks and (forced or (pending and dump_due)):
                self.last_dump_t = now
                events += await loop.run_in_executor(None, self._collect_dumps, fr_ranks)
            addrs = sorted({r.ras_addr for r in ranks if r.readable and r.nccl_loaded and r.ras_enabled})
            if addrs and (ras_due or (pending and now - (self.last_ras_t or 0.0) >= 1.0) or forced):
                self.last_ras_t = now
                events += await loop.run_in_executor(None, self._read_ras, addrs)
            return events

    def _discover(self) -> tuple[collective_env.RankEnv, ...]:
        pids = collective_env.tree_pids(self.root, self.proc) if self.root is not None else list(self.pids)
        known = self._created
        self._created = {pid: known[pid] if pid in known else _create_time(pid) for pid in pids}   # the tree now
        return collective_env.discover(pids, self.proc)

    def _once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.say(line)

    def _collect_dumps(self, ranks) -> list[LogEvent]:
        if not self.proven():
            self._once("collectives: the server's identity is not proven: no dump trigger written")
            return []
        wanted: dict[int, tuple[str, str]] = {}
        pids: dict[int, int] = {}
        rankless = []
        for r in ranks[:MAX_RANKS]:
            if r.rank is None:
                rankless.append(r)
            elif r.pipe is None:
                self._once(f"collectives: rank {r.rank}: no dump trigger pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE "
                           "unset): no dump asked")
            elif r.dump is None:
                self._once(f"collectives: rank {r.rank}: TORCH_FR_DUMP_TEMP_FILE unset: where torch writes its "
                           "dump depends on its version; set it")
            elif (why := not_ours(r.pid, r.pipe, self._created.get(r.pid))) is not None:
                self._once(f"collectives: rank {r.rank}: {why}")
            elif r.rank in wanted:
                self._once(f"collectives: two processes say RANK={r.rank}: only the first is asked")
            else:
                wanted[r.rank] = (r.pipe, r.dump)
                pids[r.rank] = r.pid
        for rank, pipe, dump in self._by_pipe_name(rankless):
            wanted.setdefault(rank, (pipe, dump))
        if not wanted:
            return []
        got = flight_recorder.collect(wanted, timeout_s=self.dump_timeout_s)
        t = self.clock.now()
        self.collections += 1
        self.last_collected = got
        for rank, why in sorted(got.failures.items()):
            self._once(f"collectives: rank {rank}: {why}")
        if not got.dumps:
            return []
        held = {rank: flight_recorder.collectives_held(dump) for rank, dump in got.dumps.items()}
        discovery = collective_env.summary(self._ranks or (), held)
        if discovery != self.discovery:          # a dump read is evidence the discovery line did not have
            self.discovery = discovery
            self.say(f"collectives: {discovery}")
        analysis = flight_recorder.analyse(got.dumps)
        self.last_analysis = analysis
        for note in analysis.notes:
            self._once(f"collectives: {note}")
        self.say(f"collectives: {len(got.dumps)} dump(s) in {got.seconds:.2f} s: {analysis.why()}")
        return collective_events.from_flight_recorder(analysis, t, pids) + collective_events.positions(
            analysis, t, limit=MAX_POSITIONS)

    def _by_pipe_name(self, rankless) -> list[tuple[int, str, str]]:
        """Ranks whose environment has no RANK (an engine's own worker processes, started without torchrun):
        the pipes their watchdogs made, PREFIX + N + ".pipe", are found by name in the prefix's directory, each
        written only when it belongs to the user such a process runs as; the process behind each is not known."""
        found: dict[int, tuple[int, str, str]] = {}
        for r in rankless:
            if r.pipe_prefix is None or r.dump_prefix is None:
                self._once(f"collectives: pid {r.pid} has no RANK in its environment and no dump trigger pipe or "
                           "dump path: its dump is not known")
                continue
            folder, stem = os.path.split(r.pipe_prefix)
            try:
                names = sorted(os.listdir(folder or "."))[:10 * MAX_RANKS]
            except OSError:
                continue
            uid = _uid(r.pid)
            for name in names:
                number = name[len(stem):-len(".pipe")] if name.startswith(stem) and name.endswith(".pipe") else ""
                if not number.isdigit() or int(number) in found or len(found) >= MAX_RANKS:
                    continue
                pipe = os.path.join(folder, name)
                try:
                    owner = os.stat(pipe).st_uid
                except OSError:
                    continue
                if uid is not None and owner != uid:
                    self._once(f"collectives: pipe of rank {number}: it belongs to another user than the ranks: "
                               "not written")
                    continue
                found[int(number)] = (int(number), pipe, f"{r.dump_prefix}{number}")
            if not found:
                self._once(f"collectives: pid {r.pid} has no RANK in its environment and no dump trigger pipe was "
                           "found by name: its dump is not known")
        return sorted(found.values())

    def _read_ras(self, addrs: list[str]) -> list[LogEvent]:
        events = []
        for addr in addrs:
            try:
                report = nccl_ras.query(addr, connect_s=1.0, total_s=self.ras_total_s,
                                        ras_timeout_s=max(1, int(self.ras_total_s) - 1))
            except nccl_ras.RasError as exc:
                self._once(f"collectives: {exc}")
                continue
            self.ras_reads += 1
            if not report.known_version:
                self._once(f"collectives: {report.version_words()}")
            tree = {r.pid for r in self._ranks or ()}
            events += collective_events.from_ras(report, self.clock.now(),
                                                 lambda pid, host: pid in tree and self._local(host))
        return events

    def _local(self, host: str | None) -> bool:
        """Whether RAS's node name for a rank is this host (its name or one of its addresses)."""
        if self._local_names is None:
            names = {"localhost", socket.gethostname()}
            try:
                import psutil

                names |= {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
            except Exception:  # noqa: BLE001 - no addresses: the host name alone
                pass
            self._local_names = names
        return host is not None and (host in self._local_names or host.startswith("127."))


async def collect_now(recorder) -> CollectiveSource | None:
    """Collect every rank's dump and read RAS now, into the recorder's timeline (guard, before a kill); the
    recorder's collective source, or None when it has none."""
    for source in getattr(recorder, "sources", ()):
        if isinstance(source, CollectiveSource):
            source.force()
            await recorder.poll(source)
            return source
    return None
