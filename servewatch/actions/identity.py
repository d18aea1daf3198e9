"""Proof that a PID is the server behind a URL, before servewatch records its process tree or signals it.

A PID the user typed can be anything: a `sleep`, PID 1, a process that has since exited and whose PID
was reused. The proof: the PID, or one of its descendants, holds a LISTEN socket on the URL's port
(its socket inodes in /proc/<pid>/fd matched against the listening sockets, via psutil), in the same
network namespace as servewatch, for a URL whose host is this machine. The proof is pinned by the
PID's create time and checked again (`reprove`) before every signal.

When the port cannot be seen from here (the host is another machine, the process is in another network
namespace, its sockets cannot be read), nothing is proven; the caller may still go on with
`allow_unverifiable` (an explicit user override it must record), and the proof then says so.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from servewatch import proctime
from servewatch.errors import ServewatchError

NOTHING_LISTENS = "nothing listens on port {port} here"
CREATE_TIME_TOLERANCE_S = 0.01     # as in actions.tree: psutil's create time is rounded to clock ticks


class ServerIdentityError(ServewatchError):
    """The PID is not proven to be the server behind the URL; str() is the one line the user sees.
    `unverifiable` is True when nothing could be proven from here (not a mismatch): the user's explicit
    override (allow_unverifiable) would accept it."""

    exit_code = 2

    def __init__(self, message: str, *, unverifiable: bool = False, not_listening: bool = False,
                 gone: bool = False):
        super().__init__(message)
        self.unverifiable = unverifiable
        self.not_listening = not_listening   # nothing at all listens on the port yet (a server still starting)
        self.gone = gone                     # the PID is not running (or a zombie): it exited


@dataclass(frozen=True, slots=True)
class ServerProof:
    pid: int                      # the process the user named (the root servewatch acts on)
    create_time: float            # its create time when proven: a reused PID does not match
    listener_pid: int | None      # the member of its tree that holds the listening socket (None: unverified)
    port: int | None              # the URL's port
    verified: bool                # False only when the caller allowed an unverifiable URL
    how: str                      # one readable sentence for bundles and reports (no names, no paths)


def prove_server(pid: int, url: str, *, allow_unverifiable: bool = False) -> ServerProof:
    """The proof that `pid` (or a descendant) listens on the URL's port here; ServerIdentityError if not."""
    import psutil

    base, host, port = _parse(url)
    proc, name = _process(pid, base)
    create_time = _create_time(proc, pid, name, base)

    def unverifiable(why: str) -> ServerProof:
        if not allow_unverifiable:
            raise ServerIdentityError(f"pid {pid} ({name}) cannot be proven to serve {base}: {why} "
                                      f"(pass --unverified-pid-ok to go on anyway)", unverifiable=True)
        return ServerProof(pid, create_time, None, port, False,
                           f"not verified: {why}; pid {pid} was accepted on the user's explicit override")

    why = unverifiable_reason(url)
    if why is not None:
        return unverifiable(why)
    addresses = _resolve(host, port)
    same = _same_netns(pid)
    if same is None:
        return unverifiable("its network namespace cannot be read by this user")
    if not same:
        return unverifiable(f"it is in another network namespace, where port {port} cannot be seen from here")
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        raise ServerIdentityError(f"pid {pid} ({name}) exited before it could be proven to serve {base}") from None
    denied = []
    for member in members:
        try:
            conns = _connections(member)
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            denied.append(member.pid)
            continue
        if any(_listens_on(conn, port, addresses) for conn in conns):
            if member.pid == pid:
                how = f"pid {pid} listens on port {port} itself, in servewatch's network namespace"
            else:
                how = (f"pid {member.pid}, a descendant of pid {pid}, listens on port {port}, "
                       f"in servewatch's network namespace")
            return ServerProof(pid, create_time, member.pid, port, True, how)
    holder_pid, holder = _holder(port, addresses)
    if denied and holder_pid is None:
        return unverifiable(f"the sockets of pid {denied[0]} cannot be read by this user")
    raise ServerIdentityError(f"pid {pid} ({name}) does not serve {base}: {holder}",
                              not_listening=holder_pid is None and holder == NOTHING_LISTENS.format(port=port))


def reprove(proof: ServerProof, url: str) -> ServerProof:
    """The proof again, just before a signal: the PID is still the same process (its create time), and
    (when it was verified) its tree still holds the port. ServerIdentityError if not."""
    base, _, _ = _parse(url)
    proc, name = _process(proof.pid, base)
    now = _create_time(proc, proof.pid, name, base)
    if abs(now - proof.create_time) > CREATE_TIME_TOLERANCE_S:
        raise ServerIdentityError(f"pid {proof.pid} ({name}) is no longer the process proven to serve {base}: "
                                  f"the server exited and its PID was reused")
    if not proof.verified:
        return proof
    again = prove_server(proof.pid, url)
    if abs(again.create_time - proof.create_time) > CREATE_TIME_TOLERANCE_S:   # reused in between
        raise ServerIdentityError(f"pid {proof.pid} is no longer the process proven to serve {base}: "
                                  f"the server exited and its PID was reused")
    return again


def tree_listens(pid: int, url: str) -> bool:
    """Whether pid or a descendant holds a LISTEN socket on the URL's port now: the cheap part of the proof
    (a fraction of a millisecond; naming another holder reads every process's sockets, a tenth of a second
    or more), for polling until a started server listens. Never a proof by itself: prove_server is."""
    import psutil

    _, host, port = _parse(url)
    addresses = _resolve(host, port) or set()
    try:
        proc = psutil.Process(pid)
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return False
    for member in members:
        try:
            if any(_listens_on(conn, port, addresses) for conn in _connections(member)):
                return True
        except psutil.Error:
            continue
    return False


def unverifiable_reason(url: str) -> str | None:
    """Why no PID can be proven to serve this URL from here (its host is not this machine, or does not
    resolve), or None when one can."""
    _, host, port = _parse(url)
    addresses = _resolve(host, port)
    if addresses is None:
        return f"{host} does not resolve here"
    if not _is_local(addresses):
        return f"{host} is not an address of this machine"
    return None


# --- helpers -----------------------------------------------------------------------------------------

def _parse(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerIdentityError(f"{url!r}: not an http(s) URL")
    try:
        port = parts.port
    except ValueError:
        raise ServerIdentityError(f"{url!r}: bad port") from None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}", parts.hostname, port


def _process(pid: int, base: str):
    import psutil

    try:
        proc = psutil.Process(pid)
    except (psutil.NoSuchProcess, ValueError):
        raise ServerIdentityError(f"pid {pid} is not running, so it cannot be the server behind {base}",
                                  gone=True) from None
    return proc, _name(proc)


def _create_time(proc, pid: int, name: str, base: str) -> float:
    import psutil

    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            raise psutil.NoSuchProcess(pid)
        return proctime.of(proc)
    except psutil.NoSuchProcess:
        raise ServerIdentityError(f"pid {pid} ({name}) is not running, so it cannot be the server behind {base}",
                                  gone=True) from None


def _name(proc) -> str:
    """The process title or kernel name, never its arguments."""
    from servewatch.sources.process import title_of

    return title_of(proc)


def _resolve(host: str, port: int) -> set[ipaddress._BaseAddress] | None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    out = set()
    for info in infos:
        try:
            out.add(ipaddress.ip_address(info[4][0].split("%", 1)[0]))
        except ValueError:
            continue
    return out or None


def _local_addresses() -> set[ipaddress._BaseAddress]:
    import psutil

    out = set()
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    out.add(ipaddress.ip_address(addr.address.split("%", 1)[0]))
                except ValueError:
                    continue
    return out


def _is_local(addresses) -> bool:
    """Every address the host resolves to is this machine's (a name that could reach another is not)."""
    local = None
    for address in addresses:
        if address.is_loopback or address.is_unspecified:
            continue
        local = _local_addresses() if local is None else local
        if address not in local:
            return False
    return True


def _same_netns(pid: int) -> bool | None:
    """Whether pid shares servewatch's network namespace; None when that cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:
        return None


def _connections(proc):
    method = getattr(proc, "net_connections", None) or proc.connections   # psutil >= 6 renamed it
    return method(kind="tcp")


def _listens_on(conn, port: int, addresses) -> bool:
    import psutil

    if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
        return False
    try:
        bound = ipaddress.ip_address(conn.laddr.ip.split("%", 1)[0])
    except ValueError:
        return False
    if bound.is_unspecified:
        # 0.0.0.0 takes every IPv4 address; :: every IPv6 one and (dual stack) the IPv4 ones too
        return bound.version == 6 or any(a.version == 4 for a in addresses)
    mapped = getattr(bound, "ipv4_mapped", None)
    return bound in addresses or (mapped is not None and mapped in addresses)


def _holder(port: int, addresses) -> tuple[int | None, str]:
    """(the pid that holds the port's listening socket, or None; who holds it, in words)."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None, f"the listening sockets on port {port} cannot be read here"
    for conn in conns:
        if _listens_on(conn, port, addresses):
            if conn.pid is None:
                return None, f"port {port} is held by a process this user cannot see"
            try:
                name = _name(psutil.Process(conn.pid))
            except psutil.Error:
                name = "a process that has just exited"
            return conn.pid, f"port {port} is held by pid {conn.pid} ({name})"
    return None, NOTHING_LISTENS.format(port=port)
