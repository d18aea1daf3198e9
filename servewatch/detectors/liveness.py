"""engine_dead, process_exit, health_loss: the outer shell is up while the engine inside is not.

On a real vLLM, a killed worker gave /health 503 within 1 s (EngineDeadError), connection refused
~5 s later, then the API server exited; vLLM #48966 is an API server that exits 0 after its engine
died, which defeats Restart=on-failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch import dialects
from servewatch.detectors.evidence.crash_loop import in_crash_loop
from servewatch.detectors.evidence.engine_signs import (_dead_status, _engine_children_gone, _trailing,
                                                        answer_problem, engine_death_evidence, health_evidence,
                                                        in_shutdown)
from servewatch.detectors.evidence.stages import in_startup
from servewatch.detectors.verdict import (INCIDENT, PAGE, RESTART, Evidence, RunbookBranch, Settings, Thresholds,
                                          Verdict, VerdictSpec)
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class LivenessSettings(Settings):
    """health_loss's and engine_dead's thresholds."""

    # health_loss: this many consecutive failed probes (no answer or non-2xx).
    health_fail_count: int = 3
    # engine_dead: the /health status that means "engine dead" is the dialect's (vLLM 503; SGLang none).
    # log lines of an engine death count for this long after they were read.
    log_evidence_s: float = 30.0
    # ...and nothing is a death when the dialect's shutdown line was read (a requested stop: vLLM 0.32 stops
    # its engine core first, 0.4 s after SIGTERM, logging EngineDeadError with requests in flight, then the
    # API server). Where a log is read, a dead-status probe or a vanished engine waits this long for that
    # line (read a poll late) before it counts; the engine's own death lines count at once.
    shutdown_log_wait_s: float = 2.0

    def validate(self) -> list[str]:
        return self.counts("health_fail_count")


# --- engine_dead ---------------------------------------------------------------------------------

def detect_engine_dead(window: Window, config: Thresholds) -> list[Verdict]:
    if in_crash_loop(window, config):
        return []   # one crash_loop verdict, not a death verdict per start
    onset, evidence, reasons = engine_death_evidence(window, config)
    if onset is None:
        return []
    api_alive = window.process[-1].alive if window.process else None
    outlived = api_alive is False and any(p.alive for p in window.process if p.t >= onset)
    if api_alive is False and not outlived:
        return []  # the whole target went at once: that is process_exit's verdict
    t = max(e.t for e in evidence)
    why = "engine dead: " + "; ".join(reasons)
    if api_alive:
        why += " — the API process is still alive"
    elif outlived:    # a real vLLM's API server exits about a second after its engine: both are said
        why += " — the API process outlived it, then exited"
    return [Verdict("engine_dead", t, onset, why, tuple(evidence),
                    {"api_alive": api_alive, "signals": len(reasons)})]


# --- process_exit --------------------------------------------------------------------------------

def detect_process_exit(window: Window, config: Thresholds) -> list[Verdict]:
    if not window.process or window.process[-1].alive or in_crash_loop(window, config):
        return []
    run = _trailing(window.process, lambda p: not p.alive)
    first, last = run[0], run[-1]
    if not _exit_log_read(window, first.t, config):
        return []    # the engine's last lines may be read a poll after the exit is seen: they say why it went
    code = next((p.exit_code for p in reversed(run) if p.exit_code is not None), None)
    signal = next((p.exit_signal for p in reversed(run) if p.exit_signal is not None), None)
    death_onset, death_evidence = _death_before(window, first.t, config)
    after_death = death_onset is not None

    if code is not None:
        how = f"exit code {code}"
    elif signal is not None:
        how = f"signal {signal}"
    else:
        how = "exit status unknown (not our child)"
    why = f"target process {first.root_pid} is gone ({how})"
    if after_death:
        gap = first.t - death_onset
        why += (f"; the engine died {gap:.1f} s before" if gap > 0
                else "; the engine died before it (its death lines were read just after the exit)")
        if code == 0:
            why += " — an exit 0 after an engine death hides the failure from Restart=on-failure"
            note = _exit_zero_note(window)
            if note:
                why += f" ({note})"
    startup = [e for e in window.logs if e.kind == "startup_failure"]
    # the line that carries the engine's numbers says most; else the first (the root cause comes first)
    startup = [next((e for e in startup if len(e.fields) > 2), startup[0])] if startup else []
    if startup:
        why += f"; startup failure in the log: {_describe_startup_failure(startup[-1].fields)}"

    evidence = [Evidence("process", first.t, "alive", False)]
    if code is not None or signal is not None:
        evidence.append(Evidence("process", last.t, "exit_code" if code is not None else "exit_signal",
                                 code if code is not None else signal))
    evidence += death_evidence
    evidence += [Evidence("log", e.t, "reason", e.fields.get("reason")) for e in startup[-1:]]
    details = {"pid": first.root_pid, "exit_code": code, "exit_signal": signal, "after_engine_death": after_death,
               "masked_failure": bool(after_death and code == 0)}
    if startup:
        details["startup_failure"] = str(startup[-1].fields.get("reason", "unknown"))
    return [Verdict("process_exit", last.t, first.t, why, tuple(evidence), details)]


EXIT_REASON_LINES = ("engine_dead", "shutdown", "startup_failure")   # log kinds that say why a server went


def _exit_log_read(window: Window, t: float, config: Thresholds) -> bool:
    """Whether the target's exit seen at `t` can be judged: no log is read, or a death or shutdown line was read
    around it, or shutdown_log_wait_s has passed. Lines are timed when they are read: on a real vLLM 0.32 whose
    worker was SIGKILLed the API server exited 0.5 s later, and in one drill its exit was judged before its
    EngineDeadError lines were read — process_exit said only "exit code 0", not that the engine had died."""
    if not window.logs:
        return True
    end = window.end or t
    return end - t >= config.shutdown_log_wait_s or any(
        e.kind in EXIT_REASON_LINES and t - config.log_evidence_s <= e.t for e in window.logs)


def _death_before(window: Window, t: float, config: Thresholds) -> tuple[float | None, list[Evidence]]:
    """The first engine-death sign in the window before `t`: a dead-status probe (vLLM), an engine
    child gone while the root lived, or an engine-death log line (read up to shutdown_log_wait_s after `t`:
    lines are timed when read, and the exit may be seen a poll before them)."""
    signs: list[Evidence] = []
    dead_status = _dead_status(window)
    if dead_status is not None:
        signs += [Evidence("health", h.t, "status", h.status) for h in window.health
                  if h.t < t and h.status == dead_status][:1]
    alive_before = tuple(p for p in window.process if p.t < t and p.alive)
    gone = _engine_children_gone(alive_before)
    if gone is not None:
        signs.append(Evidence("process", gone[0].t, f"members[{gone[2][0][0]}]", "gone"))
    signs += [Evidence("log", e.t, "kind", e.kind) for e in window.logs
              if e.kind == "engine_dead" and e.t < t + config.shutdown_log_wait_s][:1]
    signs = [e for e in signs if not in_shutdown(window, e.t, config)]   # a requested stop is no death
    if not signs:
        return None, []
    signs.sort(key=lambda e: e.t)
    return signs[0].t, signs


# --- health_loss ---------------------------------------------------------------------------------

def detect_health_loss(window: Window, config: Thresholds) -> list[Verdict]:
    run = _trailing(window.health, lambda h: not h.ok)
    if len(run) < config.health_fail_count:
        return []
    if in_startup(window, config):
        return []   # a starting target is not healthy yet, not unhealthy: startup_stalled covers a stuck start
    if in_crash_loop(window, config):
        return []
    first, last = run[0], run[-1]
    kinds = sorted({answer_problem(h) for h in run})
    why = (f"{len(run)} consecutive health probes failed over {last.t - first.t:.1f} s "
           f"(≥ {config.health_fail_count}); last: {answer_problem(last)}; seen: {', '.join(kinds)}")
    evidence = (health_evidence(first), health_evidence(last))
    return [Verdict("health_loss", last.t, first.t, why, evidence,
                    {"failed_probes": len(run), "last_status": last.status, "last_error": last.error})]


def _exit_zero_note(window: Window) -> str | None:
    """The engine's known bug behind an exit 0 after its death: the scraped engine's, else (no scrape
    recognised an engine) any registered engine's — the engine that could not be seen is most likely one."""
    scraped = next((m.dialect for m in reversed(window.metrics) if m.dialect), None)
    if scraped is not None:
        dialect = dialects.by_name(scraped)
        return dialect.exit_zero_after_death_note if dialect else None
    notes = [d.exit_zero_after_death_note for d in dialects.registered() if d.exit_zero_after_death_note]
    return ", ".join(notes) or None


def _describe_startup_failure(fields) -> str:
    """Through the dialect that logged it (or, for an event without one, whose grammar has the reason)."""
    dialect = dialects.by_name(fields.get("dialect")) or next(
        (d for d in dialects.registered() if fields.get("reason") in d.grammar_literals()), None)
    return dialect.describe_startup_failure(fields) if dialect else str(fields.get("reason", "unknown"))


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

ENGINE_DEAD = RunbookBranch(
    meaning="The engine is gone while the API may still answer: /health returned 503, or the engine child "
            "disappeared under a living API process.",
    check_next=(
        "The log tail: EngineDeadError, 'Executor failed.', 'Worker proc ... died unexpectedly', "
        "out-of-memory lines ('Tried to allocate N MiB') and the stack that raised them.",
        "Running count and KV usage at the last good scrape. KV well below 100% at death rules the KV "
        "cache out (a vLLM serving Qwen2.5-7B-Instruct-AWQ on one RTX 3060 died under overload with 193 running and KV at 15.9%).",
        "Multiply before guessing: running x vocabulary x 4 bytes against the bytes the OOM asked for "
        "(193 x 152,064 x 4 = 112 MiB: a logits-sized temporary in the sampler, an activation limit).",
        "Client side: in-flight requests may have received HTTP 200 with short bodies (real vLLM: 4 requests "
        "'succeeded' after 1.8 s instead of ~15 s) - lost work that a status-code count calls success.",
        "The API process's exit code when it goes: exit 0 after an engine death defeats "
        "Restart=on-failure (vLLM #48966).",
    ),
    expected_range="/health 200, the engine-core process present in the tree, no ERROR lines in the log.",
    safe_action="Take the replica out of routing and keep its log. If the cause is an activation OOM, restart "
                "with more memory left outside the engine's budget (e.g. memory utilisation 0.9 -> 0.85) or "
                "a lower max-num-seqs, which bounds logits-sized temporaries.",
    rollback="Restore the previous memory settings if the restarted server shows lower throughput and no "
             "deaths across a full normal-day peak; the change is a flag, reversible at the next restart.",
    restart_destroys="The dead engine's KV and prefix cache are already lost. A restart also discards the API "
                     "process's in-memory state, its /metrics history and any response still being "
                     "streamed; make sure the log is persisted first - if it dies with the server you "
                     "must reproduce the incident to diagnose it.",
)

PROCESS_EXIT = RunbookBranch(
    meaning="The watched process exited (with its exit code or signal when knowable).",
    check_next=(
        "Exit code and signal: SIGKILL without an operator usually means the kernel OOM killer "
        "(check the kernel log); exit 0 right after an engine death is vLLM #48966.",
        "Whether an engine_dead verdict or error lines preceded the exit in this window.",
        "The supervisor's restart policy: Restart=on-failure does not restart an exit 0.",
        "The last metrics before the exit: running, waiting and KV, to size the lost work.",
    ),
    expected_range="A serving process does not exit; exit 0 only on an intended shutdown.",
    safe_action="Let the supervisor bring it back, with a policy that also restarts after exit 0 that "
                "follows an engine death (Restart=always, rate-limited), and keep routing away until ready.",
    rollback="Revert the supervisor policy if it causes a restart loop (cap the restart rate and alert).",
    restart_destroys="The process is already gone: its KV and prefix cache and any graphs not cached on "
                     "disk must re-warm; startup takes tens of seconds (30-50 s for the small CPU lab "
                     "server) to minutes for large models, and requests during it fail or queue.",
)

HEALTH_LOSS = RunbookBranch(
    meaning="/health stopped answering 2xx (refused, timed out, or an error status) while it had been fine.",
    check_next=(
        "Connection refused vs 503 vs timeout: refused with the process alive means it is shutting down "
        "(real vLLM refused ~5 s after an engine death); 503 means the engine is dead; timeouts mean a "
        "saturated API server.",
        "Whether /metrics still answers, and how long scrapes take (a saturated API answers slowly).",
        "Process states and exit information in the same window.",
    ),
    expected_range="/health 2xx within well under a second on every probe.",
    safe_action="Remove the replica from routing and keep this bundle. Decide between engine death "
                "(see engine_dead) and saturation (see overload) before restarting anything.",
    rollback="Put it back in routing after /health is 2xx for several consecutive probes.",
    restart_destroys="In-flight requests, KV and prefix cache, and the evidence of why the probe failed.",
)

SETTINGS = (LivenessSettings,)
SPECS = (
    VerdictSpec("engine_dead", detect_engine_dead, INCIDENT, "page",
                "the engine died behind a live API process", ENGINE_DEAD,
                ("health", "process", "log"), action=RESTART),
    VerdictSpec("process_exit", detect_process_exit, INCIDENT, "page",
                "the server process exited", PROCESS_EXIT, ("process", "health", "log"), action=PAGE),
    VerdictSpec("health_loss", detect_health_loss, INCIDENT, "page",
                "/health stopped answering 2xx", HEALTH_LOSS, ("health",), action=PAGE),
)
