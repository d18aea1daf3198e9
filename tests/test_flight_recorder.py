"""Flight Recorder analysis on real dumps (tests/fixtures/flight_recorder/: a two-rank gloo job under the lab
vLLM venv's torch, recorded by tests/collective/record_fixtures.py), with no torch here."""

from __future__ import annotations

import json
import os
import pickle
import select
import threading
from pathlib import Path

import pytest

from servewatch.sources import flight_recorder as fr

FIXTURES = Path(__file__).parent / "fixtures" / "flight_recorder"
META = json.loads((FIXTURES / "meta.json").read_text())


def real(mode: str) -> dict[int, fr.Dump]:
    return {r: fr.parse_dump((FIXTURES / f"gloo_{mode}_rank{r}.json").read_bytes()) for r in (0, 1)}


def test_the_fixtures_say_where_they_come_from():
    assert META["recorded"] == "2026-12-05" and META["torch"].startswith("2.") and META["backend"] == "gloo"
    for mode, case in META["cases"].items():
        assert all((FIXTURES / name).is_file() for name in case["files"]), mode


def test_real_dumps_rank_1_behind_at_collective_5():
    dumps = real("behind")
    assert all(d.known_version and d.version.startswith("2.") for d in dumps.values())
    analysis = fr.analyse(dumps)
    assert analysis.behind == (("0", 1, 5),)
    (group,) = analysis.groups
    at = {p.rank: p for p in group.positions}
    assert (at[0].completed, at[0].entered, at[0].pending_op) == (4, 5, "all_reduce")
    assert (at[1].completed, at[1].entered, at[1].pending_op) == (4, 4, None)
    assert at[0].started is None     # gloo records no start: its entries stay "scheduled" until retired
    assert group.waiting == (0,) and group.op == "all_reduce" and not group.mismatches
    assert analysis.why() == ("Flight Recorder: group 0 (default_pg): rank 1 at collective 4 (completed) — behind; "
                              "rank 0 waiting in collective 5 (all_reduce)")
    assert analysis.why() == META["cases"]["behind"]["why"]


def test_real_dumps_the_op_mismatch_at_collective_5():
    analysis = fr.analyse(real("mismatch"))
    assert analysis.behind == () and analysis.mismatched
    (mismatch,) = analysis.groups[0].mismatches
    assert mismatch.seq == 5
    assert mismatch.by_rank == {0: "all_reduce [1024]", 1: "broadcast [1024]"}
    assert "mismatch at collective 5: rank 0 all_reduce [1024], rank 1 broadcast [1024]" in analysis.why()


def _doc(entries, version="2.10"):
    return json.dumps({"version": version, "comm_lib_version": "", "pg_config": {"0": {"desc": "default_pg",
                       "ranks": "[0, 1, 2]"}}, "pg_status": {}, "entries": entries}).encode()


def _entry(seq, op="all_reduce", sizes=((8,),), retired=True, state="completed"):
    return {"collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": False, "profiling_name": f"nccl:{op}",
            "process_group": ["0", "default_pg"], "input_sizes": [list(s) for s in sizes],
            "output_sizes": [list(s) for s in sizes], "state": state, "retired": retired}


def test_a_size_mismatch_and_a_member_without_a_dump():
    dumps = {0: fr.parse_dump(_doc([_entry(1), _entry(2, sizes=((8,),))])),
             1: fr.parse_dump(_doc([_entry(1), _entry(2, sizes=((16,),))]))}
    analysis = fr.analyse(dumps)
    (group,) = analysis.groups
    assert group.missing == (2,)
    assert group.mismatches[0].by_rank == {0: "all_reduce [8]", 1: "all_reduce [16]"}
    assert "no dump from rank 2" in group.why()


def test_nccl_states_started_and_completed():
    dump = fr.parse_dump(_doc([_entry(1), _entry(2, retired=False, state="started")]))
    other = fr.parse_dump(_doc([_entry(1)]))
    analysis = fr.analyse({0: dump, 1: other, 2: dump})
    (group,) = analysis.groups
    assert group.behind == (1,) and group.waiting == (0, 2) and group.seq == 2
    at = {p.rank: p for p in group.positions}
    assert (at[0].started, at[0].completed) == (2, 1)
    assert "ranks 0, 2 waiting in collective 2" in analysis.why()


def test_agreeing_ranks_are_said_to_agree():
    dumps = {0: fr.parse_dump(_doc([_entry(1), _entry(2)])), 1: fr.parse_dump(_doc([_entry(1), _entry(2)]))}
    analysis = fr.analyse(dumps)
    assert analysis.behind == () and not analysis.mismatched
    assert "ranks agree, last completed collective 2" in analysis.why()


def test_a_pickle_is_refused_in_one_line_that_says_how_to_get_json():
    with pytest.raises(fr.DumpError) as err:
        fr.parse_dump(pickle.dumps({"entries": []}, protocol=4))
    assert "\n" not in str(err.value) and "_dump_fr_trace_json" in str(err.value)


def test_bad_dumps_are_said_not_guessed():
    with pytest.raises(fr.DumpError, match="not a Flight Recorder JSON dump"):
        fr.parse_dump(b"{not json")
    with pytest.raises(fr.DumpError, match="over the"):
        fr.parse_dump(b" " * (fr.MAX_DUMP_BYTES + 1))
    analysis = fr.analyse({0: fr.parse_dump(_doc([_entry(1)], version="9.0"))})
    assert analysis.notes == ("rank 0: Flight Recorder format 9.0 is not one servewatch knows; read as 2.x",)


def test_request_dump_never_blocks(tmp_path):
    assert "no dump trigger pipe" in fr.request_dump(str(tmp_path / "absent.pipe"))
    (tmp_path / "file.pipe").write_text("")
    assert "not a pipe" in fr.request_dump(str(tmp_path / "file.pipe"))
    fifo = tmp_path / "r0.pipe"
    os.mkfifo(fifo)
    assert fr.request_dump(str(fifo)) == "no process reads the dump trigger pipe: not written"
    got = []
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)   # a reader held open: the write goes through
    try:
        assert fr.request_dump(str(fifo)) is None
        got.append(os.read(reader, 16))
    finally:
        os.close(reader)
    assert got == [b"1"]


def test_collect_reads_only_a_new_dump_and_bounds_the_wait(tmp_path):
    fifo = tmp_path / "pipe_0.pipe"
    os.mkfifo(fifo)
    stale = tmp_path / "fr_rank_0"
    stale.write_bytes((FIXTURES / "gloo_behind_rank0.json").read_bytes())
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    ticks = iter(range(1000))
    try:
        got = fr.collect({0: (str(fifo), str(stale))}, timeout_s=3, clock=lambda: next(ticks), pause=lambda s: None)
    finally:
        os.close(reader)
    assert got.dumps == {} and got.failures == {0: "no dump within 3 s of the request"}

    served = threading.Event()
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)   # open before the request, as a rank's thread is

    def serve():                                   # a rank's dump thread: a request, then a new file
        select.select([reader], [], [], 30)
        os.read(reader, 16)
        new = tmp_path / "fr_rank_0.tmp"
        new.write_bytes((FIXTURES / "gloo_behind_rank1.json").read_bytes())
        os.replace(new, stale)
        served.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    got = fr.collect({0: (str(fifo), str(stale))}, timeout_s=30)
    thread.join(timeout=30)
    os.close(reader)
    assert served.is_set() and got.failures == {}
    assert fr.analyse({1: got.dumps[0]}).groups[0].positions[0].entered == 4


def test_collect_says_a_pickle_from_the_pipe_and_waits_out_a_file_still_being_written(tmp_path):
    fifo = tmp_path / "pipe_0.pipe"
    os.mkfifo(fifo)
    dump = tmp_path / "fr_rank_0"
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    writes = iter([b"", b'{"version": "2.10", "entr', (FIXTURES / "gloo_behind_rank0.json").read_bytes()])

    def pause(_):                                  # each poll, the writer has written a little more
        data = next(writes, None)
        if data is not None:
            dump.write_bytes(data)

    try:
        got = fr.collect({0: (str(fifo), str(dump))}, timeout_s=30, pause=pause)
        assert got.failures == {} and got.dumps[0].version == "2.10"
        dump.write_bytes(pickle.dumps({"entries": []}))
        stale = dump.stat()
        got = fr.collect({0: (str(fifo), str(dump))}, timeout_s=30,
                         pause=lambda _: dump.write_bytes(pickle.dumps({"entries": [], "n": 1})))
        assert stale and got.failures[0].startswith("a pickle dump is not read")
    finally:
        os.close(reader)
