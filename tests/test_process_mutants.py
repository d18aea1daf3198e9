"""The process source's values (sources/process.py, issue 50 item 8), where scripts/mutation.sh's mutants of the
module changed a figure that tests/test_sources_process.py and tests/test_values_process_source.py did not read:
the slot limit at its boundaries, a title from argv[0], the kernel name's bytes, the exit status of a process
that ended (code 0, a code, a signal, none known), the sample of an access denied, the psutil fallback's member,
CPU % to one decimal, the tree between two full walks (a child of another thread kept, a new child of the main
thread found, each once), the one read of a title, and a source that never raises."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
from contextlib import nullcontext
from types import SimpleNamespace

import psutil
import pytest

from servewatch.clock import VirtualClock
from servewatch.errors import SourceUnavailable
from servewatch.sources import process as S
from servewatch.timeline.samples import ProcessMember, ProcessSample
from tests.test_sources_process import child, wait_for  # noqa: F401 - a fixture

# --- the slot limit, a title, the kernel name -----------------------------------------------------------------


def test_slot_limit_at_its_boundaries():
    assert S.slot_limit_from_argv(["vllm", "serve", "--max-num-seqs", "1"]) == 1
    assert S.slot_limit_from_argv(["vllm", "serve", "--max-num-seqs", "0"]) is None
    assert S.slot_limit_from_argv(["vllm", "serve", "--max-num-seqs=0"]) is None
    # the flag last, with no value: nothing (not an error)
    assert S.slot_limit_from_argv(["vllm", "serve", "--max-num-seqs"]) is None
    # another flag's number after it is not the slot limit
    assert S.slot_limit_from_argv(["--max-num-seqs", "16", "--port", "8000", "x"]) == 16
    assert S.slot_limit_from_argv(["serve", "64"]) is None


class Proc:
    def __init__(self, argv=None, name="python3", pid=None):
        self.argv, self._name, self.pid, self.reads = argv, name, pid, 0

    def cmdline(self):
        self.reads += 1
        if isinstance(self.argv, Exception):
            raise self.argv
        return self.argv

    def name(self):
        if isinstance(self._name, Exception):
            raise self._name
        return self._name


def test_a_title_from_argv_0_else_the_kernel_name():
    assert S.title_of(Proc(["VLLM::Worker_TP0 extra words", "--secret"])) == "VLLM::Worker_TP0"
    assert S.title_of(Proc([" VLLM::EngineCore"])) == "python3"          # not a title: the first word is empty
    assert S.title_of(Proc([])) == "python3"
    assert S.title_of(Proc([""])) == "python3"
    assert S.title_of(Proc(psutil.AccessDenied(1))) == "python3"
    assert S.title_of(Proc(["python3", "-m", "vllm"], name="vllm")) == "vllm"
    assert S.title_of(Proc(psutil.NoSuchProcess(1), name=psutil.NoSuchProcess(1))) == "?"


def test_the_kernel_name_is_the_first_64_bytes_of_comm_without_its_newline(monkeypatch):
    opened = []

    def comm(content):
        def fake_open(path, mode):
            opened.append((path, mode))
            return io.BytesIO(content)
        monkeypatch.setattr(S, "open", fake_open, raising=False)

    comm(b"WORKERX\n")
    assert S.kernel_name(41) == "WORKERX"
    assert opened == [("/proc/41/comm", "rb")]
    comm(b"worker \n")
    assert S.kernel_name(41) == "worker "
    comm(b"w\xff\n")
    assert S.kernel_name(41) == "w\ufffd"
    comm(b"a" * 63 + b"bc\n")
    assert S.kernel_name(41) == "a" * 63 + "b"

    def denied(path, mode):
        raise PermissionError(path)
    monkeypatch.setattr(S, "open", denied, raising=False)
    assert S.kernel_name(41) is None


def test_a_zombies_wait_status_is_read_past_the_last_parenthesis_of_its_name(monkeypatch):
    def stat(comm: bytes, wait_status: int) -> bytes:
        return b"77 (" + comm + b") Z " + b" ".join([b"1"] * 48) + b" " + str(wait_status).encode() + b"\n"

    monkeypatch.setattr(S, "open", lambda path, mode: io.BytesIO(stat(b"a) b", 7 << 8)), raising=False)
    assert S.zombie_wait_status(77) == (7, None)
    monkeypatch.setattr(S, "open", lambda path, mode: io.BytesIO(stat(b"x", 9)), raising=False)
    assert S.zombie_wait_status(77) == (None, 9)


# --- /proc read for real ----------------------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc")
def test_the_stat_of_this_process_and_the_children_of_its_main_thread(child):  # noqa: F811
    status, ppid, cpu_s, threads, rss = S.read_stat(os.getpid())
    assert (status, ppid) == ("running", os.getppid())
    assert cpu_s > 0 and threads >= 1 and rss > 0
    assert child.pid in S.main_thread_children(os.getpid())
    assert S.main_thread_children(999_999_999) == []


# --- the probe ----------------------------------------------------------------------------------------------------

def test_a_pid_that_is_no_process_id_is_one_line():
    for pid in (0, -1):
        with pytest.raises(SourceUnavailable) as error:
            S.PsutilProbe(pid)
        assert str(error.value) == f"--pid {pid}: not a process id"


def test_a_pid_whose_access_is_denied_is_one_line(monkeypatch):
    def denied(pid):
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", denied)
    with pytest.raises(SourceUnavailable) as error:
        S.PsutilProbe(4242)
    assert str(error.value) == "--pid 4242: access denied"


@pytest.mark.skipif(not psutil.pid_exists(1), reason="no process 1 here")
def test_process_1_is_a_process_id():
    try:
        probe = S.PsutilProbe(1)
    except SourceUnavailable as error:          # another user's init: the access, not the id, is refused
        assert "not a process id" not in str(error)
    else:
        assert probe.pid == 1


def test_the_exit_of_a_process_as_its_exit_status_says_or_unknown(child):  # noqa: F811
    statuses = {"ok": 0, "code": 3, "signal": -9, "unknown": None}
    probes = {k: S.PsutilProbe(child.pid, exit_status=(lambda v=v: v)) for k, v in statuses.items()}
    probes["not ours"] = S.PsutilProbe(child.pid)           # no exit status and never seen a zombie
    create_time = probes["ok"].create_time
    child.kill()
    child.wait(timeout=10)
    gone = {k: p.snapshot(4.0) for k, p in probes.items()}

    def ended(code, sig):
        return ProcessSample(t=4.0, root_pid=child.pid, root_create_time=None, alive=False, exit_code=code,
                             exit_signal=sig, error="no_such_process")
    assert gone == {"ok": ended(0, None), "code": ended(3, None), "signal": ended(None, 9),
                    "unknown": ended(None, None), "not ours": ended(None, None)}
    assert create_time > 0


def test_a_zombie_root_keeps_its_time_and_identity(child):  # noqa: F811
    probe = S.PsutilProbe(child.pid)
    child.kill()
    assert wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE)
    assert probe.snapshot(3.0) == ProcessSample(t=3.0, root_pid=child.pid, root_create_time=probe.create_time,
                                                alive=False, exit_signal=signal.SIGKILL, error="no_such_process")


def test_a_root_whose_access_is_denied_is_alive_with_that_error():
    probe = S.PsutilProbe(os.getpid())

    def denied(pid):
        raise psutil.AccessDenied(pid)

    probe._psutil = SimpleNamespace(Process=denied, NoSuchProcess=psutil.NoSuchProcess,
                                    AccessDenied=psutil.AccessDenied, ZombieProcess=psutil.ZombieProcess,
                                    STATUS_ZOMBIE=psutil.STATUS_ZOMBIE)
    assert probe.snapshot(5.0) == ProcessSample(t=5.0, root_pid=os.getpid(), root_create_time=None, alive=True,
                                                error="access_denied")


class Full(Proc):
    """What psutil gives where /proc/PID/stat is not read."""

    def __init__(self, pid, threads=4):
        super().__init__(["python3"], "python3", pid)
        self.threads = threads

    def oneshot(self):
        return nullcontext()

    def status(self):
        return "sleeping"

    def memory_info(self):
        return SimpleNamespace(rss=123_456)

    def num_threads(self):
        if isinstance(self.threads, Exception):
            raise self.threads
        return self.threads

    def cpu_percent(self, interval):
        assert interval is None
        return 12.5

    def ppid(self):
        return 77


def test_the_member_read_through_psutil_where_stat_is_not_there(monkeypatch):
    probe = S.PsutilProbe(os.getpid())
    monkeypatch.setattr(S, "read_stat", lambda pid: None)
    monkeypatch.setattr(probe, "_title", lambda proc, key: "python worker")
    member = probe._member(Full(os.getpid()), None)
    assert member == ProcessMember(pid=os.getpid(), create_time=probe.create_time, role="other",
                                   title="python worker", status="sleeping", rss_bytes=123_456, threads=4,
                                   cpu_percent=12.5, ppid=77)
    # one field that cannot be read is None; the member stays
    assert probe._member(Full(os.getpid(), threads=psutil.AccessDenied(1)), "api").threads is None
    # a process gone before it is read is no member
    assert probe._member(Full(999_999_999), None) is None


def test_cpu_percent_is_said_to_one_decimal(monkeypatch):
    probe = S.PsutilProbe(os.getpid())
    reads = iter([("running", 1, 10.0, 4, 4096), ("running", 1, 10.5, 4, 4096)])
    clock = iter([100.0, 101.5])
    monkeypatch.setattr(S, "read_stat", lambda pid: next(reads))
    monkeypatch.setattr(S, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(probe, "_title", lambda proc, key: "python worker")
    proc = probe._procs[(probe.pid, probe.create_time)]
    probe._member(proc, None)
    assert probe._member(proc, None).cpu_percent == 33.3          # 0.5 CPU s over 1.5 s: 33.33...


def test_a_title_is_read_once_until_the_kernel_name_changes(monkeypatch):
    probe = S.PsutilProbe(os.getpid())
    proc = Proc(["VLLM::EngineCore"], pid=os.getpid())
    key = (os.getpid(), probe.create_time)
    names = iter(["python3", "python3", "sh"])
    monkeypatch.setattr(S, "kernel_name", lambda pid: next(names))
    assert [probe._title(proc, key), probe._title(proc, key)] == ["VLLM::EngineCore", "VLLM::EngineCore"]
    assert proc.reads == 1                          # /proc/PID/cmdline read once: it takes the memory-map lock
    proc.argv = ["/bin/sh", "-c", "lscpu"]
    assert probe._title(proc, key) == "python3" and proc.reads == 2     # exec'd: read again


def test_a_title_forgotten_when_the_process_execs_is_not_brought_back_by_its_old_name(monkeypatch):
    probe = S.PsutilProbe(os.getpid())
    proc = Proc(["VLLM::EngineCore"], name="python3", pid=os.getpid())
    key = (os.getpid(), probe.create_time)
    names = iter(["python3", "sh", "python3"])
    monkeypatch.setattr(S, "kernel_name", lambda pid: next(names))
    assert probe._title(proc, key) == "VLLM::EngineCore"
    proc.argv = ["/bin/sh"]
    assert probe._title(proc, key) == "python3"              # exec'd sh: no title, the kernel name
    proc.argv = ["python3", "tool.py"]                      # exec'd python again: untitled, read again
    assert probe._title(proc, key) == "python3" and proc.reads == 3


# --- the tree between two full walks -----------------------------------------------------------------------------

TREE = r"""
import subprocess, sys, threading
GRAND = ("import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
         "print(p.pid, flush=True)\ntime.sleep(60)")
kids = []
def spawn(code):
    kids.append(subprocess.Popen([sys.executable, "-c", code]))
for line in sys.stdin:
    word = line.strip()
    if word == "busy":      # spins at most 20 s
        spawn("import time\nend = time.monotonic() + 20\nwhile time.monotonic() < end: pass")
    elif word == "thread":  # started from another thread, which stays: not in /proc/PID/task/PID/children
        started = threading.Event()
        def run():
            spawn("import time; time.sleep(60)")
            started.set()
            threading.Event().wait()        # (a thread that ends hands its children to the main thread)
        threading.Thread(target=run, daemon=True).start()
        started.wait()
    elif word == "grand":   # a child that starts a grandchild: "child grandchild"
        kids.append(subprocess.Popen([sys.executable, "-c", GRAND], stdout=subprocess.PIPE, text=True))
        print(kids[-1].pid, kids[-1].stdout.readline().strip(), flush=True)
        continue
    else:
        spawn("import time; time.sleep(60)")
    print(kids[-1].pid, flush=True)
for kid in kids:
    kid.kill()
    kid.wait()
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc")
def test_between_full_walks_a_new_child_is_found_and_a_known_one_kept_each_once_with_its_cpu(monkeypatch):
    root = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    kids = []
    try:
        def spawn(word):
            root.stdin.write(word + "\n")
            root.stdin.flush()
            pids = [int(p) for p in root.stdout.readline().split()]
            kids.extend(pids)
            return pids[0] if len(pids) == 1 else pids

        busy, other = spawn("busy"), spawn("thread")
        probe = S.PsutilProbe(root.pid)
        first = probe.snapshot(100.0)                               # a full walk
        assert sorted(m.pid for m in first.members) == sorted([root.pid, busy, other])
        assert other not in S.main_thread_children(root.pid)
        spent = next(m for m in first.members if m.pid == busy)
        before = S.read_stat(busy)[2]
        assert wait_for(lambda: S.read_stat(busy)[2] > before, timeout=20.0)
        new = spawn("main")
        child, grandchild = spawn("grand")
        # a pid listed by the kernel that is gone before it is read (the incremental walk's, then snapshot's own)
        # is passed over, not the end of the walk
        real_children, real_walk = S.main_thread_children, probe._children
        monkeypatch.setattr(S, "main_thread_children",
                            lambda pid: ([999_999_999] if pid == root.pid else []) + real_children(pid))
        monkeypatch.setattr(probe, "_children", lambda r, t: [SimpleNamespace(pid=999_999_998)] + real_walk(r, t))
        second = probe.snapshot(101.0)                              # within RESCAN_S: the incremental walk
        assert sorted(m.pid for m in second.members) == sorted([root.pid, busy, other, new, child, grandchild])
        assert spent.cpu_percent == 0.0                             # no earlier read of it
        assert next(m for m in second.members if m.pid == busy).cpu_percent > 0
        assert [m.role for m in second.members if m.pid == root.pid] == ["api"]
    finally:
        root.stdin.close()
        try:
            root.wait(timeout=20)
        finally:
            for pid in kids + [root.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


# --- the source ---------------------------------------------------------------------------------------------------

def test_the_source_samples_at_its_clocks_time_and_never_raises():
    clock = VirtualClock(50.0)
    seen = []

    class Probe:
        pid = 4242

        def snapshot(self, t):
            seen.append(t)
            return ProcessSample(t, 4242, 1.0, True)

    source = S.ProcessSource(Probe(), clock, 0.5)
    assert source.interval == 0.5 and source.kind == "process"
    assert asyncio.run(source.poll()) == [ProcessSample(50.0, 4242, 1.0, True)] and seen == [50.0]

    class Broken(Probe):
        def snapshot(self, t):
            raise RuntimeError("boom")

    clock.advance(1.0)
    assert asyncio.run(S.ProcessSource(Broken(), clock, 0.5).poll()) == [
        ProcessSample(t=51.0, root_pid=4242, root_create_time=None, alive=True, error="unavailable: RuntimeError")]

    class Bare:
        def snapshot(self, t):
            raise OSError("no pid attribute")

    assert asyncio.run(S.ProcessSource(Bare(), clock, 0.5).poll())[0].root_pid == 0
