"""A step of the wall clock (NTP) must not make a process look like another one: psutil's create_time()
moves with the clock, the start read from /proc does not. Simulated by making psutil report what it reports
after a one-hour step (the machine's clock is never touched)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from servewatch import proctime
from servewatch.actions.tree import Member, _same, snapshot
from servewatch.sources.process import PsutilProbe

STEP_S = 3600.0


@pytest.fixture
def stepped(monkeypatch):
    """From the call on, psutil says what it says after the wall clock stepped an hour forward. servewatch's
    boot time is read afresh for the test: read once per process, it can sit a whole second from psutil's when
    /proc/stat's boot time (whole seconds) has moved since (1 s on this VM after 15 h up, 2026-12-03)."""
    monkeypatch.setattr(proctime, "_boot", None)

    def step():
        plain_create, plain_boot = psutil.Process.create_time, psutil.boot_time
        monkeypatch.setattr(psutil.Process, "create_time", lambda self: plain_create(self) + STEP_S)
        monkeypatch.setattr(psutil, "boot_time", lambda: plain_boot() + STEP_S)
    return step


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_the_start_agrees_with_psutil_until_a_step_and_does_not_move_with_it(child, stepped):
    before = proctime.create_time(child.pid)
    assert before == pytest.approx(psutil.Process(child.pid).create_time(), abs=0.011)
    stepped()
    assert proctime.create_time(child.pid) == before
    assert psutil.Process(child.pid).create_time() == pytest.approx(before + STEP_S, abs=0.011)   # psutil moved


def test_a_step_is_no_restart_of_the_watched_server(child, stepped):
    probe = PsutilProbe(child.pid)
    first = probe.snapshot(1.0)
    stepped()
    second = probe.snapshot(2.0)
    assert second.alive and second.root_create_time == first.root_create_time


def test_a_step_does_not_make_guard_take_its_server_for_another(child, stepped):
    [member] = snapshot(child.pid)
    stepped()
    assert _same(member) is not None                          # still the server: a signal may go to it
    assert snapshot(child.pid, member.create_time) != ()


def test_a_gone_process_is_lookup_error_and_psutils_no_such_process_through_of():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=10)
    with pytest.raises(ProcessLookupError):
        proctime.create_time(dead.pid)
    with pytest.raises(psutil.NoSuchProcess):
        proctime.of(type("Gone", (), {"pid": dead.pid})())
    assert proctime.started_since_boot(os.getpid()) > 0
