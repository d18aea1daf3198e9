"""What each rank process says about its collective sources, from /proc/PID/environ (and /proc/PID/maps for
whether NCCL is loaded): NCCL RAS on or off and its address, the Flight Recorder's buffer, dump trigger pipe
and dump file. Read where readable, never guessed: a process whose environ cannot be read is said so.

The variables, as NCCL and PyTorch document them:
  NCCL_RAS_ENABLE (default 1 from NCCL 2.24), NCCL_RAS_ADDR (default localhost:28028);
  TORCH_FR_BUFFER_SIZE (older: TORCH_NCCL_TRACE_BUFFER_SIZE), > 0 turns the Flight Recorder on;
  TORCH_NCCL_DEBUG_INFO_PIPE_FILE: a pipe per rank (PREFIX + RANK + ".pipe") that asks for a dump;
  TORCH_FR_DUMP_TEMP_FILE (older: TORCH_NCCL_DEBUG_INFO_TEMP_FILE): where a dump is written (PREFIX + RANK);
  unset, torch's default depends on its version (/tmp/nccl_trace_rank_ in older releases, under the cache
  directory in newer ones), so it is not guessed: the rank's dump is said to be unknown;
  RANK (torchrun), else LOCAL_RANK: the process's rank.
Only these variables are kept; the rest of the environment is never stored.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

MAX_ENVIRON_BYTES = 1024 * 1024
MAX_MAPS_BYTES = 8 * 1024 * 1024
RAS_DEFAULT_ADDR = "localhost:28028"
_KEPT = ("NCCL_RAS_ENABLE", "NCCL_RAS_ADDR", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
         "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
         "RANK", "LOCAL_RANK")


@dataclass(frozen=True, slots=True)
class RankEnv:
    pid: int
    readable: bool
    rank: int | None = None
    nccl_loaded: bool | None = None      # libnccl mapped into the process (None: maps not readable)
    ras_enabled: bool | None = None      # NCCL_RAS_ENABLE != "0" (RAS also needs NCCL >= 2.24)
    ras_addr: str = RAS_DEFAULT_ADDR
    fr_buffer: int = 0                   # Flight Recorder ring size; 0: off
    pipe_prefix: str | None = None       # the dump trigger pipe's prefix (None: no pipe)
    dump_prefix: str | None = None       # None: unset (torch's default is version-dependent: not guessed)

    @property
    def pipe(self) -> str | None:
        return None if self.pipe_prefix is None or self.rank is None else f"{self.pipe_prefix}{self.rank}.pipe"

    @property
    def dump(self) -> str | None:
        return None if self.rank is None or self.dump_prefix is None else f"{self.dump_prefix}{self.rank}"


def parse_environ(data: bytes) -> dict[str, str]:
    """The kept variables of a NUL-separated environ block."""
    kept = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        name = key.decode("ascii", "replace")
        if sep and name in _KEPT:
            kept[name] = value.decode("utf-8", "replace")
    return kept


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def rank_env(pid: int, env: dict[str, str] | None, maps: bytes | None) -> RankEnv:
    if env is None:
        return RankEnv(pid=pid, readable=False)
    rank = _int(env.get("RANK"))
    if rank is None:
        rank = _int(env.get("LOCAL_RANK"))
    buffer = _int(env.get("TORCH_FR_BUFFER_SIZE", env.get("TORCH_NCCL_TRACE_BUFFER_SIZE"))) or 0
    return RankEnv(
        pid=pid, readable=True, rank=rank,
        nccl_loaded=None if maps is None else b"libnccl" in maps,
        ras_enabled=env.get("NCCL_RAS_ENABLE", "1").strip() != "0",
        ras_addr=env.get("NCCL_RAS_ADDR") or RAS_DEFAULT_ADDR,
        fr_buffer=max(buffer, 0),
        pipe_prefix=env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE") or None,
        dump_prefix=env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or None)


def _read(path: str, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def discover(pids: Iterable[int], proc: str = "/proc") -> tuple[RankEnv, ...]:
    """Each process's collective sources, from its environ (and maps) where readable."""
    found = []
    for pid in pids:
        data = _read(f"{proc}/{pid}/environ", MAX_ENVIRON_BYTES)
        maps = _read(f"{proc}/{pid}/maps", MAX_MAPS_BYTES)
        found.append(rank_env(pid, None if data is None else parse_environ(data), maps))
    return tuple(found)


MAX_TREE = 512


def tree_pids(root: int, proc: str = "/proc") -> list[int]:
    """`root` and its descendants, from /proc/PID/task/TID/children (bounded to MAX_TREE processes)."""
    seen, queue = [], [root]
    while queue and len(seen) < MAX_TREE:
        pid = queue.pop(0)
        if pid in seen:
            continue
        seen.append(pid)
        try:
            tasks = os.listdir(f"{proc}/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            data = _read(f"{proc}/{pid}/task/{tid}/children", 65536)
            if data:
                queue.extend(int(c) for c in data.split() if c.isdigit())
    return seen


def watch_line(root: int) -> str:
    """The line `watch` and `guard` say once at start about the tree under `root`."""
    return "collectives: " + summary(discover(tree_pids(root)))


def summary(ranks: Iterable[RankEnv]) -> str:
    """One line, said once at start: e.g. "RAS: on (localhost:28028), 2 ranks; Flight Recorder: off — set
    TORCH_FR_BUFFER_SIZE to get it". No paths."""
    ranks = tuple(ranks)
    readable = [r for r in ranks if r.readable]
    unread = len(ranks) - len(readable)
    tail = f" ({unread} process{'es' if unread != 1 else ''} not readable)" if unread else ""
    if not readable:
        return f"RAS, Flight Recorder: not known — no process environment readable{tail}"
    nccl = [r for r in readable if r.nccl_loaded]
    if not nccl:
        ras = "not in use (no NCCL loaded)"
    else:
        on = [r for r in nccl if r.ras_enabled]
        addrs = sorted({r.ras_addr for r in on})
        ras = (f"on ({', '.join(addrs)}), {len(on)} of {len(nccl)} NCCL process{'es' if len(nccl) != 1 else ''}"
               " (needs NCCL >= 2.24)" if on else "off (NCCL_RAS_ENABLE=0)")
    fr_on = [r for r in readable if r.fr_buffer > 0]
    if not fr_on:
        fr = "off — set TORCH_FR_BUFFER_SIZE to get it"
    else:
        sizes = sorted({r.fr_buffer for r in fr_on})
        trigger = "pipe" if all(r.pipe_prefix for r in fr_on) else (
            "pipe on some ranks" if any(r.pipe_prefix for r in fr_on) else
            "no pipe: dumps on timeout only — set TORCH_NCCL_DEBUG_INFO_PIPE_FILE to ask for one")
        norank = sum(1 for r in fr_on if r.rank is None)
        fr = (f"on (buffer {'/'.join(str(s) for s in sizes)}, {trigger}), {len(fr_on)} of {len(readable)} "
              f"process{'es' if len(readable) != 1 else ''}"
              + (f"; {norank} without RANK: their pipes are found by name" if norank else ""))
    return f"RAS: {ras}; Flight Recorder: {fr}{tail}"
