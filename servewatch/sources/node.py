"""The node-local view: every inference engine running on this node, found by its process titles, no URL needed.

When ranks run on other hosts (multi-node TP/PP, Ray), the API node cannot see them; a servewatch on each node
can. `discover()` walks the node's processes once, keeps those whose title a registered dialect claims as an
engine rank (`VLLM::Worker_TP1`, `sglang::scheduler_DP1`, ...), and groups them into engines by their root: the
parent of the topmost ranked process (the API server or launcher), or the topmost ranked process itself when
its parent is init. Each engine is then named the way Prometheus can join it with the rest of the cluster:
- `port`: the TCP port its root listens on, read in the root's own network namespace (/proc/PID/net/tcp*
  and the root's socket inodes), so a server in another pod's namespace is seen from a DaemonSet with hostPID;
- `pod_uid`: the Kubernetes pod UID from the root's cgroup path, when it runs in a pod (kube-state-metrics'
  `kube_pod_info{uid=...}` gives the pod, namespace and owner from it).
Nothing else is read from those processes: no argv beyond a title, no environment.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from servewatch.timeline.ranks import rank_of

MAX_PROCESSES = 20_000        # a node's processes read per discovery, at most
MAX_ENGINES = 32              # engines kept per node (a bound on the exported series)
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_LISTEN = "0A"                # TCP_LISTEN in /proc/net/tcp's st column


@dataclass(frozen=True, slots=True)
class NodeEngine:
    root_pid: int
    root_create_time: float
    port: int | None           # the lowest TCP port the root listens on, in its own network namespace
    pod_uid: str | None        # the Kubernetes pod UID from its cgroup, when it runs in a pod
    ranks: int                 # ranked processes found under it

    @property
    def engine(self) -> str:
        """The engine's label: its port, stable across restarts; "none" when it listens on none."""
        return str(self.port) if self.port is not None else "none"


def discover(*, max_processes: int = MAX_PROCESSES) -> list[NodeEngine]:
    """The engines on this node now, by port then root pid; at most MAX_ENGINES."""
    import psutil

    from servewatch.sources.process import title_of

    parents: dict[int, int] = {}
    ranked: set[int] = set()
    created: dict[int, float] = {}
    for n, proc in enumerate(psutil.process_iter(["pid", "ppid", "create_time"])):
        if n >= max_processes:
            break
        info = proc.info
        if info.get("ppid") is None:
            continue
        parents[info["pid"]] = info["ppid"]
        created[info["pid"]] = info.get("create_time") or 0.0
        try:
            if rank_of(title_of(proc)) is not None:
                ranked.add(info["pid"])
        except psutil.Error:
            continue
    roots: dict[int, int] = {}
    for pid in ranked:
        top = pid
        while parents.get(top) in ranked:
            top = parents[top]
        root = parents.get(top, 0)
        root = top if root <= 1 or root not in parents else root
        roots[root] = roots.get(root, 0) + 1
    engines = [NodeEngine(root, created.get(root, 0.0), listening_port(root), pod_uid(root), count)
               for root, count in roots.items()]
    engines.sort(key=lambda e: (e.port is None, e.port or 0, e.root_pid))
    return engines[:MAX_ENGINES]


def listening_port(pid: int, proc_root: str = "/proc") -> int | None:
    """The lowest TCP port `pid` itself holds a listening socket on, read in its own network namespace."""
    inodes = set()
    try:
        for fd in os.listdir(f"{proc_root}/{pid}/fd"):
            try:
                target = os.readlink(f"{proc_root}/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return None
    ports = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc_root}/{pid}/net/{table}", encoding="ascii", errors="replace") as rows:
                next(rows, None)
                for row in rows:
                    fields = row.split()
                    if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in inodes:
                        ports.append(int(fields[1].rsplit(":", 1)[1], 16))
        except (OSError, ValueError):
            continue
    return min(ports) if ports else None


def pod_uid(pid: int, proc_root: str = "/proc") -> str | None:
    """The Kubernetes pod UID in `pid`'s cgroup path (cgroupfs `pod<uid>` or systemd `pod<uid_with_underscores>`)."""
    try:
        with open(f"{proc_root}/{pid}/cgroup", encoding="utf-8", errors="replace") as cgroup:
            text = cgroup.read(65536)
    except OSError:
        return None
    found = _POD_UID.search(text)
    return found.group(1).replace("_", "-") if found else None
