"""Values of servewatch/sources/flight_recorder.py (issue 50 item 8: the rank behind and the mismatch that
collective_hang reports come from here): every field a dump is read into, each rank's position, the words, the
bounds, and collect's wait on a virtual clock. Each figure written by hand beside the assertion."""

from __future__ import annotations

import errno
import json
import os

import pytest

from servewatch.sources import flight_recorder as fr


def _entry(seq, op="all_reduce", sizes=((8,),), retired=True, state="completed", pg=("0", "default_pg"),
           backend="nccl", p2p=False, **extra):
    raw = {"collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": p2p, "profiling_name": f"{backend}:{op}",
           "process_group": list(pg), "input_sizes": [list(s) for s in sizes],
           "output_sizes": [list(s) * 2 for s in sizes], "state": state, "retired": retired}
    raw.update(extra)
    return raw


def _doc(entries, version="2.10", config=None, status=None, **extra):
    doc = {"version": version, "comm_lib_version": "2.27.3",
           "pg_config": {"0": {"desc": "default_pg", "ranks": "[0, 1]"}} if config is None else config,
           "pg_status": {} if status is None else status, "entries": entries}
    doc.update(extra)
    return json.dumps(doc).encode()


def test_the_bounds_and_versions():
    assert fr.MAX_DUMP_BYTES == 32 * 1024 * 1024
    assert fr.KNOWN_VERSIONS == ("2.",)


def test_every_field_of_an_entry_is_read():
    dump = fr.parse_dump(_doc([_entry(3, sizes=((2, 4), (8,)), state="started", retired=False),
                               _entry(1, op="broadcast", backend="gloo")]))
    assert (dump.version, dump.comm_lib_version, dump.known_version) == ("2.10", "2.27.3", True)
    (group,) = dump.groups.values()
    assert (group.name, group.desc, group.ranks, group.status) == ("0", "default_pg", (0, 1), {})
    assert group.entries == (
        fr.Entry(1, "broadcast", "gloo", ((8,),), ((8, 8),), "completed", True, False),
        fr.Entry(3, "all_reduce", "nccl", ((2, 4), (8,)), ((2, 4, 2, 4), (8, 8)), "started", False, False))
    assert fr.collectives_held(dump) == 2


def test_an_entry_with_fields_missing_reads_as_empty():
    dump = fr.parse_dump(json.dumps({"entries": [{"collective_seq_id": 7}, "not an entry", {"x": 1}]}).encode())
    assert (dump.version, dump.comm_lib_version, dump.known_version) == ("", "", False)
    assert list(dump.groups) == [""]
    assert dump.groups[""] == fr.GroupTrace("", "", None, (fr.Entry(7, "", "", (), (), "", False, False),), {})
    assert fr.parse_dump(b'{"entries": [{"collective_seq_id": 1, "process_group": ["9"], '
                         b'"profiling_name": "send"}]}').groups["9"].entries[0].op == "send"


def test_p2p_and_unsequenced_entries_are_left_out():
    dump = fr.parse_dump(_doc([_entry(1), _entry(2, p2p=True), {**_entry(3), "collective_seq_id": "3"},
                               {**_entry(4), "collective_seq_id": None}]))
    assert [e.seq for e in dump.groups["0"].entries] == [1]
    assert fr.collectives_held(fr.parse_dump(_doc([]))) == 0


def test_groups_from_the_status_alone_and_the_config_fallbacks():
    config = {"0": {"desc": "default_pg", "ranks": "[0, 1, 2]"}, "1": {"desc": "tp", "ranks": "not json"},
              "2": "not a dict", "3": {"desc": "x", "ranks": "5"}}
    status = {"4": {"last_enqueued_collective": 9}, "0": "not a dict"}
    dump = fr.parse_dump(_doc([_entry(1, pg=("1", "")), _entry(2, pg=("0", "mine"))], config=config, status=status))
    assert sorted(dump.groups) == ["0", "1", "4"]
    assert (dump.groups["0"].desc, dump.groups["0"].ranks, dump.groups["0"].status) == ("mine", (0, 1, 2), {})
    assert (dump.groups["1"].desc, dump.groups["1"].ranks) == ("tp", None)        # the config's desc, no ranks
    assert (dump.groups["4"].entries, dump.groups["4"].status) == ((), {"last_enqueued_collective": 9})
    assert (dump.groups["4"].desc, dump.groups["4"].ranks) == ("", None)
    assert fr._ranks(config, "2") is None and fr._ranks(config, "3") is None
    assert fr._desc(config, "2") == "" and fr._desc(config, "9") == ""
    # gloo's default group configured under "" and entries under "0": the only group configured is it
    only = {"": {"desc": "default_pg", "ranks": "[0, 1]"}}
    assert fr._ranks(only, "0") == (0, 1)
    assert fr._ranks({**only, "5": {}}, "0") is None
    assert fr.parse_dump(_doc([], config=[], status=[])).groups == {}


@pytest.mark.parametrize("doc, words", [
    (b"[1, 2]", "not a Flight Recorder JSON dump (no entries list)"),
    (b'{"entries": {}}', "not a Flight Recorder JSON dump (no entries list)"),
    (b"\xff\xfe{", "not a Flight Recorder JSON dump (not UTF-8 text)"),
    (b"{", "not a Flight Recorder JSON dump (not valid JSON)"),
    (b"\x80\x04}", fr.PICKLE_WORDS),
])
def test_bad_dumps_in_one_line(doc, words):
    with pytest.raises(fr.DumpError) as bad:
        fr.parse_dump(doc)
    assert str(bad.value) == words


def test_the_size_bound_is_inclusive():
    at = b"{}" + b" " * (fr.MAX_DUMP_BYTES - 2)
    assert fr.parse_dump(at).groups == {}
    with pytest.raises(fr.DumpError) as big:
        fr.parse_dump(at + b" ")
    assert str(big.value) == "dump of 33,554,433 bytes is over the 33,554,432-byte bound: not read"
    assert fr.parse_dump(b'{"entries": []}').known_version is False


def test_an_entry_is_completed_when_retired_or_completed_and_started_when_started_or_completed():
    e = lambda state, retired: fr.Entry(1, "x", "", (), (), state, retired, False)
    assert [e(s, r).completed for s, r in [("scheduled", True), ("completed", False), ("started", False)]] == [
        True, True, False]
    assert [e(s, False).started for s in ("scheduled", "started", "completed")] == [False, True, True]


def test_positions_and_the_words_of_each():
    trace = fr.GroupTrace("0", "", None, (
        fr.Entry(1, "all_reduce", "", (), (), "completed", True, False),
        fr.Entry(2, "all_gather", "", (), (), "started", False, False),
        fr.Entry(3, "broadcast", "", (), (), "scheduled", False, False)), {})
    assert fr._position(4, trace) == fr.Position(4, 1, 2, 3, "broadcast")
    assert fr._position(4, None) == fr.Position(4, None, None, None, None)
    assert fr._position(4, fr.GroupTrace("0", "", None, (), {})) == fr.Position(4, None, None, None, None)
    assert fr._at(fr.Position(0, None, None, None, None)) == "no collective"
    assert fr._at(fr.Position(0, 3, 3, 3, None)) == "collective 3 (completed)"
    assert fr._at(fr.Position(0, 2, 2, 3, "broadcast")) == "collective 3 (broadcast, not completed)"
    entry = fr.Entry(1, "all_reduce", "", ((2, 3), (4,), 5), (), "", False, False)
    assert fr._describe(entry) == "all_reduce [2x3,4,5]"
    assert fr.Mismatch(5, {1: "b", 0: "a"}).words() == "collective 5: rank 0 a, rank 1 b"


def _dumps(*per_rank, version="2.10", ranks="[0, 1, 2]"):
    config = {"0": {"desc": "default_pg", "ranks": ranks}}
    return {r: fr.parse_dump(_doc(entries, version=version, config=config)) for r, entries in enumerate(per_rank)}


def test_two_ranks_behind_one_with_no_collective_and_the_words():
    analysis = fr.analyse(_dumps([_entry(1), _entry(2, retired=False, state="scheduled", op="all_gather")],
                                 [_entry(1)], []))
    (g,) = analysis.groups
    assert (g.behind, g.waiting, g.seq, g.op, g.missing) == ((1, 2), (0,), 2, "all_gather", ())
    assert analysis.behind == (("0", 1, 2), ("0", 2, 2))
    assert g.why() == ("group 0 (default_pg): rank 1 at collective 1 (completed), rank 2 at no collective — behind; "
                       "rank 0 waiting in collective 2 (all_gather)")
    assert analysis.why() == "Flight Recorder: " + g.why()
    assert analysis.notes == () and not analysis.mismatched


def test_all_waiting_at_the_frontier_is_nobody_behind():
    analysis = fr.analyse(_dumps([_entry(1), _entry(2, retired=False, state="started")],
                                 [_entry(1), _entry(2, retired=False, state="started")], ranks="[0, 1]"))
    (g,) = analysis.groups
    assert (g.behind, g.waiting, g.seq, g.op) == ((), (), None, None)
    assert analysis.why() == "Flight Recorder: group 0 (default_pg): ranks agree, last completed collective 1"
    # a rank behind a frontier that every rank completed is no rank behind (nobody waits)
    done = fr.analyse(_dumps([_entry(1), _entry(2)], [_entry(1)], ranks="[0, 1]"))
    assert done.groups[0].behind == () and done.groups[0].waiting == ()
    assert done.why() == "Flight Recorder: group 0 (default_pg): ranks agree, last completed collective 1/2"


def test_the_ranks_agree_words_order_none_first_and_no_group():
    g = fr.GroupFinding("1", "", (fr.Position(0, 3, None, 3, None), fr.Position(1, None, None, None, None),
                                  fr.Position(2, 1, None, 1, None)))
    assert g.why() == "group 1: ranks agree, last completed collective None/1/3"
    assert fr.Analysis(groups=()).why() == "Flight Recorder: no collectives recorded"
    assert fr.analyse({}) == fr.Analysis(groups=(), notes=())


def test_members_with_no_dump_and_mismatches_past_the_third():
    entries0 = [_entry(s, sizes=((8,),)) for s in range(1, 6)]
    entries1 = [_entry(s, sizes=((16,),)) for s in range(1, 6)]
    analysis = fr.analyse(_dumps(entries0, entries1, ranks="[0, 1, 2, 3]"))
    (g,) = analysis.groups
    assert g.missing == (2, 3)
    assert [m.seq for m in g.mismatches] == [1, 2, 3, 4, 5]
    assert analysis.mismatched and analysis.behind == ()
    assert g.why() == ("group 0 (default_pg): mismatch at collective 1: rank 0 all_reduce [8], rank 1 all_reduce [16]; "
                       "collective 2: rank 0 all_reduce [8], rank 1 all_reduce [16]; "
                       "collective 3: rank 0 all_reduce [8], rank 1 all_reduce [16]; "
                       "group 0 (default_pg): no dumps from ranks 2, 3".replace("no dumps from", "no dump from"))
    one = fr.analyse(_dumps([_entry(1)], ranks="[0, 1]")).groups[0]
    assert one.missing == (1,) and one.why().endswith("; group 0 (default_pg): no dump from rank 1")


def test_a_collective_one_rank_holds_is_no_mismatch_and_output_sizes_do_not_count():
    a = [_entry(1), _entry(2, sizes=((4,),))]
    b = [{**_entry(1), "output_sizes": [[99]]}]
    g = fr.analyse(_dumps(a, b, ranks="[0, 1]")).groups[0]
    assert g.mismatches == ()
    assert fr._mismatches({0: None, 1: fr.parse_dump(_doc(a)).groups["0"]}) == ()


def test_ranks_outside_the_groups_members_are_left_out_and_groups_without_members_take_every_dump():
    config = {"0": {"desc": "tp", "ranks": "[1]"}}
    dumps = {r: fr.parse_dump(_doc([_entry(1)], config=config)) for r in (0, 1)}
    (g,) = fr.analyse(dumps).groups
    assert [p.rank for p in g.positions] == [1] and g.missing == ()
    nomembers = {r: fr.parse_dump(_doc([_entry(1, pg=("7", ""))], config={})) for r in (0, 1)}
    (g,) = fr.analyse(nomembers).groups
    assert [p.rank for p in g.positions] == [0, 1] and g.missing == () and g.desc == ""


def test_the_desc_comes_from_any_rank_that_has_one():
    d0 = fr.parse_dump(_doc([_entry(1, pg=("0", ""))], config={}))
    d1 = fr.parse_dump(_doc([_entry(1, pg=("0", "named"))], config={}))
    assert fr.analyse({0: d0, 1: d1}).groups[0].desc == "named"
    assert fr.analyse({0: d0, 1: d0}).groups[0].desc == ""


def test_a_group_only_some_ranks_hold():
    d0 = fr.parse_dump(_doc([_entry(1), _entry(1, pg=("1", "tp"))], config={}))
    d1 = fr.parse_dump(_doc([_entry(1)], config={}))
    groups = fr.analyse({0: d0, 1: d1}).groups
    assert [g.group for g in groups] == ["0", "1"]
    assert [p.rank for p in groups[1].positions] == [0, 1]
    assert groups[1].positions[1] == fr.Position(1, None, None, None, None)


def test_unknown_versions_are_noted_per_rank():
    dumps = {1: fr.parse_dump(b'{"entries": []}'), 0: fr.parse_dump(_doc([], version="3.0")),
             2: fr.parse_dump(_doc([]))}
    assert fr.analyse(dumps).notes == (
        "rank 0: Flight Recorder format 3.0 is not one servewatch knows; read as 2.x",
        "rank 1: Flight Recorder format (none) is not one servewatch knows; read as 2.x")


def test_the_paths_of_the_pipe_and_the_dump():
    assert fr.pipe_path("/run/x/pipe_", 3) == "/run/x/pipe_3.pipe"
    assert fr.dump_path("/run/x/fr_", 3) == "/run/x/fr_3"


def test_request_dump_words(tmp_path, monkeypatch):
    assert fr.request_dump(str(tmp_path / "none")) == "no dump trigger pipe (the process has not made it)"
    (tmp_path / "file").write_text("")
    assert fr.request_dump(str(tmp_path / "file")) == "the dump trigger is not a pipe: not written"
    pipe = tmp_path / "p.pipe"
    os.mkfifo(pipe)
    assert fr.request_dump(str(pipe)) == "no process reads the dump trigger pipe: not written"
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert fr.request_dump(str(pipe)) is None
        assert os.read(reader, 10) == b"1"

        def refused(*_a, **_k):
            raise PermissionError(errno.EACCES, "denied")
        monkeypatch.setattr(fr.os, "open", refused)
        assert fr.request_dump(str(pipe)) == "dump trigger pipe not opened (EACCES)"
        monkeypatch.undo()

        def full(*_a):
            raise BlockingIOError(errno.EAGAIN, "full")
        monkeypatch.setattr(fr.os, "write", full)
        assert fr.request_dump(str(pipe)) == "the dump trigger pipe is full (a request is already pending)"

        def broken(*_a):
            raise OSError(errno.EPIPE, "broken")
        monkeypatch.setattr(fr.os, "write", broken)
        assert fr.request_dump(str(pipe)) == "dump trigger pipe not written (EPIPE)"
    finally:
        os.close(reader)


def test_read_dump_bounds_and_the_earlier_file(tmp_path):
    path = tmp_path / "fr_0"
    assert fr.read_dump(str(path)) is None
    assert fr._identity(str(path)) is None
    path.write_bytes(b"12345")
    before = fr._identity(str(path))
    st = os.stat(path)
    assert before == (st.st_ino, st.st_mtime_ns, 5)
    assert fr.read_dump(str(path), unlike=before) is None
    assert fr.read_dump(str(path), unlike=(st.st_ino, st.st_mtime_ns, 4)) == b"12345"
    assert fr.read_dump(str(path), max_bytes=5) == b"12345"
    with pytest.raises(fr.DumpError) as big:
        fr.read_dump(str(path), max_bytes=4)
    assert str(big.value) == "dump of 5 bytes is over the 4-byte bound: not read"


class _Clock:
    def __init__(self):
        self.t = 100.0
        self.pauses = []

    def __call__(self):
        return self.t

    def pause(self, s):
        self.pauses.append(s)
        self.t += s


def test_collect_waits_on_its_clock_until_the_timeout(tmp_path):
    clock = _Clock()
    pipes = {}
    for r in (0, 1, 2):
        os.mkfifo(tmp_path / f"p{r}.pipe")
        pipes[r] = os.open(tmp_path / f"p{r}.pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        (tmp_path / "d0").write_bytes(_doc([_entry(1)]))          # rank 0's dump is there at once
        (tmp_path / "d2").write_bytes(b"{")                        # rank 2's is still being written
        ranks = {r: (str(tmp_path / f"p{r}.pipe"), str(tmp_path / f"d{r}")) for r in (0, 1, 2)}
        ranks[3] = (str(tmp_path / "nopipe"), str(tmp_path / "d3"))
        # rank 0's file existed before the request: it is the earlier dump, not this one
        got = fr.collect(ranks, timeout_s=0.5, poll_s=0.125, clock=clock, pause=clock.pause)
        assert got.dumps == {}
        assert got.failures == {0: "no dump within 0.5 s of the request", 1: "no dump within 0.5 s of the request",
                                2: "no dump within 0.5 s of the request",
                                3: "no dump trigger pipe (the process has not made it)"}
        assert clock.pauses == [0.125] * 4 and got.seconds == 0.5
    finally:
        for fd in pipes.values():
            os.close(fd)


def test_collect_reads_the_new_dumps_and_says_a_half_written_one(tmp_path):
    clock = _Clock()
    fds = []
    for r in (0, 1):
        os.mkfifo(tmp_path / f"p{r}.pipe")
        fds.append(os.open(tmp_path / f"p{r}.pipe", os.O_RDONLY | os.O_NONBLOCK))
    ranks = {r: (str(tmp_path / f"p{r}.pipe"), str(tmp_path / f"d{r}")) for r in (0, 1)}

    def pause(s):
        clock.pause(s)
        if len(clock.pauses) == 1:
            (tmp_path / "d0").write_bytes(_doc([_entry(1), _entry(2)]))
            (tmp_path / "d1").write_bytes(b"{")
    try:
        got = fr.collect(ranks, timeout_s=1.0, poll_s=0.25, clock=clock, pause=pause)
    finally:
        for fd in fds:
            os.close(fd)
    assert list(got.dumps) == [0] and fr.collectives_held(got.dumps[0]) == 2
    assert got.failures == {1: "not a Flight Recorder JSON dump (not valid JSON)"}
    assert clock.pauses == [0.25] * 4 and got.seconds == 1.0
    assert fr.Collected({}, {}, 0.0).failures == {}


def test_collect_gives_up_on_a_dump_over_the_bound_at_once(tmp_path, monkeypatch):
    clock = _Clock()
    os.mkfifo(tmp_path / "p0.pipe")
    fd = os.open(tmp_path / "p0.pipe", os.O_RDONLY | os.O_NONBLOCK)
    (tmp_path / "d0").write_bytes(b"\x80\x04.")
    try:
        monkeypatch.setattr(fr, "_identity", lambda path: None)
        got = fr.collect({0: (str(tmp_path / "p0.pipe"), str(tmp_path / "d0"))}, clock=clock, pause=clock.pause)
    finally:
        os.close(fd)
    assert got.failures == {0: fr.PICKLE_WORDS} and clock.pauses == [] and got.seconds == 0.0


def test_analyse_files_reads_each_and_says_what_it_could_not(tmp_path):
    (tmp_path / "r0").write_bytes(_doc([_entry(1)]))
    (tmp_path / "r1").write_bytes(b"{")
    analysis, failures = fr.analyse_files([(0, str(tmp_path / "r0")), (1, str(tmp_path / "r1")),
                                           (2, str(tmp_path)), (3, str(tmp_path / "none"))])
    assert failures == {1: "not a Flight Recorder JSON dump (not valid JSON)",
                        2: f"{tmp_path}: not read (Is a directory)",
                        3: f"{tmp_path / 'none'}: not read (No such file or directory)"}
    assert [p.rank for p in analysis.groups[0].positions] == [0]
    assert analysis.groups[0].missing == (1,)


def test_only_the_groups_with_a_rank_behind_or_a_mismatch_are_said_when_there_are_any():
    config = {"0": {"desc": "default_pg", "ranks": "[0, 1]"}, "1": {"desc": "tp", "ranks": "[0, 1]"}}
    d0 = fr.parse_dump(_doc([_entry(1), _entry(2, retired=False, state="started"), _entry(1, pg=("1", "tp"))],
                            config=config))
    d1 = fr.parse_dump(_doc([_entry(1), _entry(1, pg=("1", "tp"))], config=config))
    analysis = fr.analyse({0: d0, 1: d1})
    assert analysis.why() == ("Flight Recorder: group 0 (default_pg): rank 1 at collective 1 (completed) — behind; "
                              "rank 0 waiting in collective 2 (all_reduce)")
    d2 = fr.parse_dump(_doc([_entry(1, sizes=((4,),)), _entry(1, pg=("1", "tp"), sizes=((4,),))], config=config))
    both = fr.analyse({0: d0, 1: d1, 2: d2})
    assert both.why().count("; group 1 (tp): mismatch at collective 1") == 1
    agree = fr.analyse({0: d1, 1: d1})
    assert agree.why() == ("Flight Recorder: group 0 (default_pg): ranks agree, last completed collective 1; "
                           "group 1 (tp): ranks agree, last completed collective 1")


def test_a_config_entry_without_a_desc_is_no_desc():
    assert fr._desc({"0": {"ranks": "[0]"}}, "0") == ""


def test_a_rank_that_completed_nothing():
    trace = fr.GroupTrace("0", "", None, (fr.Entry(1, "x", "", (), (), "scheduled", False, False),), {})
    assert fr._position(0, trace) == fr.Position(0, None, None, 1, "x")


def test_a_collective_one_rank_holds_does_not_stop_the_mismatches_after_it():
    a = [_entry(1), _entry(2, sizes=((4,),))]
    b = [_entry(2, sizes=((8,),))]
    (m,) = fr.analyse(_dumps(a, b, ranks="[0, 1]")).groups[0].mismatches
    assert m.seq == 2


def test_an_error_number_without_a_name_is_said_as_its_number(tmp_path, monkeypatch):
    pipe = tmp_path / "p.pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        def odd(*_a, **_k):
            raise OSError(9999, "odd")
        monkeypatch.setattr(fr.os, "write", odd)
        assert fr.request_dump(str(pipe)) == "dump trigger pipe not written (9999)"
        monkeypatch.setattr(fr.os, "open", odd)
        assert fr.request_dump(str(pipe)) == "dump trigger pipe not opened (9999)"
    finally:
        monkeypatch.undo()
        os.close(reader)


def test_read_dump_reads_one_byte_past_the_bound_whatever_the_file_grew_to(tmp_path, monkeypatch):
    path = tmp_path / "fr_0"
    path.write_bytes(b"0123456789")
    real = os.stat
    monkeypatch.setattr(fr.os, "stat", lambda p: os.stat_result((*real(p)[:6], 3, *real(p)[7:])))
    assert fr.read_dump(str(path), max_bytes=5) == b"012345"


def test_collect_by_default_waits_5_s_polling_every_50_ms(tmp_path):
    clock = _Clock()
    os.mkfifo(tmp_path / "p0.pipe")
    fd = os.open(tmp_path / "p0.pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        got = fr.collect({0: (str(tmp_path / "p0.pipe"), str(tmp_path / "d0"))}, clock=clock, pause=clock.pause)
    finally:
        os.close(fd)
    assert got.failures == {0: "no dump within 5 s of the request"}
    assert set(clock.pauses) == {0.05} and 100 <= len(clock.pauses) <= 101


def test_collect_reads_the_next_rank_after_a_half_written_one(tmp_path):
    clock = _Clock()
    fds = []
    for r in (0, 1):
        os.mkfifo(tmp_path / f"p{r}.pipe")
        fds.append(os.open(tmp_path / f"p{r}.pipe", os.O_RDONLY | os.O_NONBLOCK))
    ranks = {r: (str(tmp_path / f"p{r}.pipe"), str(tmp_path / f"d{r}")) for r in (0, 1)}

    def pause(s):
        clock.pause(s)
        if len(clock.pauses) == 1:
            (tmp_path / "d0").write_bytes(b"{")
            (tmp_path / "d1").write_bytes(_doc([_entry(1)]))
    try:
        got = fr.collect(ranks, timeout_s=0.5, poll_s=0.25, clock=clock, pause=pause)
    finally:
        for fd in fds:
            os.close(fd)
    assert list(got.dumps) == [1] and got.failures == {0: "not a Flight Recorder JSON dump (not valid JSON)"}


def test_analyse_files_reads_bytes_bounded_and_says_an_error_without_words(tmp_path, monkeypatch):
    (tmp_path / "bad").write_bytes(b"\xff\xfe{")
    (tmp_path / "big").write_bytes(b"{" + b" " * 11)
    monkeypatch.setattr(fr, "MAX_DUMP_BYTES", 10)
    _, failures = fr.analyse_files([(0, str(tmp_path / "bad")), (1, str(tmp_path / "big"))])
    assert failures == {0: "not a Flight Recorder JSON dump (not UTF-8 text)",
                        1: "dump of 11 bytes is over the 10-byte bound: not read"}

    def wordless(*_a, **_k):
        raise OSError("no words")
    monkeypatch.setattr(fr, "open", wordless, raising=False)
    _, failures = fr.analyse_files([(2, "/x/fr_2")])
    assert failures == {2: "/x/fr_2: not read (unreadable)"}


def test_entries_after_one_left_out_are_still_read():
    dump = fr.parse_dump(_doc([_entry(1), "not an entry", _entry(2), _entry(3, p2p=True), _entry(4),
                               {**_entry(5), "collective_seq_id": "5"}, _entry(6)]))
    assert [e.seq for e in dump.groups["0"].entries] == [1, 2, 4, 6]
    one = fr.parse_dump(b'{"entries": [{"collective_seq_id": 1, "process_group": ["9"]}]}')
    assert one.groups["9"].desc == ""


def test_the_members_come_from_any_rank_that_has_them():
    d0 = fr.parse_dump(_doc([_entry(1, pg=("1", ""))], config={}))
    d1 = fr.parse_dump(_doc([_entry(1, pg=("1", ""))], config={"1": {"desc": "tp", "ranks": "[0, 1, 2]"}}))
    (g,) = fr.analyse({0: d0, 1: d1}).groups
    assert g.missing == (2,) and [p.rank for p in g.positions] == [0, 1]
    d2 = fr.parse_dump(_doc([], config={}))                         # a rank without the group at all, first
    (g,) = fr.analyse({0: d2, 1: d1}).groups
    assert g.missing == (2,) and [p.rank for p in g.positions] == [0, 1]
    assert g.positions[0] == fr.Position(0, None, None, None, None)


def test_a_group_known_only_from_its_status_has_nobody_behind():
    status = {"4": {"last_enqueued_collective": 3}}
    dumps = {r: fr.parse_dump(_doc([], config={}, status=status)) for r in (0, 1)}
    (g,) = fr.analyse(dumps).groups
    assert (g.group, g.behind, g.waiting, g.seq) == ("4", (), (), None)
    assert [p.entered for p in g.positions] == [None, None]
