"""The process tree from --pid: identity (pid + create time), titles, status, RSS, threads, CPU.

Only a process *title* is kept (e.g. "VLLM::EngineCore", set by the engine with setproctitle) or the
kernel's short name ("python3"): never a command line. The target's command line is read in memory
only to find its slot limit (--max-num-seqs / --max-running-requests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import time
from collections.abc import Callable

from servewatch import proctime
from servewatch.clock import Clock
from servewatch import dialects
from servewatch.errors import SourceUnavailable
from servewatch.timeline.samples import ProcessMember, ProcessSample

_TITLE = re.compile(r"^[A-Za-z][\w.-]*::[\w.:-]+$")   # setproctitle titles: VLLM::Worker_TP0, sglang::scheduler

RESCAN_S = 5.0    # the whole tree is walked at most this often (see PsutilProbe._children)

ExitStatus = Callable[[], "int | None"]   # returncode of our own child: >= 0 exit code, < 0 -signal


def role_of(title: str) -> str:
    """The role a registered engine gives a process with this title ("other" when none claims it)."""
    for dialect in dialects.registered():
        role = dialect.role_of(title)
        if role is not None:
            return role
    return "other"


def title_of(proc) -> str:
    """The process title if the process set one, else its kernel name. Never argv beyond a title."""
    try:
        argv = proc.cmdline()
    except Exception:  # noqa: BLE001 - access denied / gone: fall back to the name
        argv = []
    first = argv[0].split(" ")[0] if argv and argv[0] else ""
    if _TITLE.match(first):
        return first
    try:
        return proc.name()
    except Exception:  # noqa: BLE001
        return "?"


def slot_limit_from_argv(argv: list[str]) -> int | None:
    """The engine's slot limit flag from its command line; given more than once, the last (argparse's
    reading, the engine's own)."""
    flags = [d.slot_limit_flag for d in dialects.registered() if d.slot_limit_flag]
    found = None
    for i, arg in enumerate(argv):
        for flag in flags:
            value = None
            if arg == flag and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(flag + "="):
                value = arg[len(flag) + 1:]
            if value is not None and value.isdigit() and int(value) > 0:
                found = int(value)
    return found


class PsutilProbe:
    """Reads the tree under one PID. Raises SourceUnavailable at construction for a wrong PID."""

    def __init__(self, pid: int, exit_status: ExitStatus | None = None):
        import psutil

        self._psutil = psutil
        if pid <= 0:
            raise SourceUnavailable(f"--pid {pid}: not a process id")
        try:
            root = psutil.Process(pid)
            self.create_time = proctime.of(root)
        except psutil.NoSuchProcess:
            raise SourceUnavailable(f"--pid {pid}: no such process") from None
        except psutil.AccessDenied:
            raise SourceUnavailable(f"--pid {pid}: access denied") from None
        self.pid = pid
        self._exit_status = exit_status
        self._reaped_status: tuple[int | None, int | None] | None = None   # (exit code, signal) seen on the zombie
        self._procs: dict[tuple[int, float], object] = {(pid, self.create_time): root}
        self._titles: dict[tuple[int, float], tuple[str | None, str]] = {}   # (kernel name read with it, title)
        self._last_walk: float | None = None     # when the whole tree was last walked (see _children)
        self._cpu: dict[tuple[int, float], tuple[float, float]] = {}   # (monotonic time, CPU seconds) last read

    def slot_limit(self) -> int | None:
        """From the target's command line, read in memory and dropped."""
        try:
            return slot_limit_from_argv(self._psutil.Process(self.pid).cmdline())
        except Exception:  # noqa: BLE001
            return None

    def snapshot(self, t: float) -> ProcessSample:
        psutil = self._psutil
        try:
            root = psutil.Process(self.pid)
            create_time = proctime.of(root)
            status = root.status()
        except psutil.NoSuchProcess:
            return self._gone(t, None)
        except psutil.AccessDenied:
            return ProcessSample(t=t, root_pid=self.pid, root_create_time=None, alive=True, error="access_denied")
        if status == psutil.STATUS_ZOMBIE:
            # Not reaped yet: the kernel still holds its wait status, readable by anyone (not only the parent).
            self._reaped_status = zombie_wait_status(self.pid)
            return self._gone(t, create_time)
        key = (self.pid, create_time)
        root = self._procs.setdefault(key, root)  # keep the object: cpu_percent needs its previous call
        members = [m for m in [self._member(root, "api")] if m is not None]
        parents: dict[int, int | None] = {}
        live_keys = {key}
        for child in self._children(root, t):
            try:
                child_key = (child.pid, proctime.of(child))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            live_keys.add(child_key)
            proc = self._procs.setdefault(child_key, child)
            member = self._member(proc, None)
            if member is not None:
                members.append(member)
                parents[member.pid] = member.ppid
        for stale in set(self._procs) - live_keys:
            del self._procs[stale]
            self._titles.pop(stale, None)
            self._cpu.pop(stale, None)
        return ProcessSample(t=t, root_pid=self.pid, root_create_time=create_time, alive=True,
                             members=without_inherited_roles(members, parents))

    def _children(self, root, t: float) -> list:
        """The tree under the root. A full walk (psutil reads every process's /proc/PID/stat to find the
        parents: ~3 ms on a machine with 120 processes, more on a busy node) at most every RESCAN_S; in between,
        the processes found before that are still there, plus the children each of them (and the root) started
        from its main thread (/proc/PID/task/PID/children: one small read per process). A child started from
        another thread is found by the next full walk."""
        psutil = self._psutil
        if self._last_walk is None or not t - RESCAN_S < self._last_walk <= t:
            self._last_walk = t
            try:
                return root.children(recursive=True)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return []
        known = {pid: proc for (pid, _), proc in self._procs.items() if pid != root.pid}
        found: list = []
        queue, seen = [root.pid], {root.pid}
        while queue:
            pid = queue.pop()
            for child in main_thread_children(pid):
                if child in seen:
                    continue
                seen.add(child)
                queue.append(child)
                proc = known.get(child)
                if proc is None:
                    try:
                        proc = psutil.Process(child)
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        continue
                found.append(proc)
        # a known process whose parent did not list it (started from another thread): kept while it lives
        for pid, proc in known.items():
            if pid not in seen and _maybe(proc.is_running):
                found.append(proc)
        return found

    def _title(self, proc, key: tuple[int, float]) -> str:
        """Read once per process and kernel name once it has a setproctitle title. Reading
        /proc/PID/cmdline takes the target's memory-map lock: next to a vLLM worker busy allocating, one
        read blocked for seconds. The kernel name changes on exec and on setproctitle, so a fork read
        with its parent's title and then exec'd (a shell, a compiler) or retitled is read again."""
        name = kernel_name(proc.pid)
        cached = self._titles.get(key)
        if cached is not None and cached[0] == name:
            return cached[1]
        title = title_of(proc)
        if _TITLE.match(title):
            self._titles[key] = (name, title)
        else:
            self._titles.pop(key, None)
        return title

    def _member(self, proc, role: str | None) -> ProcessMember | None:
        """State, parent, CPU, threads and RSS from one read of /proc/PID/stat (what psutil reads from three
        files); psutil where that file is not there."""
        psutil = self._psutil
        try:
            key = (proc.pid, proctime.of(proc))
            title = self._title(proc, key)
            stat = read_stat(proc.pid)
            if stat is None:
                return self._member_psutil(proc, key, title, role)
            status, ppid, cpu_s, threads, rss = stat
            now = time.monotonic()
            before = self._cpu.get(key)
            self._cpu[key] = (now, cpu_s)
            cpu = 0.0 if before is None or now <= before[0] else round(100.0 * (cpu_s - before[1]) / (now - before[0]), 1)
            if status == "zombie":
                rss = threads = None
            return ProcessMember(pid=proc.pid, create_time=key[1], role=role or role_of(title), title=title,
                                 status=status, rss_bytes=rss, threads=threads, cpu_percent=cpu, ppid=ppid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            return None

    def _member_psutil(self, proc, key, title: str, role: str | None) -> ProcessMember | None:
        with proc.oneshot():
            status = proc.status()
            rss = _maybe(lambda: proc.memory_info().rss)
            threads = _maybe(proc.num_threads)
            cpu = _maybe(lambda: proc.cpu_percent(None))
            ppid = _maybe(proc.ppid)
        return ProcessMember(pid=proc.pid, create_time=key[1], role=role or role_of(title), title=title,
                             status=status, rss_bytes=rss, threads=threads, cpu_percent=cpu, ppid=ppid)

    def _gone(self, t: float, create_time: float | None) -> ProcessSample:
        code = signal = None
        status = self._exit_status() if self._exit_status is not None else None
        if status is not None:
            if status < 0:
                signal = -status
            else:
                code = status
        elif self._reaped_status is not None:
            code, signal = self._reaped_status
        return ProcessSample(t=t, root_pid=self.pid, root_create_time=create_time, alive=False,
                             exit_code=code, exit_signal=signal, error="no_such_process")


def without_inherited_roles(members: list[ProcessMember], parents: dict[int, int | None]) -> tuple[ProcessMember, ...]:
    """A child carrying its parent's exact title is a copy of it (fork, or vfork before exec), not one of
    the engine's processes: right after titling itself, a real vLLM EngineCore runs `lscpu` through
    `/bin/sh`, and a snapshot that caught that shell before its exec saw a second "VLLM::EngineCore"
    (same memory size, parent waiting in the vfork) that was gone half a second later."""
    titles = {m.pid: m.title for m in members}
    return tuple(
        dataclasses.replace(m, role="other")
        if m.role != "other" and parents.get(m.pid) in titles and titles[parents[m.pid]] == m.title
        else m
        for m in members
    )


_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie",
           "X": "dead", "x": "dead", "I": "idle", "W": "waking", "P": "parked", "K": "wake-kill"}
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_stat(pid: int) -> tuple[str, int, float, int, int] | None:
    """(status word as psutil names it, parent pid, CPU seconds, threads, RSS bytes) from /proc/PID/stat;
    None when the file is not there (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        after = stat[stat.rindex(b")") + 2:].split()
        letter = after[0].decode()
        return (_STATES.get(letter, letter), int(after[1]), (int(after[11]) + int(after[12])) / _TICKS,
                int(after[17]), int(after[21]) * _PAGE)
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            raise_gone(pid)
        return None
    except (OSError, ValueError, IndexError):
        return None


def raise_gone(pid: int):
    import psutil

    raise psutil.NoSuchProcess(pid)


def main_thread_children(pid: int) -> list[int]:
    """The children a process started from its main thread (Linux /proc/PID/task/PID/children); [] when unreadable."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as handle:
            return [int(field) for field in handle.read().split()]
    except (OSError, ValueError):
        return []


def kernel_name(pid: int) -> str | None:
    """/proc/PID/comm: the kernel's name of the process, readable without the memory-map lock."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return handle.read(64).rstrip(b"\n").decode("utf-8", errors="replace")
    except OSError:
        return None


def zombie_wait_status(pid: int) -> tuple[int | None, int | None] | None:
    """(exit code, signal) of a zombie from /proc/PID/stat field 52 (Linux ≥ 3.5); None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        fields_after_comm = stat[stat.rindex(b")") + 2:].split()
        wait_status = int(fields_after_comm[52 - 3])
    except (OSError, ValueError, IndexError):
        return None
    if wait_status & 0x7F == 0:
        return (wait_status >> 8) & 0xFF, None
    return None, wait_status & 0x7F


def _maybe(read):
    try:
        return read()
    except Exception:  # noqa: BLE001 - one unreadable field does not lose the member
        return None


class ProcessSource:
    kind = "process"

    def __init__(self, probe, clock: Clock, interval: float):
        self._probe = probe          # PsutilProbe or any object with snapshot(t) -> ProcessSample
        self._clock = clock
        self.interval = interval

    async def poll(self) -> list[ProcessSample]:
        # In a worker thread: a /proc read can block for seconds (below), and the health and metrics
        # probes share the event loop.
        try:
            return [await asyncio.to_thread(self._probe.snapshot, self._clock.now())]
        except Exception as exc:  # noqa: BLE001 - never raise out of a source
            return [ProcessSample(t=self._clock.now(), root_pid=getattr(self._probe, "pid", 0), root_create_time=None,
                                  alive=True, error=f"unavailable: {type(exc).__name__}")]
