"""The rank in words, for every verdict that names one: an engine key's data-parallel rank, the processes stopped
or gone by rank ("TP rank 1 of 2 (VLLM::Worker_TP1, pid 812)"). Pure functions of samples, on the rank model
(timeline.ranks); no detector of its own, so every detector may use them without importing another detector.
"""

from __future__ import annotations

from servewatch.dialects import dp_rank_in_key_words, dp_rank_of
from servewatch.timeline.ranks import engine_ranks, rank_view, rank_words
from servewatch.timeline.samples import ProcessSample

__all__ = ["dp_rank_of", "dp_words", "engine_dp_rank", "gone_words", "named_processes", "stopped_words"]


def engine_dp_rank(key: str) -> str | None:
    """The DP rank an engine key ("engine=1", "dp_rank=1,tp_rank=0") names, if any."""
    labels = dict(part.split("=", 1) for part in key.split(",") if "=" in part)
    return dp_rank_of(labels)


def dp_words(process: ProcessSample | None, key: str) -> str:
    """" (DP rank 1)" for a stall on one engine of a data-parallel server whose processes show DP ranks."""
    if dp_rank_in_key_words(key):   # SGLang's engine key says its DP rank already ("the unified engine (DP rank 1, ...)")
        return ""
    dp = engine_dp_rank(key)
    if process is None or dp is None or not dp.isdigit():
        return ""
    if not any(r.axis("DP") is not None for r in rank_view(process)):
        return ""
    return f" (DP rank {dp})"


def stopped_words(process: ProcessSample | None, key: str, stopped) -> str:
    """"; DP rank 1 worker (VLLM::Worker, pid 907) stopped": the stopped processes by rank, those of the
    stalled engine first; titles for processes the rank model does not know."""
    view = rank_view(process)
    by_pid = {r.pid: r for r in view}
    mine = {r.pid for r in engine_ranks(view, engine_dp_rank(key))}
    ordered = sorted(stopped, key=lambda m: (m.pid not in mine, m.pid))
    named = [rank_words(by_pid[m.pid], view) if m.pid in by_pid else m.title for m in ordered]
    return f"; {len(named)} process(es) stopped: {', '.join(named)}"


def gone_words(samples, missing, logs=()) -> str:
    """The engine processes that are gone, by rank where the last sample that showed them tells it ("TP rank 1
    of 2 (VLLM::Worker_TP1, pid 812), exit code -9 (signal 9)"); how they ended where a log line said it."""
    codes = [e.fields["exit_code"] for e in logs if e.kind == "engine_dead" and isinstance(e.fields.get("exit_code"), int)]
    how = ""
    if codes and len(missing) == 1:       # the line does not say which process: only when one is gone
        code = codes[-1]
        how = f", exit code {code}" + (f" (signal {-code})" if code < 0 else "")
    words = []
    for pid, title in missing:
        last = next((p for p in reversed(samples) if p.error is None and any(m.pid == pid for m in p.members)), None)
        view = rank_view(last)
        rank = next((r for r in view if r.pid == pid), None)
        words.append((rank_words(rank, view) if rank is not None else title) + how)
    return ", ".join(sorted(words))


def named_processes(sample: ProcessSample, pids_titles) -> str:
    """(pid, title) pairs of one sample by rank where the rank model knows them ("TP rank 1 of 2
    (VLLM::Worker_TP1, pid 812)"), else by title; each title once when none has a rank."""
    view = rank_view(sample)
    by_pid = {r.pid: r for r in view}
    if not any(pid in by_pid for pid, _ in pids_titles):
        return ", ".join(sorted({title for _, title in pids_titles}))
    return ", ".join(sorted(rank_words(by_pid[pid], view) if pid in by_pid else title for pid, title in pids_titles))
