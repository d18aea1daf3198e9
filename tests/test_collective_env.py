"""Discovery of each rank's collective sources from /proc/PID/environ: said once, never guessed."""

from __future__ import annotations

import os

from servewatch.sources import collective_env as ce


def _proc(tmp_path, pid, env: dict[str, str] | None, maps: bytes = b""):
    d = tmp_path / str(pid)
    d.mkdir()
    if env is not None:
        (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    (d / "maps").write_bytes(maps)


def test_only_the_collective_variables_are_kept():
    kept = ce.parse_environ(b"HOME=/root\0SECRET=x\0RANK=3\0TORCH_FR_BUFFER_SIZE=2000\0NCCL_RAS_ADDR=0.0.0.0:1\0")
    assert kept == {"RANK": "3", "TORCH_FR_BUFFER_SIZE": "2000", "NCCL_RAS_ADDR": "0.0.0.0:1"}


def test_flight_recorder_on_with_a_pipe_per_rank(tmp_path):
    for rank in (0, 1):
        _proc(tmp_path, 100 + rank, {"RANK": str(rank), "TORCH_FR_BUFFER_SIZE": "2000",
                                     "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/run/x/pipe_",
                                     "TORCH_FR_DUMP_TEMP_FILE": "/run/x/fr_"})
    ranks = ce.discover([100, 101], proc=str(tmp_path))
    assert [(r.rank, r.pipe, r.dump, r.fr_buffer) for r in ranks] == [
        (0, "/run/x/pipe_0.pipe", "/run/x/fr_0", 2000), (1, "/run/x/pipe_1.pipe", "/run/x/fr_1", 2000)]
    line = ce.summary(ranks)
    assert line == "RAS: not in use (no NCCL loaded); Flight Recorder: on (buffer 2000, pipe), 2 of 2 processes"
    assert "/run/x" not in line


def test_ras_on_by_default_with_nccl_and_the_older_variable_names(tmp_path):
    nccl = b"7f0000-7f1000 r-xp 0 0:0 0 /usr/lib/libnccl.so.2.27.3\n"
    _proc(tmp_path, 1, {"LOCAL_RANK": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "100",
                        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/tmp/t_"}, nccl)
    _proc(tmp_path, 2, {"LOCAL_RANK": "1", "NCCL_RAS_ADDR": "localhost:29000"}, nccl)
    ranks = ce.discover([1, 2], proc=str(tmp_path))
    assert (ranks[0].rank, ranks[0].fr_buffer, ranks[0].dump, ranks[0].pipe) == (0, 100, "/tmp/t_0", None)
    assert ranks[1].ras_addr == "localhost:29000" and ranks[1].fr_buffer == 0
    assert ce.summary(ranks) == (
        "RAS: on (localhost:28028, localhost:29000), 2 of 2 NCCL processes (needs NCCL >= 2.24); Flight Recorder: "
        "on (buffer 100, no pipe: dumps on timeout only — set TORCH_NCCL_DEBUG_INFO_PIPE_FILE to ask for one), "
        "1 of 2 processes")


def test_ras_off_fr_off_and_unreadable_processes_are_said(tmp_path):
    _proc(tmp_path, 1, {"NCCL_RAS_ENABLE": "0"}, b"libnccl.so.2")
    _proc(tmp_path, 2, None)
    line = ce.summary(ce.discover([1, 2], proc=str(tmp_path)))
    assert line == ("RAS: off (NCCL_RAS_ENABLE=0); Flight Recorder: off — set TORCH_FR_BUFFER_SIZE to get it "
                    "(1 process not readable)")
    assert ce.summary(ce.discover([2], proc=str(tmp_path))).startswith("RAS, Flight Recorder: not known")


def test_this_process_is_readable():
    (me,) = ce.discover([os.getpid()])
    assert me.readable and me.nccl_loaded is False


def test_the_tree_under_a_process_and_the_line_watch_says(tmp_path):
    for pid, children in ((10, "11 12"), (11, ""), (12, "13")):
        task = tmp_path / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        (task / "children").write_text(children)
    (tmp_path / "13" / "task").mkdir(parents=True)
    assert ce.tree_pids(10, proc=str(tmp_path)) == [10, 11, 12, 13]
    assert ce.watch_line(os.getpid()).startswith("collectives: RAS: not in use (no NCCL loaded); Flight Recorder: ")
