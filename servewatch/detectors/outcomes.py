"""server_errors, client_errors, requests_aborted: how the requests of the last minute ended.

Read as increases over `outcome_window_s` of the API server's responses by status and the engine's
finished requests by reason, never as cumulative values (a counter that went down is a restart: what
it counts after is the increase). A real vLLM 0.32 rejects a prompt over its maximum length with 400,
an unknown model name with 404 and a path it has no route for with 404 under handler "none"; none of
them reaches the engine, and none is written to its log.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import reduce
from operator import add, attrgetter, sub

from servewatch.detectors.evidence.crash_loop import in_crash_loop
from servewatch.detectors.evidence.engine_signs import dialect_hint, engine_death_evidence
from servewatch.detectors.verdict import (FINDING, INCIDENT, PAGE, Evidence, RunbookBranch, Settings, Thresholds,
                                          Verdict, VerdictSpec)
from servewatch.detectors.series import Track, once_per_window, progress_totals, tracks
from servewatch.engine.state import EngineState
from servewatch.kinds import TIMEOUT
from servewatch.timeline.samples import DEADLINE, HealthSample, MetricsSample
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class OutcomeSettings(Settings):
    """server_errors', client_errors' and requests_aborted's thresholds."""

    # server_errors, client_errors, requests_aborted: increases over the last outcome_window_s (never the
    # cumulative counts). server_errors: at least server_error_min 5xx responses (or requests the engine
    # finished with reason error) and at least server_error_fraction of the responses; client_errors the
    # same for 4xx; requests_aborted: aborted requests against all finished ones.
    outcome_window_s: float = 60.0
    server_error_min: float = 3.0
    server_error_fraction: float = 0.05
    client_error_min: float = 5.0
    client_error_fraction: float = 0.25
    abort_min: float = 5.0
    abort_fraction: float = 0.25

    def validate(self) -> list[str]:
        return self.shares("server_error_fraction", "client_error_fraction", "abort_fraction")


# The likely cause of client errors, by exact status code (engines that count codes, not classes).
CAUSE_BY_CODE = {"400": "invalid_request", "401": "unauthorized", "403": "unauthorized", "404": "not_found",
                 "405": "not_found", "413": "input_too_long", "422": "invalid_request", "429": "rate_limited"}
CAUSE_TEXT = {
    "input_too_long": "inputs over the model's maximum length",
    "not_found": "an unknown model name or a path the server has no route for",
    "unknown_path": "requests to a path the server has no route for",
    "invalid_request": "requests the server's validation rejects (a prompt plus max_tokens over the model's "
                       "maximum length, max_tokens out of range, an unknown model name or a malformed body)",
    "unauthorized": "requests without valid credentials",
    "rate_limited": "the server's rate or queue limit",
    "other": "client errors",
}
# A token is at least one byte of text, and usually about four in English: request bodies averaging more
# bytes than this many times the model's maximum length carry prompts over it.
BYTES_PER_TOKEN = 4
_time = attrgetter("t")


@dataclass(frozen=True, slots=True)
class Outcomes:
    """The increases over one stretch of good scrapes."""

    first: MetricsSample
    last: MetricsSample
    responses: dict[str, float] = field(default_factory=dict)   # by status key ("4xx", "404", "unrouted")
    finished: dict[str, float] = field(default_factory=dict)    # by finish reason
    request_bytes: float | None = None
    request_bytes_count: float | None = None
    answered: float | None = None          # 2xx responses of the handlers that run the engine
    scrapes: tuple[MetricsSample, ...] = ()

    @property
    def span_s(self) -> float:
        return self.last.t - self.first.t

    def by_class(self, cls: str) -> float:
        return sum(v for k, v in self.responses.items() if status_class(k) == cls)

    @property
    def total_responses(self) -> float:
        return sum(self.responses.values())

    def rate(self, count: float) -> float:
        return count / self.span_s if self.span_s > 0 else 0.0


def status_class(key: str) -> str:
    """ "404" → "4xx"; "4xx" stays; "unrouted" (a path without a route: 404) → "4xx"."""
    if key == "unrouted":
        return "4xx"
    return f"{key[0]}xx"


def _steps_in_order(steps: Iterable[float]) -> float:
    """0.0 + each step, one after the other: the walk's own sum (and its last bit)."""
    return reduce(add, steps, 0.0)


def _steps_summed(steps: Iterable[float]) -> float:
    return sum(steps, 0.0)


# sum() adds floats one after the other in C as the walk does, without a float object a step; from Python 3.12
# it compensates the rounding (a different last bit), and there the reduce keeps the walk's figure.
_steps_sum = _steps_summed if _steps_summed((1e16, 1.0, 1.0)) == _steps_in_order((1e16, 1.0, 1.0)) else _steps_in_order


def increase(values: Iterable[float | None]) -> float:
    """A counter's increase over a series, across resets (after a drop the new value is all increase)."""
    values = values if isinstance(values, list) else list(values)
    try:
        # no reset (sorted as they are: each value at least the one before, which sort's run check tells in C):
        # the walk's sum of steps, in C; a NaN among them (which sort does not place) is the walk's
        if sorted(values) == values and (total := _steps_sum(map(sub, values[1:], values))) == total:
            return total
    except TypeError:   # None (not exported) among them: the walk skips it
        pass
    return walked_increase(values)


def walked_increase(values: Iterable[float | None]) -> float:
    """`increase` by its definition, one step at a time."""
    total = 0.0
    previous = None
    for value in values:
        if value is None:
            continue
        if previous is not None:
            total += value - previous if value >= previous else value
        previous = value
    return total


@once_per_window          # three detectors read one window's outcomes
def window_outcomes(window: Window, config: Thresholds) -> Outcomes | None:
    """The increases over the last `outcome_window_s` of good scrapes (None with fewer than two)."""
    return _outcomes(window, config)


def _outcomes(window: Window, config: Thresholds) -> Outcomes | None:
    end = window.end or 0.0
    engines = tracks(window.metrics)
    if len(engines) == 1:
        return _one_engine_outcomes(next(iter(engines.values())), end - config.outcome_window_s)
    metrics = window.metrics       # in time order
    recent = metrics[bisect_left(metrics, end - config.outcome_window_s, key=_time):]
    scrapes = [m for m in recent if m.error is None and m.engines]
    if len(scrapes) < 2:
        return None
    # server-wide counts: every engine of a scrape carries the same, the first one speaks for them
    engines = [m.engines for m in scrapes]
    server = [e[0].counters for e in engines]
    responses: dict[str, float] = {}
    for key in sorted(set().union(*[c.responses for c in server])):
        responses[key] = increase([c.responses.get(key, 0.0) for c in server])
    finished: dict[str, float] = {}
    one_engine = sum(map(len, engines)) == len(engines)
    for reason in sorted(set().union(*[c.finished for c in server] if one_engine else
                                     [e.counters.finished for m in engines for e in m])):
        if one_engine:   # the sum over one engine is its value
            finished[reason] = increase([c.finished.get(reason) for c in server])
        else:
            finished[reason] = increase([_engine_sum(m.engines, reason) for m in scrapes])
    body_bytes = _optional_increase([c.request_bytes for c in server])
    bodies = _optional_increase([c.request_bytes_count for c in server])
    answered = _optional_increase([c.answered for c in server])
    return Outcomes(scrapes[0], scrapes[-1], responses, finished, body_bytes, bodies, answered, tuple(scrapes))


def _one_engine_outcomes(track: Track, since: float) -> Outcomes | None:
    """`_outcomes` where every good scrape holds one engine (its track's points are the good scrapes),
    from the track's columns."""
    start = bisect_left(track.times, since)
    if len(track.points) - start < 2:
        return None
    counters = track.column("counters")[start:]
    responses = {key: increase(track.column("responses", key)[start:])
                 for key in sorted(set().union(*[c.responses for c in counters]))}
    finished = {reason: increase(track.column("finished", reason)[start:])
                for reason in sorted(set().union(*[c.finished for c in counters]))}
    body_bytes, bodies, answered = (
        None if _none_but(track.column(name)[start:]) else increase(track.column(name)[start:])
        for name in ("request_bytes", "request_bytes_count", "answered"))
    scrapes = tuple(point[0] for point in track.points[start:])
    return Outcomes(scrapes[0], scrapes[-1], responses, finished, body_bytes, bodies, answered, scrapes)


def _none_but(values: list) -> bool:
    return values[0] is None and values.count(None) == len(values)


def engine_failing(window: Window, config: Thresholds) -> bool:
    """A dead or crash-looping engine fails and ends the requests it holds: engine_dead or crash_loop says
    it, not the outcome verdicts."""
    return engine_death_evidence(window, config)[0] is not None or in_crash_loop(window, config)


def _engine_sum(engines: Iterable[EngineState], reason: str) -> float | None:
    values = [e.counters.finished[reason] for e in engines if reason in e.counters.finished]
    return sum(values) if values else None


def _optional_increase(values: list[float | None]) -> float | None:
    return None if not values or _none_but(values) else increase(values)


def _own_health_hangups(window: Window, o: Outcomes, not_serving: list[tuple[float, float]]) -> int:
    """Our health probes that timed out, outside the stretches whose aborts are already set aside."""
    dialect = dialect_hint(window)
    if dialect is None or not dialect.health_runs_through_engine:
        return 0
    return sum(1 for h in window.health if h.error == TIMEOUT and o.first.t < h.t <= o.last.t
               and not _inside(h.t, not_serving))


def _inside(t: float, stretches: list[tuple[float, float]]) -> bool:
    return any(start < t <= end for start, end in stretches)


def aborts_while_not_serving(window: Window, o: Outcomes) -> tuple[float, list[tuple[float, float]]]:
    """(aborts, stretches): where /health runs through the engine, the aborts counted between two
    scrapes while the engine was not serving — no progress counter of any engine moved and /health was
    failing. Those requests never got served because of the stall, which the stall verdicts tell. On a
    real SGLang 0.5.23 whose /health runs a generation, a scheduler stopped for 26 s had 20 requests
    counted aborted: every health probe that gave up meanwhile (ours, a load balancer's, an
    orchestrator's) hangs up on one."""
    stretches: list[tuple[float, float]] = []
    aborts = 0.0
    dialect = dialect_hint(window)
    if dialect is None or not dialect.health_runs_through_engine:
        return aborts, stretches
    for a, b in zip(o.scrapes, o.scrapes[1:]):
        if _progress_totals(a) != _progress_totals(b) or not _health_failing(window.health, a.t, b.t):
            continue
        stretches.append((a.t, b.t))
        aborts += increase((_engine_sum(a.engines, "abort"), _engine_sum(b.engines, "abort")))
    return aborts, stretches


def _progress_totals(sample: MetricsSample) -> tuple[float, ...]:
    return progress_totals(sample.engines)


def _health_failing(health: tuple[HealthSample, ...], start: float, end: float) -> bool:
    """A health answer in (start, end] failed, or the last one before it did."""
    before = [h for h in health if h.t <= start]
    return any(not h.ok for h in health if start < h.t <= end) or bool(before and not before[-1].ok)


def _answers_ending_at_the_start(window: Window, o: Outcomes) -> float:
    """Requests the engine counted finished just before the window's first scrape whose answers ended
    just after it: at most how far the answers outran the finished count up to the second scrape, and
    at most those finished since the scrape before — or, where there is no good scrape before (the
    server just became ready), at least as many as the engine had finished beyond the answers counted
    by then. On a real vLLM 0.32 in CI, two requests of the stream before a window were caught this
    way and 8 hang-ups were counted as 10; in another run the first good scrape came mid-stream with
    2 finished and 1 answered, and 8 were counted as 9."""
    if len(o.scrapes) < 2:
        return 0.0
    first, second = o.scrapes[0], o.scrapes[1]
    before = _scrape_before(window, o.first.t)
    finished_first, answered_first = _finished_now(first), first.engines[0].counters.answered
    ending = (finished_first - answered_first
              if finished_first is not None and answered_first is not None else 0.0)   # surely still ending
    if before is not None:
        ending = max(ending, increase([_finished_now(before), finished_first]))
    answered = increase([answered_first, second.engines[0].counters.answered])
    finished = increase([finished_first, _finished_now(second)])
    return max(0.0, min(ending, answered - finished))


def _scrape_before(window: Window, t: float) -> MetricsSample | None:
    metrics = window.metrics
    for sample in reversed(metrics[:bisect_left(metrics, t, key=_time)]):
        if sample.error is None and sample.engines:
            return sample
    return None


def _finished_now(sample: MetricsSample) -> float | None:
    """The requests a scrape's engines had counted finished, every reason (SGLang: "all")."""
    totals = [e.counters.finished.get("all", sum(e.counters.finished.values())) for e in sample.engines
              if e.counters.finished]
    return sum(totals) if totals else None


def _finished_total(o: Outcomes) -> float:
    """Requests finished over the stretch: SGLang counts them all ("all"), vLLM by reason."""
    return o.finished["all"] if "all" in o.finished else sum(o.finished.values())


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "n/a"


def _n(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x:.1f}"


def _status_evidence(o: Outcomes, keys: Iterable[str]) -> tuple[Evidence, ...]:
    out = []
    for key in keys:
        field_name = f"counters.responses.{key}"
        out += [Evidence("metrics", o.first.t, field_name, o.first.engines[0].counters.responses.get(key)),
                Evidence("metrics", o.last.t, field_name, o.last.engines[0].counters.responses.get(key))]
    return tuple(out)


# --- server_errors -------------------------------------------------------------------------------

def detect_server_errors(window: Window, config: Thresholds) -> list[Verdict]:
    o = window_outcomes(window, config)
    if o is None:
        return []
    errors_5xx = o.by_class("5xx")
    engine_errors = o.finished.get("error", 0.0)
    errors = max(errors_5xx, engine_errors)
    total = o.total_responses or _finished_total(o)
    if errors < config.server_error_min or total <= 0 or errors / total < config.server_error_fraction:
        return []
    if engine_failing(window, config):
        return []
    keys = sorted(k for k in o.responses if status_class(k) == "5xx" and o.responses[k] > 0)
    why = (f"{_n(errors_5xx)} of {_n(o.total_responses)} responses in the last {o.span_s:.0f} s were 5xx "
           f"({_pct(errors_5xx, o.total_responses)}, {o.rate(errors_5xx):.2f} per s; "
           f"≥ {config.server_error_fraction:.0%} and ≥ {config.server_error_min:g})")
    if keys and not all(k == "5xx" for k in keys):
        why += ": " + ", ".join(f"{_n(o.responses[k])} × {k}" for k in keys)
    if engine_errors:
        why += f"; the engine finished {_n(engine_errors)} request(s) with reason error"
    evidence = _status_evidence(o, keys or ["5xx"])
    if engine_errors:
        evidence += (Evidence("metrics", o.last.t, "counters.finished.error", _engine_sum(o.last.engines, "error")),)
    return [Verdict("server_errors", o.last.t, o.first.t, why, evidence,
                    {"errors": errors, "responses": o.total_responses, "fraction": round(errors / total, 4),
                     "per_s": round(o.rate(errors), 4), "engine_errors": engine_errors})]


# --- client_errors -------------------------------------------------------------------------------

def detect_client_errors(window: Window, config: Thresholds) -> list[Verdict]:
    o = window_outcomes(window, config)
    if o is None:
        return []
    errors = o.by_class("4xx")
    total = o.total_responses
    if errors < config.client_error_min or total <= 0 or errors / total < config.client_error_fraction:
        return []
    cause, because = _client_cause(o, window)
    keys = sorted(k for k in o.responses if status_class(k) == "4xx" and o.responses[k] > 0)
    why = (f"{_n(errors)} of {_n(total)} responses in the last {o.span_s:.0f} s were 4xx ({_pct(errors, total)}, "
           f"{o.rate(errors):.2f} per s; ≥ {config.client_error_fraction:.0%} and ≥ {config.client_error_min:g}): "
           + ", ".join(f"{_n(o.responses[k])} × {'404 (no route)' if k == 'unrouted' else k}" for k in keys)
           + f"; likely cause: {CAUSE_TEXT[cause]}")
    if because:
        why += f" ({because})"
    return [Verdict("client_errors", o.last.t, o.first.t, why, _status_evidence(o, keys),
                    {"cause": cause, "errors": errors, "responses": total, "fraction": round(errors / total, 4),
                     "per_s": round(o.rate(errors), 4)})]


def _client_cause(o: Outcomes, window: Window) -> tuple[str, str]:
    """The likely cause of the window's client errors, and the figures that say so."""
    counts = {k: v for k, v in o.responses.items() if status_class(k) == "4xx" and v > 0}
    top = max(counts, key=lambda k: (counts[k], k))
    if top == "unrouted":
        return "unknown_path", ""
    if top != "4xx":
        return CAUSE_BY_CODE.get(top, "other"), ""
    # The engine counts classes only: the rejected requests' body size tells long inputs apart.
    rejected_bytes = _rejected_body_bytes(o, counts["4xx"])
    if rejected_bytes is None:
        return "invalid_request", ""
    max_len = max_model_len(window.logs)
    if max_len and rejected_bytes > BYTES_PER_TOKEN * max_len:
        return "input_too_long", (f"the rejected request bodies averaged ~{rejected_bytes:,.0f} bytes, over "
                                  f"{BYTES_PER_TOKEN} bytes × the maximum length of {max_len:,} tokens the log gave")
    return "invalid_request", f"the rejected request bodies averaged ~{rejected_bytes:,.0f} bytes"


def _rejected_body_bytes(o: Outcomes, rejected: float) -> float | None:
    """The mean body of the window's rejected requests: the window's bytes less what its other requests
    sent, counted at the mean body of the requests before the window (all of the window's when none)."""
    if o.request_bytes is None or not o.request_bytes_count or rejected <= 0:
        return None
    before = o.first.engines[0].counters
    if before.request_bytes_count:
        others = max(o.request_bytes_count - rejected, 0.0)
        typical = before.request_bytes / before.request_bytes_count
        return max(o.request_bytes - others * typical, 0.0) / min(rejected, o.request_bytes_count)
    return o.request_bytes / o.request_bytes_count


def max_model_len(logs: Iterable) -> int | None:
    """The model's maximum length as the startup log stated it (the KV-size line's tokens per request)."""
    for event in reversed(tuple(logs)):
        if event.kind == "startup" and event.fields.get("per_request"):
            return int(event.fields["per_request"])
    return None


# --- requests_aborted ----------------------------------------------------------------------------

def detect_requests_aborted(window: Window, config: Thresholds) -> list[Verdict]:
    o = window_outcomes(window, config)
    if o is None:
        return []
    # Aborts while the engine was not serving belong to the stall; the rest are weighed below.
    stalled, not_serving = aborts_while_not_serving(window, o)
    # A probe that missed its deadline hangs up: the engine counts that request aborted. Our own.
    own = sum(1 for p in window.probe if p.outcome == DEADLINE and o.first.t < p.t <= o.last.t
              and not _inside(p.t, not_serving))
    # Where /health runs a generation (SGLang), each of our health probes that timed out hung up on one:
    # the engine counts it aborted, and never as a finished request.
    own_health = _own_health_hangups(window, o, not_serving)
    reported = max(0.0, o.finished.get("abort", 0.0) - stalled - own_health)
    # Answered by the API server yet never counted finished by the engine: the client hung up. An engine
    # finishes a request a moment before its response ends: at the window's end that undercounts, at its
    # start the answers still ending would be counted as hang-ups (`_answers_ending_at_the_start`).
    hung_up = (max(0.0, o.answered - _finished_total(o) - _answers_ending_at_the_start(window, o))
               if o.answered is not None else 0.0)
    aborted = max(0.0, reported + hung_up - own)
    # SGLang counts aborted requests apart from its finished ones: the share is of both, at most all
    finished = max(aborted, _finished_total(o) + hung_up - own)
    if aborted < config.abort_min or finished <= 0 or aborted / finished < config.abort_fraction:
        return []
    if engine_failing(window, config):
        return []
    why = (f"{_n(aborted)} of {_n(finished)} requests finished in the last {o.span_s:.0f} s were aborted "
           f"({_pct(aborted, finished)}, {o.rate(aborted):.2f} per s; ≥ {config.abort_fraction:.0%} and "
           f"≥ {config.abort_min:g}): clients gave up or timed out before their answer was complete")
    if hung_up:
        why += (f" ({_n(hung_up)} answered by the API server but never counted finished by the engine: "
                f"the client hung up mid-answer)")
    evidence = (Evidence("metrics", o.first.t, "counters.finished.abort", _engine_sum(o.first.engines, "abort")),
                Evidence("metrics", o.last.t, "counters.finished.abort", _engine_sum(o.last.engines, "abort")))
    if hung_up:
        evidence += (Evidence("metrics", o.first.t, "counters.answered", o.first.engines[0].counters.answered),
                     Evidence("metrics", o.last.t, "counters.answered", o.last.engines[0].counters.answered))
    return [Verdict("requests_aborted", o.last.t, o.first.t, why, evidence,
                    {"aborted": aborted, "finished": finished, "fraction": round(aborted / finished, 4),
                     "per_s": round(o.rate(aborted), 4), "hung_up": hung_up})]


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

SERVER_ERRORS = RunbookBranch(
    meaning="A share of the requests of the last minute ended in a 5xx (or the engine finished them with "
            "reason error): the server, not the client, failed them.",
    check_next=(
        "Which status: 500 is an exception in the API server or the engine; 503 is a server that refuses "
        "work (starting, draining, its engine dead, or SGLang's own request timeouts); 502/504 come from a "
        "proxy in front of the server.",
        "Whether engine_dead, health_loss or a stall fired at the same time: 5xx that follow an engine "
        "death are its consequence; 5xx on a healthy engine point at a request pattern or a software fault.",
        "The log tail at the verdict's onset for tracebacks (the bundle keeps the engine's grammar "
        "literals, not the request text).",
        "Whether the errors follow one client or one kind of request (the client's own logs).",
    ),
    expected_range="0 5xx responses per window on a healthy server.",
    safe_action="Keep the bundle and the log; take the replica out of routing if other replicas serve, so "
                "clients stop receiving errors while the cause is read.",
    rollback="Return it to routing once a window passes with no 5xx.",
    restart_destroys="In-flight requests and the KV and prefix cache; an exception that repeats on the next "
                     "request of the same kind survives a restart.",
)

CLIENT_ERRORS = RunbookBranch(
    meaning="A share of the requests of the last minute were refused as the client's error (4xx): the server "
            "works and is doing its job; the clients send what it cannot serve.",
    check_next=(
        "The cause the verdict names: inputs over the model's maximum length (a real vLLM answers 400 "
        "before the engine sees the request), an unknown model name (404), a path without a route (404), "
        "max_tokens out of range (400), credentials (401/403), a rate limit (429).",
        "The model's maximum length (vLLM's 'Maximum concurrency for N tokens per request' startup line) "
        "against what the clients send: prompt plus max_tokens must fit.",
        "Which client or release started sending them: the onset time against deploys of the clients.",
    ),
    expected_range="A few 4xx are normal; a quarter of all responses in a minute is not.",
    safe_action="No action on the server. Tell the clients' owners the cause; if longer inputs are "
                "intended, raise the maximum length only where the KV cache still fits it.",
    rollback="Nothing to roll back on the server: this branch is read-only.",
    restart_destroys="A restart fixes nothing here and drops in-flight requests and the KV cache.",
    by_cause={
        "input_too_long": "Clients send prompts over the model's maximum length: truncate or chunk on the "
                          "client, or raise --max-model-len where the KV cache still holds it.",
        "unknown_path": "Clients call a path the server has no route for: check the client's base URL and "
                        "API version (/v1/...).",
        "not_found": "Clients name a model the server does not serve, or call a path it has no route for: "
                     "compare the client's model name with GET /v1/models.",
        "rate_limited": "The server's own limit refuses work: read it together with overload.",
    },
)

REQUESTS_ABORTED = RunbookBranch(
    meaning="A share of the requests the engine finished in the last minute were aborted: the client went "
            "away (a timeout, a cancel, a disconnect) before the answer was complete.",
    check_next=(
        "Latency at the same time (TTFT and queue time): clients give up when the wait exceeds their "
        "timeout, so aborts usually follow overload or a slow engine.",
        "The clients' timeout against the e2e latency p99: a timeout below it aborts normal requests.",
        "Whether an engine death or a restart is in the window: requests it ends count as aborted too.",
    ),
    expected_range="Close to 0 aborted per window; a quarter of the finished requests is not normal.",
    safe_action="Relieve the latency that makes clients give up (see overload); align client timeouts "
                "with the measured latency.",
    rollback="Restore previous limits once the abort share stays low across a peak window.",
    restart_destroys="The requests still running, which would then be aborted too.",
)

SETTINGS = (OutcomeSettings,)
SPECS = (
    VerdictSpec("server_errors", detect_server_errors, INCIDENT, "page",
                "requests fail with server errors (5xx)", SERVER_ERRORS, ("metrics",), action=PAGE),
    VerdictSpec("client_errors", detect_client_errors, FINDING, "ticket",
                "clients send requests the server refuses (4xx)", CLIENT_ERRORS, ("metrics",),
                labels=("cause",), action=PAGE),
    VerdictSpec("requests_aborted", detect_requests_aborted, INCIDENT, "ticket",
                "clients abort their requests before the answer is complete", REQUESTS_ABORTED,
                ("metrics",), action=PAGE),
)
