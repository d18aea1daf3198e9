"""From a user's complaint to the quantity that decides it: ranked hypotheses over what was recorded.

The recorder's detectors decide the verdicts and the runbook holds each verdict's safe action, rollback and
what a restart destroys; the doctor reads the quantities across them (gauges over the window, per-request
means from the histogram and counter deltas, a load run's signature) and ranks the explanations for a symptom.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.detectors.verdict import Verdict
from servewatch.detectors.liveness import dialect_hint
from servewatch.detectors.registry import runbook_for
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
    "slow-first-token": ("overload", "long_prompt", "stall", "engine_dead"),
    "slow-text": ("contention", "kv_pressure", "stall"),
    "long-answers": ("long_output", "contention"),
    "hangs-under-load": ("overload", "kv_pressure", "stall", "engine_dead"),
    "errors": ("engine_dead", "stall", "overload"),
    "e2e-up": ("long_output", "contention", "long_prompt"),
    None: ("engine_dead", "stall", "kv_pressure", "overload", "long_output", "long_prompt", "contention", "idle"),
}
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
    preemptions: float | None = None
    tokens_in: float | None = None            # per request
    tokens_out: float | None = None
    length_share: float | None = None         # requests that stopped at max_tokens
    queue_s: float | None = None
    ttft_s: float | None = None
    itl_s: float | None = None
    e2e_s: float | None = None
    engine_dead_lines: int = 0
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

def _delta_mean(first, last, kind: str) -> float | None:
    a, b = first.histograms.get(kind), last.histograms.get(kind)
    if b is None:
        return None
    count = b.count - (a.count if a else 0.0)
    total = b.sum - (a.sum if a else 0.0)
    if count <= 0:
        return None
    return total / count


def _window_or_lifetime(first, last, kind: str) -> float | None:
    """The mean over the window; over the server's life when the window saw no finished request."""
    mean = _delta_mean(first, last, kind)
    if mean is None and last.histograms.get(kind) is not None and last.histograms[kind].count > 0:
        mean = last.histograms[kind].sum / last.histograms[kind].count
    return mean


def readings_from_window(window: Window, config: DetectorConfig | None = None) -> Readings:
    config = config or DetectorConfig()
    r = Readings(sources=["recorded samples"])
    good = window.good_metrics()
    r.scrapes = len(good)
    if window.start is not None and window.end is not None:
        r.seconds = window.end - window.start
    r.verdicts = run_detectors(window, config)
    if window.health:
        r.health_last = window.health[-1].status
    dialect = dialect_hint(window)
    r.health_dead_status = dialect.health_dead_status if dialect is not None else None
    r.slot_limit_flag = dialect.slot_limit_flag if dialect is not None else None
    r.engine_dead_lines = sum(1 for e in window.logs if e.kind == "engine_dead")
    engines = [e for m in good for e in m.engines]
    if not engines:
        return r
    r.max_running = max((e.running for e in engines if e.running is not None), default=None)
    r.max_waiting = max((e.waiting for e in engines if e.waiting is not None), default=None)
    r.max_kv = max((e.kv_usage for e in engines if e.kv_usage is not None), default=None)
    r.slot_limit = next((e.slot_limit for e in reversed(engines) if e.slot_limit is not None), None)
    first, last = good[0].engines[0], good[-1].engines[0]
    if len(good) >= 2 and first.counters.generation_tokens is not None and last.counters.generation_tokens is not None:
        r.tokens_moved = last.counters.generation_tokens > first.counters.generation_tokens
    if first.counters.preemptions is not None and last.counters.preemptions is not None:
        r.preemptions = last.counters.preemptions - first.counters.preemptions
    finished_first = sum(first.counters.finished.values()) if len(good) >= 2 else 0.0
    finished = sum(last.counters.finished.values()) - finished_first
    if finished > 0:
        length = last.counters.finished.get("length", 0.0) - (first.counters.finished.get("length", 0.0)
                                                               if len(good) >= 2 else 0.0)
        r.length_share = length / finished
        if len(good) >= 2:
            for name, counter in (("tokens_out", "generation_tokens"), ("tokens_in", "prompt_tokens")):
                a, b = getattr(first.counters, counter), getattr(last.counters, counter)
                if a is not None and b is not None:
                    setattr(r, name, (b - a) / finished)
    for name, kind in (("queue_s", "queue"), ("ttft_s", "ttft"), ("itl_s", "itl"), ("e2e_s", "e2e")):
        setattr(r, name, _window_or_lifetime(first if len(good) >= 2 else _empty(last), last, kind))
    return r


def _empty(state):
    import dataclasses

    return dataclasses.replace(state, histograms={})


def readings_from_load(summary: dict) -> Readings:
    """A `servewatch load` run: its signature row (server values preferred, client values otherwise)."""
    row = summary.get("signature") or summary
    r = Readings(sources=["load run signature"])
    r.tokens_in, r.tokens_out = row.get("tokens_in"), row.get("tokens_out")
    r.queue_s, r.ttft_s, r.itl_s, r.e2e_s = (row.get("queue_wait_s"), row.get("ttft_s"), row.get("itl_s"),
                                            row.get("e2e_s"))
    r.max_running, r.max_waiting, r.max_kv = row.get("max_running"), row.get("max_waiting"), row.get("max_kv")
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


def _engine_dead(r: Readings, config: DetectorConfig) -> Hypothesis:
    verdict = _verdict(r, "engine_dead")
    dead_status = r.health_dead_status is not None and r.health_last == r.health_dead_status
    supported = verdict is not None or dead_status or r.engine_dead_lines > 0
    measured = r.health_last is not None or r.engine_dead_lines or verdict
    why = (verdict.why if verdict else
           f"/health answered {r.health_last}" + (f" and the log has {r.engine_dead_lines} engine-death line(s)"
                                                  if r.engine_dead_lines else "") if supported else
           "/health answered 2xx and the log has no engine-death line")
    return _from_runbook("engine_dead", title="the engine died", verdict=_v(supported, measured),
                         quantity="/health status and engine-death log lines",
                         value=f"/health {r.health_last}, {r.engine_dead_lines} death line(s)",
                         expected="/health 200, no EngineDeadError / 'Worker proc ... died' lines", why=why,
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
                         value=f"moved: {r.tokens_moved}, running {_fmt(r.max_running)}",
                         expected="tokens advance at every scrape while running > 0", why=why,
                         score=90 if supported else 0, confirmed_by=verdict.name if verdict else None)


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
    return _from_runbook("overload", title=f"overload: demand above capacity (cause {cause})",
                         verdict=_v(supported, r.max_waiting is not None or r.queue_s is not None),
                         quantity="waiting, queue wait, running against the slot limit, KV",
                         value=f"waiting {_fmt(r.max_waiting)}, running {_fmt(r.max_running)} of "
                               f"{_fmt(r.slot_limit)}, KV {_fmt(r.max_kv, pct=True)}",
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
           f"KV peaked at {_fmt(r.max_kv, pct=True)} (< {config.kv_high:.0%})")
    return _from_runbook("kv_pressure", title="KV cache pressure (preemptions)", verdict=_v(supported, r.max_kv is not None),
                         quantity="KV usage, preemption delta, waiting",
                         value=f"KV {_fmt(r.max_kv, pct=True)}, preemptions +{_fmt(r.preemptions)}",
                         expected=f"KV below {config.kv_high:.0%}, no preemption in the window", why=why,
                         score=(85 if verdict else 75) if supported else 0, confirmed_by=verdict.name if verdict else None)


def _long_output(r: Readings, _config) -> Hypothesis:
    long = r.tokens_out is not None and r.tokens_out >= LONG_OUTPUT_TOKENS
    starts_fast = (r.queue_s or 0) < 0.1
    supported = long and starts_fast
    why = (f"{_fmt(r.tokens_out)} output tokens per request with queue wait {_fmt(r.queue_s, 's')} and TTFT "
           f"{_fmt(r.ttft_s, 's')}: the system does what it is asked, the job is long"
           + (f"; {r.length_share:.0%} stopped at max_tokens" if r.length_share is not None else "")
           if supported else f"{_fmt(r.tokens_out)} output tokens per request")
    return Hypothesis("long_output", "long answers (a long-output workload)", _v(supported, r.tokens_out is not None),
                      "output tokens per request, stop reason", f"{_fmt(r.tokens_out)} tokens out",
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
           f"hides its cost in the prefix cache)" if long else f"{_fmt(r.tokens_in)} input tokens per request")
    return Hypothesis("long_prompt", "long prompts", _v(long, r.tokens_in is not None),
                      "input tokens per request, prefix-cache hits", f"{_fmt(r.tokens_in)} tokens in",
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
           f"every stream" if slow else f"{_fmt(r.itl_s, 's')} between tokens")
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
    quiet = (r.max_running or 0) == 0 and (r.max_waiting or 0) == 0 and r.engine_dead_lines == 0 and \
            (r.health_last is None or 200 <= r.health_last < 300)
    return Hypothesis("idle", "nothing wrong on the server: idle", _v(quiet, r.max_running is not None),
                      "running, waiting, health", f"running {_fmt(r.max_running)}, waiting {_fmt(r.max_waiting)}",
                      "running > 0 whenever users are served", "no request ran or waited in the window" if quiet
                      else "requests ran or waited", "whether the complaint's requests reach this server at all "
                      "(router, DNS, client timeouts)", "No action on the server.", "Nothing to roll back.",
                      "Nothing to gain: an idle server has nothing to fix.", 10 if quiet else 0)


def _v(supported: bool, measured) -> str:
    return "supported" if supported else ("ruled out" if measured else "not measured")


CHECKS = {"engine_dead": _engine_dead, "stall": _stall, "overload": _overload, "kv_pressure": _kv_pressure,
          "long_output": _long_output, "long_prompt": _long_prompt, "contention": _contention, "idle": _idle}


def diagnose(readings: Readings, symptom: str | None = None, config: DetectorConfig | None = None) -> list[Hypothesis]:
    """Hypotheses for the symptom, supported first (strongest first), then not measured, then ruled out."""
    if symptom is not None and symptom not in SYMPTOMS:
        raise ValueError(f"unknown symptom {symptom!r}")
    config = config or DetectorConfig()
    order = CANDIDATES[symptom]
    found = [CHECKS[name](readings, config) for name in order]
    rank = {"supported": 0, "not measured": 1, "ruled out": 2}
    return sorted(found, key=lambda h: (rank[h.verdict], -h.score, order.index(h.name)))
