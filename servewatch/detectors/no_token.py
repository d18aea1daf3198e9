"""requests_no_token: streamed requests are in flight through `servewatch proxy` and none got a byte
from the engine (and no request ended) for longer than max(k x the TTFT it should take, a floor).
A request that is not streamed gets its whole answer at its end, so its silence until then is no sign.

The one signal that sees a wedge without asking the engine anything: a stopped tensor-parallel rank
left a real vLLM reporting "running 0, waiting 0" and /health 200 while four clients waited. The
threshold follows the target: the recent TTFT p99, or the oldest waiting request's expected TTFT
(recent prefill speed x its size) when that is longer, so a long prefill is given its time. An overload
served in turn keeps tokens flowing to some request, so `quiet_s` stays short and nothing fires.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.verdict import (INCIDENT, PAGE, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class NoTokenSettings(Settings):
    """requests_no_token's thresholds."""

    # requests_no_token (needs `servewatch proxy`): requests are in flight and none of them got a byte
    # (and none ended) for longer than
    #   max(no_token_k x max(recent TTFT p99, the oldest waiting request's expected TTFT), no_token_floor_s)
    # where the expected TTFT scales the recent prefill speed (TTFT per request byte) by its size, so a
    # long prefill raises the bar; an overload served in turn keeps bytes flowing and never reaches it.
    no_token_k: float = 4.0
    no_token_floor_s: float = 2.0


NAME = "requests_no_token"


def threshold_s(sample, config: Thresholds) -> float:
    expected = max(sample.ttft_p99_s or 0.0, sample.expected_ttft_s or 0.0)
    return max(config.no_token_k * expected, config.no_token_floor_s)


def _threshold_terms(sample, config: Thresholds) -> str:
    """How the threshold was made, every term with its figure: max(the floor, k x the larger expectation)."""
    k, floor = config.no_token_k, config.no_token_floor_s
    p99, expected = sample.ttft_p99_s or 0.0, sample.expected_ttft_s or 0.0
    if expected > p99:
        return f"max({floor:g} s, {k:g} x the oldest waiting request's expected TTFT {expected:.3f} s)"
    if p99 > 0:
        return f"max({floor:g} s, {k:g} x recent TTFT p99 {p99:.3f} s)"
    return f"the {floor:g} s floor: no stream has finished yet to give a recent TTFT"


def detect(window: Window, config: Thresholds) -> list[Verdict]:
    if not window.requests:
        return []
    last = window.requests[-1]
    if last.error is not None or not last.in_flight or last.quiet_s is None:
        return []
    limit = threshold_s(last, config)
    if last.quiet_s <= limit:
        return []
    why = (f"{last.in_flight} request(s) in flight got no byte from the engine for {last.quiet_s:.1f} s "
           f"(threshold {limit:.1f} s = {_threshold_terms(last, config)})")
    if last.oldest_waiting_s is not None:
        why += f"; the oldest has waited {last.oldest_waiting_s:.1f} s for its first token"
    details: dict[str, float | int | str | bool | None] = {
        "in_flight": last.in_flight, "waiting_first_token": last.waiting_first_token,
        "quiet_s": round(last.quiet_s, 3), "threshold_s": round(limit, 3), "ttft_p99_s": last.ttft_p99_s}
    evidence = [Evidence("requests", last.t, "quiet_s", round(last.quiet_s, 3)),
                Evidence("requests", last.t, "in_flight", last.in_flight)]
    if window.health:
        evidence.append(Evidence("health", window.health[-1].t, "status", window.health[-1].status))
    return [Verdict(NAME, last.t, last.t - last.quiet_s, why, tuple(evidence), details)]


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

REQUESTS_NO_TOKEN = RunbookBranch(
    meaning="Requests are in flight through `servewatch proxy` and none of them got a byte from the engine "
            "for far longer than the recent time to first token (scaled up for a long prompt): the engine "
            "accepted the work and stopped answering. The engine's own gauges may show nothing running "
            "(a stopped tensor-parallel rank leaves vLLM reporting 0 running, 0 waiting) while clients wait.",
    check_next=(
        "The requests samples in the bundle: in-flight count, the oldest request waiting for its first "
        "token and how long no byte came; a queue that grows while quiet_s grows confirms a wedge.",
        "Process states in the bundle: an engine core or worker in status 'stopped' or at ~0% CPU while "
        "requests wait names the fault domain; take a stack (`py-spy dump --pid PID`) before touching it.",
        "Send one request yourself with a timeout (`curl -m 20 URL/v1/completions` with max_tokens 1) "
        "directly to the engine, past the proxy: no answer confirms the engine, an answer points at the "
        "proxy's upstream connection.",
    ),
    expected_range="A served request gets its first token within a few times the recent TTFT p99 (a long "
                   "prompt within a few times its expected prefill); an overload served in turn delivers "
                   "tokens to some request every step.",
    safe_action="Keep this bundle and a stack dump, then stop routing new traffic to this replica (drain it at "
                "the router); the requests waiting on it will not finish by themselves.",
    rollback="Return the replica to routing once requests through the proxy get tokens again.",
    restart_destroys="The requests waiting on the engine, the KV and prefix cache contents, and the frozen "
                     "process state that shows where it hung: take the stack before any restart.",
)

SETTINGS = (NoTokenSettings,)
SPECS = (
    VerdictSpec("requests_no_token", detect, INCIDENT, "page",
                "requests in flight get no token from the engine", REQUESTS_NO_TOKEN,
                ("requests", "health", "metrics"), action=PAGE),
)
