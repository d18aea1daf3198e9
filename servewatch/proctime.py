"""When a process started, in a form a step of the wall clock cannot move.

A process is the same process while its pid and its start are the same. psutil's create_time() is the boot
time as the wall clock puts it *now* plus the start in ticks since boot, so an NTP step of the clock moves
every process's create time: a watcher comparing them would see its server "restarted" and a guard would
refuse to signal it as "another process". Here the start is read from /proc/PID/stat (ticks since boot) and
placed on the wall clock with the boot time read once per servewatch process: stable across steps for as long
as servewatch runs, and within a tick of psutil's value until the first step.
"""

from __future__ import annotations

import os

_boot: float | None = None     # the wall-clock boot time, read once


def started_since_boot(pid: int) -> float:
    """Seconds since boot at which `pid` started (/proc/PID/stat's starttime). Raises ProcessLookupError when
    there is no such process; where there is no /proc, psutil's value in the same unit."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read(4096)
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    except OSError:
        import psutil

        return psutil.Process(pid).create_time() - psutil.boot_time()
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")      # field 22 of stat: the 20th after ") "


def create_time(pid: int) -> float:
    """`pid`'s start on the wall clock as it was when servewatch first asked (see the module's note).
    Raises ProcessLookupError when there is no such process."""
    global _boot
    if _boot is None:
        import psutil

        _boot = psutil.boot_time()
    return _boot + started_since_boot(pid)


def of(proc) -> float:
    """`create_time` of a psutil.Process, raising psutil's NoSuchProcess when it is gone (as its own would)."""
    try:
        return create_time(proc.pid)
    except ProcessLookupError:
        import psutil

        raise psutil.NoSuchProcess(proc.pid) from None
