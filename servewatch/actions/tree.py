"""The server's process tree, pinned by identity (pid + create time) so that a signal never reaches a
process that merely reuses a PID, and the two ways to end it: ask (SIGTERM to the root) or kill
(SIGKILL to every member, stopped ones included)."""

from __future__ import annotations

from servewatch import proctime

import signal as signals
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Member:
    pid: int
    create_time: float
    role: str           # "api", "engine_core", "worker", ... (servewatch.sources.process.role_of)
    title: str = ""     # the process title (VLLM::Worker_TP1) or kernel name: which rank it is


@dataclass(frozen=True, slots=True)
class Killed:
    members: tuple[Member, ...]                 # what was signalled
    survivors: tuple[int, ...] = ()             # still there after the wait
    skipped: tuple[int, ...] = ()               # gone or a different process by then


def snapshot(pid: int, create_time: float | None = None) -> tuple[Member, ...]:
    """The root and its descendants now; () when the root is gone or is not the process we started
    watching (its create time differs)."""
    import psutil

    from servewatch.sources.process import role_of, title_of

    try:
        root = psutil.Process(pid)
        if create_time is not None and abs(proctime.of(root) - create_time) > 0.01:
            return ()
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ()
    members = []
    for i, proc in enumerate(procs):
        try:
            title = title_of(proc)
            members.append(Member(proc.pid, proctime.of(proc), "api" if i == 0 else role_of(title), title))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return tuple(members)


def _same(member: Member):
    import psutil

    try:
        proc = psutil.Process(member.pid)
        if abs(proctime.of(proc) - member.create_time) <= 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return None


def ask_to_stop(root: Member) -> bool:
    """SIGTERM to the root only (the server drains and stops its own children). False if it is gone."""
    proc = _same(root)
    if proc is None:
        return False
    try:
        proc.send_signal(signals.SIGTERM)
    except Exception:  # noqa: BLE001 - gone in between
        return False
    return True


def stop_again_after(root: Member) -> tuple[str, float] | None:
    """(the engine's name, seconds) where the root is the server of an engine whose first SIGTERM leaves the process
    waiting on its clients and whose second ends it (Dialect.stop_signal_again_after_s), told by the root's own
    title; None otherwise, or when the root is gone."""
    from servewatch import dialects

    members = snapshot(root.pid, root.create_time)
    if not members:
        return None
    for dialect in dialects.registered():
        if dialect.stop_signal_again_after_s is not None and dialect.role_of(members[0].title) is not None:
            return dialect.title or dialect.name, dialect.stop_signal_again_after_s
    return None


def kill(members: tuple[Member, ...], wait_s: float = 5.0) -> Killed:
    """SIGKILL every member that is still the same process (children first, so none is re-parented
    and missed), then wait up to wait_s for them to go. A zombie counts as gone, and nothing is reaped
    here: the parent (for a server guard started, the guard's Popen) keeps its exit status."""
    import time

    import psutil

    signalled, skipped = [], []
    for member in reversed(members):
        proc = _same(member)
        try:
            if proc is None:
                raise psutil.NoSuchProcess(member.pid)
            proc.kill()
            signalled.append(member)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            skipped.append(member.pid)
    deadline = time.monotonic() + wait_s
    while (alive := [m for m in signalled if _same(m) is not None]) and time.monotonic() < deadline:
        time.sleep(0.02)   # another process's state: nothing to wait on but /proc
    return Killed(members=tuple(reversed(signalled)), survivors=tuple(m.pid for m in alive), skipped=tuple(skipped))
