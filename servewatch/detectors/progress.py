"""alive_health_ok_no_progress: /health green, process alive, work admitted, and no counter moves.

Alive is not making progress. On a real vLLM a SIGSTOPped worker left /health at 200 and
/metrics answering while `generation_tokens_total` and `iteration_tokens_total_count` froze.
Where /health itself waits on the engine (SGLang 0.5.23 runs a generation through its scheduler), a
stall takes /health down too: there a failed probe does not stop the verdict, the counters decide, and
an engine that keeps using CPU is computing one long step (a huge prefill) until the ceiling says otherwise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from servewatch.detectors.rank_words import dp_words, stopped_words
from servewatch.detectors.evidence.engine_signs import dialect_hint, engine_busy, engine_death_evidence
from servewatch.detectors.evidence.gpus import rank_gpu_evidence
from servewatch.detectors.series import (Track, admitted, cadence, has_progress_counters, num, progress, tracks,
                                         where)
from servewatch.detectors.verdict import (INCIDENT, RESTART, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.timeline.samples import STOPPED
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class StallSettings(Settings):
    """alive_health_ok_no_progress's thresholds (rank_stalled reads stall_busy_cpu_percent too)."""

    # alive_health_ok_no_progress: no progress counter (steps, generation tokens, prompt tokens) moved
    # while work was admitted for at least
    #   clamp(stall_k x max(typical longest recent gap between counter movements (p90 of the last
    #         stall_recent_movements gaps, so one earlier stall does not raise the bar), scrape cadence),
    #         stall_floor_s, stall_ceiling_s).
    # A movement seen again at the very next scrape counts as a gap of 0 (the engine steps faster than
    # we look; a slow scrape of a saturated API server is not the engine's cadence).
    # The gap is learned from the target's own recent step cadence (busy periods only), so a slow
    # engine or a long prefill that still steps raises the bar; idle (running = waiting = 0) never counts.
    stall_k: float = 4.0
    stall_floor_s: float = 2.0
    stall_ceiling_s: float = 60.0
    stall_recent_movements: int = 32     # how many recent counter movements define "recent cadence"
    # Where /health itself waits on the engine (SGLang), a long step and a stall look alike from /health
    # and the counters; the engine's own CPU tells them apart. While an engine process used
    # at least this much CPU (% of one core) in the last stall_floor_s and none is stopped, the threshold
    # is stall_ceiling_s. A real SGLang computing one 170,000-token prefill step read 47-104 % per 0.5 s
    # sample on 2 shared cores (95-180 % alone); idle with --sleep-on-idle 3-18 %; SIGSTOPped 0 %.
    stall_busy_cpu_percent: float = 30.0

    def validate(self) -> list[str]:
        return self.ordered("stall_floor_s", "stall_ceiling_s") + self.counts("stall_recent_movements")


NAME = "alive_health_ok_no_progress"
# A quiet this share of one scrape cadence short of the threshold reaches it. The threshold is a whole number of
# cadences (4 x 2.00 s = 8.00 s), and the quiet is the same number of scrape-to-scrape gaps of arrival times, which
# jitter by milliseconds: the fourth quiet scrape read 7.99x s about half the time and the verdict waited a whole
# cadence for the fifth ("no progress for 10.0 s (threshold 8.0 s)"; a frozen target's livez 10.2 and 10.5 s after
# the freeze, benchmarks/fleet.py at 1,000 targets, 2026-12-07).
JITTER_SHARE = 0.05
_COUNTER_FIELDS = ("counters.steps", "counters.generation_tokens", "counters.prompt_tokens")
_STOPPED = STOPPED


def detect(window: Window, config: Thresholds) -> list[Verdict]:
    health = window.health[-1] if window.health else None
    if health is None:
        return []
    through_engine = _health_runs_through_engine(window)
    if not health.ok and not through_engine:
        return []
    process = window.process[-1] if window.process else None
    if process is not None and not process.alive:
        return []
    if engine_death_evidence(window, config)[0] is not None:
        return []   # an engine that died makes no progress: that is engine_dead's verdict, not a stall
    verdicts = []
    # Not only while /health fails: the probe that the long step's end answers can arrive before the
    # scrape that shows the step's counters (seen on a real SGLang).
    busy = through_engine and engine_busy(window.process, config)
    for key, track in sorted(tracks(window.metrics).items()):
        verdict = _engine_stall(key, track, health, process, busy, config)
        if verdict is not None:
            verdicts.append(_with_gpus(verdict, window, process))
    return verdicts


def _with_gpus(verdict: Verdict, window: Window, process) -> Verdict:
    """The stall with each rank's GPU in its why line and details, where NVML lists the ranks."""
    clause, token = rank_gpu_evidence(window, process)
    if token is None:
        return verdict
    return dataclasses.replace(verdict, why=verdict.why + clause, details={**verdict.details, "gpus": token})


def _health_runs_through_engine(window: Window) -> bool:
    """Whether this engine's /health waits on the engine itself (SGLang): then a stalled engine takes
    /health down with it, and the stall is still told by its progress counters."""
    dialect = dialect_hint(window)
    return dialect is not None and dialect.health_runs_through_engine


def typical_longest_gap(gaps: list[float]) -> float:
    """The longest gap between counter movements that is typical of the target: with five or more gaps,
    their 90th percentile, so one earlier stall (a single huge gap) does not teach the detector that
    stalls are the normal cadence; with fewer, the longest."""
    if not gaps:
        return 0.0
    ordered = sorted(gaps)
    if len(ordered) < 5:
        return ordered[-1]
    return ordered[int(0.9 * (len(ordered) - 1))]


def _quiet_since(track: Track) -> int:
    """The index of the point the current quiet began at: the newest counter movement within the trailing
    stretch of admitted work, else that stretch's first point (the newest point must be admitted)."""
    moves, states = track.progress, track.states
    i = len(moves) - 1
    while i > 0 and moves[i] == moves[i - 1] and admitted(states[i - 1]):
        i -= 1
    return i


def _engine_stall(key, track: Track, health, process, busy: bool, config: Thresholds) -> Verdict | None:
    points = track.points
    if len(points) < 2 or not has_progress_counters(points[-1][1]):
        return None
    last_sample, last_state = points[-1]
    if not admitted(last_state):
        return None
    # The threshold is never under min(ceiling, floor): a quiet shorter than that needs no cadence.
    if track.times[-1] - track.times[_quiet_since(track)] < min(config.stall_ceiling_s, config.stall_floor_s):
        return None

    # Walk the series once: where the current busy stretch began, where the counters last moved, and
    # the gaps between movements inside busy stretches (the target's own recent step cadence).
    busy_from = None
    last_move = None
    gaps: list[float] = []
    prev_move_t = None
    interrupted = True
    moves = track.progress
    for i, (sample, state) in enumerate(points):
        if not admitted(state):
            busy_from = None
            interrupted = True
            continue
        if busy_from is None:
            busy_from = i
        if i > 0 and moves[i] != moves[i - 1]:
            if prev_move_t is not None and not interrupted:
                # Moved again at the very next scrape: the engine steps faster than we look, and the
                # scrape gap (a starved API server can take seconds to answer) is not its cadence.
                gaps.append(sample.t - prev_move_t if last_move != i - 1 else 0.0)
            prev_move_t = sample.t
            interrupted = False
            last_move = i
    start = busy_from if last_move is None or last_move < busy_from else last_move
    onset_sample, onset_state = points[start]
    quiet_s = last_sample.t - onset_sample.t

    recent_gaps = gaps[-config.stall_recent_movements:]
    longest_gap = typical_longest_gap(recent_gaps)
    scrape_gap = cadence(points) or 0.0
    basis = max(longest_gap, scrape_gap)
    threshold = min(config.stall_ceiling_s, max(config.stall_floor_s, config.stall_k * basis))
    if busy:
        threshold = config.stall_ceiling_s   # computing one long step, not stalled (below)
    if quiet_s < threshold - JITTER_SHARE * scrape_gap:
        return None

    stopped = [m for m in (process.members if process is not None else ()) if m.status in _STOPPED]
    counters = dict(zip(_COUNTER_FIELDS, progress(last_state)))
    shown = ", ".join(f"{f.split('.')[1].replace('_', ' ')} {num(v)}" for f, v in counters.items() if v is not None)
    since_what = "last counter movement" if start == last_move else "work was admitted"
    why = (f"no progress for {quiet_s:.1f} s{where(key)}{dp_words(process, key)} (threshold {threshold:.1f} s = "
           f"max({config.stall_floor_s:g} s, "
           f"{config.stall_k:g} x {basis:.2f} s recent cadence)) since {since_what}, with {num(last_state.running)} "
           f"running and {num(last_state.waiting)} waiting; {shown} unchanged; /health {_health_said(health)}")
    if stopped:
        why += stopped_words(process, key, stopped)
    if busy:
        why += f"; its engine kept using CPU, so this waited for the {threshold:g} s ceiling (no step takes that long)"

    evidence = [Evidence("metrics", onset_sample.t, f, v) for f, v in counters.items() if v is not None]
    evidence += [Evidence("metrics", last_sample.t, f, v) for f, v in counters.items() if v is not None]
    evidence += [Evidence("metrics", last_sample.t, "running", last_state.running),
                 Evidence("metrics", last_sample.t, "waiting", last_state.waiting),
                 Evidence("health", health.t, "status", health.status) if health.ok
                 else Evidence("health", health.t, "error", health.error)]
    if process is not None:
        evidence.append(Evidence("process", process.t, "alive", process.alive))
        evidence += [Evidence("process", process.t, f"members[{m.pid}].status", m.status) for m in stopped]
    t = max(last_sample.t, health.t, process.t if process is not None else last_sample.t)
    return Verdict(
        name=NAME, t=t, onset=onset_sample.t, why=why, evidence=tuple(evidence),
        details={"engine": key, "quiet_s": quiet_s, "threshold_s": threshold, "longest_gap_s": longest_gap,
                 "scrape_gap_s": scrape_gap, "running": last_state.running, "waiting": last_state.waiting,
                 "stopped_processes": len(stopped), "process_known": process is not None, "engine_busy": busy},
    )


def _health_said(health) -> str:
    if health.ok:
        return str(health.status)
    return (f"failing ({health.error or health.status}; this engine's /health waits on the engine, "
            "so a stall takes it down too)")


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

STALL = RunbookBranch(
    meaning="/health answers 2xx and the process is alive with admitted work, but no progress counter "
            "(engine steps, generation tokens, prompt tokens) moved for longer than the step cadence allows. "
            "Alive is not making progress; health green is not serving healthy.",
    check_next=(
        "Process states in the bundle: an engine core or worker in status 'stopped' or 'zombie', or "
        "running at ~0% CPU, explains a frozen engine (a SIGSTOPped vLLM worker gives exactly this "
        "signature: /health 200, /metrics answering, running 4-8, tokens frozen).",
        "Take a stack of the engine-core process before touching it (e.g. `py-spy dump --pid PID`; needs "
        "ptrace rights): a blocked queue put or collective names the fault domain (vLLM #53859: "
        "EngineCore blocked in ZmqEventPublisher.publish).",
        "num_requests_running at onset vs now: unchanged means admitted requests are parked, not finishing.",
        "num_requests_waiting and queue age: rising waiting with flat tokens means users are queueing "
        "behind a frozen engine.",
        "GPU utilisation when present: ~0% with running > 0 points at a blocked host thread; pinned "
        "at 100% points at a hung kernel or collective.",
    ),
    expected_range="While running > 0, generation_tokens_total and the engine step count advance at every "
                   "scrape (a long prefill still steps). A zero delta across the adaptive window is outside "
                   "the range; idle (running = waiting = 0) is not a stall.",
    safe_action="Keep this bundle and a stack dump, then stop routing new traffic to this replica (drain it at "
                "the router / load balancer). Draining is reversible and keeps the evidence alive.",
    rollback="Return the replica to routing once tokens move again for at least three consecutive scrapes "
             "(e.g. after the blocked consumer recovers or a stopped process is continued).",
    restart_destroys="Every in-flight request (the running count at the verdict) and its partial output, the KV "
                     "and prefix cache contents (they must re-warm), and the frozen process state that "
                     "shows where it blocked: take the stack before any restart.",
)

SETTINGS = (StallSettings,)
SPECS = (
    VerdictSpec("alive_health_ok_no_progress", detect, INCIDENT, "page",
                "health is green but no token has moved", STALL,
                ("metrics", "health", "process"), labels=("engine",), action=RESTART),
)
