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
    assert main(["collectives", "--dump", f"0={dump}"]) == 3
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "rank 0: a pickle dump is not read" in out and "_dump_fr_trace_json" in out


def test_nothing_to_read_is_said(capsys):
    assert main(["collectives"]) == 2
    assert "give --pid" in capsys.readouterr().out
