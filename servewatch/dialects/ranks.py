"""The rank model: which engine process is which rank, from process titles and parentage.

An engine titles its ranked processes with a stem and rank suffixes: vLLM `VLLM::EngineCore_DP1`,
`VLLM::Worker_PP1_TP0`, `VLLM::DPCoordinator`; SGLang `sglang::scheduler_DP0_TP1`, `sglang::detokenizer`,
`sglang::data_parallel_controller`. A dialect lists its stems (`Dialect.rank_titles`); `parse_title` reads a
title against them. A rank a title does not carry is inherited from the nearest ranked ancestor: a vLLM
data-parallel worker is titled plain `VLLM::Worker`, and only its parent `VLLM::EngineCore_DP1` says DP 1.
A title no dialect claims is not guessed at: it has no rank.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

Axes = tuple[tuple[str, int], ...]      # (("DP", 1), ("TP", 0)): the title's order
_SUFFIX = re.compile(r"_((?:[A-Z]+_)*[A-Z]+)(\d+)")
_SUFFIXES = re.compile(rf"(?:{_SUFFIX.pattern})*")
COMM_LEN = 15            # a title read from the kernel's name is cut to 15 bytes ("VLLM::Worker_TP")

def parse_title(title: str, stems: Mapping[str, str]) -> tuple[str, Axes] | None:
    """(kind, axes) when `title` is one of `stems` followed only by rank suffixes, else None."""
    for stem, kind in stems.items():
        if title == stem:
            return kind, ()
        if title.startswith(stem) and _SUFFIXES.fullmatch(title, len(stem)):
            return kind, tuple((axis, int(n)) for axis, n in _SUFFIX.findall(title, len(stem)))
        if len(title) == COMM_LEN and (stem.startswith(title) or title.startswith(stem)):
            return kind, ()          # a cut kernel name: the kind is sure, the ranks are not there
    return None
