"""`servewatch collectives`: the real gloo dumps read from files, a pickle refused, nothing to read said."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from servewatch.cli import main

FR = Path(__file__).parent / "fixtures" / "flight_recorder"


def dumps(mode: str) -> list[str]:
    return [arg for r in (0, 1) for arg in ("--dump", f"{r}={FR / f'gloo_{mode}_rank{r}.json'}")]


def test_the_rank_behind_from_real_dumps(capsys):
    assert main(["collectives", *dumps("behind")]) == 1
    assert capsys.readouterr().out == ("Flight Recorder: group 0 (default_pg): rank 1 at collective 4 (completed) — "
                                       "behind; rank 0 waiting in collective 5 (all_reduce)\n")
    assert main(["collectives", "--json", *dumps("mismatch")]) == 1
    out = json.loads(capsys.readouterr().out)
    (group,) = out["flight_recorder"]["groups"]
    assert group["mismatches"] == [{"seq": 5, "by_rank": {"0": "all_reduce [1024]", "1": "broadcast [1024]"}}]
    assert [p["entered"] for p in group["positions"]] == [5, 5]


def test_a_pickle_dump_is_refused_in_one_line(tmp_path, capsys):
    dump = tmp_path / "r0"
    dump.write_bytes(pickle.dumps({"entries": []}))
    assert main(["collectives", "--dump", f"0={dump}"]) == 2           # nothing read: errors.USAGE
    said = capsys.readouterr()
    assert said.out.count("\n") == 1 and "rank 0: a pickle dump is not read" in said.out
    assert "_dump_fr_trace_json" in said.out
    assert said.err.count("\n") == 1 and said.err.startswith("servewatch collectives: no Flight Recorder dump or "
                                                              "NCCL RAS answer could be read: rank 0: a pickle")


def test_nothing_to_read_is_said(capsys):
    assert main(["collectives"]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err == ("servewatch collectives: give --pid for every rank, --dump RANK=FILE, or "
                                           "--ras HOST:PORT\n")


def test_a_bad_dump_is_bad_input_said_in_plain_words(tmp_path, capsys):
    """--dump not RANK=FILE, a directory, a file that is not JSON: status 2, one line on stderr, no class name."""
    (tmp_path / "garbage.json").write_text("{not json", encoding="utf-8")
    for dump, words in (("nonsense", "--dump 'nonsense': not RANK=FILE"),
                        (f"0={tmp_path}", f"rank 0: {tmp_path}: not read (Is a directory)"),
                        (f"0={tmp_path / 'garbage.json'}", "rank 0: not a Flight Recorder JSON dump (not valid JSON)")):
        assert main(["collectives", "--dump", dump]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, (dump, err)
        assert "Error" not in err and "Traceback" not in err
