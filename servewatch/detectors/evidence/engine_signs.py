"""The engine's signs that several verdicts read: its dialect, its death (engine_dead, process_exit, the
stall, the rank and the outcome verdicts), a shutdown it was asked for, a /health answer in words and as
evidence, and an engine busy computing (the stall's and not_serving's)."""

from __future__ import annotations

from servewatch import dialects
from servewatch.detectors.rank_words import gone_words
from servewatch.detectors.series import once_per_window
from servewatch.detectors.verdict import Evidence, Thresholds
from servewatch.timeline.samples import STOPPED, HealthSample, ProcessSample
from servewatch.timeline.window import Window

_ENGINE_ROLES = ("engine_core", "worker")


def dialect_hint(window: Window) -> dialects.Dialect | None:
    """The engine's dialect as the window shows it: from scrapes, else from process titles."""
    for sample in reversed(window.metrics):
        if sample.dialect:
            return dialects.by_name(sample.dialect)
    for sample in reversed(window.process):
        for member in sample.members:
            for dialect in dialects.registered():
                if dialect.role_of(member.title) is not None:
                    return dialect
    return None


def _dead_status(window: Window) -> int | None:
    """The /health status that means "engine dead" for this window's engine (None: it has none, or the
    engine is not known)."""
    dialect = dialect_hint(window)
    return dialect.health_dead_status if dialect is not None else None


def _trailing(samples, predicate) -> list:
    """The newest run of consecutive samples satisfying predicate (oldest first)."""
    run = []
    for sample in reversed(samples):
        if not predicate(sample):
            break
        run.append(sample)
    run.reverse()
    return run


def answer_problem(sample) -> str:
    """What went wrong with an answer (a /health sample or a probe's) in words: its HTTP status, else its error."""
    if sample.status is not None:
        return f"HTTP {sample.status}"
    return sample.error or "no answer"


@once_per_window          # engine_dead, alive_health_ok_no_progress and the outcome verdicts all ask
def engine_death_evidence(window: Window, config: Thresholds) -> tuple[float | None, list[Evidence], list[str]]:
    """`_engine_death_evidence`, computed once per window (undecorated there: mutmut mutates no decorated
    function, and its body is a figure the death verdicts read)."""
    return _engine_death_evidence(window, config)


def _engine_death_evidence(window: Window, config: Thresholds) -> tuple[float | None, list[Evidence], list[str]]:
    """(onset, evidence, reasons) for an engine death visible in the window, or (None, [], []).
    Nothing that belongs to a requested shutdown counts (see `in_shutdown`); where a log is read, a
    dead-status probe and a vanished engine count once they have held shutdown_log_wait_s, so that the
    shutdown line, read a poll late, can still say so."""
    onsets: list[float] = []
    evidence: list[Evidence] = []
    reasons: list[str] = []
    end = window.end or 0.0
    dead_lines = [e for e in window.logs if e.kind == "engine_dead" and e.t >= end - config.log_evidence_s
                  and not in_shutdown(window, e.t, config)]

    def counts(t: float) -> bool:
        if in_shutdown(window, t, config):
            return False
        # The engine's own death lines say it was no shutdown: nothing more to wait for. On a real vLLM
        # 0.32 whose worker was SIGKILLed, the API server exited 0.5 s after its worker went, before the
        # death lines were read; waiting for a shutdown line held engine_dead 2 s behind process_exit.
        return not window.logs or bool(dead_lines) or end - t >= config.shutdown_log_wait_s

    dead_status = _dead_status(window)
    if dead_status is not None:
        run = _trailing(window.health, lambda h: h.status == dead_status)
        if run and counts(run[0].t):
            onsets.append(run[0].t)
            evidence += [Evidence("health", run[0].t, "status", run[0].status),
                         Evidence("health", run[-1].t, "status", run[-1].status)]
            reasons.append(f"/health {dead_status} for {len(run)} probe(s) "
                           f"over {run[-1].t - run[0].t:.1f} s")

    gone = _engine_children_gone(window.process)
    if gone is not None and counts(gone[0].t):
        first_missing, last, missing = gone
        onsets.append(first_missing.t)
        evidence.append(Evidence("process", first_missing.t, "alive", first_missing.alive))
        evidence += [Evidence("process", first_missing.t, f"members[{pid}]", "gone") for pid, _ in missing]

        titles = gone_words(window.process, missing, window.logs)
        reasons.append(f"engine process(es) gone ({titles}) while the API process {last.root_pid} lives")

    if dead_lines:
        onsets.append(dead_lines[0].t)
        evidence += [Evidence("log", e.t, "kind", e.kind) for e in dead_lines[:3]]
        fields = dead_lines[0].fields
        reason = fields.get("reason", "engine_dead")
        if isinstance(fields.get("worker_rank"), int):     # the line names the worker that died
            reason += f": worker rank {fields['worker_rank']}"
            code = fields.get("exit_code")
            if isinstance(code, int):
                reason += f", exit code {code}" + (f" (signal {-code})" if code < 0 else "")
        reasons.append(f"{len(dead_lines)} engine-death log line(s) ({reason})")
    return (min(onsets) if onsets else None), evidence, reasons


def _engine_children_gone(samples: tuple[ProcessSample, ...]):
    """(first sample missing them, newest sample, [(pid, title)]) when engine children seen earlier are
    gone (or zombies) while the root is alive with the same identity."""
    samples = tuple(p for p in samples if p.error is None)  # an unreadable tree is not an empty one
    if not samples or not samples[-1].alive:
        return None
    last = samples[-1]
    identity = (last.root_pid, last.root_create_time)
    live_now = {(m.pid, m.create_time) for m in last.members if m.status != "zombie"}
    seen: dict[tuple[int, float], str] = {}
    for sample in samples:
        if (sample.root_pid, sample.root_create_time) != identity or not sample.alive:
            seen.clear()
            continue
        for m in sample.members:
            if m.role in _ENGINE_ROLES and m.status != "zombie":
                seen.setdefault((m.pid, m.create_time), m.title)
    missing = {ident: title for ident, title in seen.items() if ident not in live_now}
    if not missing:
        return None
    first_missing = last
    for sample in reversed(samples):
        live = {(m.pid, m.create_time) for m in sample.members if m.status != "zombie"}
        if all(ident not in live for ident in missing) and sample.alive:
            first_missing = sample
        else:
            break
    return first_missing, last, sorted((pid, title) for (pid, _), title in missing.items())


def in_shutdown(window: Window, t: float, config: Thresholds) -> bool:
    """Whether a sign seen at `t` belongs to a shutdown the server was asked for (SIGTERM, ^C): the
    dialect's shutdown line was read at most log_evidence_s before it, or at most shutdown_log_wait_s after
    it (lines are timed when they are read, a poll late at times). On a real vLLM 0.32 the API server
    logs "shutdown triggered", its engine is gone within the same second, and with requests in flight
    it also logs EngineDeadError as it goes: none of that is an engine death."""
    return any(e.kind == "shutdown" and e.t - config.shutdown_log_wait_s <= t <= e.t + config.log_evidence_s
               for e in window.logs)


def health_evidence(sample: HealthSample) -> Evidence:
    """A /health sample as evidence: its status, or the error when it got none."""
    if sample.status is None:
        return Evidence("health", sample.t, "error", sample.error)
    return Evidence("health", sample.t, "status", sample.status)


def engine_busy(process_samples, config: Thresholds) -> bool:
    """The engine is computing: no engine process is stopped now, and one of them used at least
    stall_busy_cpu_percent in some process sample of the last stall_floor_s (one sample on a shared
    machine can read low). No process samples (no --pid) is not busy."""
    if not process_samples:
        return False
    newest = process_samples[-1]
    if any(m.role in _ENGINE_ROLES and m.status in STOPPED for m in newest.members):
        return False
    recent = [p for p in process_samples if p.t >= newest.t - config.stall_floor_s]
    return any((m.cpu_percent or 0.0) >= config.stall_busy_cpu_percent
               for p in recent for m in p.members if m.role in _ENGINE_ROLES)
