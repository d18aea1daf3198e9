"""The process source on real processes: identity, titles (never command lines), stopped and zombie
status, exit codes of our own children, a wrong PID, a reused PID."""

import os
import signal
import subprocess
import sys

import psutil
import pytest

from servewatch import proctime
from servewatch.errors import SourceUnavailable
from servewatch.sources.process import PsutilProbe, role_of, slot_limit_from_argv, title_of

SECRET = "do-not-store-this-argument"


@pytest.fixture
def child():
    # Popen returns at the exec, before Python has run: wait for the child's word that it is up. The kernel's
    # RSS of /proc/PID/stat is its per-CPU counters' approximate sum (batches of 32+ pages each not yet
    # folded in), so a process sampled at its exec read 0 bytes in a CI run (2026-12-04); once Python is up
    # it has faulted in megabytes.
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)",
                             "--max-num-seqs", "24", SECRET], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def wait_for(predicate, timeout=10.0):
    """Bounded wait on a condition the kernel reports (status changes are asynchronous)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_snapshot_identity_title_and_no_command_line(child):
    probe = PsutilProbe(child.pid)
    sample = probe.snapshot(1.0)
    assert sample.alive and sample.root_pid == child.pid
    # the identity is servewatch's own start time (servewatch.proctime: the boot time read once); psutil reads
    # /proc/stat's boot time anew each call, and it moves with every step of the wall clock: on this VM by 1 s
    # between a test worker's first read and a later one (2026-12-03), by 16 s in a clean-clone CI run
    # (2026-12-04: 1796418462.25 against 1796418478.25). So the start is compared with psutil's on the
    # since-boot basis, which no step moves, to the clock tick (10 ms).
    assert sample.root_create_time == proctime.create_time(child.pid)
    since_boot = psutil.Process(child.pid).create_time() - psutil.boot_time()
    assert proctime.started_since_boot(child.pid) == pytest.approx(since_boot, abs=0.011)
    (root,) = sample.members
    assert root.role == "api" and root.pid == child.pid
    assert root.title and SECRET not in repr(sample) and "time.sleep" not in repr(sample)
    assert root.rss_bytes > 0 and root.threads >= 1


def test_slot_limit_read_from_the_command_line_and_dropped(child):
    probe = PsutilProbe(child.pid)
    assert probe.slot_limit() == 24
    assert SECRET not in repr(vars(probe))
    assert slot_limit_from_argv(["x", "--max-running-requests=64"]) == 64
    assert slot_limit_from_argv(["x", "--max-num-seqs", "abc"]) is None


def test_a_slot_limit_given_twice_is_the_last_one_as_the_engines_argparse_reads_it():
    """A lab or wrapper that passes its default and then the user's value (`--max-num-seqs 16 ...
    --max-num-seqs 4`, as a drill plan's args did): the engine runs with 4, and the overload verdict read
    16 ("running 4 below its limit (16) ... nothing is admitted though there is room")."""
    assert slot_limit_from_argv(["vllm", "serve", "--max-num-seqs", "16", "--max-num-seqs=4"]) == 4
    assert slot_limit_from_argv(["x", "--max-running-requests", "8", "--max-running-requests", "2"]) == 2
    assert slot_limit_from_argv(["x", "--max-num-seqs", "8", "--max-num-seqs", "abc"]) == 8


def test_stopped_member_is_reported(child):
    probe = PsutilProbe(os.getpid())
    os.kill(child.pid, signal.SIGSTOP)
    try:
        assert wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_STOPPED)
        sample = probe.snapshot(1.0)
        member = next(m for m in sample.members if m.pid == child.pid)
        assert member.status == "stopped"
    finally:
        os.kill(child.pid, signal.SIGCONT)


def test_exit_of_our_child_with_its_signal(child):
    probe = PsutilProbe(child.pid, exit_status=child.poll)
    child.kill()
    child.wait(timeout=10)
    sample = probe.snapshot(2.0)
    assert not sample.alive and sample.exit_signal == signal.SIGKILL and sample.exit_code is None
    assert sample.error == "no_such_process"


def test_zombie_root_is_not_alive(child):
    probe = PsutilProbe(child.pid)
    child.send_signal(signal.SIGTERM)
    assert wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE)
    sample = probe.snapshot(3.0)
    assert not sample.alive


def test_exit_code_of_a_process_we_did_not_start_is_read_from_its_zombie():
    # The watcher is not the parent (exit_status=None): the code comes from the kernel's wait status of
    # the zombie, and is remembered once the parent reaps it.
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(0.2); sys.exit(7)"])
    try:
        probe = PsutilProbe(proc.pid)
        assert wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE)
        zombie = probe.snapshot(1.0)
        assert not zombie.alive and zombie.exit_code == 7 and zombie.exit_signal is None
    finally:
        proc.wait(timeout=10)
    reaped = probe.snapshot(2.0)
    assert not reaped.alive and reaped.exit_code == 7


def test_signal_of_a_killed_process_is_read_from_its_zombie(child):
    probe = PsutilProbe(child.pid)
    child.kill()
    assert wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE)
    sample = probe.snapshot(3.0)
    assert sample.exit_signal == signal.SIGKILL and sample.exit_code is None


def test_wrong_pid_is_one_line_error():
    with pytest.raises(SourceUnavailable, match=r"^--pid 999999999: no such process$"):
        PsutilProbe(999_999_999)
    with pytest.raises(SourceUnavailable):
        PsutilProbe(0)


def test_reused_pid_shows_a_new_identity(child, monkeypatch):
    probe = PsutilProbe(child.pid)
    first = probe.snapshot(1.0)
    # Another process on the same pid: it started 500 s later (since boot), the start servewatch compares.
    plain = proctime.started_since_boot
    monkeypatch.setattr(proctime, "started_since_boot", lambda pid: plain(pid) + 500.0)
    second = probe.snapshot(2.0)
    assert second.alive and second.root_create_time == first.root_create_time + 500.0
    from servewatch.detectors import run_detectors
    from servewatch.timeline.window import Window
    verdicts = run_detectors(Window.from_samples([first, second]))
    assert [v.name for v in verdicts] == ["target_restarted"]


def test_titles_and_roles():
    assert role_of("VLLM::EngineCore") == "engine_core"
    assert role_of("VLLM::EngineCor") == "engine_core"     # the kernel's 15-byte name
    assert role_of("VLLM::Worker_TP0") == "worker"
    assert role_of("sglang::scheduler_TP1") == "engine_core"
    assert role_of("python3") == "other"

    class Fake:
        def __init__(self, argv, name):
            self._argv, self._name = argv, name

        def cmdline(self):
            return self._argv

        def name(self):
            return self._name

    assert title_of(Fake(["VLLM::Worker_TP0"], "VLLM::Worker_TP")) == "VLLM::Worker_TP0"
    assert title_of(Fake(["/opt/venv/bin/python", "-m", "vllm", "--model", "/models/x"], "python3")) == "python3"


# A stand-in EngineCore: titled like vLLM's, it forks a copy of itself that never execs (as a vfork'd
# `/bin/sh` is before its exec) and waits; the test ends both.
_FORKING_CORE = """
import os, signal
if os.fork() == 0:
    signal.pause()
    os._exit(0)
signal.pause()
"""


def _titled(title: str, code: str, **popen) -> subprocess.Popen:
    """A Python process whose argv[0], hence its title as a process tree reads it, is `title`."""
    return subprocess.Popen([title, "-c", code], executable=sys.executable, **popen)


def test_a_fork_carrying_its_parents_title_is_not_an_engine_process_and_its_exit_is_no_death():
    from servewatch.detectors import run_detectors
    from servewatch.timeline.window import Window

    api = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, signal\n"
                            f"subprocess.Popen(['VLLM::EngineCore', '-c', {_FORKING_CORE!r}], executable=sys.executable)\n"
                            f"signal.pause()"])
    try:
        assert wait_for(lambda: len(psutil.Process(api.pid).children(recursive=True)) == 2)
        core = psutil.Process(api.pid).children()[0]
        (copy,) = core.children()
        probe = PsutilProbe(api.pid)
        first = probe.snapshot(1.0)
        roles = {m.pid: (m.title, m.role) for m in first.members}
        assert roles[core.pid] == ("VLLM::EngineCore", "engine_core")
        assert roles[copy.pid] == ("VLLM::EngineCore", "other")

        copy.kill()
        assert wait_for(lambda: not copy.is_running() or copy.status() == psutil.STATUS_ZOMBIE)
        second = probe.snapshot(2.0)
        assert "engine_dead" not in [v.name for v in run_detectors(Window.from_samples([first, second]))]

        core.kill()
        assert wait_for(lambda: not core.is_running() or core.status() == psutil.STATUS_ZOMBIE)
        third = probe.snapshot(3.0)
        dead = [v for v in run_detectors(Window.from_samples([first, second, third])) if v.name == "engine_dead"]
        assert dead and f"members[{core.pid}]" in {e.field for e in dead[0].evidence}
    finally:
        for proc in psutil.Process(api.pid).children(recursive=True):
            proc.kill()
        api.kill()
        api.wait(timeout=10)


def test_a_titled_process_that_execs_is_read_again():
    # Before its exec a vfork'd child reads with its parent's title; afterwards it is the program it ran.
    proc = _titled("VLLM::Worker_TP0", "import os, sys; sys.stdin.readline(); os.execv('/bin/sleep', ['sleep', '30'])",
                   stdin=subprocess.PIPE, text=True)
    try:
        # Just after an exec the kernel shows an empty command line for an instant.
        assert wait_for(lambda: psutil.Process(proc.pid).cmdline()[:1] == ["VLLM::Worker_TP0"])
        probe = PsutilProbe(proc.pid)
        assert probe.snapshot(1.0).members[0].title == "VLLM::Worker_TP0"
        proc.stdin.write("exec\n")
        proc.stdin.flush()
        assert wait_for(lambda: psutil.Process(proc.pid).name() == "sleep")
        assert probe.snapshot(2.0).members[0].title == "sleep"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_inherited_titles_in_the_tree_a_real_vllm_start_showed():
    # From a bundle of a real vLLM 0.32 start watched with --pid: EngineCore (waiting in a vfork) and, 40 ms
    # old, its child with the same title and the same 587 MB (the shell running lscpu, not yet exec'd).
    from servewatch.sources.process import without_inherited_roles
    from servewatch.timeline.samples import ProcessMember

    def member(pid, role, title, status, rss_mb):
        return ProcessMember(pid=pid, create_time=0.0, role=role, title=title, status=status, rss_bytes=rss_mb << 20)

    members = [member(1131, "api", "python", "sleeping", 595), member(1146, "other", "python", "sleeping", 12),
               member(1147, "engine_core", "VLLM::EngineCore", "disk-sleep", 587),
               member(1157, "engine_core", "VLLM::EngineCore", "running", 587)]
    parents = {1146: 1131, 1147: 1131, 1157: 1147}
    assert [m.role for m in without_inherited_roles(members, parents)] == ["api", "other", "engine_core", "other"]


class _FakePsutil:
    """A psutil with one API process (pid 500) whose worker child's PID 501 can be handed to a new process."""

    NoSuchProcess, AccessDenied, ZombieProcess = psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess
    STATUS_ZOMBIE = psutil.STATUS_ZOMBIE

    def __init__(self):
        self.table = {500: (1000.0, ["python3"], "python3"), 501: (1001.0, ["VLLM::Worker_TP0"], "python3")}
        fake = self

        class Process:
            def __init__(self, pid):
                if pid not in fake.table:
                    raise psutil.NoSuchProcess(pid)
                self.pid = pid
                self._born = fake.table[pid][0]   # psutil binds an object to the process it found

            def _row(self):
                row = fake.table.get(self.pid)
                if row is None or row[0] != self._born:
                    raise psutil.NoSuchProcess(self.pid)
                return row

            def create_time(self):
                return self._row()[0]

            def cmdline(self):
                return self._row()[1]

            def name(self):
                return self._row()[2]

            def status(self):
                self._row()
                return psutil.STATUS_SLEEPING

            def children(self, recursive=False):
                return [Process(pid) for pid in fake.table if pid != 500]

            def oneshot(self):
                import contextlib
                return contextlib.nullcontext()

            def memory_info(self):
                raise psutil.AccessDenied(self.pid)

            num_threads = cpu_percent = memory_info

            def ppid(self):
                return 500

        self.Process = Process


def test_a_reused_child_pid_is_a_new_process_not_the_old_title(monkeypatch):
    import servewatch.sources.process as process

    fake = _FakePsutil()
    monkeypatch.setattr(process, "kernel_name", lambda pid: "python3")   # the same kernel name for both
    monkeypatch.setattr(process, "read_stat", lambda pid: None)          # no /proc for the fake pids: psutil's path
    monkeypatch.setattr(process, "RESCAN_S", 0.0)                        # every snapshot walks the whole tree
    monkeypatch.setitem(sys.modules, "psutil", fake)     # the real probe, over the fake process table
    monkeypatch.setattr(proctime, "create_time", lambda pid: fake.table[pid][0])   # their starts, not /proc's
    probe = PsutilProbe(500)
    before = probe.snapshot(1.0)
    assert [(m.pid, m.title, m.role) for m in before.members] == [(500, "python3", "api"), (501, "VLLM::Worker_TP0",
                                                                                            "worker")]
    fake.table[501] = (1050.0, ["bash", "-c", "do-not-store"], "bash")   # the worker died; a shell got its PID
    after = probe.snapshot(2.0)
    reused = next(m for m in after.members if m.pid == 501)
    assert (reused.create_time, reused.title, reused.role) == (1050.0, "bash", "other")
    assert "do-not-store" not in repr(after)
    from servewatch.detectors import run_detectors
    from servewatch.timeline.window import Window
    verdicts = {v.name: v for v in run_detectors(Window.from_samples([before, after]))}
    assert "engine_dead" in verdicts and "VLLM::Worker_TP0" in verdicts["engine_dead"].why
