"""not_serving: /health answers 2xx (or, where /health is itself a generation through the engine, fails the same
way), yet a one-token probe gets no token, no counter moves and the gauges
show no admitted work (with work admitted and frozen, that is alive_health_ok_no_progress's verdict).

The idle wedge: an engine that hangs while nothing runs keeps its gauges at 0 running and 0 waiting,
every counter flat and /health at 200 — to a passive reader, an idle server — while every request that
arrives waits forever. Only asking the server for a token tells the two apart (see sources.probe).
A probe that could not be asked (no /v1/models, the model 404s, a 4xx) proves nothing and never counts.

Where /metrics is answered by the engine's own loop (Dialect.metrics_wait_on_engine), a loop hung outside a step
also silences /metrics while /health, answered by the HTTP thread, stays 200: scrapes that time out since the first
missed probe are the verdict's second sign (the endpoint and how long it has not answered are said), and the gauges
read before the silence, stale, no longer send it to alive_health_ok_no_progress. A long prompt is no hang: the loop
answers /metrics between its batches with its step counter moved (which resets the probes' run), a batch ending
meanwhile writes a prompt-progress line, and the newest such line says how long the rest of its prompt takes at its
rate: the verdict waits for twice that (PROMPT_DUE_FACTOR); where the engine lists its slots (sources.slots), a busy
slot's computed tokens moving between listings answered since the first missed probe say the same. A slot listing
that times out meanwhile (it waits on the same loop) is evidence beside /metrics's.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.evidence import engine_signs
from servewatch.detectors.evidence.stages import in_startup
from servewatch.detectors.probes import asked_at, trailing_failures
from servewatch.detectors.rank_words import engine_dp_rank
from servewatch.detectors.series import tracks, where
from servewatch.detectors.verdict import (INCIDENT, RESTART, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.kinds import TIMEOUT
from servewatch.timeline.samples import DEADLINE, STOPPED, ProbeSample
from servewatch.timeline.tracks import engine_key
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class NotServingSettings(Settings):
    """not_serving's thresholds."""

    # not_serving: this many active probes in a row got no token (deadline missed or an error) while
    # /health answered 2xx and no counter moved. Probes run only with --probe.
    probe_fail_count: int = 1

    def validate(self) -> list[str]:
        return self.counts("probe_fail_count")


NAME = "not_serving"


def detect(window: Window, config: Thresholds) -> list[Verdict]:
    if not any(p.failed for p in window.probe):
        return []
    # (The same missed probe with a stalled rank named is rank_stalled's: not_serving yields to it, registry.)
    # Each data-parallel engine answers for itself (the probe asks them in turn): engine 0 serving says
    # nothing of engine 1. Probes not aimed at an engine are one group of their own.
    verdicts = []
    for engine, probes in _by_engine(window.probe).items():
        verdict = _engine_verdict(window, config, engine, probes)
        if verdict is not None:
            verdicts.append(verdict)
    return verdicts


def _by_engine(probes: tuple[ProbeSample, ...]) -> dict[str | None, tuple[ProbeSample, ...]]:
    groups: dict[str | None, list[ProbeSample]] = {}
    for probe in probes:
        groups.setdefault(probe.engine, []).append(probe)
    return {engine: tuple(group) for engine, group in groups.items()}


def _engine_verdict(window: Window, config: Thresholds, engine: str | None,
                    probes: tuple[ProbeSample, ...]) -> Verdict | None:
    if not probes[-1].failed:
        return None
    key = _engine_key(window, engine)
    # Only probes sent after the counters (of the engine asked) last moved count: one sent before proves nothing
    # now. Nor does one sent while a process of the server was stopped: that stop explains it (rank_stalled's
    # evidence), and right after SIGCONT, before the counters move again, it would read as a new incident (a
    # real vLLM's engine core resumed after 34 s: not_serving for 0.63 s on the probes sent during the stop).
    after = max((t for t in (_last_counter_movement(window, key), _last_stopped(window)) if t is not None),
                default=None)
    run = trailing_failures(probes, after=after)
    if not run or len(run) < config.probe_fail_count:
        return None
    first, last = run[0], run[-1]
    asked = asked_at(first)

    health = [h for h in window.health if asked <= h.t <= last.t] or [h for h in window.health if h.t <= last.t][-1:]
    if not health:
        return None
    through = not (all(h.ok for h in health) and window.health[-1].ok)
    if through and not _health_is_a_probe(window, config, asked):
        return None   # /health itself is failing: that is health_loss's (or engine_dead's) verdict

    # Where /metrics waits on the engine's own loop (Dialect.metrics_wait_on_engine), scrapes that time out since the
    # first missed probe was sent are the hung loop's second sign, and the gauges read before it are stale: they decide
    # nothing. The same silence during one long prompt batch is no hang (the log's prompt lines say so).
    silent = _metrics_silent(window, asked, max(last.t, health[-1].t))
    if silent and (_loop_logged_progress(window, asked) or _prompt_still_due(window, max(last.t, health[-1].t))
                   or _slots_show_prompt(window, asked, max(last.t, health[-1].t))):
        return None
    newest = None if silent else _newest_gauges(window, key)
    if newest is not None and ((newest[1] or 0) > 0 or (newest[2] or 0) > 0):
        return None   # the gauges show admitted work that does not move: alive_health_ok_no_progress says it

    what = (f"got no token within {last.deadline_s:g} s" if last.outcome == DEADLINE
            else f"failed ({engine_signs.answer_problem(last)})")
    streak = f" ({len(run)} probes in a row over {last.t - asked:.1f} s)" if len(run) > 1 else ""
    aimed = f" sent to DP rank {engine}'s engine" if engine is not None else ""
    if through:
        why = (f"a one-token probe{aimed} {what}{streak}, and /health, which runs its own generation through this "
               f"engine, failed too ({engine_signs.answer_problem(health[-1])}) while /metrics answered")
    else:
        why = (f"a one-token probe{aimed} {what}{streak} while /health answered {health[-1].status} "
               f"({len(health)} time(s) meanwhile)")
    details: dict[str, float | int | str | bool | None] = {
        "failed_probes": len(run), "last_outcome": last.outcome, "deadline_s": last.deadline_s,
        "last_status": last.status, "last_error": last.error}
    if engine is not None:
        details["engine"] = key if key is not None else f"dp_rank={engine}"
    evidence = [Evidence("probe", first.t, "outcome", first.outcome),
                engine_signs.health_evidence(health[-1])]
    if last is not first:
        evidence.insert(1, Evidence("probe", last.t, "outcome", last.outcome))
    if silent:
        at = max(last.t, health[-1].t)
        timeouts = [m for m in window.metrics if asked <= m.t <= at]
        answered = [m.t for m in window.good_metrics() if m.t < asked]
        quiet_s = at - (answered[-1] if answered else asked)
        why += (f"; /metrics has not answered for {quiet_s:.1f} s ({len(timeouts)} scrape(s) timed out meanwhile; this "
                f"engine answers /metrics from the loop that decodes, /health from its HTTP thread)")
        details.update(timed_out="/metrics", metrics_timeouts=len(timeouts), metrics_silent_s=round(quiet_s, 3))
        evidence += [Evidence("metrics", m.t, "error", m.error) for m in timeouts[:1] + timeouts[1:][-1:]]
        slot_timeouts = [s for s in window.slots if asked <= s.t <= at and s.error == TIMEOUT]
        if slot_timeouts:      # the engine's slot listing waits on the same loop (sources.slots)
            why += f"; its slot listing timed out too ({len(slot_timeouts)} time(s))"
            details.update(slots_timeouts=len(slot_timeouts))
            evidence += [Evidence("slots", s.t, "error", s.error) for s in slot_timeouts[:1] + slot_timeouts[1:][-1:]]
    if newest is not None:
        sample, running, waiting = newest
        why += (f"; no counter moved{where(key) if key is not None else ''} "
                f"(running {_count(running)}, waiting {_count(waiting)})")
        details.update(running=running, waiting=waiting)
        evidence += [Evidence("metrics", sample.t, "running", running),
                     Evidence("metrics", sample.t, "waiting", waiting)]
    return Verdict(NAME, max(last.t, health[-1].t), asked, why, tuple(evidence), details)


# With no scrape ended since the first missed probe, /metrics is silent once it has been quiet this many times its own
# cadence (the median gap between its answers): one scrape late is not yet silence.
SILENT_CADENCES = 3.0


def _metrics_silent(window: Window, asked: float, at: float) -> bool:
    """This engine's /metrics waits on its loop (Dialect.metrics_wait_on_engine) and has not answered since `asked`:
    every scrape since then timed out (at least one), or none has ended for SILENT_CADENCES times its cadence."""
    dialect = engine_signs.dialect_hint(window)
    if not getattr(dialect, "metrics_wait_on_engine", False):
        return False
    since = [m for m in window.metrics if asked <= m.t <= at]
    if since:
        return all(m.error == TIMEOUT for m in since)
    answers = [m.t for m in window.good_metrics() if m.t < asked]
    gaps = sorted(b - a for a, b in zip(answers, answers[1:]))
    return bool(gaps) and at - answers[-1] >= SILENT_CADENCES * gaps[len(gaps) // 2]


def _loop_logged_progress(window: Window, asked: float) -> bool:
    """The engine's log shows its loop finishing work since `asked`: a prompt batch's progress line or a generation
    rate line (a `stats` event)."""
    return any(event.kind == "stats" and event.t >= asked for event in window.logs)


# A prompt's own log line says how much of it is left and how fast it goes: its loop is silent for up to this many
# times that long before a hang is said (a rate measured over the prompt so far; batches differ, hence the margin).
PROMPT_DUE_FACTOR = 2.0


def _prompt_still_due(window: Window, at: float) -> bool:
    """The newest `stats` line is a prompt's progress (batch "prefill", progress under 1) and the rest of that
    prompt, at the rate the line states, is not yet PROMPT_DUE_FACTOR times overdue at `at`: one long prompt batch,
    not a hang."""
    line = next((event for event in reversed(window.logs) if event.kind == "stats" and event.t <= at), None)
    if line is None or line.fields.get("batch") != "prefill":
        return False
    done, progress, rate = (line.fields.get(k) for k in ("tokens", "progress", "tps"))
    if not all(isinstance(v, (int, float)) and v > 0 for v in (done, progress, rate)) or progress >= 1:
        return False
    left_s = done * (1 - progress) / progress / rate
    return at - line.t < PROMPT_DUE_FACTOR * left_s


def _slots_show_prompt(window: Window, asked: float, at: float) -> bool:
    """The engine's slot listing (sources.slots), answered since `asked`, shows a busy slot's computed tokens (prompt
    or generated) moving from one listing to the next: the loop is working through a long prompt, not hung. (The
    listing holds no prompt's length, only what is computed so far: it cannot say how much is left.)"""
    good = [s for s in window.slots if s.error is None and s.t <= at]
    return any(after.t >= asked and after.busy and _slot_work(before) != _slot_work(after)
               for before, after in zip(good, good[1:]))


def _slot_work(sample) -> dict:
    """Per busy slot, the tokens it has computed on its request (prompt and generated)."""
    return {v.slot.id: (v.slot.prompt_processed, v.slot.decoded) for v in sample.slots if v.slot.busy}


def _health_is_a_probe(window: Window, config: Thresholds, asked: float) -> bool:
    """Where /health runs a generation through the engine (SGLang 0.5.23: one token, waiting up to its own
    20 s for any output), a /health that fails is the engine's own probe missing, not a contradiction of
    ours — provided the HTTP process itself still answers (/metrics read since the first missed probe was
    sent: a frozen API server is health_loss's), the engine is not visibly computing one long step (an
    engine process using CPU, where the process tree is watched: engine_busy, as the stall's), no start
    or asked-for shutdown is under way, and the engine has no "dead" status of its own (engine_dead's)."""
    dialect = engine_signs.dialect_hint(window)
    if dialect is None or not dialect.health_runs_through_engine:
        return False
    good = window.good_metrics()
    if not good or good[-1].t < asked or window.metrics[-1] is not good[-1]:
        return False
    if engine_signs.engine_busy(window.process, config) or in_startup(window, config):
        return False
    last = window.health[-1]
    if dialect.health_dead_status is not None and last.status == dialect.health_dead_status:
        return False
    return not engine_signs.in_shutdown(window, last.t, config)


def _engine_key(window: Window, engine: str | None) -> str | None:
    """The metrics engine key of DP rank `engine` ("engine=1" on vLLM, "dp_rank=1,..." on SGLang), or None
    (not aimed, or no scrape names that engine)."""
    if engine is None:
        return None
    return next((key for key in tracks(window.metrics) if engine_dp_rank(key) == engine), None)


def _last_counter_movement(window: Window, key: str | None = None) -> float | None:
    """The time of the newest scrape whose progress counters differ from the scrape before (of engine `key`;
    of any engine when it is None)."""
    newest = None
    for name, track in tracks(window.metrics).items():
        if key is not None and name != key:
            continue
        moves = track.progress
        for i in range(len(moves) - 1, 0, -1):
            if moves[i] != moves[i - 1]:
                newest = track.times[i] if newest is None else max(newest, track.times[i])
                break
    return newest


def _last_stopped(window: Window) -> float | None:
    """The newest process sample that shows a process of the server stopped (SIGSTOP, a tracer)."""
    for sample in reversed(window.process):
        if any(m.status in STOPPED for m in sample.members):
            return sample.t
    return None


def _newest_gauges(window: Window, key: str | None = None):
    """(newest scrape, running, waiting summed over its engines — engine `key`'s alone when given), or None
    without a good scrape."""
    good = window.good_metrics()
    if not good:
        return None
    sample = good[-1]
    running = waiting = None
    for state in sample.engines:
        if key is not None and engine_key(state.labels) != key:
            continue
        running = _add(running, state.running)
        waiting = _add(waiting, state.waiting)
    return sample, running, waiting


def _add(total, value):
    if value is None:
        return total
    return value if total is None else total + value


def _count(value) -> str:
    return "?" if value is None else f"{value:g}"


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

NOT_SERVING = RunbookBranch(
    meaning="/health answers 2xx, but a one-token completion sent by the probe got no token within its "
            "deadline (or failed) and no progress counter moved. An engine that hangs while idle keeps its "
            "gauges at 0 running and 0 waiting and its counters flat, which reads exactly like an idle "
            "server; every request that arrives waits forever.",
    check_next=(
        "Process states in the bundle: an engine core or worker in status 'stopped' or at ~0% CPU while "
        "requests wait explains it (a SIGSTOPped vLLM worker with nothing running gives this signature: "
        "/health 200, /metrics answering with 0 running, 0 waiting, frozen counters).",
        "Take a stack of the engine-core process and its workers before touching them (e.g. `py-spy dump "
        "--pid PID`): a blocked queue, collective or kernel launch names the fault domain.",
        "Send one request yourself with a timeout (`curl -m 20 URL/v1/completions` with max_tokens 1): "
        "no answer confirms the probe; an answer with a 4xx means the probe's request is wrong, not the "
        "server.",
        "The probe's latency over time in the bundle: answers that got slower before the first miss point "
        "at a degrading engine; a sudden miss at a wedge.",
    ),
    expected_range="An idle server answers a one-token completion in well under a second (a real vLLM on "
                   "a 2-core CPU with a tiny model: tens of milliseconds); the deadline (10 s by default) "
                   "is far outside that range.",
    safe_action="Keep this bundle and a stack dump, then stop routing new traffic to this replica (drain it at "
                "the router / load balancer); the requests already waiting on it will not finish by "
                "themselves. Draining is reversible and keeps the evidence alive.",
    rollback="Return the replica to routing once probes are served again for several intervals in a row.",
    restart_destroys="The requests waiting on the hung engine (they are lost either way), the KV and prefix "
                     "cache contents, and the frozen process state that shows where it hung: take the stack "
                     "before any restart.",
)

SETTINGS = (NotServingSettings,)
SPECS = (
    VerdictSpec("not_serving", detect, INCIDENT, "page",
                "health is green but a one-token probe gets no token", NOT_SERVING,
                ("probe", "health", "metrics", "slots"), action=RESTART, probes=2,
                yields_to=("rank_stalled",)),       # the same missed probe, with the stalled rank named,
)
