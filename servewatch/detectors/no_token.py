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

from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.window import Window

NAME = "requests_no_token"


def threshold_s(sample, config: DetectorConfig) -> float:
    expected = max(sample.ttft_p99_s or 0.0, sample.expected_ttft_s or 0.0)
    return max(config.no_token_k * expected, config.no_token_floor_s)


def _threshold_terms(sample, config: DetectorConfig) -> str:
    """How the threshold was made, every term with its figure: max(the floor, k x the larger expectation)."""
    k, floor = config.no_token_k, config.no_token_floor_s
    p99, expected = sample.ttft_p99_s or 0.0, sample.expected_ttft_s or 0.0
    if expected > p99:
        return f"max({floor:g} s, {k:g} x the oldest waiting request's expected TTFT {expected:.3f} s)"
    if p99 > 0:
        return f"max({floor:g} s, {k:g} x recent TTFT p99 {p99:.3f} s)"
    return f"the {floor:g} s floor: no stream has finished yet to give a recent TTFT"


def detect(window: Window, config: DetectorConfig) -> list[Verdict]:
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
