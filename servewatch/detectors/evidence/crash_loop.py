"""crash_loop's episodes, which restart, engine_dead, process_exit, health_loss, startup_stalled and the outcome
verdicts also read: several restarts or deaths in a short window are one crash loop, not a verdict per start."""

from __future__ import annotations

from servewatch.detectors.series import once_per_window, tracks
from servewatch.detectors.verdict import Evidence, Thresholds
from servewatch.timeline.window import Window

_COUNTERS = ("steps", "generation_tokens", "prompt_tokens", "preemptions")

Episode = tuple[float, Evidence]


def _identity_changes(window: Window) -> list[Episode]:
    alive = [p for p in window.process if p.alive and p.root_create_time is not None]
    return [(b.t, Evidence("process", b.t, "root_create_time", b.root_create_time))
            for a, b in zip(alive, alive[1:])
            if (a.root_pid, a.root_create_time) != (b.root_pid, b.root_create_time)]


def _counter_resets(window: Window) -> list[Episode]:
    resets: list[Episode] = []
    for _, track in sorted(tracks(window.metrics).items())[:1]:    # one engine tells a server restart
        for i, c in track.counter_drops:
            t = track.times[i]
            resets.append((t, Evidence("metrics", t, f"counters.{_COUNTERS[c]}", track.counter_columns[c][i])))
    return resets


def _later_starts(window: Window) -> list[Episode]:
    ups = [e for e in window.logs if e.kind == "startup" and e.fields.get("stage") == "process_up"]
    return [(e.t, Evidence("log", e.t, "stage", "process_up")) for e in ups[1:]]


def _exits(window: Window) -> list[Episode]:
    out: list[Episode] = []
    previous = None
    for p in window.process:
        if previous is not None and previous.alive and not p.alive:
            out.append((p.t, Evidence("process", p.t, "alive", False)))
        previous = p
    return out


def _engine_deaths(window: Window, config: Thresholds) -> list[Episode]:
    """engine_dead log lines, one episode per burst (a traceback repeats its death over several lines)."""
    out: list[Episode] = []
    for event in window.logs:
        if event.kind != "engine_dead":
            continue
        if not out or event.t - out[-1][0] > config.crash_loop_burst_s:
            out.append((event.t, Evidence("log", event.t, "kind", "engine_dead")))
    return out


@once_per_window          # restart, engine_dead and crash_loop all ask
def crash_loop_episodes(window: Window, config: Thresholds) -> tuple[str, list[Episode]] | None:
    """`_crash_loop_episodes`, computed once per window (undecorated there: mutmut mutates no decorated function)."""
    return _crash_loop_episodes(window, config)


def _crash_loop_episodes(window: Window, config: Thresholds) -> tuple[str, list[Episode]] | None:
    """(what repeats, its episodes) when the target restarted or died at least crash_loop_count times in
    the last crash_loop_window_s; the signal with the most episodes speaks (one restart shows as a new
    process, a counter reset and a new startup line at once: they are not added up)."""
    since = (window.end or 0.0) - config.crash_loop_window_s
    signals = {
        "restarts (new process)": _identity_changes(window),
        "restarts (counters reset)": _counter_resets(window),
        "restarts (startup lines)": _later_starts(window),
        "exits": _exits(window),
        "engine deaths": _engine_deaths(window, config),
    }
    best = None
    for what, episodes in signals.items():
        recent = [e for e in episodes if e[0] >= since]
        if len(recent) >= config.crash_loop_count and (best is None or len(recent) > len(best[1])):
            best = (what, recent)
    return best


def in_crash_loop(window: Window, config: Thresholds) -> bool:
    return crash_loop_episodes(window, config) is not None
