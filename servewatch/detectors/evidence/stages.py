"""A start as a sequence of stages, and whether one is in progress: startup_stalled, health_loss and not_serving
read it (and the bundle's incident report)."""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.detectors.verdict import Settings, Thresholds
from servewatch.timeline.samples import LogEvent
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class StartSettings(Settings):
    """What makes a start one in progress (startup_stalled, health_loss and not_serving read it): shared evidence's
    setting, composed into DetectorConfig with the verdicts' own."""

    # A target whose process is younger than startup_max_s and was never healthy since counts as starting (no
    # health_loss then), also without a log.
    startup_max_s: float = 900.0


# The stages in the order an engine goes through them (a start skips those its engine does not log).
STAGES = ("process_up", "engine_start", "weights_loading", "weights_loaded", "compiling", "compiled",
          "kv_cache_size", "graphs_capturing", "graphs_captured", "engine_ready", "api_listening", "ready",
          "health_ok")
START_STAGE = "process_up"


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    t: float
    fields: dict = field(default_factory=dict)   # the numbers the log gave (seconds, tokens, concurrency)
    source: str = "log"                          # "log", "health" or "process"


def startup_events(window: Window) -> list[LogEvent]:
    return [e for e in window.logs if e.kind == "startup" and isinstance(e.fields.get("stage"), str)]


def latest_start(window: Window, config: Thresholds) -> Stage | None:
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


def stages(window: Window, config: Thresholds | None = None) -> list[Stage]:
    """The stages of the newest start, in time order (each stage once, at its first line; the numbers of
    its later lines, such as vLLM 0.11's separate concurrency line, merged in)."""
    config = config or StartSettings()
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


def in_startup(window: Window, config: Thresholds) -> bool:
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
