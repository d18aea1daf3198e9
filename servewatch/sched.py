"""The CPU priority of a process's session: its autogroup's nice (Linux, /proc/PID/autogroup).

With `kernel.sched_autogroup_enabled` (the default of most distributions) the scheduler shares the CPU between
sessions first, and a process's own nice counts only within its session. A server started in a session of its
own (the lab's engines, the command `servewatch guard` starts) that keeps both cores busy then makes every
process of another session wait for a CPU, whatever that process's nice: measured here (2026-12-03, 2 cores, a
TP=2 vLLM under 32 streams), a nice-0 loop of 50 ms sleeps in another session saw 67 s of gaps in 170 s, the
longest 11.5 s, while a SCHED_FIFO one beside it saw none; with the engine's autogroup at nice 10 no gap over
0.2 s and the engine's throughput the same. Raising a nice needs no privilege; lowering one needs
CAP_SYS_NICE. Under systemd (or any cgroup but the root) autogroups do not apply: the unit's CPUWeight= does.
"""

from __future__ import annotations

NICE_RANGE = range(-20, 20)      # the nice values Linux takes: -20..19


def set_session_nice(pid: int, nice: int) -> str | None:
    """Set the autogroup nice of `pid`'s session to `nice` (-20..19); None when done, else why not, in words
    (no autogroups on this kernel, no such process, not permitted)."""
    if nice not in NICE_RANGE:
        return f"a nice of {nice} is outside -20..19"
    try:
        with open(f"/proc/{pid}/autogroup", "w", encoding="ascii") as f:
            f.write(str(nice))
    except FileNotFoundError:
        return "this kernel has no autogroups (CONFIG_SCHED_AUTOGROUP), or the process is gone"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None

