"""Values of servewatch/sources/logs.py (issue 50 item 8: every log event's time and numbers): the prefix stripped and
its stamp read (vLLM's year-less month-day, SGLang's full date), the line clock's offset, repeated events folded,
and the tail's bounds, rotation and truncation, on a virtual clock. Each figure by hand beside the assertion."""

from __future__ import annotations

import asyncio
import os
from datetime import datetime, timezone

from servewatch.clock import VirtualClock
from servewatch.sources import logs as lg
from servewatch.sources.logs import LineClock, LogTail, parse_line

STATS = ("Engine 000: Avg prompt throughput: 40.0 tokens/s, Avg generation throughput: 3511.2 tokens/s, Running: 8 reqs, "
         "Waiting: 11 reqs, Preemptions: 16, CPU KV cache usage: 95.2%, Prefix cache hit rate: 0.0%")
DEAD = "EngineCore encountered a fatal error."


def _vllm(msg, ts="11-29 13:42:51", process="APIServer"):
    return f"({process} pid=13124) INFO {ts} [loggers.py:335] {msg}"


def _utc(*parts):
    return datetime(*parts, tzinfo=timezone.utc).timestamp()


def test_the_bounds():
    assert (lg.MAX_BYTES_PER_POLL, lg.MAX_LINE_BYTES, LineClock.RESET_S) == (2**20, 64 * 1024, 1800.0)


def test_the_message_its_dialect_first_and_its_stamp():
    msg, candidates, stamp = lg._message("\x1b[1;36m" + _vllm("hello") + "\x1b[0m\r\n")
    assert (msg, candidates[0].name, stamp) == ("hello", "vllm", _utc(2000, 11, 29, 13, 42, 51))
    assert sorted(d.name for d in candidates) == sorted(d.name for d in lg.dialects.registered())
    msg, candidates, stamp = lg._message("[2026-01-01 12:00:00.123 TP0] Decode batch")
    assert (msg, candidates[0].name, stamp) == ("Decode batch", "sglang", _utc(2026, 1, 1, 12, 0, 0))
    msg, candidates, stamp = lg._message("no prefix here\n")
    assert (msg, stamp) == ("no prefix here", None)
    assert [d.name for d in candidates] == [d.name for d in lg.dialects.registered()]


def test_a_stamp_of_february_29_reads_in_a_leap_year_and_a_bad_one_is_none():
    assert lg._message(_vllm("x", ts="02-29 00:00:01"))[2] == _utc(2000, 2, 29, 0, 0, 1)
    assert lg._message(_vllm("x", ts="13-01 00:00:00"))[2] is None
    assert lg._message("[2026-02-30 00:00:00] x")[2] is None


def test_the_line_clock_maps_stamps_by_the_smallest_gap_seen():
    clock = LineClock()
    assert clock.offset is None and clock.time(100.0, 555.0) == 555.0
    clock.read([], 500.0)
    assert clock.offset is None
    clock.read([100.0, 104.0], 510.0)                 # the newest stamp read 406 s after it
    assert clock.offset == 406.0
    assert clock.time(100.0, 510.0) == 506.0          # the older line keeps its own second
    assert clock.time(None, 510.0) == 510.0
    assert clock.time(200.0, 510.0) == 510.0          # never later than the reading
    clock.read([110.0], 520.0)                        # 410: a larger gap (a late read) is not taken
    assert clock.offset == 406.0
    clock.read([115.0], 520.0)                        # 405: smaller, taken
    assert clock.offset == 405.0
    clock.read([115.0 - 1800.0], 520.0)               # exactly RESET_S further behind: kept
    assert clock.offset == 405.0
    clock.read([115.0 - 1800.0], 520.0 + 0.5)         # 2205.5: more than RESET_S behind: a new zone
    assert clock.offset == 2205.5


def test_the_reset_is_strictly_past_its_bound():
    clock = LineClock()
    clock.read([0.0], 10.0)
    clock.read([0.0], 1810.0)                         # 1800 further: not a reset
    assert clock.offset == 10.0
    clock.read([0.0], 1810.001)
    assert clock.offset == 1810.001


def test_parse_line_gives_each_finding_at_the_time_given():
    stats, pre = parse_line(_vllm(STATS), 5.0)
    assert (stats.t, stats.kind, pre.kind, pre.fields) == (5.0, "stats", "preemption",
                                                           {"dialect": "vllm", "count": 16})
    assert stats.fields["dialect"] == "vllm" and stats.fields["running"] == 8
    assert parse_line("", 1.0) == [] and parse_line("nothing known", 1.0) == []
    assert lg._read_line(_vllm("nothing known")) == (_utc(2000, 11, 29, 13, 42, 51), None, [])
    assert lg._read_line(_vllm("")) == (_utc(2000, 11, 29, 13, 42, 51), None, [])


def _tail(tmp_path, clock, **kw):
    return LogTail(str(tmp_path / "server.log"), clock, 1.0, **kw)


def _poll(tail):
    return asyncio.run(tail.poll())


def test_the_tail_times_each_line_by_its_stamp_and_folds_repeats(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(_vllm("old: never read", ts="11-29 13:00:00") + "\n")
    clock = VirtualClock(1_800_000_000.0)
    tail = _tail(tmp_path, clock)
    assert (tail.kind, tail.interval) == ("log", 1.0)
    assert _poll(tail) == []                                   # history before watching is not ours
    with open(path, "a") as f:
        f.write(_vllm(STATS, ts="11-29 13:42:40") + "\n" + _vllm(DEAD, ts="11-29 13:42:45", process="EngineCore")
                + "\n" + _vllm(DEAD, ts="11-29 13:42:45", process="EngineCore") + "\n"
                + _vllm(DEAD, ts="11-29 13:42:50", process="EngineCore") + "\n" + "partial")
    clock.advance(30.0)
    events = _poll(tail)
    t = clock.now()
    # the newest stamp (13:42:50) read at t: offset t - 13:42:50; 13:42:40 → t - 10
    # the same death said three times in a row is one event (the first)
    assert [(e.kind, e.t) for e in events] == [("stats", t - 10), ("preemption", t - 10), ("engine_dead", t - 5)]
    assert tail.lines_read == 4 and tail.lines_dropped == 0
    with open(path, "a") as f:
        f.write(" line\n")
    clock.advance(1.0)
    assert _poll(tail) == [] and tail.lines_read == 5


def test_the_tail_from_the_start_and_lines_without_a_stamp(tmp_path):
    path = tmp_path / "server.log"
    path.write_bytes(b"Engine 000: x\n" + _vllm(STATS).encode() + b"\n\xff\n")
    clock = VirtualClock(100.0)
    tail = _tail(tmp_path, clock, from_start=True)
    events = _poll(tail)
    assert [(e.kind, e.t) for e in events] == [("stats", 100.0), ("preemption", 100.0)]
    assert tail.lines_read == 3


def test_rotation_truncation_and_a_missing_file(tmp_path):
    path = tmp_path / "server.log"
    clock = VirtualClock(100.0)
    tail = _tail(tmp_path, clock)
    (missing,) = _poll(tail)
    assert (missing.t, missing.kind, missing.fields) == (100.0, "unavailable", {"error": "no_such_file"})
    assert _poll(tail) == []                                   # said once
    path.write_text(_vllm(STATS) + "\n")                       # appears later: read from its start
    assert [e.kind for e in _poll(tail)] == ["stats", "preemption"]
    os.rename(path, tmp_path / "server.log.1")
    path.write_text(_vllm(DEAD, process="EngineCore") + "\n")  # rotated: the new file from its start
    assert [e.kind for e in _poll(tail)] == ["engine_dead"]
    path.write_text("")                                        # truncated (and shorter than read before)
    with open(path, "a") as f:
        f.write(_vllm(DEAD, process="E") + "\n")
    assert [e.kind for e in _poll(tail)] == ["engine_dead"]
    path.unlink()
    clock.advance(2.0)
    assert [(e.t, e.fields) for e in _poll(tail)] == [(102.0, {"error": "no_such_file"})]
    path.mkdir()
    assert _poll(tail) == []                                   # still unavailable: not said again
    tail.close()
    assert tail._handle is None


def test_an_unreadable_file_is_said_so(tmp_path):
    (tmp_path / "server.log").mkdir()
    (event,) = _poll(_tail(tmp_path, VirtualClock(5.0)))
    assert event.fields == {"error": "unreadable"}


def test_each_poll_reads_at_most_its_bound_and_long_lines_are_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(lg, "MAX_LINE_BYTES", 64)               # (64 KiB lines through every grammar: 90 s)
    path = tmp_path / "server.log"
    path.write_bytes(b"")
    tail = _tail(tmp_path, VirtualClock(1.0), max_bytes_per_poll=10)
    _poll(tail)
    path.write_bytes(b"abcdefghi\nrest\n")
    _poll(tail)
    assert tail.lines_read == 1 and tail._partial == b""       # 10 bytes: one line and its newline
    _poll(tail)
    assert tail.lines_read == 2
    exact = b"x" * lg.MAX_LINE_BYTES
    with open(path, "ab") as f:
        f.write(exact + b"\n" + exact + b"y\n")
    tail._max = 2**20
    _poll(tail)
    assert (tail.lines_read, tail.lines_dropped) == (3, 1)
    with open(path, "ab") as f:
        f.write(exact)
    _poll(tail)
    assert tail._partial == exact and tail.lines_dropped == 1  # a partial line at the bound is kept
    with open(path, "ab") as f:
        f.write(b"z")
    _poll(tail)
    assert tail._partial == b"" and tail.lines_dropped == 2    # past it: dropped
    with open(path, "ab") as f:
        f.write(b"tail\n")
    _poll(tail)
    assert (tail.lines_read, tail.lines_dropped) == (4, 2)


def test_only_the_line_end_is_stripped_and_a_stamp_no_format_reads_is_none():
    # the message keeps its own last characters (only \r and \n are the line's end)
    assert lg._message("ends in X\r\n")[0] == "ends in X"
    assert lg._message(_vllm("ends in X\n"))[0] == "ends in X"
    # llama.cpp's prefix has a stamp (seconds since start) but no clock format: no stamp, the message still read
    msg, candidates, stamp = lg._message("0.01.234.567 I srv  update_slots: all slots are idle\n")
    assert (msg, candidates[0].name, stamp) == ("srv  update_slots: all slots are idle", "llamacpp", None)


def test_a_dialect_without_a_prefix_is_tried_last_and_not_matched(monkeypatch):
    from types import SimpleNamespace
    registered = lg.dialects.registered
    bare = SimpleNamespace(name="bare", log_prefix=None, log_clock_format=None)
    monkeypatch.setattr(lg.dialects, "registered", lambda: (bare, *registered()))
    msg, candidates, stamp = lg._message("no prefix here\n")
    assert (msg, stamp, candidates[0].name) == ("no prefix here", None, "bare")
    msg, candidates, stamp = lg._message(_vllm("hello"))
    assert (msg, [d.name for d in candidates][:2]) == ("hello", ["vllm", "bare"])


def test_a_stamp_is_read_as_utc_whatever_the_machine_zone(monkeypatch):
    import time
    monkeypatch.setenv("TZ", "EST+5")                          # a POSIX zone 5 h behind UTC (no tz database needed)
    time.tzset()
    try:
        assert lg._message(_vllm("x", ts="11-29 13:42:51"))[2] == _utc(2000, 11, 29, 13, 42, 51)
        assert lg._message("[2026-01-01 12:00:00] x")[2] == _utc(2026, 1, 1, 12, 0, 0)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_repeat_is_folded_but_what_follows_it_on_its_line_is_kept(tmp_path, monkeypatch):
    path = tmp_path / "server.log"
    path.write_text("one\ntwo\n")
    found = {"one": [("engine_dead", {"n": 1})],
             "two": [("engine_dead", {"n": 1}), ("stats", {"running": 3}), ("stats", {"running": 3})]}
    monkeypatch.setattr(lg, "_read_line", lambda line: (None, "vllm", found[line]))
    events = _poll(_tail(tmp_path, VirtualClock(7.0), from_start=True))
    assert [(e.t, e.kind, e.fields) for e in events] == [(7.0, "engine_dead", {"dialect": "vllm", "n": 1}),
                                                         (7.0, "stats", {"dialect": "vllm", "running": 3})]


def test_a_rotated_file_longer_than_the_old_one_is_read_from_its_start(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("")
    tail = _tail(tmp_path, VirtualClock(1.0))
    assert _poll(tail) == []
    with open(path, "a") as f:
        f.write("short\n")
    assert _poll(tail) == [] and tail.lines_read == 1          # 6 bytes read of the old file
    os.rename(path, tmp_path / "server.log.1")
    path.write_text(_vllm(DEAD, process="EngineCore") + "\n")  # a new inode, longer than 6 bytes
    assert [e.kind for e in _poll(tail)] == ["engine_dead"]
    assert tail.lines_read == 2
