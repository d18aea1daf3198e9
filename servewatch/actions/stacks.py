"""Stacks of the server's processes with py-spy, before the tree is killed: the evidence a post-mortem
needs that a log never has.

The dump is private: Python stacks carry file paths and module names. It goes to its own file (mode
0600) in the directory the user named, never into a shareable bundle; what a bundle or a JSON line may
say is the typed outcome (`StackCapture.public()`). py-spy attaches with ptrace (root, or
CAP_SYS_PTRACE in a container) and briefly pauses the process it reads, which does not matter for a
server about to be killed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from servewatch.actions.tree import Member

MAX_DUMP_BYTES = 4 * 2**20      # per process: a dump is a few KiB; a bound all the same
STATUSES = ("captured", "partial", "unavailable", "denied", "timeout", "failed")


@dataclass(frozen=True, slots=True)
class ProcessStacks:
    pid: int
    role: str
    status: str          # captured | denied | timeout | failed | gone
    seconds: float
    title: str = ""
    innermost: str | None = None   # the main thread's innermost frame, "func (file.py:line)", from the dump
    stopped: bool = False          # the process was stopped (state T) when it was read


@dataclass(frozen=True, slots=True)
class Divergence:
    """A rank whose main thread is somewhere else than its siblings' (same kind, e.g. every TP worker)."""

    odd: tuple[ProcessStacks, ...]      # the rank(s) out of step
    others: tuple[ProcessStacks, ...]   # the siblings that agree (or the rest, when nobody agrees)
    words: str

    def public(self) -> list[str]:
        """The diverging ranks by title: no frames, no paths."""
        return [p.title for p in self.odd]


@dataclass(frozen=True, slots=True)
class StackCapture:
    status: str                              # one of STATUSES
    producer: str | None                     # "py-spy 0.4.3"
    path: str | None                         # the private file, when anything was captured
    processes: tuple[ProcessStacks, ...] = ()
    reason: str | None = None                # for unavailable / failed: one line
    divergence: Divergence | None = None     # a rank not where its siblings are

    def public(self) -> dict:
        """What may leave the machine: the outcome and counts, no path, no stack text (the diverging ranks
        by title only)."""
        return {"status": self.status, "producer": self.producer,
                "processes": {p.role: p.status for p in self.processes},
                "diverging": self.divergence.public() if self.divergence else []}


def find_py_spy() -> str | None:
    """py-spy next to this Python (installed with servewatch) or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def producer_version(py_spy: str) -> str | None:
    try:
        done = subprocess.run([py_spy, "--version"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip()[:40] or None


def capture(members: tuple[Member, ...], out_dir: Path, *, timeout_s: float = 10.0, when: str = "",
            py_spy: str | None = None) -> StackCapture:
    """`py-spy dump` of every member, one after the other, each bounded by timeout_s, into one file."""
    py_spy = py_spy or find_py_spy()
    if py_spy is None:
        return StackCapture("unavailable", None, None, reason="py-spy is not installed (pip install py-spy)")
    producer = producer_version(py_spy)
    path = out_dir / f"stacks-{when or time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.txt"
    results = []
    texts = []
    try:   # a full or read-only disk costs the stacks, never the action that follows them
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for member in members:
                started = time.monotonic()
                stopped = _stopped(member.pid)
                status, text = _dump_one(py_spy, member.pid, timeout_s)
                results.append(ProcessStacks(member.pid, member.role, status, round(time.monotonic() - started, 3),
                                             member.title, innermost(text) if status == "captured" else None,
                                             stopped))
                texts.append(f"=== pid {member.pid} ({member.role}): {status}{' — ' + member.title if member.title else ''}"
                             f"{' (stopped)' if stopped else ''}\n{text}\n")
            split = divergence(results)
            if split is not None:
                out.write(f"divergence: {split.words}\n\n")
            out.writelines(texts)
    except OSError as exc:
        return StackCapture("failed", producer, None, tuple(results),
                            reason=f"cannot write {path}: {exc.strerror or exc}")
    return StackCapture(_overall(results), producer, str(path), tuple(results), divergence=split)


_THREAD = re.compile(r'^Thread \S+ \([^)]*\)(?:: "([^"]*)")?')
_FRAME = re.compile(r"^\s+(\S.*?) \((?:.*/)?([^/()]+:\d+)\)\s*$")


def innermost(dump: str) -> str | None:
    """The innermost frame of the main thread (else the first thread) in a `py-spy dump`: "func (file.py:12)",
    the file's base name only."""
    threads: list[tuple[str, str | None]] = []
    for line in dump.splitlines():
        head = _THREAD.match(line)
        if head:
            threads.append((head.group(1) or "", None))
            continue
        frame = _FRAME.match(line)
        if frame and threads and threads[-1][1] is None:
            threads[-1] = (threads[-1][0], f"{frame.group(1)} ({frame.group(2)})")
    with_frames = [(name, frame) for name, frame in threads if frame]
    main = next((frame for name, frame in with_frames if name == "MainThread"), None)
    return main or (with_frames[0][1] if with_frames else None)


def divergence(results: list[ProcessStacks]) -> Divergence | None:
    """The first group of sibling ranks (same kind by title) whose main threads are not all in one place:
    the rank(s) outside the largest agreeing set, or — two ranks, no majority — the stopped one."""
    from servewatch.timeline.ranks import rank_of

    groups: dict[str, list[ProcessStacks]] = {}
    for result in results:
        found = rank_of(result.title) if result.title else None
        if found is not None and result.innermost:
            groups.setdefault(found[0], []).append(result)
    for group in groups.values():
        places: dict[str, list[ProcessStacks]] = {}
        for result in group:       # one function is one place, whichever of its lines each rank is on
            places.setdefault(result.innermost.rsplit(":", 1)[0], []).append(result)
        if len(group) < 2:
            continue
        stopped = [r for r in group if r.stopped]
        if len(places) < 2:
            if stopped and len(stopped) < len(group):   # one place, but a rank there holds still
                running = [r for r in group if not r.stopped]
                where = next(iter(places)) + ")"
                words = (f"{', '.join(_who(r) for r in stopped)} stopped (state T) in {where}, where its "
                         f"{len(running)} sibling(s) ({', '.join(_who(r) for r in running)}) are too, not stopped")
                return Divergence(tuple(stopped), tuple(running), words)
            continue
        ranked = sorted(places.values(), key=len, reverse=True)
        if len(ranked[0]) > len(ranked[1]):
            agree = ranked[0]
        else:   # a tie: the stopped ranks are the odd ones, when some are
            agree = [r for r in group if not r.stopped] if stopped and len(stopped) < len(group) else None
        if agree is not None:
            odd = [r for r in group if r not in agree]
            places_of_agree = {r.innermost.rsplit(":", 1)[0] + ")" for r in agree}
            where = next(iter(places_of_agree)) if len(places_of_agree) == 1 else "different places"
            words = "; ".join(f"{_who(r)} is in {r.innermost}{' (stopped)' if r.stopped else ''}" for r in odd)
            words += f", while its {len(agree)} sibling(s) ({', '.join(_who(r) for r in agree)}) are in {where}"
            return Divergence(tuple(odd), tuple(agree), words)
        words = "; ".join(f"{_who(r)} is in {r.innermost}" for r in group)
        return Divergence(tuple(group), (), f"the ranks are in different places: {words}")
    return None


def _who(result: ProcessStacks) -> str:
    return f"{result.title} (pid {result.pid})"


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def _dump_one(py_spy: str, pid: int, timeout_s: float) -> tuple[str, str]:
    status, text = _py_spy_dump(py_spy, pid, timeout_s, [])
    if status == "failed" and "suspend" in text:
        # A stopped process (SIGSTOP, a debugger) cannot be suspended again; it holds still for a
        # nonblocking read all the same.
        status, text = _py_spy_dump(py_spy, pid, timeout_s, ["--nonblocking"])
    return status, text


def _py_spy_dump(py_spy: str, pid: int, timeout_s: float, options: list[str]) -> tuple[str, str]:
    try:
        done = subprocess.run([py_spy, "dump", *options, "--pid", str(pid)], capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", f"py-spy did not finish within {timeout_s:g} s"
    except OSError as exc:
        return "failed", f"py-spy could not run: {exc.strerror or exc}"
    text = (done.stdout[:MAX_DUMP_BYTES] + done.stderr[:MAX_DUMP_BYTES]).decode("utf-8", "replace")
    if done.returncode == 0:
        return "captured", text
    lowered = text.lower()
    if "permission" in lowered or "operation not permitted" in lowered:
        return "denied", text
    if "no such process" in lowered or "failed to find process" in lowered:
        return "gone", text
    return "failed", text


def _overall(results: list[ProcessStacks]) -> str:
    statuses = {r.status for r in results}
    if statuses <= {"captured", "gone"} and "captured" in statuses:
        return "captured"
    if "captured" in statuses:
        return "partial"
    for status in ("denied", "timeout"):
        if status in statuses:
            return status
    return "failed"
