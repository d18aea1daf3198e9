"""From a user's complaint to the quantity that decides it: ranked hypotheses over what was recorded.

The recorder's detectors decide the verdicts and the runbook holds each verdict's safe action, rollback and
what a restart destroys; the doctor reads the quantities across them (gauges over the window, per-request
means from the histogram and counter deltas, a load run's signature) and ranks the explanations for a symptom.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.detectors.verdict import Verdict
from servewatch.detectors.evidence.engine_signs import dialect_hint
from servewatch.detectors.registry import runbook_for
from servewatch.engine.served import served, totals
from servewatch.kinds import CONNECT, TIMEOUT, failure_words
from servewatch.timeline.window import Window

SYMPTOMS = {
    "slow-first-token": "the first word takes ages",
    "slow-text": "the text appears slowly",
    "long-answers": "answers take long but start at once",
    "hangs-under-load": "it hangs when many use it",
    "errors": "errors (500), then the server vanished",
    "e2e-up": "end-to-end latency rose while TTFT and the queue look normal",
}
# Which explanations each complaint opens, in the order an operator checks them.
CANDIDATES = {
    "slow-first-token": ("not_answering", "overload", "long_prompt", "stall", "engine_dead"),
    "slow-text": ("not_answering", "contention", "kv_pressure", "stall"),
    "long-answers": ("not_answering", "long_output", "contention"),
    "hangs-under-load": ("not_answering", "overload", "kv_pressure", "stall", "engine_dead"),
    "errors": ("not_answering", "engine_dead", "stall", "overload"),
    "e2e-up": ("not_answering", "long_output", "contention", "long_prompt"),
    None: ("not_answering", "engine_dead", "stall", "kv_pressure", "overload", "long_output", "long_prompt", "contention", "idle"),
}
# A live server whose every connection is refused is said to be so after this grace, not after the whole
# --window (a server still starting gets the grace to begin listening); tried again every CONNECT_RETRY_S.
CONNECT_GRACE_S = 5.0
CONNECT_RETRY_S = 0.25
# The doctor's own ranges, for quantities no detector judges (measured on a 7B model on one GPU: a normal
# request was 44 tokens in / 128 out; the long-output run 1,024 out, the long-prompt run 2,905 in).
LONG_OUTPUT_TOKENS = 512
LONG_PROMPT_TOKENS = 1000
CONTENTION_ITL_S = 0.05          # 50 ms between tokens: a batch this slow is felt as slow text
RUNBOOK_OF = {"engine_dead": "engine_dead", "stall": "alive_health_ok_no_progress", "overload": "overload",
              "kv_pressure": "kv_pressure"}


@dataclass
class Readings:
    """The quantities the doctor reasons on; None when not measured."""

    seconds: float | None = None
    scrapes: int = 0
    max_running: float | None = None
    max_waiting: float | None = None
    max_kv: float | None = None
    slot_limit: float | None = None
    tokens_moved: bool | None = None          # generation counter moved across the window
    health_last: int | None = None
    health_dead_status: int | None = None     # the status that means "engine dead" for this engine, if any
    slot_limit_flag: str | None = None        # the engine's flag that caps running requests
    engine: str | None = None                 # the engine's name in words, where the window tells it
    engine_alive_signs: str | None = None     # what a live engine of that kind shows (the dialect's words)
    engine_in_api_process: bool = False       # its engine dies with the API server's process (a refused connection)
    metrics_wait_on_engine: bool | None = None   # its /metrics waits on the engine's loop (None: engine not known)
    slots_path: str | None = None             # its slot listing, where it has one
    preemptions: float | None = None
    tokens_in: float | None = None            # per request
    tokens_out: float | None = None
    length_share: float | None = None         # requests that stopped at max_tokens
    queue_s: float | None = None
    ttft_s: float | None = None
    itl_s: float | None = None
    e2e_s: float | None = None
    engine_dead_lines: int = 0
    shutdown_lines: int = 0                   # the log's lines of a requested stop
    health_answers: int = 0                   # /health probes that got an HTTP answer
    health_failures: dict[str, int] = field(default_factory=dict)    # failure kind -> probes ("connect", "http_503")
    metrics_failures: dict[str, int] = field(default_factory=dict)   # failure kind -> scrapes
    lifetime_means: bool = False              # the latency means are the server's lifetime ones
    verdicts: list[Verdict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Hypothesis:
    name: str
    title: str
    verdict: str            # "supported" | "ruled out" | "not measured"
    quantity: str
    value: str
    expected: str
    why: str
    next_check: str
    safe_action: str
    rollback: str
    restart_destroys: str
    score: float = 0.0
    confirmed_by: str | None = None   # the recorder's verdict that confirms it

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "title", "verdict", "quantity", "value", "expected", "why",
                                              "next_check", "safe_action", "rollback", "restart_destroys", "score",
                                              "confirmed_by")}


# --- readings -----------------------------------------------------------------------------------------

def readings_from_window(window: Window, config: DetectorConfig | None = None) -> Readings:
    """The quantities of a window of samples, by the same definition `servewatch load` writes to its
    summary (`servewatch.engine.served`); with one scrape the means are the server's lifetime ones, and a
    window in which no request finished falls back to the lifetime latency means (said in `sources`)."""
    config = config or DetectorConfig()
    r = Readings(sources=["recorded samples"])
    good = window.good_metrics()
    r.scrapes = len(good)
    if window.start is not None and window.end is not None:
        r.seconds = window.end - window.start
    r.verdicts = run_detectors(window, config)
    answered = [h for h in window.health if h.status is not None]
    if answered:
        r.health_last = answered[-1].status
    r.health_failures = _failures(window.health)
    r.metrics_failures = _failures(window.metrics)
    r.health_answers = len(answered)
    dialect = dialect_hint(window)
    r.health_dead_status = dialect.health_dead_status if dialect is not None else None
    r.slot_limit_flag = dialect.slot_limit_flag if dialect is not None else None
    if dialect is not None:
        r.engine = dialect.title or dialect.name
        r.engine_alive_signs = dialect.engine_alive_signs
        r.engine_in_api_process = dialect.engine_in_api_process
        r.metrics_wait_on_engine = dialect.metrics_wait_on_engine
        r.slots_path = dialect.slots_path
    r.engine_dead_lines = sum(1 for e in window.logs if e.kind == "engine_dead")
    r.shutdown_lines = sum(1 for e in window.logs if e.kind == "shutdown")
    if not any(m.engines for m in good):
        return r
    last = list(good[-1].engines)
    if len(good) >= 2:
        _fill(r, served(list(good[0].engines), last, (totals(m.engines) for m in good), len(good)))
    else:
        _fill(r, served(None, last, [totals(last)], 1))
    if all(getattr(r, name) is None for name, _ in LATENCY_KINDS):
        # No request finished in the window (or one scrape): the server's lifetime means, said as such.
        lifetime = served([_empty(e) for e in last], last, [totals(last)], 2)
        for name, kind in LATENCY_KINDS:
            setattr(r, name, lifetime.means.get(kind))
        r.lifetime_means = any(getattr(r, name) is not None for name, _ in LATENCY_KINDS)
        if r.length_share is None and lifetime.means.get("finished") and lifetime.length_finished is not None:
            r.length_share = lifetime.length_finished / lifetime.means["finished"]
    return r


LATENCY_KINDS = (("queue_s", "queue"), ("ttft_s", "ttft"), ("itl_s", "itl"), ("e2e_s", "e2e"))


def _fill(r: Readings, quantities) -> None:
    r.max_running, r.max_waiting, r.max_kv = quantities.max_running, quantities.max_waiting, quantities.max_kv
    r.slot_limit, r.preemptions, r.tokens_moved = quantities.slot_limit, quantities.preemptions, quantities.tokens_moved
    means = quantities.means
    r.tokens_in, r.tokens_out = means.get("tokens_in"), means.get("tokens_out")
    for name, kind in LATENCY_KINDS:
        setattr(r, name, means.get(kind))
    if means.get("finished") and quantities.length_finished is not None:
        r.length_share = quantities.length_finished / means["finished"]


def _failures(samples) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in samples:
        if s.error is not None:
            out[s.error] = out.get(s.error, 0) + 1
    return out


def _empty(state):
    """The engine as it was at its start: no observation, every counter at zero."""
    import dataclasses

    c = state.counters
    zero = dataclasses.replace(c, prompt_tokens=0.0, generation_tokens=0.0, preemptions=0.0,
                               finished={reason: 0.0 for reason in c.finished})
    return dataclasses.replace(state, counters=zero, histograms={
        kind: dataclasses.replace(h, cumulative=tuple(0.0 for _ in h.cumulative), count=0.0, sum=0.0)
        for kind, h in state.histograms.items()})


def readings_from_load(summary: dict) -> Readings:
    """A `servewatch load` run: its signature row (server values preferred, client values otherwise)."""
    row = summary.get("signature") or summary
    r = Readings(sources=["load run signature"])
    r.tokens_in, r.tokens_out = row.get("tokens_in"), row.get("tokens_out")
    r.queue_s, r.ttft_s, r.itl_s, r.e2e_s = (row.get("queue_wait_s"), row.get("ttft_s"), row.get("itl_s"),
                                            row.get("e2e_s"))
    r.max_running, r.max_waiting, r.max_kv = row.get("max_running"), row.get("max_waiting"), row.get("max_kv")
    view = summary.get("server_view") or {}
    r.slot_limit, r.preemptions = view.get("slot_limit"), view.get("preemptions")
    r.scrapes = int(view.get("samples") or 0) - sum((view.get("errors") or {}).values())
    r.metrics_failures = dict(view.get("errors") or {})
    requested = summary.get("output_tokens_requested")
    if requested and r.tokens_out is not None and r.tokens_out >= requested:
        r.length_share = 1.0
    return r


# --- hypotheses ---------------------------------------------------------------------------------------

def _fmt(value, unit: str = "", pct: bool = False) -> str:
    if value is None:
        return "not measured"
    if pct:
        return f"{value:.0%}"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:,.0f}{unit}"


def _verdict(readings: Readings, name: str) -> Verdict | None:
    return next((v for v in readings.verdicts if v.name == name), None)


def _from_runbook(name: str, **kw) -> Hypothesis:
    branch = runbook_for(RUNBOOK_OF[name])
    return Hypothesis(name=name, next_check=branch.check_next[0], safe_action=branch.safe_action,
                      rollback=branch.rollback, restart_destroys=branch.restart_destroys, **kw)


def _failure_list(failures: dict[str, int]) -> str:
    return ", ".join(f"{failure_words(kind)} ×{n}" for kind, n in sorted(failures.items(), key=lambda kv: -kv[1]))


def _health_words(r: Readings) -> str:
    if r.health_last is not None:
        return f"/health answered {r.health_last}"
    if r.health_failures:
        return f"/health never answered ({_failure_list(r.health_failures)})"
    return "/health not probed"


def _limit_words(r: Readings) -> str:
    if r.slot_limit is not None:
        return f"of the slot limit {_fmt(r.slot_limit)}"
    flag = f" ({r.slot_limit_flag})" if r.slot_limit_flag else ""
    return f"(its slot limit{flag} is not in /metrics)"


def _loop_silent(r: Readings) -> bool:
    """/health answered every probe while every failed scrape timed out: the sign of an engine loop that hangs
    where /metrics waits on that loop (Dialect.metrics_wait_on_engine)."""
    return bool(r.health_answers and not r.health_failures and r.metrics_failures
                and set(r.metrics_failures) == {TIMEOUT} and r.health_last is not None and 200 <= r.health_last < 300
                and r.metrics_wait_on_engine is not False)


def _silent_loop_hypothesis(r: Readings, listed: str) -> Hypothesis:
    """not_answering when /metrics times out behind a /health of 200: on an engine whose /metrics waits on its loop,
    a hung loop (the not_serving verdict's sign), said with that engine's own facts."""
    from servewatch import dialects

    branch = runbook_for("not_serving")
    timeouts = r.metrics_failures[TIMEOUT]
    if r.metrics_wait_on_engine:
        why = (f"/metrics timed out ×{timeouts} while /health answered {r.health_last}: {r.engine} answers /health "
               f"without its engine loop and /metrics waits on that loop, so the loop is hung (or in one step "
               f"longer than the scrape timeout)")
    else:
        engines = ", ".join(d.title or d.name for d in dialects.registered() if d.metrics_wait_on_engine)
        why = (f"/metrics timed out ×{timeouts} while /health answered {r.health_last}: where /metrics waits on the "
               f"engine's loop ({engines}), that loop is hung; elsewhere /metrics itself is slow")
    listing = f"; its slot listing ({r.slots_path}) waits on the same loop: a busy slot whose tokens move between " \
              f"listings is a long prompt, not a hang" if r.slots_path else ""
    return Hypothesis("not_answering", "the engine's loop does not answer (/health does)", "supported",
                      "failed /health probes and /metrics scrapes by kind", listed,
                      "every /health and /metrics answered 2xx", why,
                      "send one request yourself with a deadline (curl -m 20 URL/v1/completions with max_tokens 1) or "
                      "watch with --probe: no token while /health answers 200 is the hang (not_serving)" + listing,
                      branch.safe_action, branch.rollback, branch.restart_destroys, 110)


def _not_answering(r: Readings, _config) -> Hypothesis:
    failures = {**{f"/health {failure_words(k)}": n for k, n in r.health_failures.items()},
                **{f"/metrics {failure_words(k)}": n for k, n in r.metrics_failures.items()}}
    unreachable = any(not k.startswith("http_") for k in (*r.health_failures, *r.metrics_failures))
    listed = ", ".join(f"{k} ×{n}" for k, n in failures.items())
    if _loop_silent(r):
        return _silent_loop_hypothesis(r, listed)
    why = (f"{listed}: the server did not answer every probe in the window" if failures else
           "every probe got an answer" if (r.scrapes or r.health_answers) else "no probe was made")
    return Hypothesis("not_answering", "the server does not answer (or answers with errors)",
                      _v(bool(failures), bool(r.scrapes or r.health_answers or failures or r.max_running is not None)),
                      "failed /health probes and /metrics scrapes by kind",
                      listed or "none", "every /health and /metrics answered 2xx", why,
                      "whether the process is up and listening on that port (ss -ltnp), its log's last lines, "
                      "and the router or firewall in between",
                      "Take the replica out of routing until /health answers 200 again; keep its log.",
                      "Return it to routing once /health and /metrics answer for a full window.",
                      "Nothing the server still holds if it is not running; if it is, in-flight requests and "
                      "the KV / prefix cache.",
                      120 if unreachable else 95 if failures else 0)


def _engine_dead(r: Readings, config: DetectorConfig) -> Hypothesis:
    verdict = _verdict(r, "engine_dead")
    dead_status = r.health_dead_status is not None and r.health_last == r.health_dead_status
    # An engine that is a thread of the server's one process dies with it: /health answered, then the port closed.
    # A stop line in its log makes that a requested stop.
    closed = r.engine_in_api_process and r.health_last is not None and bool(r.health_failures.get(CONNECT))
    gone = closed and not r.shutdown_lines
    supported = verdict is not None or dead_status or r.engine_dead_lines > 0 or gone
    measured = r.health_last is not None or r.engine_dead_lines or verdict
    lines = f" and the log has {r.engine_dead_lines} engine-death line(s)" if r.engine_dead_lines else ""
    why = (verdict.why if verdict else
           f"/health answered {r.health_last}, then {failure_words(CONNECT)} ×{r.health_failures[CONNECT]}: "
           f"{r.engine}'s engine runs in the server's one process, so the process and its engine are gone"
           if gone else _health_words(r) + lines if supported else
           f"/health answered {r.health_last}, then {failure_words(CONNECT)} ×{r.health_failures[CONNECT]} after "
           f"{r.shutdown_lines} line(s) of a requested stop in its log: stopped, not dead" if closed else
           f"{_health_words(r)} and the log has no engine-death line")
    return _from_runbook("engine_dead", title="the engine died", verdict=_v(supported, measured),
                         quantity="/health status and engine-death log lines",
                         value=f"{_health_words(r)}, {r.engine_dead_lines} death line(s)",
                         expected=r.engine_alive_signs or "/health 200, no engine-death line in its log", why=why,
                         score=100 if supported else 0, confirmed_by=verdict.name if verdict else None)


def _stall(r: Readings, config: DetectorConfig) -> Hypothesis:
    verdict = _verdict(r, "alive_health_ok_no_progress")
    admitted = (r.max_running or 0) > 0
    frozen = r.tokens_moved is False and admitted and (r.health_last is None or 200 <= r.health_last < 300)
    supported = verdict is not None or (frozen and (r.seconds or 0) >= config.stall_floor_s)
    measured = r.tokens_moved is not None
    why = (verdict.why if verdict else
           f"{_fmt(r.max_running)} running and the generation counter did not move in {r.seconds or 0:.1f} s"
           if supported else "tokens kept moving" if r.tokens_moved else
           "no admitted work" if not admitted else "progress not measured (one scrape)")
    return _from_runbook("stall", title="alive but not progressing (a stalled engine or worker)",
                         verdict=_v(supported, measured), quantity="generation tokens across the window, running",
                         value=f"{_MOVED[r.tokens_moved]}, running {_fmt(r.max_running)}",
                         expected="tokens advance at every scrape while running > 0", why=why,
                         score=90 if supported else 0, confirmed_by=verdict.name if verdict else None)


_MOVED = {True: "tokens moved", False: "tokens did not move", None: "token movement not measured (one scrape)"}


def _overload(r: Readings, config: DetectorConfig) -> Hypothesis:
    verdict = _verdict(r, "overload")
    queued = (r.max_waiting or 0) > 0 or (r.queue_s or 0) > 0.1
    at_limit = r.slot_limit is not None and r.max_running is not None and r.max_running >= r.slot_limit
    kv_low = r.max_kv is not None and r.max_kv < config.kv_high
    supported = verdict is not None or (queued and (at_limit or r.slot_limit is None) and kv_low
                                        and r.tokens_moved is not False)
    cause = "slots" if at_limit and kv_low else (verdict.details.get("cause") if verdict else "unknown")
    why = (verdict.why if verdict else
           f"{_fmt(r.max_waiting)} waiting while running {_fmt(r.max_running)} = slot limit "
           f"{_fmt(r.slot_limit)} and KV {_fmt(r.max_kv, pct=True)}: out of slots, not memory"
           if supported and at_limit else
           f"{_fmt(r.max_waiting)} waiting, queue wait {_fmt(r.queue_s, 's')}" if supported else
           f"no queue: waiting {_fmt(r.max_waiting)}, queue wait {_fmt(r.queue_s, 's')}")
    return _from_runbook("overload", title="overload: demand above capacity" + (f" (cause {cause})" if supported else ""),
                         verdict=_v(supported, r.max_waiting is not None or r.queue_s is not None),
                         quantity="waiting, queue wait, running against the slot limit, KV",
                         value=f"waiting {_fmt(r.max_waiting)}, queue wait {_fmt(r.queue_s, 's')}, running "
                               f"{_fmt(r.max_running)} {_limit_words(r)}, KV {_fmt(r.max_kv, pct=True)}",
                         expected="waiting 0 and queue wait ~0 (overload is the only signature with a queue)",
                         why=why, score=(80 if verdict else 70) if supported else 0,
                         confirmed_by=verdict.name if verdict else None)


def _kv_pressure(r: Readings, config: DetectorConfig) -> Hypothesis:
    verdict = _verdict(r, "kv_pressure") or _verdict(r, "preemption")
    high = r.max_kv is not None and r.max_kv >= config.kv_high
    preempted = (r.preemptions or 0) >= config.preemption_min
    supported = verdict is not None or high and ((r.max_waiting or 0) > 0 or preempted)
    why = (verdict.why if verdict else f"KV peaked at {_fmt(r.max_kv, pct=True)} with {_fmt(r.max_waiting)} waiting "
           f"and {_fmt(r.preemptions)} preemption(s)" if supported else
           f"KV peaked at {_fmt(r.max_kv, pct=True)} (< {config.kv_high:.0%})" if r.max_kv is not None else
           "KV usage not measured")
    return _from_runbook("kv_pressure", title="KV cache pressure (preemptions)", verdict=_v(supported, r.max_kv is not None),
                         quantity="KV usage, preemption delta, waiting",
                         value=f"KV {_fmt(r.max_kv, pct=True)}, preemptions "
                               f"{'+' + _fmt(r.preemptions) if r.preemptions is not None else 'not measured'}",
                         expected=f"KV below {config.kv_high:.0%}, no preemption in the window", why=why,
                         score=(85 if verdict else 75) if supported else 0, confirmed_by=verdict.name if verdict else None)


def _per_request(value: float | None, which: str) -> str:
    return f"{_fmt(value)} {which} tokens per request" if value is not None else \
        f"{which} tokens per request not measured (no request finished in the window)"


def _long_output(r: Readings, _config) -> Hypothesis:
    long = r.tokens_out is not None and r.tokens_out >= LONG_OUTPUT_TOKENS
    starts_fast = (r.queue_s or 0) < 0.1
    supported = long and starts_fast
    why = (f"{_fmt(r.tokens_out)} output tokens per request with queue wait {_fmt(r.queue_s, 's')} and TTFT "
           f"{_fmt(r.ttft_s, 's')}: the system does what it is asked, the job is long"
           + (f"; {r.length_share:.0%} stopped at max_tokens" if r.length_share is not None else "")
           if supported else _per_request(r.tokens_out, "output"))
    return Hypothesis("long_output", "long answers (a long-output workload)", _v(supported, r.tokens_out is not None),
                      "output tokens per request, stop reason", _per_request(r.tokens_out, "output"),
                      f"below {LONG_OUTPUT_TOKENS} tokens for chat-sized answers", why,
                      "the stop reason (finished_reason=length means cut at max_tokens), max_tokens and the prompt "
                      "or model version that changed",
                      "Cap max_tokens at the gateway or fix the prompt that asks for long answers; do not add "
                      "GPUs for a workload change.", "Restore the previous max_tokens cap.",
                      "Nothing that helps: a restart does not shorten answers; it loses in-flight requests and the "
                      "prefix cache.", 60 if supported else 0)


def _long_prompt(r: Readings, _config) -> Hypothesis:
    long = r.tokens_in is not None and r.tokens_in >= LONG_PROMPT_TOKENS
    why = (f"{_fmt(r.tokens_in)} input tokens per request (prefill {_fmt(r.ttft_s, 's')} TTFT; a repeated prompt "
           f"hides its cost in the prefix cache)" if long else _per_request(r.tokens_in, "input"))
    return Hypothesis("long_prompt", "long prompts", _v(long, r.tokens_in is not None),
                      "input tokens per request, prefix-cache hits", _per_request(r.tokens_in, "input"),
                      f"below {LONG_PROMPT_TOKENS} tokens", why,
                      "prefix-cache hit rate and the prompt template version: different long prompts cost far more "
                      "prefill than a repeated one",
                      "Shorten the prompt or reuse a fixed prefix so the prefix cache serves it.",
                      "Restore the previous prompt template.",
                      "The prefix cache: a restart makes every long prompt pay full prefill again.",
                      50 if long else 0)


def _contention(r: Readings, _config) -> Hypothesis:
    slow = r.itl_s is not None and r.itl_s >= CONTENTION_ITL_S
    why = (f"{_fmt(r.itl_s, 's')} between tokens with up to {_fmt(r.max_running)} running: a large batch slows "
           f"every stream" if slow else f"{_fmt(r.itl_s, 's')} between tokens" if r.itl_s is not None else
           "time between tokens not measured")
    return Hypothesis("contention", "contention in generation (a batch too large)", _v(slow, r.itl_s is not None),
                      "time between tokens against the running count",
                      f"ITL {_fmt(r.itl_s, 's')}, running {_fmt(r.max_running)}",
                      f"below {CONTENTION_ITL_S * 1000:.0f} ms between tokens", why,
                      "ITL over time against running: if they rise together the batch is the cause",
                      f"Lower the concurrent-sequence limit ({r.slot_limit_flag or 'the slot limit'}) or add "
                      "replicas.",
                      "Raise the limit again when waiting grows while ITL stays in range.",
                      "In-flight requests and the KV / prefix cache.", 55 if slow else 0)


def _idle(r: Readings, _config) -> Hypothesis:
    quiet = r.max_running is not None and r.max_running == 0 and (r.max_waiting or 0) == 0 and \
        r.engine_dead_lines == 0 and (r.health_last is None or 200 <= r.health_last < 300)
    return Hypothesis("idle", "nothing wrong on the server: idle", _v(quiet, r.max_running is not None),
                      "running, waiting, health", f"running {_fmt(r.max_running)}, waiting {_fmt(r.max_waiting)}",
                      "running > 0 whenever users are served", "no request ran or waited in the window" if quiet
                      else "requests ran or waited", "whether the complaint's requests reach this server at all "
                      "(router, DNS, client timeouts)", "No action on the server.", "Nothing to roll back.",
                      "Nothing to gain: an idle server has nothing to fix.", 10 if quiet else 0)


def _v(supported: bool, measured) -> str:
    return "supported" if supported else ("ruled out" if measured else "not measured")


CHECKS = {"not_answering": _not_answering, "engine_dead": _engine_dead, "stall": _stall, "overload": _overload, "kv_pressure": _kv_pressure,
          "long_output": _long_output, "long_prompt": _long_prompt, "contention": _contention, "idle": _idle}


def diagnose(readings: Readings, symptom: str | None = None, config: DetectorConfig | None = None) -> list[Hypothesis]:
    """Hypotheses for the symptom, supported first (strongest first), then ruled out, then not measured: a
    hypothesis nothing measured never leads (a load run has no /health; "the engine died — not measured" is
    an open question, not a finding)."""
    if symptom is not None and symptom not in SYMPTOMS:
        raise ValueError(f"unknown symptom {symptom!r}")
    config = config or DetectorConfig()
    order = CANDIDATES[symptom]
    found = [CHECKS[name](readings, config) for name in order]
    rank = {"supported": 0, "ruled out": 1, "not measured": 2}
    return sorted(found, key=lambda h: (rank[h.verdict], -h.score, order.index(h.name)))


def looks_healthy(readings: Readings, hypotheses: list[Hypothesis]) -> str | None:
    """When something was measured and nothing measured supports a problem (an idle server is not one): the
    line said first, "looks healthy", with the figures that show it and where they come from; else None."""
    if any(h.verdict == "supported" and h.name != "idle" for h in hypotheses):
        return None
    ruled_out = [h.title for h in hypotheses if h.verdict == "ruled out"]
    if not ruled_out and not any(h.verdict == "supported" for h in hypotheses):
        return None                                     # nothing measured: nothing to call healthy
    figures = [f"{label} {_fmt(value, 's')}" for label, value in
               (("TTFT", readings.ttft_s), ("time between tokens", readings.itl_s), ("E2E", readings.e2e_s),
                ("queue wait", readings.queue_s)) if value is not None]
    mean_words = " (the server's lifetime means)" if readings.lifetime_means else " (means)"
    said = [", ".join(figures) + mean_words] if figures else []
    gauges = [f"{label} {_fmt(value, pct=pct)}" for label, value, pct in
              (("running at most", readings.max_running, False), ("waiting at most", readings.max_waiting, False),
               ("KV at most", readings.max_kv, True)) if value is not None]
    if readings.slot_limit is not None and readings.max_running is not None:
        gauges[0] += f" of {_fmt(readings.slot_limit)} slots"
    said += [", ".join(gauges)] if gauges else []
    if readings.tokens_moved:
        said.append("tokens moved")
    if readings.health_last is not None:
        said.append(f"/health answered {readings.health_last}")
    where = f"the {', '.join(readings.sources)}" if readings.sources else "what was recorded"
    not_measured = [h.title for h in hypotheses if h.verdict == "not measured"]
    lines = [f"Looks healthy: nothing measured supports a problem (from {where})"]
    lines += [f"   figures: {'; '.join(said)}"] if said else []
    lines += [f"   ruled out: {len(ruled_out)} explanation{'s' if len(ruled_out) != 1 else ''} (below)"
              + (f"; not measured here (listed last): {'; '.join(not_measured)}" if not_measured else "")]
    line = "\n".join(lines)
    return line


def refused_throughout(url: str, grace_s: float, retry_s: float = CONNECT_RETRY_S) -> bool:
    """Whether every TCP connection to the URL's host and port was refused for `grace_s` seconds (nothing
    listens there). False at the first connection made, and at any other failure (a timeout, a name that
    does not resolve): the recording finds and says those. A connection made is closed at once, unused."""
    import socket
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    host = parts.hostname or "localhost"
    deadline = time.monotonic() + grace_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(1.0, deadline - time.monotonic()))):
                return False
        except ConnectionRefusedError:
            pass
        except OSError:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(retry_s, left))
