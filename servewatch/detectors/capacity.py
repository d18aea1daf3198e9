"""overload, kv_pressure, preemption: the engine works, but demand exceeds what it can hold.

Seed 002: overload is the only signature with a queue; "running pinned at the slot limit while KV
is 28% used" means out of slots, not memory. Seed 000: preemption is a capacity signal with a price,
read as the counter's delta in the window (a peer read the cumulative value as current pressure).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import gt, mul, sub

from servewatch.detectors.series import Point, Track, engine_key, num, tracks, where
from servewatch.detectors.verdict import (INCIDENT, PAGE, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.engine.state import EngineState
from servewatch.timeline.samples import LogEvent
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class OverloadSettings(Settings):
    """overload's thresholds."""

    # overload: waiting > 0 for at least overload_sustain_s while the engine still progresses; it holds
    # through dips to 0 shorter than overload_clear_s (so a queue hovering at 0/1 fires once).
    overload_sustain_s: float = 10.0
    overload_clear_s: float = 5.0
    # ...and a time-averaged queue of at least this many requests over that stretch: one request that
    # comes and goes while its prefill is admitted is not overload.
    overload_min_mean_waiting: float = 2.0
    # ...and its cause is `slots` when running sat at the slot limit for at least this share of the
    # stretch (a real vLLM dips below it for a step whenever a request finishes before the next is admitted).
    overload_slots_share: float = 0.5
    # ...counting running within this share of the limit as at it: SGLang publishes its running count after
    # a decode step has freed the slots of the requests that finished, before the next prefill refills them
    # (254 of 256 under a queue). Below 50 slots this is less than one request: the limit itself.
    overload_slots_slack: float = 0.02
    # ...and where /metrics gave no good answer for at least this long within such a stretch (a saturated
    # API server answers a scrape in seconds or not at all; a watcher starved of CPU asks late), the same
    # rules read the engine's own periodic stats lines in its log instead (vLLM's "Running: 4 reqs,
    # Waiting: 28 reqs, ..." every VLLM_LOG_STATS_INTERVAL s).
    overload_metrics_silent_s: float = 5.0

    def validate(self) -> list[str]:
        return self.shares("overload_slots_share", "overload_slots_slack")


@dataclass(frozen=True, slots=True)
class KvPressureSettings(Settings):
    """kv_pressure's thresholds (kv_high also splits overload's cause)."""

    # kv_pressure, either of two rules. Held: KV usage >= kv_high over at least kv_sustain_s, holding
    # through dips shorter than kv_grace_s, with a time-weighted mean of at least kv_clear over that
    # stretch. Queued: over the last kv_window_s (at least kv_sustain_s of it seen), requests waiting,
    # a peak >= kv_high and a time-weighted mean >= kv_clear (a real vLLM under pressure swings 60-100%
    # as requests finish or are preempted, with dips longer than any grace). kv_high is also where
    # overload's cause is "kv", not "slots".
    kv_high: float = 0.90
    kv_clear: float = 0.80
    kv_sustain_s: float = 5.0
    kv_grace_s: float = 5.0
    kv_window_s: float = 20.0

    def validate(self) -> list[str]:
        return self.shares("kv_high", "kv_clear") + self.ordered("kv_clear", "kv_high")


@dataclass(frozen=True, slots=True)
class PreemptionSettings(Settings):
    """preemption's thresholds."""

    # preemption: the counter rose by at least preemption_min within preemption_window_s
    # (the delta, never the cumulative value).
    preemption_window_s: float = 60.0
    preemption_min: float = 1.0


def _sustained(times: list[float], hot: list[bool], grace_s: float) -> tuple[int, int] | None:
    """(first, last) index of the hot points of the newest stretch where `hot` holds, cold dips shorter
    than grace_s included; None when the newest cold stretch has already lasted grace_s."""
    first = last = None
    boundary_t = times[-1] if times else 0.0
    for i in range(len(times) - 1, -1, -1):
        if hot[i]:
            if last is None:
                last = i
            first = i
            boundary_t = times[i]
        elif boundary_t - times[i] >= grace_s:
            break
    return (first, last) if last is not None else None


def _between(times: list[float], first: int, last: int) -> slice:
    """The points whose time lies within [times[first], times[last]] (times in order)."""
    return slice(bisect_left(times, times[first]), bisect_right(times, times[last]))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


# --- overload ------------------------------------------------------------------------------------

def detect_overload(window: Window, config: Thresholds) -> list[Verdict]:
    """From the scrapes; and, for an engine whose /metrics went unanswered for long stretches (a saturated
    API server, a starved watcher), from the engine's own periodic stats lines in its log. A queue behind a
    throttled GPU is gpu_throttled's (the registry's yields_to), not more demand than capacity."""
    verdicts = []
    by_engine = tracks(window.metrics)
    for key, track in sorted(by_engine.items()):
        verdict = _overload_from_scrapes(key, track, config)
        if verdict is not None:
            verdicts.append(verdict)
    seen = {v.details["engine"] for v in verdicts}
    for key, lines in sorted(_stats_lines(window).items()):
        if key in seen or (key not in by_engine and seen):
            continue   # the scrapes already tell it (a line naming no engine may be any of them)
        scraped = by_engine[key].times if key in by_engine else [m.t for m in window.good_metrics()]
        limit = by_engine[key].states[-1].slot_limit if key in by_engine else None
        verdict = _overload_from_stats_lines(key, lines, scraped, limit, config)
        if verdict is not None:
            verdicts.append(verdict)
    return verdicts


def _overload_from_scrapes(key: str, track: Track, config: Thresholds) -> Verdict | None:
    points, times = track.points, track.times
    waiting = track.column("waiting")
    stretch = _sustained(times, [(w or 0) > 0 for w in waiting], config.overload_clear_s)
    if stretch is None:
        return None
    (first, first_state), (last, state) = points[stretch[0]], points[stretch[1]]
    sustained = last.t - first.t
    if sustained < config.overload_sustain_s:
        return None
    if track.progress[stretch[0]] == track.progress[-1]:
        return None  # a queue behind an engine that does nothing is a stall, not an overload
    span = _between(times, *stretch)
    mean_waiting = _time_mean(times[span], [w or 0.0 for w in waiting[span]])
    if mean_waiting < config.overload_min_mean_waiting:
        return None
    cause, because = _overload_cause(points[span], config)
    why = (f"{num(state.waiting)} waiting{where(key)}, waiting > 0 for {sustained:.1f} s "
           f"(≥ {config.overload_sustain_s:g} s, {mean_waiting:.1f} on average); cause {cause}: {because}")
    evidence = (Evidence("metrics", first.t, "waiting", first_state.waiting),
                Evidence("metrics", last.t, "waiting", state.waiting),
                Evidence("metrics", last.t, "running", state.running),
                Evidence("metrics", last.t, "kv_usage", state.kv_usage),
                Evidence("metrics", last.t, "slot_limit", state.slot_limit))
    return Verdict("overload", last.t, first.t, why, evidence,
                   {"engine": key, "cause": cause, "waiting": state.waiting, "running": state.running,
                    "slot_limit": state.slot_limit, "kv_usage": state.kv_usage, "sustained_s": sustained,
                    "mean_waiting": mean_waiting})


@dataclass(frozen=True, slots=True)
class _Line:
    """One engine stats line read from the log, as a point the overload rules read like a scrape's."""

    t: float                  # when it was read
    event: LogEvent
    title: str                # the engine's name in words
    source: str               # the line's shape in words ("stats line")
    state: EngineState        # running, waiting, KV usage (and the slot limit the scrapes know)
    moved: bool               # the line states tokens computed since the previous one


def _stats_lines(window: Window) -> dict[str, list[_Line]]:
    """Each engine's stats lines that state its queue, by engine key (the key of its scrapes)."""
    from servewatch.dialects import by_name

    found: dict[str, list[_Line]] = {}
    for event in window.logs:
        if event.kind != "stats":
            continue
        dialect = by_name(str(event.fields.get("dialect")))
        reading = dialect.stats_reading(event.fields) if dialect is not None else None
        if reading is None or reading.values.get("waiting") is None:
            continue
        values = reading.values
        kv_pct = values.get("kv_pct")
        state = EngineState(dialect=dialect.name, naming=reading.naming or "", labels=dict(reading.labels),
                            running=values.get("running"), waiting=values.get("waiting"),
                            kv_usage=None if kv_pct is None else kv_pct / 100.0)
        moved = (values.get("gen_tps") or 0) > 0 or (values.get("prompt_tps") or 0) > 0
        found.setdefault(engine_key(dict(reading.labels)), []).append(
            _Line(event.t, event, dialect.title or dialect.name, reading.source, state, moved))
    return found


def _longest_silence(scraped: list[float], start: float, end: float) -> float:
    """The longest time within [start, end] with no good scrape (`scraped`: their times, in order); a
    silence that began before `start` counts from its last good scrape."""
    before = scraped[:bisect_right(scraped, start)][-1:] or [start]
    inside = scraped[bisect_right(scraped, start):bisect_left(scraped, end)]
    marks = [*before, *inside, end]
    return max((b - a for a, b in zip(marks, marks[1:])), default=0.0)


def _overload_from_stats_lines(key: str, lines: list[_Line], scraped: list[float], slot_limit: int | None,
                               config: Thresholds) -> Verdict | None:
    """The overload rules over the engine's own stats lines, for a stretch in which /metrics left the
    detector blind for at least overload_metrics_silent_s (a saturated API server answers a scrape in
    seconds or not at all, and a watcher starved of CPU asks late; the engine's log lines still come)."""
    times = [line.t for line in lines]
    stretch = _sustained(times, [(line.state.waiting or 0) > 0 for line in lines], config.overload_clear_s)
    if stretch is None:
        return None
    first, last = lines[stretch[0]], lines[stretch[1]]
    sustained = last.t - first.t
    if sustained < config.overload_sustain_s:
        return None
    span = _between(times, *stretch)
    if not any(line.moved for line in lines[span][1:]):
        return None  # a queue behind an engine that computes nothing is a stall, not an overload
    mean_waiting = _time_mean(times[span], [line.state.waiting or 0.0 for line in lines[span]])
    if mean_waiting < config.overload_min_mean_waiting:
        return None
    silent = _longest_silence(scraped, first.t, last.t)
    if silent < config.overload_metrics_silent_s:
        return None   # the scrapes saw this stretch: they, not the log, decide
    for line in lines[span]:
        line.state.slot_limit = slot_limit
    cause, because = _overload_cause([(line, line.state) for line in lines[span]], config)
    state = last.state
    clock = datetime.fromtimestamp(last.t, tz=timezone.utc).strftime("%H:%M:%S")
    why = (f"{num(state.waiting)} waiting{where(key)}, waiting > 0 for {sustained:.1f} s "
           f"(≥ {config.overload_sustain_s:g} s, {mean_waiting:.1f} on average), from {last.title}'s own "
           f"{last.source} at {clock} UTC; /metrics did not answer for {silent:.0f} s; cause {cause}: {because}")
    evidence = (Evidence("log", first.t, "waiting", first.state.waiting),
                Evidence("log", last.t, "waiting", state.waiting),
                Evidence("log", last.t, "running", state.running),
                Evidence("log", last.t, "kv_pct", last.event.fields.get("kv_pct")))
    return Verdict("overload", last.t, first.t, why, evidence,
                   {"engine": key, "cause": cause, "waiting": state.waiting, "running": state.running,
                    "slot_limit": slot_limit, "kv_usage": state.kv_usage, "sustained_s": sustained,
                    "mean_waiting": mean_waiting, "seen_in": "log", "metrics_silent_s": silent})


def _time_mean(times: list[float], values: list[float]) -> float:
    """Time-weighted mean of a step function: values[i] holds from times[i] to times[i + 1]."""
    if len(values) < 2:
        return values[0] if values else 0.0
    total = sum(map(mul, map(sub, times[1:], times), values))    # (t2 - t1) * v, in order
    return total / (times[-1] - times[0])


def _overload_cause(run: list[Point], config: Thresholds) -> tuple[str, str]:
    state = run[-1][1]
    deferred = state.waiting_by_reason.get("deferred", 0.0)
    capacity = state.waiting_by_reason.get("capacity", 0.0)
    if deferred > 0 and deferred >= capacity:
        return "deferred", f"{num(deferred)} of {num(state.waiting)} waiting are deferred (not for lack of room)"
    kv_values = [s.kv_usage for _, s in run if s.kv_usage is not None]
    peak_kv = max(kv_values) if kv_values else None
    if peak_kv is not None and peak_kv >= config.kv_high:
        return "kv", (f"KV peaked at {_pct(peak_kv)} (≥ {_pct(config.kv_high)}) while requests waited, now "
                      f"{_pct(state.kv_usage)} with {num(state.running)} running")
    full = None if state.slot_limit is None else state.slot_limit * (1.0 - config.overload_slots_slack)
    if full is not None and state.running is not None and state.running >= state.slot_limit:
        return "slots", (f"running {num(state.running)} = slot limit {state.slot_limit} while KV is "
                         f"{_pct(state.kv_usage)}: out of slots, not memory")
    if full is not None and state.running is not None and state.running >= full:
        return "slots", (f"running {num(state.running)} of the slot limit {state.slot_limit} (the slots of requests "
                         f"that just finished, not yet refilled) while KV is {_pct(state.kv_usage)}: out of slots, "
                         "not memory")
    if full is not None:
        at_limit = _time_mean([p.t for p, _ in run],
                              [1.0 if (s.running or 0) >= full else 0.0 for _, s in run])
        if at_limit >= config.overload_slots_share:
            return "slots", (f"running at the slot limit {state.slot_limit} for {at_limit:.0%} of the stretch (now "
                             f"{num(state.running)}) while KV peaked at {_pct(peak_kv)}: out of slots, not memory")
    runnings = {s.running for _, s in run}
    if state.slot_limit is None and len(runnings) == 1 and (state.running or 0) > 0:
        return "slots", (f"running flat at {num(state.running)} (slot limit unknown, inferred) while KV is "
                         f"{_pct(state.kv_usage)}")
    return "unknown", (f"running {num(state.running)} below its limit ({num(state.slot_limit)}) and KV "
                       f"{_pct(state.kv_usage)}: nothing is admitted though there is room")


# --- kv_pressure ---------------------------------------------------------------------------------

def detect_kv_pressure(window: Window, config: Thresholds) -> list[Verdict]:
    """KV near full, judged three ways (any fires):

    - held: KV ≥ kv_high over a stretch of at least kv_sustain_s, dips shorter than kv_grace_s included,
      averaging ≥ kv_clear (the cache pinned full, queue or not);
    - queued: over the last kv_window_s, a time-weighted mean ≥ kv_clear, a peak ≥ kv_high and requests
      waiting. A real vLLM under pressure swings 60–100%: a finished request frees its blocks at once and
      the next admitted one refills them a token per step, so the dips outlast any grace time while the
      queue says the cache, not demand, is the limit;
    - preempting: the engine preempted requests while a scrape showed KV ≥ kv_high and a queue.
    """
    verdicts = []
    for key, track in sorted(tracks(window.metrics).items()):
        known = _KvSeries(track)
        found = _kv_held(known, config) or _kv_queued(known, config) or _kv_preempting(known, config)
        if found is None:
            continue
        rule, run, mean = found
        (first, first_state), (last, state) = run[0], run[-1]
        span = last.t - first.t
        peak = max(s.kv_usage for _, s in run)
        tokens = ""
        if state.kv_used_tokens is not None and state.kv_total_tokens:
            tokens = f" ({num(state.kv_used_tokens)} of {num(state.kv_total_tokens)} tokens)"
        if rule == "held":
            how = (f"≥ {_pct(config.kv_high)} over {span:.1f} s (dips under {config.kv_grace_s:g} s included; "
                   f"mean {_pct(mean)}, peak {_pct(peak)})")
        elif rule == "queued":
            most_waiting = max(s.waiting or 0.0 for _, s in run)
            how = (f"mean {_pct(mean)} over the last {span:.1f} s, peak {_pct(peak)}, with up to "
                   f"{num(most_waiting)} waiting for room")
        else:
            most_waiting = max(s.waiting or 0.0 for _, s in run)
            how = (f"+{num(_preempted(run))} preemptions in the last {span:.1f} s with KV peaking at {_pct(peak)} "
                   f"and up to {num(most_waiting)} waiting: the engine evicts running requests to find room")
        why = (f"KV cache {_pct(state.kv_usage)}{tokens}{where(key)}: {how}, "
               f"{num(state.running)} running, {num(state.waiting)} waiting")
        evidence = (Evidence("metrics", first.t, "kv_usage", first_state.kv_usage),
                    Evidence("metrics", last.t, "kv_usage", state.kv_usage),
                    Evidence("metrics", last.t, "waiting", state.waiting))
        verdicts.append(Verdict("kv_pressure", last.t, first.t, why, evidence,
                                {"engine": key, "rule": rule, "kv_usage": state.kv_usage, "peak_kv_usage": peak,
                                 "mean_kv_usage": mean, "sustained_s": span,
                                 "kv_total_tokens": state.kv_total_tokens}))
    return verdicts


class _KvSeries:
    """The points of a track whose KV usage is known, with their times, KV usage and waiting."""

    def __init__(self, track: Track):
        kv, waiting = track.column("kv_usage"), track.column("waiting")
        if None in kv:
            keep = [i for i, value in enumerate(kv) if value is not None]
            self.points = [track.points[i] for i in keep]
            self.times = [track.times[i] for i in keep]
            self.kv = [kv[i] for i in keep]
            self.waiting = [waiting[i] for i in keep]
        else:
            self.points, self.times, self.kv, self.waiting = track.points, track.times, kv, waiting

    def mean(self, span: slice) -> float:
        return _time_mean(self.times[span], self.kv[span])

    def last_seconds(self, seconds: float) -> slice:
        """The points of the last `seconds` (at least the newest one)."""
        return slice(bisect_left(self.times, self.times[-1] - seconds), len(self.times))


def _kv_held(known: _KvSeries, config: Thresholds) -> tuple[str, list[Point], float] | None:
    stretch = _sustained(known.times, [value >= config.kv_high for value in known.kv], config.kv_grace_s)
    if stretch is None:
        return None
    if known.times[stretch[1]] - known.times[stretch[0]] < config.kv_sustain_s:
        return None
    span = _between(known.times, *stretch)
    mean = known.mean(span)
    return ("held", known.points[span], mean) if mean >= config.kv_clear else None


def _kv_queued(known: _KvSeries, config: Thresholds) -> tuple[str, list[Point], float] | None:
    if not known.points:
        return None
    span = known.last_seconds(config.kv_window_s)
    if known.times[-1] - known.times[span.start] < config.kv_sustain_s:
        return None
    if not any((w or 0) > 0 for w in known.waiting[span]) or max(known.kv[span]) < config.kv_high:
        return None
    mean = known.mean(span)
    return ("queued", known.points[span], mean) if mean >= config.kv_clear else None


def _kv_preempting(known: _KvSeries, config: Thresholds) -> tuple[str, list[Point], float] | None:
    """Preemptions within the last kv_window_s, at a scrape with KV ≥ kv_high and requests waiting: an
    engine preempts only when it cannot find KV blocks, so this is pressure however briefly a starved
    watcher saw it (a real vLLM on a 2-core VM drained 24 long requests with +9 preemptions at KV 100%
    in 4 s, between scrapes seconds apart)."""
    if not known.points:
        return None
    span = known.last_seconds(config.kv_window_s)
    full_with_queue = any(value >= config.kv_high and (w or 0) > 0
                          for value, w in zip(known.kv[span], known.waiting[span]))
    run = known.points[span]
    if not full_with_queue or _preempted(run) < config.preemption_min:
        return None
    return "preempting", run, known.mean(span)


def _preempted(run: list[Point]) -> float:
    """The preemption counter's rise over the run (0 across a reset or where it is not exported)."""
    counts = [s.counters.preemptions for _, s in run if s.counters.preemptions is not None]
    return max(0.0, counts[-1] - counts[0]) if len(counts) >= 2 and counts[-1] >= counts[0] else 0.0


# --- preemption ----------------------------------------------------------------------------------

def detect_preemption(window: Window, config: Thresholds) -> list[Verdict]:
    end = window.end
    if end is None:
        return []
    verdicts = []
    for key, track in sorted(tracks(window.metrics).items()):
        preemptions = track.column("preemptions")
        keep = [i for i in range(bisect_left(track.times, end - config.preemption_window_s), len(track.times))
                if preemptions[i] is not None]
        counts = [preemptions[i] for i in keep]
        if not any(map(gt, counts[1:], counts)):
            continue  # no rise: nothing to add up
        delta = 0.0
        onset = None
        for j in range(1, len(counts)):
            step = counts[j] - counts[j - 1]
            if step > 0:  # a decrease is a counter reset (target_restarted), never negative pressure
                delta += step
                if onset is None:
                    onset = track.times[keep[j]]
        if onset is None or delta < config.preemption_min:
            continue
        (first, first_state), (last, state) = track.points[keep[0]], track.points[keep[-1]]
        why = (f"+{num(delta)} preemptions in the last {last.t - first.t:.0f} s{where(key)} (counter "
               f"{num(first_state.counters.preemptions)} → {num(state.counters.preemptions)}; the delta, not the "
               f"cumulative value); KV {_pct(state.kv_usage)}, {num(state.waiting)} waiting")
        evidence = (Evidence("metrics", first.t, "counters.preemptions", first_state.counters.preemptions),
                    Evidence("metrics", last.t, "counters.preemptions", state.counters.preemptions),
                    Evidence("metrics", last.t, "kv_usage", state.kv_usage))
        verdicts.append(Verdict("preemption", last.t, onset, why, evidence,
                                {"engine": key, "delta": delta, "window_s": last.t - first.t,
                                 "kv_usage": state.kv_usage}))
    return verdicts


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

OVERLOAD = RunbookBranch(
    meaning="Requests wait for a sustained period; the cause names the limit: slots (running at the slot "
            "limit), kv (cache full) or deferred (the scheduler deferred admission).",
    check_next=(
        "Queue wait (request_queue_time) and waiting count over time: overload is the only signature "
        "with a queue (vLLM serving Qwen2.5-7B-Instruct-AWQ on one RTX 3060: 0.472 s wait and 44 waiting under overload, 0 otherwise).",
        "Running vs the slot limit (max-num-seqs, default 256) and KV usage: running pinned at the limit "
        "with KV well below 100% means out of slots, not memory (256 running, KV 28%).",
        "Inter-token latency: a full batch slows every token (x9.2 at 256 running on the RTX 3060 above).",
        "Arrival rate against the capacity measured on a normal day.",
    ),
    expected_range="Waiting 0 and queue wait ~0 under normal load (RTX 3060, normal load: 0.000 s, max 0 waiting); "
                   "alert on waiting > 0 sustained, or on queue age against the TTFT budget.",
    safe_action="Shed or limit admission at the router early, with an actionable rejection class, or add "
                "replicas. Raising max-num-seqs when KV is low adds slots but also activation memory "
                "(193 running crashed at 0.9 memory utilisation).",
    rollback="Remove temporary capacity or admission limits once the waiting count has drained to 0 and "
             "stayed there for one full window - not 'eventually'.",
    restart_destroys="A restart adds no capacity: it drops every queued and running request and the prefix "
                     "cache, so the queue returns larger.",
    by_cause={
        "slots": "Cause slots: running sits at the slot limit while KV has room - the engine ran out of "
                 "sequence slots, not memory. Add replicas or shed load; raise max-num-seqs only with "
                 "memory headroom for the larger batch's activations.",
        "kv": "Cause kv: the KV cache is full - admission waits for memory. Expect preemptions; cap output "
              "length or concurrency, or add KV capacity (see kv_pressure).",
        "deferred": "Cause deferred: requests wait although there is room - the scheduler deferred them "
                    "(waiting_by_reason=deferred). Find what they wait for (a KV transfer, an adapter, a "
                    "dependency) before adding capacity, which would not help.",
        "unknown": "Cause unknown: nothing is admitted though slots and KV are free - an admission deadlock "
                   "or a frozen scheduler. Treat it like a stall: check the step counters and take a stack of "
                   "the engine before restarting.",
    },
)

KV_PRESSURE = RunbookBranch(
    meaning="The KV cache is near full: admission stalls and the engine starts preempting.",
    check_next=(
        "KV usage and its trend, with the preemption delta in the same window.",
        "Output and input token sizes: long outputs hold KV longer (1,024-token outputs on an RTX 3060 "
        "serving a 7B model: KV 26.1% vs 1.4% for 128-token outputs).",
        "Running and waiting: KV-bound waiting shows free slots but no memory.",
    ),
    expected_range="KV maximum well below 100% under normal load (RTX 3060, 7B: 1.4% normal, 28% overload; real "
                   "vLLM CPU reached 95% with 16 long requests on 8,192 tokens of cache).",
    safe_action="Limit concurrency or max output tokens at admission, or add replicas / KV capacity.",
    rollback="Revert the limits when KV stays below the threshold for a full window at peak.",
    restart_destroys="The KV and prefix cache (hit rate restarts at zero) and every in-flight request.",
)

PREEMPTION = RunbookBranch(
    meaning="The engine preempted (vLLM) or retracted (SGLang) running requests within this window.",
    check_next=(
        "The preemption counter's delta in the window - never its cumulative value, which carries old "
        "traffic (a peer tool reports cumulative preemptions as current pressure).",
        "Whether tokens still progress: a preemption burst that still steps is degraded, not stalled.",
        "KV usage at the same time, and recompute cost: a preempted request redoes its prefill.",
    ),
    expected_range="0 preemptions per window under normal load (real vLLM CPU: +16 at KV 95%, with 10 waiting).",
    safe_action="Lower concurrency (max-num-seqs) or add KV capacity; cap max output tokens.",
    rollback="Restore the previous limits after the preemption delta stays 0 across a peak window.",
    restart_destroys="KV state of running and preempted requests, and the counters' baseline.",
)

SETTINGS = (OverloadSettings, KvPressureSettings, PreemptionSettings)
SPECS = (
    VerdictSpec("overload", detect_overload, INCIDENT, "ticket",
                "requests wait for a sustained period", OVERLOAD, ("metrics", "log"),
                labels=("engine", "cause"), action=PAGE,
                yields_to=("gpu_throttled",)),      # a slower GPU, not more demand than capacity,
    VerdictSpec("kv_pressure", detect_kv_pressure, INCIDENT, "ticket",
                "the KV cache is near full", KV_PRESSURE, ("metrics",), labels=("engine", "rule"), action=PAGE),
    VerdictSpec("preemption", detect_preemption, INCIDENT, "ticket",
                "the engine preempted running requests", PREEMPTION, ("metrics", "log"),
                labels=("engine",), action=PAGE),
)
