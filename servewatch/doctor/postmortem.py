"""From a LogRecord to a postmortem: how the server died, the arithmetic that names the culprit, and the
safe actions the evidence supports (each with its rollback)."""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch import dialects
from servewatch.detectors.config import DetectorConfig
from servewatch.doctor import arithmetic
from servewatch.doctor.log_grammar import SIGNAL_NUMBERS, is_engine_process
from servewatch.doctor.log_record import LogRecord, StatsPoint, Traceback
from servewatch.doctor.model_config import ModelShape
from servewatch.detectors.registry import runbook_for

CLASSES = {
    "startup_sizing_error": "startup sizing error",
    "startup_failure": "startup failure",
    "runtime_oom": "runtime out of memory",
    "engine_death_behind_live_api": "engine death behind a live API",
    "watchdog_timeout": "watchdog / timeout",
    "signal": "killed by a signal",
    "clean_shutdown": "clean shutdown",
    "forced_stop": "stop forced by a second signal",
    "no_last_words": "no last words",
    "still_running": "no death in the log",
}


@dataclass(frozen=True, slots=True)
class RecommendedAction:
    action: str
    why: str
    rollback: str


@dataclass(frozen=True, slots=True)
class Death:
    classification: str
    summary: str
    t: float | None = None
    clock: str | None = None
    process: str | None = None
    exception: str | None = None
    innermost_engine_frame: str | None = None
    engine_message: str | None = None
    signal: str | None = None
    exit: str | None = None

    @property
    def label(self) -> str:
        return CLASSES[self.classification]


@dataclass
class Postmortem:
    record: LogRecord
    death: Death
    at_death: StatsPoint | None
    requested_bytes: float | None
    arithmetic: list[arithmetic.SuspectTest]
    conclusion: str | None
    actions: list[RecommendedAction]
    partial: list[str] = field(default_factory=list)
    vocab_size: int | None = None
    vocab_source: str | None = None


def _root_cause(record: LogRecord) -> Traceback | None:
    """The traceback that explains the death: an OOM first, then the first engine-process one, then any."""
    tracebacks = [tb for tb in record.tracebacks if tb.exception or tb.frames]
    for tb in tracebacks:
        if tb.is_oom:
            return tb
    for tb in tracebacks:
        if is_engine_process(tb.process):
            return tb
    return tracebacks[0] if tracebacks else None


def _events(record: LogRecord, kind: str) -> list:
    return [e for e in record.events if e.kind == kind]


def _exit(record: LogRecord) -> str | None:
    codes = _events(record, "exit_code")
    parts = []
    for e in codes:
        code = e.fields["exit_code"]
        name = arithmetic_signal(code)
        parts.append(f"a process exited with code {code}" + (f" ({name})" if name else ""))
    if _events(record, "force_kill"):
        targets = sorted({e.fields["target"] for e in _events(record, "force_kill")})
        parts.append("the API server force-killed " + ", ".join(targets))
    if _events(record, "api_exit"):
        parts.append("the API server finished its process (the exit code is not in the log)")
    for e in _events(record, "forced_stop"):
        parts.append(f"the server exited with code {e.fields['exit_code']} on a second stop signal")
    return "; ".join(parts) or None


def arithmetic_signal(code: int) -> str | None:
    """The signal a negative exit code names (-9: SIGKILL); None for any other code."""
    return SIGNAL_NUMBERS.get(-code)


def classify(record: LogRecord) -> Death:
    served = record.ready_t is not None or bool(record.stats)
    root = _root_cause(record)
    failures = _events(record, "startup_failure")
    ooms = [tb for tb in record.tracebacks if tb.is_oom] + _events(record, "oom")
    exit_text = _exit(record)
    frame = root.innermost_engine_frame if root else None
    base = dict(process=root.process if root else None, exception=root.exception if root else None,
                innermost_engine_frame=frame, exit=exit_text)
    t = root.t if root else None
    clock = root.clock if root else None

    if not served and (failures or root):
        sizing = [e for e in failures if "max_model_len" in e.fields or "desired_gib" in e.fields
                  or "memory" in str(e.fields.get("reason", "")).lower()]
        message = next((tb.known_message for tb in record.tracebacks if tb.known_message), None) \
            or next((str(e.fields["reason"]) for e in failures if e.fields.get("reason")), None)
        if sizing or ooms:
            first = sizing[0] if sizing else None
            return Death("startup_sizing_error",
                         "the engine could not size its memory at startup and never served" +
                         (f": {message}" if message else ""),
                         t=first.t if first else t, clock=first.clock if first else clock,
                         engine_message=message, **base)
        return Death("startup_failure", "the engine failed before it was ready",
                     t=failures[0].t if failures else t, clock=failures[0].clock if failures else clock,
                     engine_message=message, **base)
    if ooms:
        tb = next((x for x in record.tracebacks if x.is_oom), None)
        where = f" in {tb.innermost_engine_frame}" if tb and tb.innermost_engine_frame else ""
        requested = tb.numbers.get("requested_bytes") if tb else None
        what = f" asking for {arithmetic.mib(requested)}" if requested else ""
        return Death("runtime_oom", f"the engine ran out of device memory while serving{what}{where}",
                     t=tb.t if tb else ooms[0].t, clock=tb.clock if tb else ooms[0].clock,
                     engine_message="out of memory", **({**base, **({"process": tb.process,
                                                                      "exception": tb.exception,
                                                                      "innermost_engine_frame": tb.innermost_engine_frame}
                                                                     if tb else {})}))
    watchdog = _events(record, "watchdog") + _events(record, "timeout")
    if watchdog:
        first = watchdog[0]
        reason = first.fields.get("reason") or first.fields.get("literal")
        return Death("watchdog_timeout", f"a watchdog or timeout ended the engine ({reason})",
                     t=first.t, clock=first.clock, **base)
    dead = _events(record, "engine_dead")
    if dead:
        first = dead[0]
        codes = [e.fields["exit_code"] for e in _events(record, "exit_code")] + \
                [e.fields["exit_code"] for e in dead if "exit_code" in e.fields]
        killed = next((arithmetic_signal(c) for c in codes if arithmetic_signal(c)), None)
        outlived = any(s.t > (first.t or 0) for s in record.stats) or bool(_events(record, "api_exit"))
        reasons = sorted({str(e.fields.get("reason")) for e in dead})
        summary = ("the engine died while the API server lived on" if outlived else "the engine died") + \
                  f" ({'; '.join(reasons)})"
        if killed:
            summary += f"; a child was killed by {killed}"
        if _events(record, "api_exit"):
            summary += f"; {_exit_zero_words(record)}"
        return Death("engine_death_behind_live_api", summary, t=first.t, clock=first.clock,
                     signal=killed, **{**base, "process": base["process"] or first.process})
    signals = _events(record, "signal")
    shutdown = _events(record, "shutdown")
    codes = [e.fields["exit_code"] for e in _events(record, "exit_code")]
    killed = next((arithmetic_signal(c) for c in codes if arithmetic_signal(c)), None)
    if killed and not shutdown:
        return Death("signal", f"a process was killed by {killed} without an orderly shutdown", signal=killed,
                     **base)
    forced = _events(record, "forced_stop")
    if forced:
        # The engine's own line for a stop signal repeated during its stop: the first began an orderly stop (its
        # shutdown line, when it logs one), the process had not exited when the second came, and the second ended
        # it at once with a failure status.
        first = (signals or shutdown or forced)[0]
        began = f" (its stop began at {first.clock})" if first.clock and (signals or shutdown) else ""
        return Death("forced_stop", f"a second stop signal forced the exit{began}: the server had not exited on the "
                     f"first, and requests still waiting then got no answer; exit status "
                     f"{forced[0].fields['exit_code']}, which a supervisor counts as a failure",
                     t=first.t, clock=first.clock, signal=signals[0].fields["signal"] if signals else None, **base)
    if shutdown or signals:
        first = (signals or shutdown)[0]
        signal = signals[0].fields["signal"] if signals else None
        cause = f" on {signal}" if signal else ""
        return Death("clean_shutdown", f"an orderly shutdown{cause}: no error before it", t=first.t,
                     clock=first.clock, signal=signal, **base)
    if root is not None and root.exception:
        return Death("engine_death_behind_live_api" if is_engine_process(root.process) else "no_last_words",
                     f"the last words are a {root.exception} in {root.process or 'an unnamed process'}",
                     t=t, clock=clock, **base)
    if served:
        return Death("no_last_words", "the log ends while the server was serving, without an error, a shutdown "
                     "or an exit: SIGKILL and the kernel's OOM killer leave no last words (or the log was cut)",
                     t=record.duration_s, clock=record.last_clock, **base)
    return Death("still_running", "no death and no serving in the log", **base)


def _at(record: LogRecord, t: float | None) -> StatsPoint | None:
    dump = [s for s in record.stats if s.source == "engine dump at death" and (t is None or s.t <= t + 1)]
    if dump:
        return dump[-1]
    before = [s for s in record.stats if t is None or s.t <= t]
    return before[-1] if before else None


def postmortem(record: LogRecord, shape: ModelShape | None = None, *, vocab_size: int | None = None,
               vocab_source: str | None = None, config: DetectorConfig | None = None) -> Postmortem:
    config = config or DetectorConfig()
    death = classify(record)
    vocab = vocab_size if vocab_size is not None else (shape.vocab_size if shape else None)
    at_death = _at(record, death.t)
    partial: list[str] = []
    requested = None
    tests: list[arithmetic.SuspectTest] = []
    conclusion = None
    oom_tb = next((tb for tb in record.tracebacks if tb.is_oom), None)
    if oom_tb is not None:
        requested = oom_tb.numbers.get("requested_bytes")
    truncated = [tb for tb in record.tracebacks if not tb.complete]
    if truncated:
        last = truncated[-1]
        partial.append(f"a traceback of {last.process or 'an unnamed process'} at {last.clock or 'an unknown time'} "
                       f"is cut off after {last.frames} frame(s): its exception is unknown")
    if death.classification == "runtime_oom":
        if requested is None:
            partial.append("the out-of-memory message states no size: the suspects cannot be tested")
        else:
            running = at_death.running if at_death else None
            kv_pct = at_death.kv_pct if at_death else None
            tests.append(arithmetic.logits_temporary(requested, running, vocab))
            if vocab is not None and running is not None:
                tests.append(arithmetic.logits_temporary(requested, running, vocab, bytes_per_value=2,
                                                         label="logits-sized temporary in half precision"))
            tests.append(arithmetic.kv_cache(requested, kv_pct, 100 * config.kv_high,
                                             shape.kv_bytes_per_token if shape else None, record.kv_cache_tokens))
            if vocab is None:
                partial.append("the vocabulary is unknown (no --model-config with vocab_size, no --vocab-size): "
                               "the logits-sized suspect is untested")
            if running is None:
                partial.append("no stats line before the death: the running count at death is unknown")
            logits, kv = tests[0], tests[-1]
            if logits.verdict == "matches" and kv.verdict == "ruled out":
                conclusion = "not the KV cache: a logits-sized temporary"
            elif logits.verdict == "matches":
                conclusion = "a logits-sized temporary (the KV cache was also nearly full)"
            elif kv.verdict == "ruled out" and logits.verdict == "cannot test":
                conclusion = "not the KV cache (the logits-sized suspect is untested)"
            elif kv.verdict == "ruled out":
                conclusion = "not the KV cache; no known suspect matches the bytes requested"
    actions = _actions(record, death, at_death, tests, vocab)
    return Postmortem(record, death, at_death, requested, tests, conclusion, actions, partial, vocab, vocab_source)


def _actions(record: LogRecord, death: Death, at_death: StatsPoint | None, tests, vocab: int | None) -> list[RecommendedAction]:
    engine_dead = runbook_for("engine_dead")
    process_exit = runbook_for("process_exit")
    c = death.classification
    dialect = dialects.by_name(record.dialect)
    budget_key, budget_flag, budget_default = (dialect.memory_budget if dialect and dialect.memory_budget
                                               else (None, "the engine's memory-budget flag", None))
    if c == "runtime_oom":
        utilisation = record.settings.get(budget_key) if budget_key else None
        utilisation = utilisation or budget_default
        current = f"{utilisation:g}" if utilisation else "its current value"
        lower = f"{max(0.5, utilisation - 0.05):.2f}" if utilisation else "5 points lower"
        if utilisation and not record.settings.get(budget_key):
            current += " (the default)"
        running = at_death.running if at_death else None
        actions = [RecommendedAction(f"Restart with {budget_flag} lowered from {current} to {lower}",
                          "leaves more device memory outside the engine's budget for activations such as the "
                          "logits-sized temporaries (measured on a 7B model on one 12 GiB GPU: at 0.85 the same overload queued, running 256 and 44 waiting, instead of dying at 0.9)",
                          engine_dead.rollback)]
        matched = any(t.verdict == "matches" for t in tests)
        if running:
            per_seq = f" ({vocab * 4 / 2**10:,.0f} KiB per sequence for each such temporary)" if vocab else ""
            slot_flag = dialect.slot_limit_flag if dialect and dialect.slot_limit_flag else "the engine's slot limit"
            actions.append(RecommendedAction(f"Or cap concurrent sequences below {running} ({slot_flag})",
                                  "the temporary grows with the running count" + per_seq +
                                  ("; the arithmetic ties the failed allocation to it" if matched else ""),
                                  "Raise the cap again when waiting grows at peak while no death recurs; the "
                                  "cap is a flag, reversible at the next restart."))
        return actions
    if c == "startup_failure":
        said = f"the engine's own message: \"{death.engine_message}\"" if death.engine_message else \
            "the engine's error in its log" + (f" ({death.exception})" if death.exception else "")
        return [RecommendedAction(f"Read {said}, and change the flag, build or environment it points to before starting "
                       "again: a restart with the same flags fails the same way",
                       "the engine stopped before it was ready, for a reason other than memory sizing",
                       "Nothing served yet, so nothing to roll back; keep the failing flags in the deploy record.")]
    if c == "startup_sizing_error":
        length_flag = dialect.context_length_flag if dialect and dialect.context_length_flag else "the maximum length"
        return [RecommendedAction(f"Follow the engine's own message: raise the memory budget ({budget_flag}) or lower "
                       f"{length_flag} until one request of the maximum length fits",
                       death.engine_message or "the engine stopped before it was ready",
                       "Nothing served yet, so nothing to roll back; keep the failing flags in the deploy record.")]
    if c == "engine_death_behind_live_api":
        return [RecommendedAction(engine_dead.safe_action, engine_dead.meaning, engine_dead.rollback),
                RecommendedAction(process_exit.safe_action, _exit_zero_words(record), process_exit.rollback)]
    if c == "watchdog_timeout":
        stall = runbook_for("alive_health_ok_no_progress")
        return [RecommendedAction(stall.safe_action, stall.meaning, stall.rollback)]
    if c == "signal":
        return [RecommendedAction(process_exit.safe_action, process_exit.meaning, process_exit.rollback)]
    if c == "no_last_words":
        return [RecommendedAction("Read the kernel log for the OOM killer (dmesg -T | grep -i oom) and the supervisor's record "
                       "of the exit before restarting; persist the server's log outside the container",
                       "a death without last words in the log is usually a SIGKILL from outside",
                       "Nothing changed on the server: read-only.")]
    if c == "clean_shutdown":
        return [RecommendedAction("No action on the server: it was stopped on purpose",
                       "an orderly shutdown with no error before it", "Nothing to roll back.")]
    if c == "forced_stop":
        return [RecommendedAction("No repair on the server: it was stopped on purpose, with no error before the stop; "
                                  "check that its supervisor did not restart it for the failure status of the forced "
                                  "exit (Restart=on-failure does)",
                                  "a second stop signal ended a stop that was waiting on requests still in flight",
                                  "Nothing changed on the server: read-only."),
                RecommendedAction("Next time, stop sending it requests and let them finish (or their clients hang up) "
                                  "before the stop signal: the first one then exits 0",
                                  "the server exits by itself on the first signal once no request is waiting",
                                  "Nothing to roll back: it is an order of steps, not a setting.")]
    return []


def _exit_zero_words(record: LogRecord) -> str:
    dialect = dialects.by_name(record.dialect)
    if dialect and dialect.exit_zero_after_death_note:
        return (f"the API server exits 0 after an engine death ({dialect.exit_zero_after_death_note}), which "
                f"Restart=on-failure does not restart")
    return "the API server exited after the engine died; check its exit status reaches the restart policy"
