"""Values of servewatch/proctime.py (issue 50: a process's start, which identity proofs and restart detection rest on,
found by the mutation rule): the start read from /proc/PID/stat past the last ")" of the command name, psutil's
value where /proc cannot be read, and the errors that name the pid."""

from __future__ import annotations

import io
import os

import psutil
import pytest

from servewatch import proctime as P


def _stat(comm: bytes, start_ticks: int) -> bytes:
    # pid (comm) state ppid ... : starttime is field 22, the 20th after ") "
    after = [b"S", b"1"] + [b"0"] * 17 + [str(start_ticks).encode()] + [b"0"] * 30
    return b"4242 (" + comm + b") " + b" ".join(after) + b"\n"


def test_the_start_is_read_past_the_last_parenthesis(monkeypatch):
    tick = os.sysconf("SC_CLK_TCK")
    stat = _stat(b"a) S 1 2 (b", 123 * tick)            # a command name holding ") " and "(": the last ")" counts
    monkeypatch.setattr(P, "open", lambda path, mode: io.BytesIO(stat), raising=False)
    assert P.started_since_boot(4242) == 123.0


def test_where_proc_cannot_be_read_psutil_says(monkeypatch):
    def refused(path, mode):
        raise PermissionError(path)

    monkeypatch.setattr(P, "open", refused, raising=False)
    pid = os.getppid()                                    # another process than this one: another start
    expected = psutil.Process(pid).create_time() - psutil.boot_time()
    assert P.started_since_boot(pid) == pytest.approx(expected, abs=1e-6) and 0 < expected


def test_a_gone_process_is_named(monkeypatch):
    def gone(path, mode):
        raise FileNotFoundError(path)

    monkeypatch.setattr(P, "open", gone, raising=False)
    with pytest.raises(ProcessLookupError) as lookup:
        P.started_since_boot(4242)
    assert lookup.value.args == (4242,)

    class Proc:
        pid = 4343

    with pytest.raises(psutil.NoSuchProcess) as missing:
        P.of(Proc())
    assert missing.value.pid == 4343
