"""Startup as a sequence of stages, and startup_stalled: a start that stopped at a stage.

Stages are the dialects' startup log events (process up, engine start, weights loaded with the seconds
they took, KV cache sized, compile, graph capture, engine ready, API listening, ready) plus the first
successful /health after the start. A real vLLM 0.32 on 2 CPU cores went through them in 30–50 s, the
longest gaps being its imports (~16 s to the engine start) and torch.compile (~20 s); a target that is
starting is not "health lost" (its port refuses, or SGLang answers 503, until it is ready).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.rank_words import named_processes
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.samples import LogEvent
from servewatch.timeline.window import Window

# The stages in the order an engine goes through them (a start skips those its engine does not log).
STAGES = ("process_up", "engine_start", "weights_loading", "weights_loaded", "compiling", "compiled",
          "kv_cache_size", "graphs_capturing", "graphs_captured", "engine_ready", "api_listening", "ready",
          "health_ok")
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
START_STAGE = "process_up"
FINAL_STAGES = ("ready", "health_ok")


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    t: float
    fields: dict = field(default_factory=dict)   # the numbers the log gave (seconds, tokens, concurrency)
    source: str = "log"                          # "log", "health" or "process"


def startup_events(window: Window) -> list[LogEvent]:
    return [e for e in window.logs if e.kind == "startup" and isinstance(e.fields.get("stage"), str)]


def latest_start(window: Window, config: DetectorConfig) -> Stage | None:
    """The newest start the window shows: the log's process_up line (else its first stage line), or the
    target process's create time when it is recent enough to be a start in progress."""
    events = startup_events(window)
    ups = [e for e in events if e.fields["stage"] == START_STAGE]
    if ups:
        return Stage(START_STAGE, ups[-1].t, {}, "log")
    candidates = []
    if events:
        candidates.append(Stage(START_STAGE, events[0].t, {}, "log"))
    alive = [p for p in window.process if p.alive and p.root_create_time is not None and p.error is None]
    if alive:
        created = alive[-1].root_create_time
        end = window.end or created
        if end - created <= config.startup_max_s:
            candidates.append(Stage(START_STAGE, created, {}, "process"))
    return max(candidates, key=lambda s: s.t) if candidates else None


def stages(window: Window, config: DetectorConfig | None = None) -> list[Stage]:
    """The stages of the newest start, in time order (each stage once, at its first line; the numbers of
    its later lines, such as vLLM 0.11's separate concurrency line, merged in)."""
    config = config or DetectorConfig()
    start = latest_start(window, config)
    if start is None:
        return []
    found: dict[str, Stage] = {START_STAGE: start}
    for event in startup_events(window):
        if event.t < start.t:
            continue
        name = event.fields["stage"]
        numbers = {k: v for k, v in event.fields.items() if k not in ("stage", "dialect")}
        if name in found:
            seen = found[name]
            found[name] = Stage(name, seen.t, {**numbers, **seen.fields}, seen.source)
        else:
            found[name] = Stage(name, event.t, numbers)
    healthy = next((h for h in window.health if h.ok and h.t >= start.t), None)
    if healthy is not None:
        found["health_ok"] = Stage("health_ok", healthy.t, {}, "health")
    return sorted(found.values(), key=lambda s: (s.t, STAGES.index(s.name) if s.name in STAGES else len(STAGES)))


def in_startup(window: Window, config: DetectorConfig) -> bool:
    """A start is in progress: the window shows one, and no /health has succeeded since."""
    found = stages(window, config)
    if not found or any(s.name == "health_ok" for s in found):
        return False
    start = found[0].t
    if any(e.kind == "startup_failure" and e.t >= start for e in window.logs):
        return False
    # An engine that has generated tokens has started, whatever /health says: a watch attached to a
    # running vLLM under load saw no /health 200 for minutes (its API loop blocked) and must not call
    # that a start stuck since the process began.
    if any(m.t >= start and any((e.counters.generation_tokens or 0) > 0 for e in m.engines) for m in window.metrics):
        return False
    if window.process and not window.process[-1].alive:
        return False
    return not (found[-1].name == "ready" and not window.health)   # a log-only watch ends at "ready"


def stall_bound(found: list[Stage], config: DetectorConfig) -> tuple[float, float]:
    """(bound, longest gap between the stages so far): k × that gap, at least the floor."""
    gaps = [b.t - a.t for a, b in zip(found, found[1:])]
    longest = max(gaps, default=0.0)
    return max(config.startup_stall_floor_s, config.startup_stall_k * longest), longest


def detect_startup_stalled(window: Window, config: DetectorConfig) -> list[Verdict]:
    from servewatch.detectors.restart import in_crash_loop

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
