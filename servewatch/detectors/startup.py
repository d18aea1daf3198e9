"""Startup as a sequence of stages, and startup_stalled: a start that stopped at a stage.

Stages are the dialects' startup log events (process up, engine start, weights loaded with the seconds
they took, KV cache sized, compile, graph capture, engine ready, API listening, ready) plus the first
successful /health after the start. A real vLLM 0.32 on 2 CPU cores went through them in 30–50 s, the
longest gaps being its imports (~16 s to the engine start) and torch.compile (~20 s); a target that is
starting is not "health lost" (its port refuses, or SGLang answers 503, until it is ready).
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.evidence.crash_loop import in_crash_loop
from servewatch.detectors.evidence.stages import Stage, in_startup, stages
from servewatch.detectors.rank_words import named_processes
from servewatch.detectors.verdict import (INCIDENT, PAGE, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class StartupSettings(Settings):
    """startup_stalled's thresholds."""

    # startup_stalled: no new startup stage for max(startup_stall_k x the longest gap between the stages
    # so far, startup_stall_floor_s) while /health has not yet succeeded since the start (what counts as a start
    # in progress, startup_max_s: detectors/evidence/stages.py).
    startup_stall_k: float = 4.0
    startup_stall_floor_s: float = 120.0


# What a start that reached a stage is doing next: where it is stuck when nothing follows.
NEXT = {
    "process_up": "starting the engine (imports, engine process start)",
    "engine_start": "preparing to load the weights",
    "weights_loading": "loading the weights",
    "weights_loaded": "compiling, profiling memory and sizing the KV cache",
    "compiling": "compiling the model",
    "compiled": "sizing the KV cache",
    "kv_cache_size": "capturing graphs and warming up",
    "graphs_capturing": "capturing graphs",
    "graphs_captured": "finishing the engine start",
    "engine_ready": "starting the API server",
    "api_listening": "starting the API server's application (and its warm-up request)",
    "ready": "answering its first /health",
}
FINAL_STAGES = ("ready", "health_ok")


def stall_bound(found: list[Stage], config: Thresholds) -> tuple[float, float]:
    """(bound, longest gap between the stages so far): k × that gap, at least the floor."""
    gaps = [b.t - a.t for a, b in zip(found, found[1:])]
    longest = max(gaps, default=0.0)
    return max(config.startup_stall_floor_s, config.startup_stall_k * longest), longest


def detect_startup_stalled(window: Window, config: Thresholds) -> list[Verdict]:
    if not in_startup(window, config) or in_crash_loop(window, config):
        return []
    found = stages(window, config)
    last = found[-1]
    end = window.end or last.t
    since = last.t
    if last.source == "process" and window.process:
        # No startup line read and the recording began after the process did: whether it was healthy before
        # we looked is unknown, so the wait counts from the first look. (A drill's watch attached to an SGLang
        # serving for 3 minutes called its first sample a start stuck for 179 s, past the 120 s floor.)
        since = max(since, window.process[0].t)
    waited = end - since
    bound, longest = stall_bound(found, config)
    if waited < bound:
        return []
    doing = NEXT.get(last.name, "the next stage")
    watched = f" of watching (the process started {end - last.t:.0f} s ago)" if since > last.t else ""
    why = (f"startup stuck after {_describe(last)} for {waited:.0f} s{watched}, {doing} (bound {bound:.0f} s: "
           f"{config.startup_stall_k:g} × the longest earlier stage, {longest:.0f} s, at least "
           f"{config.startup_stall_floor_s:g} s); {len(found)} stage(s) in {end - found[0].t:.0f} s since the start")
    if last.source == "log":
        evidence = [Evidence("log", last.t, "stage", last.name)]
    else:
        evidence = [Evidence("process", window.process[-1].t, "root_create_time", last.t)]
    stopped = _stopped_members(window)
    if stopped:

        why += f"; process(es) stopped: {named_processes(window.process[-1], stopped)}"
        evidence += [Evidence("process", window.process[-1].t, f"members[{pid}].status", "stopped")
                     for pid, _ in stopped]
    failing = [h for h in window.health if not h.ok and h.t >= found[0].t]
    if failing:
        evidence.append(Evidence("health", failing[-1].t, "status" if failing[-1].status else "error",
                                 failing[-1].status if failing[-1].status else failing[-1].error))
    return [Verdict("startup_stalled", end, last.t, why, tuple(evidence),
                    {"stage": last.name, "waited_s": round(waited, 1), "bound_s": round(bound, 1),
                     "longest_gap_s": round(longest, 1), "stages": len(found)})]


def _describe(stage: Stage) -> str:
    text = stage.name
    if "seconds" in stage.fields:
        text += f" (took {stage.fields['seconds']:g} s)"
    if stage.source == "process":
        text = "the process start (no startup line in the log)"
    return text


def _stopped_members(window: Window) -> list[tuple[int, str]]:
    if not window.process or not window.process[-1].alive:
        return []
    return [(m.pid, m.title) for m in window.process[-1].members if m.status == "stopped"]


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

STARTUP_STALLED = RunbookBranch(
    meaning="The target is starting and has not reached its next startup stage for longer than its earlier "
            "stages allow: the start is stuck at the stage the verdict names (it is not 'health lost': it was "
            "never healthy since it started).",
    check_next=(
        "The stage it stopped after and what comes next: loading weights (storage, a download, a full "
        "disk), compiling (a compile cache that fails to load makes every start compile again: ~20 s on a "
        "2-core CPU for a tiny model), sizing the KV cache (memory profiling), capturing graphs, or the API "
        "server's start.",
        "Process states in the bundle: a member in status 'stopped' or at 0% CPU is not working; one "
        "at 100% is still working and the bound may be too tight for this model (raise "
        "startup_stall_floor_s).",
        "A stack of the engine process (e.g. `py-spy dump --pid PID`) shows where it waits.",
        "The previous starts of the same deployment: how long each stage took then (the stage table of "
        "the report).",
    ),
    expected_range="Each stage follows the previous one within a few times the longest earlier stage; a real "
                   "vLLM 0.32 on 2 CPU cores reached /health 200 in 30–50 s (imports ~16 s, compile ~20 s).",
    safe_action="Keep the bundle and a stack, then stop the start and start again; if the same stage hangs "
                "again, fix its cause (storage, memory, compile cache) before retrying.",
    rollback="Nothing to roll back: the replica never served.",
    restart_destroys="Only the progress of this start (weights already read, compile results not yet cached); "
                     "no request was served yet.",
)

SETTINGS = (StartupSettings,)
SPECS = (
    VerdictSpec("startup_stalled", detect_startup_stalled, INCIDENT, "page",
                "the start stopped at a stage", STARTUP_STALLED, ("log", "process", "health"),
                labels=("stage",), action=PAGE),
)
