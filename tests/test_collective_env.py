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
    assert line == ("RAS: off (NCCL_RAS_ENABLE=0); Flight Recorder: not in use (no torch loaded) "
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


# --- whether the Flight Recorder records: from evidence, never assumed (issue 50) ----------------------------

def _torch_proc(tmp_path, pid, env, version: str | None, where="/venv/lib/python3.12/site-packages"):
    """A process with libtorch mapped from `where`/torch/lib and, when `version` is given, that torch's
    version.py under the process's root (/proc/PID/root + the mapped path)."""
    maps = f"7f0000-7f1000 r-xp 0 0:0 0 {where}/torch/lib/libtorch_cpu.so\n".encode()
    _proc(tmp_path, pid, env, maps)
    if version is not None:
        torch = tmp_path / str(pid) / "root" / where.lstrip("/") / "torch"
        torch.mkdir(parents=True)
        (torch / "version.py").write_text(f"__version__ = '{version}'\ndebug = False\n")


def test_the_default_follows_the_torch_version_at_its_boundary():
    """torch's FlightRecorder constructor: unset, 0 up to 2.10, 2,000 from 2.11; TORCH_FR_BUFFER_SIZE is read from
    2.8 (before, only TORCH_NCCL_TRACE_BUFFER_SIZE)."""
    assert ce.fr_setting({}, "2.10.0") == (0, "default")
    assert ce.fr_setting({}, "2.10.1+cu128") == (0, "default")
    assert ce.fr_setting({}, "2.11.0") == (2000, "default")
    assert ce.fr_setting({}, "2.13.0+cpu") == (2000, "default")
    assert ce.fr_setting({}, "3.0.0") == (2000, "default")
    assert ce.fr_setting({}, None) == (None, "unknown")
    assert ce.fr_setting({}, "not a version") == (None, "unknown")
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "0"}, "2.13.0") == (0, "set")
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "100"}, "2.8.0") == (100, "set")
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "100"}, "2.7.1") == (0, "ignored")
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "100", "TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}, "2.7.1") == (50, "set")
    assert ce.fr_setting({"TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}, "2.13.0") == (50, "set")
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "100"}, None) == (100, "set")


def test_unset_on_the_labs_torch_is_on_by_its_default_not_off(tmp_path):
    """The lab's case: torch 2.13 with TORCH_FR_BUFFER_SIZE unset records 2,000 entries; the line says so, with
    the version it read from the rank, and gives no advice to set the variable."""
    _torch_proc(tmp_path, 7, {"RANK": "0", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/run/x/pipe_"}, "2.13.0+cpu")
    (rank,) = ce.discover([7], proc=str(tmp_path))
    assert (rank.torch_loaded, rank.torch_version, rank.fr_buffer, rank.fr_from) == (True, "2.13.0+cpu", 2000,
                                                                                     "default")
    assert rank.dump_wanted
    assert ce.summary([rank]) == ("RAS: not in use (no NCCL loaded); Flight Recorder: on (buffer 2000 "
                                  "(torch 2.13.0+cpu's default), pipe), 1 of 1 process")


def test_unset_below_the_boundary_is_off_with_the_name_that_torch_reads(tmp_path):
    _torch_proc(tmp_path, 8, {"RANK": "0"}, "2.10.0")
    _torch_proc(tmp_path, 9, {"RANK": "1"}, "2.7.1", where="/opt/old")
    assert ce.summary(ce.discover([8], proc=str(tmp_path))).endswith(
        "Flight Recorder: off — torch 2.10.0 records nothing by default: set TORCH_FR_BUFFER_SIZE to get it")
    assert ce.summary(ce.discover([9], proc=str(tmp_path))).endswith(
        "Flight Recorder: off — torch 2.7.1 records nothing by default: set TORCH_NCCL_TRACE_BUFFER_SIZE to get it")
    _torch_proc(tmp_path, 10, {"RANK": "0", "TORCH_FR_BUFFER_SIZE": "2000"}, "2.7.1", where="/opt/older")
    assert ce.summary(ce.discover([10], proc=str(tmp_path))).endswith(
        "Flight Recorder: off — torch 2.7.1 reads TORCH_NCCL_TRACE_BUFFER_SIZE, not TORCH_FR_BUFFER_SIZE: set that "
        "to get it")


def test_an_unread_torch_version_is_said_not_known_never_off(tmp_path):
    _torch_proc(tmp_path, 11, {"RANK": "0", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/run/x/pipe_"}, None)
    _proc(tmp_path, 12, {"RANK": "1"})
    (tmp_path / "12" / "maps").unlink()                           # maps not readable: torch not known either
    ranks = ce.discover([11, 12], proc=str(tmp_path))
    assert [(r.torch_loaded, r.torch_version, r.fr_buffer, r.fr_from) for r in ranks] == [
        (True, None, None, "unknown"), (None, None, None, "unknown")]
    assert [r.dump_wanted for r in ranks] == [True, False]        # a pipe to ask through: a dump read decides
    _proc(tmp_path, 17, {"RANK": "2"}, b"7f0000-7f1000 r-xp 0 0:0 0 /opt/libtorch/lib/libtorch_cpu.so\n")
    (alone,) = ce.discover([17], proc=str(tmp_path))           # libtorch outside a torch package: not known
    assert (alone.torch_loaded, alone.fr_buffer, alone.fr_from) == (True, None, "unknown")
    line = ce.summary(ranks)
    assert line.endswith("Flight Recorder: not known — torch version of 2 processes not read; TORCH_FR_BUFFER_SIZE "
                         "unset, which records 2,000 entries from torch 2.11 on")
    assert "off" not in line and "set TORCH_FR_BUFFER_SIZE to get it" not in line
    assert ce.summary(ranks[:1]).endswith("Flight Recorder: not known — torch version of the rank not read; "
                                          "TORCH_FR_BUFFER_SIZE unset, which records 2,000 entries from torch 2.11 on")


def test_a_dump_read_from_the_rank_is_the_evidence_that_it_records(tmp_path):
    _torch_proc(tmp_path, 13, {"RANK": "0", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/run/x/pipe_"}, None)
    _torch_proc(tmp_path, 14, {"RANK": "1", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/run/x/pipe_"}, None, where="/b")
    ranks = ce.discover([13, 14], proc=str(tmp_path))
    assert ce.summary(ranks, {0: 12, 1: 9}).endswith(
        "Flight Recorder: on (2 ranks' dumps read: 12/9 collectives, pipe), 2 of 2 processes")
    assert ce.summary(ranks, {0: 12}).endswith(
        "Flight Recorder: on (1 rank's dump read: 12 collectives, pipe), 1 of 2 processes; 1 not known (torch version "
        "not read; TORCH_FR_BUFFER_SIZE unset, which records 2,000 entries from torch 2.11 on)")
    assert "not known" in ce.summary(ranks, {0: 0, 1: 0})         # an empty dump is no evidence of recording


def test_the_version_is_read_from_the_libtorch_the_process_maps_not_from_this_environment(tmp_path):
    """Two processes, two venvs: each one's own torch decides."""
    _torch_proc(tmp_path, 15, {"RANK": "0"}, "2.13.0", where="/venv-new/lib/python3.12/site-packages")
    _torch_proc(tmp_path, 16, {"RANK": "1"}, "2.9.0", where="/venv-old/lib/python3.11/site-packages")
    ranks = ce.discover([15, 16], proc=str(tmp_path))
    assert [(r.torch_version, r.fr_buffer) for r in ranks] == [("2.13.0", 2000), ("2.9.0", 0)]
    assert ce.summary(ranks).endswith("Flight Recorder: on (buffer 2000 (torch 2.13.0's default), no pipe: dumps on "
                                      "timeout only — set TORCH_NCCL_DEBUG_INFO_PIPE_FILE to ask for one), "
                                      "1 of 2 processes")
