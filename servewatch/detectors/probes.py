"""The probe's answers as evidence: when a probe was sent, and the run of misses that ends the window. Shared by
not_serving and rank_stalled (a detector never imports another for them)."""

from __future__ import annotations

from servewatch.timeline.samples import ProbeSample


def asked_at(probe: ProbeSample) -> float:
    """When the probe was sent: its answer time minus the time it waited."""
    waited = probe.latency_s if probe.latency_s is not None else probe.deadline_s
    return probe.t - waited


def trailing_failures(probes: tuple[ProbeSample, ...], after: float | None) -> list[ProbeSample]:
    run: list[ProbeSample] = []
    for probe in reversed(probes):
        if not probe.failed or (after is not None and asked_at(probe) < after):
            break
        run.append(probe)
    run.reverse()
    return run
