"""Value tests of actions/identity.py (issue 40): the PID <-> port proof, with the process table, the sockets and the
resolver replaced by fakes, so that every line and field of the answer is checked (test_identity.py proves the same
with real processes). The create-time boundary reads CREATE_TIME_TOLERANCE_S, as reprove does: a create time that
differs by more than it is another process; by it exactly, the same one."""

from __future__ import annotations

import ipaddress
import socket
from collections import namedtuple

import psutil
import pytest

from servewatch.actions import identity as I
from servewatch.actions.identity import ServerIdentityError, ServerProof

Addr = namedtuple("Addr", "ip port")
Conn = namedtuple("Conn", "status laddr pid")
IfAddr = namedtuple("IfAddr", "family address")


def listen(ip: str, port: int, pid: int | None = None, status=psutil.CONN_LISTEN) -> Conn:
    return Conn(status, Addr(ip, port), pid)


def ip(text: str):
    return ipaddress.ip_address(text)


class FakeProc:
    def __init__(self, pid, conns=(), children=(), *, denied=False, gone=False, gone_children=False):
        self.pid = pid
        self._conns = list(conns)
        self._children = list(children)
        self.denied, self.gone, self.gone_children = denied, gone, gone_children

    def children(self, recursive=False):
        assert recursive is True
        if self.gone_children:
            raise psutil.NoSuchProcess(self.pid)
        return self._children

    def net_connections(self, kind="inet"):
        assert kind == "tcp"
        if self.gone:
            raise psutil.NoSuchProcess(self.pid)
        if self.denied:
            raise psutil.AccessDenied(self.pid)
        return self._conns


@pytest.fixture
def host(monkeypatch):
    """A machine where pid 100 ("server", create time 1000.0) is the root of the fake tree `host.root`."""
    class Host:
        root = FakeProc(100)
        create_time = 1000.0
        netns = True
        holder = (None, I.NOTHING_LISTENS.format(port=8000))
        addresses = {ip("127.0.0.1")}

    h = Host()
    h.base, h.host, h.port = "http://127.0.0.1:8000", "127.0.0.1", 8000    # what the fakes expect to be asked

    def process(pid, base):
        assert (pid, base) == (100, h.base)
        return h.root, "server"

    def create_time(proc, pid, name, base):
        assert (proc, pid, name, base) == (h.root, 100, "server", h.base)
        return h.create_time

    def same_netns(pid):
        assert pid == 100
        return h.netns

    def resolve(hostname, port):
        assert (hostname, port) == (h.host, h.port)
        return h.addresses

    def holder(port, addresses):
        assert (port, addresses) == (h.port, h.addresses)
        return h.holder

    monkeypatch.setattr(I, "_process", process)
    monkeypatch.setattr(I, "_create_time", create_time)
    monkeypatch.setattr(I, "_same_netns", same_netns)
    monkeypatch.setattr(I, "_resolve", resolve)
    monkeypatch.setattr(I, "_holder", holder)
    return h


URL = "http://127.0.0.1:8000"


def test_the_pid_that_listens_itself_is_proven(host):
    host.root = FakeProc(100, [listen("127.0.0.1", 8000)])
    assert I.prove_server(100, URL) == ServerProof(
        100, 1000.0, 100, 8000, True, "pid 100 listens on port 8000 itself, in servewatch's network namespace")


def test_a_descendant_that_listens_is_named(host):
    host.root = FakeProc(100, [listen("127.0.0.1", 9999)], [FakeProc(101, [listen("127.0.0.1", 8001)]),
                                                            FakeProc(102, [listen("127.0.0.1", 8000)])])
    assert I.prove_server(100, URL) == ServerProof(
        100, 1000.0, 102, 8000, True,
        "pid 102, a descendant of pid 100, listens on port 8000, in servewatch's network namespace")


def test_a_member_that_exits_or_hides_its_sockets_is_passed_over(host):
    host.root = FakeProc(100, [], [FakeProc(101, gone=True), FakeProc(103, denied=True),
                                   FakeProc(102, [listen("0.0.0.0", 8000)])])
    assert I.prove_server(100, URL).listener_pid == 102


def test_a_tree_that_does_not_listen_is_refused_naming_the_holder(host):
    host.root = FakeProc(100, [listen("127.0.0.1", 8001)])
    host.holder = (555, "port 8000 is held by pid 555 (other)")
    with pytest.raises(ServerIdentityError) as err:
        I.prove_server(100, URL)
    assert str(err.value) == "pid 100 (server) does not serve http://127.0.0.1:8000: port 8000 is held by pid 555 (other)"
    assert (err.value.unverifiable, err.value.not_listening, err.value.gone) == (False, False, False)
    assert err.value.exit_code == 2


def test_nothing_listening_at_all_is_said_so(host):
    with pytest.raises(ServerIdentityError) as err:
        I.prove_server(100, URL)
    assert str(err.value) == "pid 100 (server) does not serve http://127.0.0.1:8000: nothing listens on port 8000 here"
    assert err.value.not_listening is True and err.value.unverifiable is False
    # a holder this user cannot see is not "nothing listens"
    host.holder = (None, "port 8000 is held by a process this user cannot see")
    with pytest.raises(ServerIdentityError) as err:
        I.prove_server(100, URL)
    assert err.value.not_listening is False


def test_sockets_that_cannot_be_read_are_unverifiable_unless_allowed(host):
    host.root = FakeProc(100, [], [FakeProc(104, denied=True), FakeProc(105, denied=True)])
    with pytest.raises(ServerIdentityError) as err:
        I.prove_server(100, URL)
    assert str(err.value) == ("pid 100 (server) cannot be proven to serve http://127.0.0.1:8000: the sockets of pid "
                              "104 cannot be read by this user (pass --unverified-pid-ok to go on anyway)")
    assert err.value.unverifiable is True
    proof = I.prove_server(100, URL, allow_unverifiable=True)
    assert proof == ServerProof(100, 1000.0, None, 8000, False,
                                "not verified: the sockets of pid 104 cannot be read by this user; pid 100 was "
                                "accepted on the user's explicit override")
    # denied sockets but a known holder elsewhere: a mismatch, not unverifiable
    host.holder = (555, "port 8000 is held by pid 555 (other)")
    with pytest.raises(ServerIdentityError) as err:
        I.prove_server(100, URL, allow_unverifiable=True)
    assert err.value.unverifiable is False and "held by pid 555" in str(err.value)


def test_another_or_unreadable_network_namespace_is_unverifiable(host):
    host.root = FakeProc(100, [listen("127.0.0.1", 8000)])
    host.netns = False
    proof = I.prove_server(100, URL, allow_unverifiable=True)
    assert proof.how == ("not verified: it is in another network namespace, where port 8000 cannot be seen from "
                         "here; pid 100 was accepted on the user's explicit override")
    assert (proof.verified, proof.listener_pid, proof.port) == (False, None, 8000)
    host.netns = None
    with pytest.raises(ServerIdentityError) as err:
        I.prove_server(100, URL)
    assert str(err.value) == ("pid 100 (server) cannot be proven to serve http://127.0.0.1:8000: its network "
                              "namespace cannot be read by this user (pass --unverified-pid-ok to go on anyway)")
    assert err.value.unverifiable


def test_a_tree_that_exits_while_listed_is_one_line(host):
    host.root = FakeProc(100, gone_children=True)
    with pytest.raises(ServerIdentityError) as err:
        I.prove_server(100, URL)
    assert str(err.value) == "pid 100 (server) exited before it could be proven to serve http://127.0.0.1:8000"


def test_a_remote_host_is_unverifiable(host, monkeypatch):
    monkeypatch.setattr(I, "_local_addresses", lambda: {ip("10.0.0.5")})
    host.addresses = {ip("192.0.2.10")}
    host.base, host.host = "http://192.0.2.10:8000", "192.0.2.10"
    proof = I.prove_server(100, "http://192.0.2.10:8000", allow_unverifiable=True)
    assert proof.how == ("not verified: 192.0.2.10 is not an address of this machine; pid 100 was accepted on "
                         "the user's explicit override")
    host.addresses = None
    host.host, host.port = "nowhere.invalid", 1
    assert I.unverifiable_reason("http://nowhere.invalid:1") == "nowhere.invalid does not resolve here"
    host.addresses = {ip("10.0.0.5")}
    host.host = "10.0.0.5"
    assert I.unverifiable_reason("http://10.0.0.5:1") is None


# --- the create-time tolerance ---------------------------------------------------------------------------

def test_reprove_create_time_boundary_under_at_and_over(host):
    host.root = FakeProc(100, [listen("127.0.0.1", 8000)])
    host.create_time = 0.0                      # so that base + tol - base is tol exactly
    proof = I.prove_server(100, URL)
    tol = I.CREATE_TIME_TOLERANCE_S
    base = proof.create_time
    assert abs((base + tol) - base) == tol
    for delta, same in ((tol / 2, True), (tol, True), (tol * 1.5, False), (-tol * 1.5, False)):
        host.create_time = base + delta
        if same:
            assert I.reprove(proof, URL).listener_pid == 100, delta
        else:
            with pytest.raises(ServerIdentityError) as err:
                I.reprove(proof, URL)
            assert str(err.value) == ("pid 100 (server) is no longer the process proven to serve "
                                      "http://127.0.0.1:8000: the server exited and its PID was reused"), delta


def test_reprove_of_an_unverified_proof_checks_the_create_time_only(host):
    unverified = ServerProof(100, 1000.0, None, 8000, False, "not verified: x")
    assert I.reprove(unverified, URL) is unverified       # nothing listens: still the same process
    host.create_time = 1000.0 + 2 * I.CREATE_TIME_TOLERANCE_S
    with pytest.raises(ServerIdentityError, match="PID was reused"):
        I.reprove(unverified, URL)


def test_reprove_catches_a_pid_reused_between_its_two_reads(host, monkeypatch):
    host.root = FakeProc(100, [listen("127.0.0.1", 8000)])
    proof = I.prove_server(100, URL)
    tol = I.CREATE_TIME_TOLERANCE_S
    for delta, same in ((tol, True), (tol * 1.5, False)):
        times = iter([1000.0, 1000.0 + delta])              # reprove's own read, then prove_server's
        monkeypatch.setattr(I, "_create_time", lambda *a: next(times))
        if same:
            assert I.reprove(proof, URL) == ServerProof(100, 1000.0 + delta, 100, 8000, True, proof.how)
        else:
            with pytest.raises(ServerIdentityError) as err:
                I.reprove(proof, URL)
            assert str(err.value) == ("pid 100 is no longer the process proven to serve http://127.0.0.1:8000: "
                                      "the server exited and its PID was reused")


def test_reprove_returns_the_new_proof(host):
    host.root = FakeProc(100, [], [FakeProc(101, [listen("127.0.0.1", 8000)])])
    proof = I.prove_server(100, URL)
    host.root = FakeProc(100, [], [FakeProc(107, [listen("127.0.0.1", 8000)])])   # the listener restarted
    assert I.reprove(proof, URL).listener_pid == 107


# --- the cheap check ---------------------------------------------------------------------------------------

def test_tree_listens(monkeypatch):
    trees = {1: FakeProc(1, [listen("127.0.0.1", 8000)]),
             2: FakeProc(2, [], [FakeProc(3, gone=True), FakeProc(4, [listen("127.0.0.1", 8000)])]),
             5: FakeProc(5, [listen("127.0.0.1", 8001)], [FakeProc(6, denied=True)])}

    def process(pid):
        if pid not in trees:
            raise psutil.NoSuchProcess(pid)
        return trees[pid]

    monkeypatch.setattr(psutil, "Process", process)
    monkeypatch.setattr(I, "_resolve", lambda h, p: {ip("127.0.0.1")} if (h, p) == ("127.0.0.1", 8000) else None)
    assert [I.tree_listens(pid, URL) for pid in (1, 2, 5, 9)] == [True, True, False, False]
    monkeypatch.setattr(I, "_resolve", lambda h, p: None)          # no address: only a wildcard v6 bind counts
    assert I.tree_listens(1, URL) is False
    trees[1] = FakeProc(1, [listen("::", 8000)])
    assert I.tree_listens(1, URL) is True


# --- helpers ------------------------------------------------------------------------------------------------

def test_parse():
    assert I._parse("http://127.0.0.1:8000/v1") == ("http://127.0.0.1:8000", "127.0.0.1", 8000)
    assert I._parse("127.0.0.1:9") == ("http://127.0.0.1:9", "127.0.0.1", 9)
    assert I._parse("https://user:pw@host.example") == ("https://host.example", "host.example", 443)
    assert I._parse("http://host.example") == ("http://host.example", "host.example", 80)
    # userinfo holding an "@": none of it is shown (the host is after the last "@")
    assert I._parse("http://u@x:pw@host.example:1") == ("http://host.example:1", "host.example", 1)
    for bad, line in (("ftp://x", "'ftp://x': not an http(s) URL"), ("http://", "'http://': not an http(s) URL"),
                      ("http://h:99999", "'http://h:99999': bad port")):
        with pytest.raises(ServerIdentityError) as err:
            I._parse(bad)
        assert str(err.value) == line


def test_listens_on():
    v4 = {ip("127.0.0.1")}
    v6 = {ip("::1")}
    assert I._listens_on(listen("127.0.0.1", 8000), 8000, v4) is True
    assert I._listens_on(listen("127.0.0.1", 8000), 8001, v4) is False
    assert I._listens_on(listen("127.0.0.1", 8000, status=psutil.CONN_ESTABLISHED), 8000, v4) is False
    assert I._listens_on(Conn(psutil.CONN_LISTEN, (), None), 8000, v4) is False
    assert I._listens_on(listen("127.0.0.2", 8000), 8000, v4) is False
    assert I._listens_on(listen("0.0.0.0", 8000), 8000, v4) is True
    assert I._listens_on(listen("0.0.0.0", 8000), 8000, v6) is False       # an IPv4 wildcard takes no IPv6 address
    assert I._listens_on(listen("::", 8000), 8000, v6) is True
    assert I._listens_on(listen("::", 8000), 8000, v4) is True              # dual stack
    assert I._listens_on(listen("::ffff:127.0.0.1", 8000), 8000, v4) is True
    assert I._listens_on(listen("::ffff:127.0.0.2", 8000), 8000, v4) is False
    assert I._listens_on(listen("::1", 8000), 8000, v4) is False
    assert I._listens_on(listen("fe80::1%eth0", 8000), 8000, {ip("fe80::1")}) is True
    assert I._listens_on(listen("not-an-ip", 8000), 8000, v4) is False


def test_resolve(monkeypatch):
    def getaddrinfo(host, port, type=0):
        assert (port, type) == (8000, socket.SOCK_STREAM)
        if host == "bad":
            raise socket.gaierror("no")
        if host == "idna":
            raise UnicodeError("label")
        return [(socket.AF_INET, type, 6, "", ("junk", port)),
                (socket.AF_INET6, type, 6, "", ("fe80::1%eth0", port, 0, 2)),
                (socket.AF_INET, type, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    assert I._resolve("h", 8000) == {ip("fe80::1"), ip("127.0.0.1")}
    assert I._resolve("bad", 8000) is None
    assert I._resolve("idna", 8000) is None
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, type=0: [(0, 0, 0, "", ("junk", port))])
    assert I._resolve("h", 8000) is None


def test_local_addresses_and_is_local(monkeypatch):
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {
        "lo": [IfAddr(socket.AF_INET, "127.0.0.1"), IfAddr(socket.AF_INET6, "::1")],
        "eth0": [IfAddr(socket.AF_INET, "bogus"), IfAddr(socket.AF_INET, "10.0.0.5"),
                 IfAddr(socket.AF_INET6, "fe80::5%eth0"), IfAddr(psutil.AF_LINK, "00:11:22:33:44:55")]})
    assert I._local_addresses() == {ip("127.0.0.1"), ip("::1"), ip("10.0.0.5"), ip("fe80::5")}
    assert I._is_local({ip("10.0.0.5"), ip("127.0.0.1")}) is True
    assert I._is_local({ip("10.0.0.5"), ip("10.0.0.6")}) is False
    assert I._is_local({ip("10.0.0.6"), ip("10.0.0.5")}) is False
    assert I._is_local({ip("0.0.0.0")}) is True
    assert I._is_local([ip("127.0.0.1"), ip("10.0.0.6")]) is False       # a loopback first does not end the check


def test_is_local_reads_the_interfaces_once_and_only_when_needed(monkeypatch):
    calls = []
    monkeypatch.setattr(I, "_local_addresses", lambda: calls.append(1) or {ip("10.0.0.5"), ip("10.0.0.6")})
    assert I._is_local({ip("127.0.0.1"), ip("::")}) is True and calls == []
    assert I._is_local({ip("10.0.0.5"), ip("10.0.0.6")}) is True and calls == [1]


def test_same_netns(monkeypatch):
    links = {"/proc/self/ns/net": "net:[1]", "/proc/7/ns/net": "net:[1]", "/proc/8/ns/net": "net:[2]"}

    def readlink(path):
        if path not in links:
            raise PermissionError(path)
        return links[path]

    monkeypatch.setattr(I.os, "readlink", readlink)
    assert [I._same_netns(pid) for pid in (7, 8, 9)] == [True, False, None]


def test_connections_uses_the_new_name_or_the_old():
    assert I._connections(FakeProc(1, [listen("127.0.0.1", 1)])) == [listen("127.0.0.1", 1)]

    class Old:
        def connections(self, kind="inet"):
            return [kind]
    assert I._connections(Old()) == ["tcp"]


def test_holder(monkeypatch):
    v4 = {ip("127.0.0.1")}
    table = [listen("127.0.0.1", 8001, pid=10), listen("127.0.0.1", 8000, pid=None)]
    monkeypatch.setattr(psutil, "net_connections", lambda kind="inet": table if kind == "tcp" else [])
    assert I._holder(8000, v4) == (None, "port 8000 is held by a process this user cannot see")
    assert I._holder(8002, v4) == (None, "nothing listens on port 8002 here")
    table[:] = [listen("127.0.0.1", 8000, pid=42)]

    class Named:
        pid = 42
    monkeypatch.setattr(psutil, "Process", lambda pid: Named() if pid == 42 else (_ for _ in ()).throw(
        psutil.NoSuchProcess(pid)))
    monkeypatch.setattr(I, "_name", lambda proc: f"title{proc.pid}")
    assert I._holder(8000, v4) == (42, "port 8000 is held by pid 42 (title42)")
    table[:] = [listen("127.0.0.1", 8000, pid=43)]
    assert I._holder(8000, v4) == (43, "port 8000 is held by pid 43 (a process that has just exited)")

    def denied(kind="inet"):
        raise psutil.AccessDenied()
    monkeypatch.setattr(psutil, "net_connections", denied)
    assert I._holder(8000, v4) == (None, "the listening sockets on port 8000 cannot be read here")


def test_process_and_create_time(monkeypatch):
    class P:
        pid = 5

        def __init__(self, status):
            self._status = status

        def status(self):
            return self._status

    monkeypatch.setattr(I, "_name", lambda proc: "srv")
    monkeypatch.setattr(psutil, "Process", lambda pid: P(psutil.STATUS_SLEEPING) if pid == 5 else (
        _ for _ in ()).throw(psutil.NoSuchProcess(pid)))
    proc, name = I._process(5, "http://h:1")
    assert (proc.pid, name) == (5, "srv")
    with pytest.raises(ServerIdentityError) as err:
        I._process(6, "http://h:1")
    assert str(err.value) == "pid 6 is not running, so it cannot be the server behind http://h:1"
    assert err.value.gone is True
    monkeypatch.setattr(I.proctime, "of", lambda proc: 1234.5)
    assert I._create_time(P(psutil.STATUS_SLEEPING), 5, "srv", "http://h:1") == 1234.5
    with pytest.raises(ServerIdentityError) as err:
        I._create_time(P(psutil.STATUS_ZOMBIE), 5, "srv", "http://h:1")
    assert str(err.value) == "pid 5 (srv) is not running, so it cannot be the server behind http://h:1"
    assert err.value.gone is True and err.value.unverifiable is False


def test_the_error_s_flags_default_to_false():
    err = ServerIdentityError("x")
    assert (str(err), err.unverifiable, err.not_listening, err.gone, err.exit_code) == ("x", False, False, False, 2)
