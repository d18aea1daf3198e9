"""The rank model: titles as the real engines set them (vLLM 0.32 CPU, SGLang 0.5), and parentage."""

from __future__ import annotations

import pytest

from servewatch.dialects import by_name
from servewatch.timeline.ranks import engine_ranks, rank_view, rank_words
from servewatch.timeline.samples import ProcessMember, ProcessSample


def member(pid, title, ppid, status="running", cpu=50.0, role="other"):
    return ProcessMember(pid=pid, create_time=1.0 + pid, role=role, title=title, status=status, cpu_percent=cpu,
                         ppid=ppid, rss_bytes=2**20, threads=4)


def sample(*members, t=10.0):
    return ProcessSample(t=t, root_pid=members[0].pid, root_create_time=1.0, alive=True, members=members)


@pytest.mark.parametrize("dialect, title, expected", [
    ("vllm", "VLLM::EngineCore", ("engine_core", ())),
    ("vllm", "VLLM::EngineCore_DP1", ("engine_core", (("DP", 1),))),
    ("vllm", "VLLM::Worker", ("worker", ())),
    ("vllm", "VLLM::Worker_TP1", ("worker", (("TP", 1),))),
    ("vllm", "VLLM::Worker_PP1_TP0", ("worker", (("PP", 1), ("TP", 0)))),
    ("vllm", "VLLM::Worker_DP1_PP0_PCP1_TP3_DCP0_EP2",
     ("worker", (("DP", 1), ("PP", 0), ("PCP", 1), ("TP", 3), ("DCP", 0), ("EP", 2)))),
    ("vllm", "VLLM::DPCoordinator", ("coordinator", ())),
    ("vllm", "VLLM::Worker_TP", ("worker", ())),              # the kernel's 15-byte name: kind sure, no rank
    ("vllm", "VLLM::WorkerPool", None),                        # not a stem followed by rank suffixes
    ("vllm", "VLLM::Worker_TPx", None),
    ("vllm", "python3", None),
    ("sglang", "sglang::scheduler", ("scheduler", ())),
    ("sglang", "sglang::scheduler_TP1", ("scheduler", (("TP", 1),))),
    ("sglang", "sglang::scheduler_DP1_TP0", ("scheduler", (("DP", 1), ("TP", 0)))),
    ("sglang", "sglang::scheduler_DP0_PP1_ATTN_CP0_TP1", ("scheduler", (("DP", 0), ("PP", 1), ("ATTN_CP", 0),
                                                                         ("TP", 1)))),
    ("sglang", "sglang::detokenizer", ("detokenizer", ())),
    ("sglang", "sglang::data_parallel_controller", ("dp_controller", ())),
    ("sglang", "sglang::tokenizer_worker:812", None),
])
def test_titles(dialect, title, expected):
    assert by_name(dialect).rank_of(title) == expected


def test_tensor_parallel_tree_names_rank_of_two():
    view = rank_view(sample(member(100, "python3", 1, role="api"), member(101, "python3", 100),
                            member(110, "VLLM::EngineCore", 100), member(111, "VLLM::Worker_TP0", 110),
                            member(112, "VLLM::Worker_TP1", 110, status="stopped")))
    assert [r.pid for r in view] == [110, 111, 112]          # unknown titles have no rank
    tp1 = view[2]
    assert tp1.state == "T" and tp1.axis("TP") == 1
    assert rank_words(tp1, view) == "TP rank 1 of 2 (VLLM::Worker_TP1, pid 112)"
    assert rank_words(view[0], view) == "the engine core (VLLM::EngineCore, pid 110)"


def test_data_parallel_worker_inherits_its_engine_cores_rank():
    view = rank_view(sample(member(100, "python3", 1, role="api"), member(105, "VLLM::DPCoordinator", 100),
                            member(110, "VLLM::EngineCore_DP0", 100), member(111, "VLLM::Worker", 110),
                            member(120, "VLLM::EngineCore_DP1", 100), member(121, "VLLM::Worker", 120)))
    worker1 = next(r for r in view if r.pid == 121)
    assert worker1.axis("DP") == 1 and worker1.own_axes == ()
    assert rank_words(worker1, view) == "DP rank 1 worker (VLLM::Worker, pid 121)"
    assert rank_words(next(r for r in view if r.pid == 120), view) == "DP rank 1 of 2 (VLLM::EngineCore_DP1, pid 120)"
    assert [r.pid for r in engine_ranks(view, "1")] == [120, 121]
    assert len(engine_ranks(view, None)) == len(view) == 5


def test_without_parentage_nothing_is_inherited():
    view = rank_view(sample(member(110, "VLLM::EngineCore_DP1", None), member(121, "VLLM::Worker", None)))
    assert view[1].axes == ()


def test_sglang_tree():
    view = rank_view(sample(member(100, "python3", 1, role="api"), member(110, "sglang::scheduler_TP0", 100),
                            member(111, "sglang::scheduler_TP1", 100), member(112, "sglang::detokenizer", 100)))
    assert rank_words(view[1], view) == "TP rank 1 of 2 (sglang::scheduler_TP1, pid 111)"
    assert rank_words(view[2], view) == "the detokenizer (sglang::detokenizer, pid 112)"
