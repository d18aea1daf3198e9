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


@dataclass(frozen=True, slots=True)
class StackCapture:
    status: str                              # one of STATUSES
    producer: str | None                     # "py-spy 0.4.3"
    path: str | None                         # the private file, when anything was captured
    processes: tuple[ProcessStacks, ...] = ()
    reason: str | None = None                # for unavailable / failed: one line

    def public(self) -> dict:
        """What may leave the machine: the outcome and counts, no path, no stack text."""
        return {"status": self.status, "producer": self.producer,
                "processes": {p.role: p.status for p in self.processes}}


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
    try:   # a full or read-only disk costs the stacks, never the action that follows them
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for member in members:
                started = time.monotonic()
                status, text = _dump_one(py_spy, member.pid, timeout_s)
                results.append(ProcessStacks(member.pid, member.role, status, round(time.monotonic() - started, 3)))
                out.write(f"=== pid {member.pid} ({member.role}): {status}\n{text}\n")
    except OSError as exc:
        return StackCapture("failed", producer, None, tuple(results),
                            reason=f"cannot write {path}: {exc.strerror or exc}")
    return StackCapture(_overall(results), producer, str(path), tuple(results))


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
