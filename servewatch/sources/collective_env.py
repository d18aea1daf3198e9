"""What each rank process says about its collective sources, from /proc/PID/environ (and /proc/PID/maps for
whether NCCL is loaded): NCCL RAS on or off and its address, the Flight Recorder's buffer, dump trigger pipe
and dump file. Read where readable, never guessed: a process whose environ cannot be read is said so.

The variables, as NCCL and PyTorch document them:
  NCCL_RAS_ENABLE (default 1 from NCCL 2.24), NCCL_RAS_ADDR (default localhost:28028);
  TORCH_FR_BUFFER_SIZE (older: TORCH_NCCL_TRACE_BUFFER_SIZE): the Flight Recorder's ring size, 0 off; unset,
  the rank's torch decides (FR_DEFAULT_ON_FROM below), so whether a rank records is read from evidence: a dump
  read from it, else the variable, else its torch's default for the torch version the process has loaded (the
  version.py beside the libtorch in its /proc/PID/maps); with none of these it is said to be not known;
  TORCH_NCCL_DEBUG_INFO_PIPE_FILE: a pipe per rank (PREFIX + RANK + ".pipe") that asks for a dump;
  TORCH_FR_DUMP_TEMP_FILE (older: TORCH_NCCL_DEBUG_INFO_TEMP_FILE): where a dump is written (PREFIX + RANK);
  unset, torch's default depends on its version (/tmp/nccl_trace_rank_ in older releases, under the cache
  directory in newer ones), so it is not guessed: the rank's dump is said to be unknown;
  RANK (torchrun), else LOCAL_RANK: the process's rank.
Only these variables are kept; the rest of the environment is never stored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MAX_ENVIRON_BYTES = 1024 * 1024
MAX_MAPS_BYTES = 8 * 1024 * 1024
RAS_DEFAULT_ADDR = "localhost:28028"
MAX_VERSION_BYTES = 4096
# What torch does with the variables, read from its own source as each release ships it (the wheel's
# torch/include/torch/csrc/distributed/c10d/FlightRecorder.hpp, the FlightRecorder constructor):
#   2.11.0 (line 111) to 2.13.0: max_entries_ = getCvarInt({"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"},
#                                2000)   -- on by default since pytorch/pytorch#172843 (merged 2026-01-29)
#   2.8.0 (line 100) to 2.10.0 (line 108): getCvarInt({"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 0)
#   2.6.0, 2.7.0 (line 103; 2.5.0: NCCLUtils.hpp:575): getCvarInt({"TORCH_NCCL_TRACE_BUFFER_SIZE"}, 0)
#                                -- TORCH_FR_BUFFER_SIZE is not read: only the older name turns it on
FR_DEFAULT_ON_FROM = (2, 11)
FR_DEFAULT_ENTRIES = 2000
FR_NEW_NAME_FROM = (2, 8)
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
    fr_buffer: int | None = 0            # Flight Recorder ring size; 0: off; None: not known (see fr_from)
    fr_from: str = "set"                 # where fr_buffer comes from: "set" (the variable), "default" (the torch
    #                                      version's default, the variable unset), "unknown" (unset, torch not read),
    #                                      "ignored" (only TORCH_FR_BUFFER_SIZE set, which this torch does not read),
    #                                      "no_torch" (unset, and no libtorch in the process's maps)
    torch_version: str | None = None     # the torch the process has loaded (its version.py), None: not read
    torch_loaded: bool | None = None     # libtorch mapped into the process (None: maps not readable)
    pipe_prefix: str | None = None       # the dump trigger pipe's prefix (None: no pipe)
    dump_prefix: str | None = None       # None: unset (torch's default is version-dependent: not guessed)

    @property
    def dump_wanted(self) -> bool:
        """Ask this rank for a dump: its recorder is on, or not known while it has a pipe to ask through (a dump
        read is then the evidence that it records)."""
        return bool(self.fr_buffer) or (self.fr_buffer is None and self.pipe_prefix is not None)

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


def version_tuple(version: str | None) -> tuple[int, int] | None:
    """(2, 13) from "2.13.0+cu130"; None when it is not a version."""
    found = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def fr_setting(env: Mapping[str, str], torch_version: str | None) -> tuple[int | None, str]:
    """(the ring size this process's torch uses, where it comes from): the variable as the version reads it, else
    the version's default (FR_DEFAULT_ON_FROM), else (None, "unknown") -- never assumed off."""
    version = version_tuple(torch_version)
    new, old = env.get("TORCH_FR_BUFFER_SIZE"), env.get("TORCH_NCCL_TRACE_BUFFER_SIZE")
    if version is not None and version < FR_NEW_NAME_FROM:
        new = None                                  # this torch reads only the older name
        if old is None and env.get("TORCH_FR_BUFFER_SIZE") is not None:
            return 0, "ignored"
    value = new if new is not None else old
    if value is not None:
        return max(_int(value) or 0, 0), "set"
    if version is None:
        return None, "unknown"
    return (FR_DEFAULT_ENTRIES if version >= FR_DEFAULT_ON_FROM else 0), "default"


_VERSION_LINE = re.compile(rb"""^__version__\s*=\s*['"]([0-9][0-9A-Za-z.+_-]{0,63})['"]""", re.M)


def torch_of(pid: int, maps: bytes | None, proc: str = "/proc") -> tuple[bool | None, str | None]:
    """(libtorch mapped, the version of that torch): its package directory from the libtorch path in the
    process's maps, the version from that package's version.py, read through /proc/PID/root (the process's own
    view of the filesystem). (None, None) when the maps are not readable; (True, None) when version.py is not."""
    if maps is None:
        return None, None
    found = re.search(rb"(/\S*)/torch/lib/lib(?:torch|c10)\S*\.so", maps)
    if found is None:          # a libtorch outside a torch package (a source build, libtorch alone): not known
        return (True if re.search(rb"/lib(?:torch|c10)[^/\s]*\.so", maps) else False), None
    path = f"{proc}/{pid}/root{found.group(1).decode('utf-8', 'replace')}/torch/version.py"
    data = _read(path, MAX_VERSION_BYTES)
    line = _VERSION_LINE.search(data) if data else None
    return True, line.group(1).decode() if line else None


def rank_env(pid: int, env: dict[str, str] | None, maps: bytes | None,
             torch: tuple[bool | None, str | None] = (None, None)) -> RankEnv:
    if env is None:
        return RankEnv(pid=pid, readable=False)
    rank = _int(env.get("RANK"))
    if rank is None:
        rank = _int(env.get("LOCAL_RANK"))
    loaded, version = torch
    buffer, source = fr_setting(env, version)
    if source == "unknown" and loaded is False:
        buffer, source = 0, "no_torch"          # no libtorch in its maps: this process records no collective
    return RankEnv(
        pid=pid, readable=True, rank=rank,
        nccl_loaded=None if maps is None else b"libnccl" in maps,
        ras_enabled=env.get("NCCL_RAS_ENABLE", "1").strip() != "0",
        ras_addr=env.get("NCCL_RAS_ADDR") or RAS_DEFAULT_ADDR,
        fr_buffer=buffer, fr_from=source, torch_version=version, torch_loaded=loaded,
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
        found.append(rank_env(pid, None if data is None else parse_environ(data), maps, torch_of(pid, maps, proc)))
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


def summary(ranks: Iterable[RankEnv], recorded: Mapping[int, int] | None = None) -> str:
    """One line, said once at start (and again when a dump read changes it): e.g. "RAS: on (localhost:28028),
    2 of 2 NCCL processes (needs NCCL >= 2.24); Flight Recorder: on (buffer 2000 (torch 2.13.0's default), pipe),
    2 of 2 processes". `recorded`: rank -> the collectives its dump held, for the ranks whose dump was read (the
    strongest evidence that a rank records). No paths."""
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
    fr = _fr_words(readable, recorded or {})
    return f"RAS: {ras}; Flight Recorder: {fr}{tail}"


def _plural(n: int) -> str:
    return f"{n} process{'es' if n != 1 else ''}"


def _fr_words(readable: list[RankEnv], recorded: Mapping[int, int]) -> str:
    # a dump that holds collectives decides for a rank not already known to record (its setting said 0 or not known)
    dumped = [r for r in readable if not r.fr_buffer and r.rank is not None and recorded.get(r.rank, 0) > 0]
    fr_on = dumped + [r for r in readable if r not in dumped and r.fr_buffer]
    unknown = [r for r in readable if r not in fr_on and r.fr_buffer is None]
    unset = (f"TORCH_FR_BUFFER_SIZE unset, which records {FR_DEFAULT_ENTRIES:,} entries from torch "
             f"{'.'.join(map(str, FR_DEFAULT_ON_FROM))} on")
    if fr_on:
        sizes = sorted({f"{r.fr_buffer}" + (f" (torch {r.torch_version}'s default)" if r.fr_from == "default" else "")
                        for r in fr_on if r not in dumped})
        parts = ["buffer " + "/".join(sizes)] if sizes else []
        if dumped:
            held = "/".join(str(recorded[r.rank]) for r in sorted(dumped, key=lambda r: r.rank))
            whose = "1 rank's dump" if len(dumped) == 1 else f"{len(dumped)} ranks' dumps"
            parts.append(f"{whose} read: {held} collectives")
        trigger = "pipe" if all(r.pipe_prefix for r in fr_on) else (
            "pipe on some ranks" if any(r.pipe_prefix for r in fr_on) else
            "no pipe: dumps on timeout only — set TORCH_NCCL_DEBUG_INFO_PIPE_FILE to ask for one")
        norank = sum(1 for r in fr_on if r.rank is None)
        words = (f"on ({'; '.join(parts)}, {trigger}), {len(fr_on)} of {_plural(len(readable))}"
                 + (f"; {norank} without RANK: their pipes are found by name" if norank else ""))
        if unknown:
            words += f"; {len(unknown)} not known (torch version not read; {unset})"
        return words
    if unknown:
        who = "the rank" if len(unknown) == 1 else _plural(len(unknown))
        return f"not known — torch version of {who} not read; {unset}"
    torch = [r for r in readable if r.fr_from != "no_torch"]
    if not torch:
        return "not in use (no torch loaded)"
    reasons = []
    for r in torch:
        v = r.torch_version
        if r.fr_from == "ignored":
            why = f"torch {v} reads TORCH_NCCL_TRACE_BUFFER_SIZE, not TORCH_FR_BUFFER_SIZE: set that to get it"
        elif r.fr_from == "default":
            name = "TORCH_FR_BUFFER_SIZE" if version_tuple(v) >= FR_NEW_NAME_FROM else "TORCH_NCCL_TRACE_BUFFER_SIZE"
            why = f"torch {v} records nothing by default: set {name} to get it"
        else:
            why = "the buffer size is set to 0"
        if why not in reasons:
            reasons.append(why)
    return "off — " + "; ".join(reasons)
