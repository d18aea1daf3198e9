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

import os

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



# --- a CPU cap: CFS bandwidth control of a cgroup (cgroup v1's cpu controller, or v2's cpu.max) ---------------
# A cap takes the capped processes' CPU time away whether the machine is otherwise busy or idle, where a less nice
# competitor takes it only from a process that would use it at the same moment: a lab TP=2 vLLM serving four
# 64-token streams at ~1,200 tokens/s read no slower beside stress-ng at twice its weight (the clean-clone CI run of
# 2026-12-05: TTFT x1.59, the token rate within 10 %).
CAP_PERIOD_US = 50_000          # one CFS period: the cap's quota is refilled every 50 ms


class CpuCap:
    """A cgroup whose processes together get at most `share` of one CPU; `release` moves them back where each
    was and removes it."""

    def __init__(self, path: str, v2: bool):
        self.path = path
        self.v2 = v2
        self.home: dict[int, str] = {}       # pid -> the cgroup.procs it came from

    def add(self, pid: int) -> str | None:
        """Move `pid` (every thread of it) under the cap; None when done, else why not."""
        home = _cgroup_dir(pid, os.path.dirname(self.path), self.v2)
        if home is None:
            return f"the cgroup of pid {pid} is not readable"
        try:
            _write(os.path.join(self.path, "cgroup.procs"), str(pid))
        except OSError as exc:
            return exc.strerror or str(exc)
        self.home[pid] = home
        return None

    def release(self) -> str | None:
        """Every process back in its own cgroup, the cap's cgroup removed; None when done, else what is left."""
        left = []
        for pid, home in self.home.items():
            try:
                _write(os.path.join(home, "cgroup.procs"), str(pid))
            except ProcessLookupError:
                pass                          # gone meanwhile: nothing to move
            except OSError as exc:
                left.append(f"pid {pid}: {exc.strerror or exc}")
        self.home.clear()
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            left.append(f"{self.path}: {exc.strerror or exc}")
        return "; ".join(left) or None


def cpu_cap(name: str, share: float) -> CpuCap | str:
    """A new, empty cgroup named `name` at the root of the cpu controller, capped at `share` of one CPU; else why
    not, in words (no cpu controller mounted, v2 without cpu delegated at the root, not permitted)."""
    root, v2 = _cpu_root()
    if root is None:
        return "no cgroup cpu controller is mounted (cgroup v1 'cpu', or v2 with cpu enabled at its root)"
    path = os.path.join(root, name)
    quota = max(1000, int(share * CAP_PERIOD_US))
    try:
        os.mkdir(path)
        if v2:
            _write(os.path.join(path, "cpu.max"), f"{quota} {CAP_PERIOD_US}")
        else:
            _write(os.path.join(path, "cpu.cfs_period_us"), str(CAP_PERIOD_US))
            _write(os.path.join(path, "cpu.cfs_quota_us"), str(quota))
    except OSError as exc:
        try:
            os.rmdir(path)
        except OSError:
            pass
        return f"cannot make a capped cgroup at {path}: {exc.strerror or exc}"
    return CpuCap(path, v2)


def remove_stale_caps(prefix: str) -> list[str]:
    """Remove the caps named `prefix` + "<pid>-..." whose maker (that pid) is gone and that hold no process (a drill
    killed in a hold leaves its cgroup behind); the names removed. A cap still holding a process stays: rmdir refuses
    it."""
    root, _ = _cpu_root()
    removed = []
    try:
        names = [n for n in os.listdir(root) if n.startswith(prefix)] if root else []
    except OSError:
        return removed
    for name in names:
        maker = name[len(prefix):].split("-", 1)[0]
        if not maker.isdigit() or os.path.exists(f"/proc/{maker}"):
            continue
        try:
            os.rmdir(os.path.join(root, name))
        except OSError:
            continue
        removed.append(name)
    return removed


def _cpu_root() -> tuple[str | None, bool]:
    """The mount of the cpu controller: cgroup v1's, else cgroup v2's where its root delegates cpu."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None, False
    for fields in mounts:
        if len(fields) >= 4 and fields[2] == "cgroup" and "cpu" in fields[3].split(","):
            return fields[1], False
    for fields in mounts:
        if len(fields) >= 3 and fields[2] == "cgroup2":
            try:
                with open(os.path.join(fields[1], "cgroup.subtree_control"), encoding="ascii") as f:
                    if "cpu" in f.read().split():
                        return fields[1], True
            except OSError:
                continue
    return None, False


def _cgroup_dir(pid: int, root: str, v2: bool) -> str | None:
    """The directory of `pid`'s cgroup under the cpu controller's mount `root`."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for fields in lines:
        if len(fields) != 3:
            continue
        controllers = fields[1].split(",")
        if (v2 and fields[0] == "0" and fields[1] == "") or (not v2 and "cpu" in controllers):
            return os.path.join(root, fields[2].lstrip("/"))
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)
