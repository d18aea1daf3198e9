"""The demo's timeline: when each phase starts, when requests arrive, when faults are injected.

Shared by the virtual-time and the real-time runs, so both follow the same script.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.demo.plan import Phase
from servewatch.load.scenarios import arrival_times, prompt_lengths


@dataclass(frozen=True, slots=True)
class Arrival:
    t: float                 # seconds after the phase start
    prompt_tokens: int
    max_tokens: int


def phase_arrivals(phase: Phase, seed: int) -> list[Arrival]:
    """Seeded Poisson arrivals over the phase's arrival window (the load generator's own processes)."""
    offsets = [t for t in arrival_times("poisson", phase.rate, seed=seed, duration_s=phase.duration_s)
               if t < phase.duration_s]
    lengths = prompt_lengths(phase.prompt_tokens, 0.0, len(offsets), seed=seed)
    return [Arrival(t, n, phase.output_tokens) for t, n in zip(offsets, lengths)]
