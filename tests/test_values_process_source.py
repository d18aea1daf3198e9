"""Values of servewatch/sources/process.py's figures (issue 50: found by the mutation rule): a member's state, parent,
CPU seconds, threads and RSS read from /proc/PID/stat past the last ")" of its name, and its CPU % between two
reads of the same process. Each figure computed by hand beside the assertion."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import pytest

from servewatch.sources import process as S


def stat_bytes(comm: bytes, state: bytes, ppid: int, utime: int, stime: int, threads: int, rss_pages: int) -> bytes:
    # after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
    # priority nice num_threads itrealvalue starttime vsize rss ...
    after = [state, str(ppid).encode()] + [b"0"] * 9 + [str(utime).encode(), str(stime).encode()] + [b"0"] * 4 \
        + [str(threads).encode(), b"0", b"12345", b"999", str(rss_pages).encode()] + [b"0"] * 20
    return b"77 (" + comm + b") " + b" ".join(after) + b"\n"


@pytest.mark.parametrize("letter, word", [(b"R", "running"), (b"S", "sleeping"), (b"D", "disk-sleep"),
                                          (b"T", "stopped"), (b"t", "tracing-stop"), (b"Z", "zombie"), (b"Q", "Q")])
def test_a_stat_line_read(monkeypatch, letter, word):
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    line = stat_bytes(b"vllm) (x", letter, 41, 3 * tick, tick // 2, 17, 1000)
    monkeypatch.setattr(S, "open", lambda path, mode: io.BytesIO(line), raising=False)
    # CPU seconds: user 3 s + system 0.5 s; RSS 1,000 pages
    assert S.read_stat(77) == (word, 41, 3.5, 17, 1000 * page)


def test_a_stat_line_that_cannot_be_read(monkeypatch):
    monkeypatch.setattr(S, "open", lambda path, mode: io.BytesIO(b"77 (x) S 1"), raising=False)
    assert S.read_stat(77) is None                                   # too short: not a reading

    def gone(path, mode):
        raise FileNotFoundError(path)

    monkeypatch.setattr(S, "open", gone, raising=False)
    import psutil

    with pytest.raises(psutil.NoSuchProcess) as missing:
        S.read_stat(77)
    assert missing.value.pid == 77


def test_cpu_percent_between_two_reads(monkeypatch):
    probe = S.PsutilProbe(os.getpid())
    reads = iter([("sleeping", 1, 10.0, 4, 4096), ("running", 1, 10.5, 5, 8192), ("zombie", 1, 10.5, 5, 8192)])
    clock = iter([100.0, 102.0, 102.0])
    monkeypatch.setattr(S, "read_stat", lambda pid: next(reads))
    monkeypatch.setattr(S, "time", SimpleNamespace(monotonic=lambda: next(clock)))    # this module's clock only
    monkeypatch.setattr(probe, "_title", lambda proc, key: "python worker")
    proc = probe._procs[(probe.pid, probe.create_time)]
    first = probe._member(proc, "engine")
    # no earlier read: 0 %; then 0.5 CPU seconds over 2.0 s: 25.0 %
    assert (first.cpu_percent, first.status, first.threads, first.rss_bytes, first.ppid, first.role) == \
           (0.0, "sleeping", 4, 4096, 1, "engine")
    second = probe._member(proc, None)
    assert (second.cpu_percent, second.status, second.threads, second.rss_bytes, second.title) == \
           (25.0, "running", 5, 8192, "python worker")
    # no time passed since: 0 %, not a division by nothing; a zombie has no threads or memory of its own
    third = probe._member(proc, None)
    assert (third.cpu_percent, third.status, third.threads, third.rss_bytes) == (0.0, "zombie", None, None)
    assert (second.pid, second.create_time) == (probe.pid, probe.create_time)
