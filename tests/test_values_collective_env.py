"""Values of servewatch/sources/collective_env.py (issue 50 item 8: which ranks record collectives, RAS's address,
the pipes and dumps collect reads): each variable read, the torch version found, the tree walked, and the line said
at start, word for word. Each figure written by hand beside the assertion."""

from __future__ import annotations

import os

import pytest

from servewatch.sources import collective_env as ce
from servewatch.sources.collective_env import RankEnv


def test_the_bounds_and_defaults():
    assert (ce.MAX_ENVIRON_BYTES, ce.MAX_MAPS_BYTES, ce.MAX_VERSION_BYTES, ce.MAX_TREE) == (
        1024 * 1024, 8 * 1024 * 1024, 4096, 512)
    assert (ce.RAS_DEFAULT_ADDR, ce.FR_DEFAULT_ON_FROM, ce.FR_DEFAULT_ENTRIES, ce.FR_NEW_NAME_FROM) == (
        "localhost:28028", (2, 11), 2000, (2, 8))


def test_parse_environ_keeps_only_the_named_variables_with_a_value():
    data = (b"RANK=1\0LOCAL_RANK\0NCCL_RAS_ADDR=a=b\0TORCH_FR_DUMP_TEMP_FILE=\xff/x\0RANKS=9\0\0"
            b"NCCL_RAS_ENABLE=\0")
    assert ce.parse_environ(data) == {"RANK": "1", "NCCL_RAS_ADDR": "a=b", "TORCH_FR_DUMP_TEMP_FILE": "\ufffd/x",
                                      "NCCL_RAS_ENABLE": ""}
    assert ce.parse_environ(b"\xffRANK=1\0") == {}


def test_numbers_and_versions():
    assert [ce._int(v) for v in ("3", "-1", " 7 ", "x", None)] == [3, -1, 7, None, None]
    assert ce.version_tuple("2.13.0+cu130") == (2, 13)
    assert ce.version_tuple("10.2") == (10, 2)
    assert [ce.version_tuple(v) for v in ("2", "v2.1", "", None)] == [None, None, None, None]


def test_fr_setting_reads_a_bad_or_negative_size_as_off():
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "-5"}, "2.13") == (0, "set")
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "lots"}, "2.13") == (0, "set")
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "7"}, "2.8") == (7, "set")              # the new name from 2.8
    assert ce.fr_setting({"TORCH_FR_BUFFER_SIZE": "7"}, "2.7") == (0, "ignored")
    assert ce.fr_setting({}, "2.7") == (0, "default")


def _maps(path):
    return f"7f0000-7f1000 r-xp 0 0:0 0 {path}\n".encode()


def test_torch_of_reads_the_version_beside_the_mapped_library(tmp_path):
    assert ce.torch_of(5, None, str(tmp_path)) == (None, None)
    assert ce.torch_of(5, b"libc.so.6", str(tmp_path)) == (False, None)
    assert ce.torch_of(5, _maps("/opt/lib/libc10.so"), str(tmp_path)) == (True, None)
    assert ce.torch_of(5, _maps("/opt/lib/libtorch.so.2"), str(tmp_path)) == (True, None)
    assert ce.torch_of(5, _maps("/opt/libtorchx/a.so"), str(tmp_path)) == (False, None)
    site = tmp_path / "5" / "root" / "v" / "torch"
    site.mkdir(parents=True)
    assert ce.torch_of(5, _maps("/v/torch/lib/libc10.so"), str(tmp_path)) == (True, None)     # no version.py
    (site / "version.py").write_text("git = 'x'\n__version__ = \"2.9.1+cpu\"\n")
    assert ce.torch_of(5, _maps("/v/torch/lib/libc10.so"), str(tmp_path)) == (True, "2.9.1+cpu")
    assert ce.torch_of(5, _maps("/v/torch/lib/libtorch_cuda.so"), str(tmp_path)) == (True, "2.9.1+cpu")
    (site / "version.py").write_text("  __version__ = '2.9.1'\n__version__ = 'dev'\n")
    assert ce.torch_of(5, _maps("/v/torch/lib/libc10.so"), str(tmp_path)) == (True, None)  # neither is a version
    (site / "version.py").write_text("#" * 4090 + "\n__version__ = '2.9.1'\n")
    assert ce.torch_of(5, _maps("/v/torch/lib/libc10.so"), str(tmp_path)) == (True, None)  # past the bound


def test_rank_env_reads_each_variable():
    env = {"RANK": "x", "LOCAL_RANK": "2", "NCCL_RAS_ENABLE": " 0 ", "NCCL_RAS_ADDR": "",
           "TORCH_FR_DUMP_TEMP_FILE": "", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/d/t_",
           "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "", "TORCH_FR_BUFFER_SIZE": "10"}
    r = ce.rank_env(9, env, b"/usr/lib/libnccl.so.2", (True, "2.13.0"))
    assert r == RankEnv(pid=9, readable=True, rank=2, nccl_loaded=True, ras_enabled=False, ras_addr="localhost:28028",
                        fr_buffer=10, fr_from="set", torch_version="2.13.0", torch_loaded=True, pipe_prefix=None,
                        dump_prefix="/d/t_")
    assert (r.pipe, r.dump, r.dump_wanted) == (None, "/d/t_2", True)
    r = ce.rank_env(9, {"RANK": "0", "LOCAL_RANK": "3", "NCCL_RAS_ENABLE": "1"}, None)
    assert (r.rank, r.nccl_loaded, r.ras_enabled, r.fr_buffer, r.fr_from, r.torch_loaded) == (
        0, None, True, None, "unknown", None)
    r = ce.rank_env(9, {}, b"", (False, None))
    assert (r.rank, r.nccl_loaded, r.ras_enabled, r.fr_buffer, r.fr_from) == (None, False, True, 0, "no_torch")
    r = ce.rank_env(9, {"TORCH_FR_BUFFER_SIZE": "0"}, b"", (False, None))
    assert (r.fr_buffer, r.fr_from) == (0, "set")                 # set: not said to be torch-less
    assert ce.rank_env(9, None, b"libnccl") == RankEnv(pid=9, readable=False)


def test_the_pipe_the_dump_and_whether_to_ask():
    r = RankEnv(pid=1, readable=True, rank=3, fr_buffer=None, pipe_prefix="/p_", dump_prefix="/d_")
    assert (r.pipe, r.dump, r.dump_wanted) == ("/p_3.pipe", "/d_3", True)
    r = RankEnv(pid=1, readable=True, rank=None, fr_buffer=5, pipe_prefix="/p_", dump_prefix="/d_")
    assert (r.pipe, r.dump, r.dump_wanted) == (None, None, True)
    assert RankEnv(pid=1, readable=True, fr_buffer=None).dump_wanted is False
    assert RankEnv(pid=1, readable=True, fr_buffer=0, pipe_prefix="/p_").dump_wanted is False
    assert (RankEnv(pid=1, readable=False).fr_buffer, RankEnv(pid=1, readable=False).fr_from) == (0, "set")


def test_discover_reads_environ_and_maps_under_proc(tmp_path):
    d = tmp_path / "40"
    d.mkdir()
    (d / "environ").write_bytes(b"RANK=1\0TORCH_FR_BUFFER_SIZE=4\0")
    (d / "maps").write_bytes(_maps("/usr/lib/libnccl.so.2"))
    (tmp_path / "41").mkdir()
    (r, unread) = ce.discover([40, 41], proc=str(tmp_path))
    assert (r.pid, r.rank, r.nccl_loaded, r.fr_buffer, r.torch_loaded) == (40, 1, True, 4, False)
    assert unread == RankEnv(pid=41, readable=False)


def _children(tmp_path, pid, tids):
    for tid, kids in tids.items():
        task = tmp_path / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "children").write_text(kids)


def test_tree_pids_walks_every_thread_breadth_first_once(tmp_path):
    _children(tmp_path, 1, {1: "2 3", 7: "4 x"})
    _children(tmp_path, 2, {2: "5 1"})
    _children(tmp_path, 3, {3: ""})
    _children(tmp_path, 4, {4: "2"})
    got = ce.tree_pids(1, proc=str(tmp_path))
    assert got in ([1, 2, 3, 4, 5], [1, 4, 2, 3, 5])        # (the threads in the order /proc lists them)
    assert ce.tree_pids(99, proc=str(tmp_path)) == [99]


def test_tree_pids_is_bounded(tmp_path, monkeypatch):
    _children(tmp_path, 1, {1: " ".join(str(i) for i in range(2, 12))})
    monkeypatch.setattr(ce, "MAX_TREE", 4)
    assert ce.tree_pids(1, proc=str(tmp_path)) == [1, 2, 3, 4]


def _r(rank, **kw):
    base = dict(pid=100 + (rank or 0), readable=True, rank=rank, nccl_loaded=False, fr_buffer=0)
    base.update(kw)
    return RankEnv(**base)


def test_the_ras_words():
    assert ce.summary([_r(0, nccl_loaded=True, ras_enabled=True)]) == (
        "RAS: on (localhost:28028), 1 of 1 NCCL process (needs NCCL >= 2.24); Flight Recorder: off — the buffer size "
        "is set to 0")
    line = ce.summary([_r(0, nccl_loaded=True, ras_enabled=True, ras_addr="b:1"),
                       _r(1, nccl_loaded=True, ras_enabled=False), _r(2, nccl_loaded=None),
                       RankEnv(pid=7, readable=False), RankEnv(pid=8, readable=False)])
    assert line == ("RAS: on (b:1), 1 of 2 NCCL processes (needs NCCL >= 2.24); Flight Recorder: off — the buffer "
                    "size is set to 0 (2 processes not readable)")
    assert ce.summary([RankEnv(pid=7, readable=False)]) == (
        "RAS, Flight Recorder: not known — no process environment readable (1 process not readable)")
    assert ce.summary([]) == "RAS, Flight Recorder: not known — no process environment readable"


def test_the_flight_recorder_words_across_ranks():
    ranks = [_r(0, fr_buffer=2000, fr_from="default", torch_version="2.13.0", pipe_prefix="/p_"),
             _r(1, fr_buffer=100, pipe_prefix=None), _r(None, fr_buffer=100, pipe_prefix="/p_"),
             _r(3, fr_buffer=None), _r(4, fr_buffer=None)]
    assert ce.summary(ranks) == (
        "RAS: not in use (no NCCL loaded); Flight Recorder: on (buffer 100/2000 (torch 2.13.0's default), pipe on some "
        "ranks), 3 of 5 processes; 1 without RANK: their pipes are found by name; 2 not known (torch version not "
        "read; TORCH_FR_BUFFER_SIZE unset, which records 2,000 entries from torch 2.11 on)")
    # a dump read for a rank set to 0 turns it on; the rank set on keeps its size
    ranks = [_r(1, fr_buffer=0, pipe_prefix="/p_"), _r(0, fr_buffer=0, pipe_prefix="/p_"),
             _r(2, fr_buffer=50, pipe_prefix="/p_")]
    assert ce.summary(ranks, {0: 4, 1: 7, 2: 9}).endswith(
        "Flight Recorder: on (buffer 50; 2 ranks' dumps read: 4/7 collectives, pipe), 3 of 3 processes")
    assert ce.summary([_r(None, fr_buffer=0)], {0: 4}).endswith("Flight Recorder: off — the buffer size is set to 0")


def test_the_off_reasons_are_said_once_each():
    ranks = [_r(0, fr_from="default", torch_version="2.10.0"), _r(1, fr_from="default", torch_version="2.10.0"),
             _r(2, fr_from="ignored", torch_version="2.7.0"), _r(3, fr_from="no_torch"),
             _r(4, fr_from="default", torch_version="2.7.1")]
    assert ce.summary(ranks).endswith(
        "Flight Recorder: off — torch 2.10.0 records nothing by default: set TORCH_FR_BUFFER_SIZE to get it; "
        "torch 2.7.0 reads TORCH_NCCL_TRACE_BUFFER_SIZE, not TORCH_FR_BUFFER_SIZE: set that to get it; "
        "torch 2.7.1 records nothing by default: set TORCH_NCCL_TRACE_BUFFER_SIZE to get it")
    assert ce.summary([_r(0, fr_from="default", torch_version="2.8.0")]).endswith(
        "set TORCH_FR_BUFFER_SIZE to get it")
    assert ce.summary([_r(0, fr_from="no_torch"), _r(1, fr_from="no_torch")]).endswith(
        "Flight Recorder: not in use (no torch loaded)")


def test_the_watch_line_reads_the_tree(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(ce, "tree_pids", lambda root: seen.append(root) or [root])
    monkeypatch.setattr(ce, "discover", lambda pids: tuple(_r(0, pid=p) for p in pids))
    assert ce.watch_line(77) == ("collectives: RAS: not in use (no NCCL loaded); Flight Recorder: off — the buffer "
                                 "size is set to 0")
    assert seen == [77]


@pytest.mark.parametrize("n, words", [(1, "1 process"), (2, "2 processes"), (0, "0 processes")])
def test_plural(n, words):
    assert ce._plural(n) == words


def test_a_dump_holding_one_collective_is_evidence_enough():
    assert ce.summary([_r(0, fr_buffer=0, pipe_prefix="/p_")], {0: 1}).endswith(
        "Flight Recorder: on (1 rank's dump read: 1 collectives, pipe), 1 of 1 process")


def test_environ_and_maps_are_read_up_to_their_bounds(tmp_path, monkeypatch):
    d = tmp_path / "50"
    d.mkdir()
    (d / "environ").write_bytes(b"A=1\0RANK=5\0")
    (d / "maps").write_bytes(b"x" * 20 + b" /usr/lib/libnccl.so.2\n")
    monkeypatch.setattr(ce, "MAX_ENVIRON_BYTES", 8)
    monkeypatch.setattr(ce, "MAX_MAPS_BYTES", 20)
    (r,) = ce.discover([50], proc=str(tmp_path))
    assert (r.rank, r.nccl_loaded) == (None, False)            # what lies past each bound is not read
    monkeypatch.setattr(ce, "MAX_ENVIRON_BYTES", 11)
    monkeypatch.setattr(ce, "MAX_MAPS_BYTES", 42)
    (r,) = ce.discover([50], proc=str(tmp_path))
    assert (r.rank, r.nccl_loaded) == (5, True)


def test_a_children_list_is_read_up_to_64_kib(tmp_path):
    _children(tmp_path, 1, {1: " " * 65535 + "7"})
    assert ce.tree_pids(1, proc=str(tmp_path)) == [1, 7]
    (tmp_path / "1" / "task" / "1" / "children").write_text(" " * 65536 + "7")
    assert ce.tree_pids(1, proc=str(tmp_path)) == [1]


def test_a_path_that_is_not_utf8_is_read_with_replacement(tmp_path):
    assert ce.torch_of(5, b"7f0000-7f1000 r-xp 0 0:0 0 /v\xff/torch/lib/libc10.so\n", str(tmp_path)) == (True, None)


def test_the_real_proc_is_read_by_default(tmp_path):
    """This process's /proc/PID/root is "/": a torch package under tmp_path is found through it, and a child
    process is found in its tree."""
    import subprocess
    import sys
    site = tmp_path / "torch"
    site.mkdir()
    (site / "version.py").write_text("__version__ = '2.12.0'\n")
    maps = f"7f0000-7f1000 r-xp 0 0:0 0 {tmp_path}/torch/lib/libc10.so\n".encode()
    assert ce.torch_of(os.getpid(), maps) == (True, "2.12.0")
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert child.pid in ce.tree_pids(os.getpid())
        (me,) = ce.discover([os.getpid()])
        assert me.readable is True
    finally:
        child.stdin.close()
        child.wait(10)
