"""The demo's script: the four load scenarios measured on an RTX 3060 serving Qwen2.5-7B-AWQ (normal,
overload, long prompt, long output), then three faults that health checks miss: a stall under load, an
engine that wedges while idle (only the active probe sees it), and an engine death."""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.load.scenarios import PRESETS

SCENARIOS = ("normal", "overload", "long-prompt", "long-output")
# The real-time demo's slot limit. At 14 req/s the built-in engine needs about 60 s of arrivals before 256
# slots fill (its batch slows as it grows: 193 running and no queue after 30 s, 256 and a queue after 60 s);
# with 64 slots the 30 s of the real-time overload pin running at the limit with a queue of ~80. The demo
# says so when it runs; --fast keeps 256.
REALTIME_SLOTS = 64
FAST_SLOTS = 256
PROBE_INTERVAL_S, PROBE_DEADLINE_S = 10.0, 5.0     # the demo's active probe (watch: --probe --probe-interval 10s)
CLEARED_BY_SERVEWATCH = ("stall", "wedge-idle")  # faults the demo ends itself once their verdict fired


@dataclass(frozen=True, slots=True)
class Phase:
    name: str                        # scenario name, or "stall" / "idle-wedge" / "engine-death"
    rate: float                      # requests per second (Poisson)
    prompt_tokens: int
    output_tokens: int
    duration_s: float                # how long requests arrive
    fault: dict | None = None        # injected `fault_after_s` into the phase
    fault_after_s: float = 0.0
    expect: tuple[str, ...] = ()     # verdicts the phase exists to show
    wait_for_verdicts_s: float = 0.0  # after the fault, how long to wait for `expect` at most
    drain_s: float = 0.0             # quiet time after arrivals stop, for in-flight requests to finish
    shared_prompt: bool = False      # every request sends the same prompt (prefix cache serves its prefill)

    @property
    def is_fault(self) -> bool:
        return self.fault is not None


def demo_plan(fast: bool, dialect: str | None = None) -> list[Phase]:
    """Virtual time (`fast`) runs 60 s of arrivals per scenario; real time scales them to fit 5 minutes. What the
    engine death expects follows the engine (`dialect`, a registered name; None: vLLM's and SGLang's shape): where the
    engine runs in no process of its own, its death is the process's exit alone."""
    from servewatch import dialects

    engine = dialects.by_name(dialect)
    dies_alone = engine is None or bool(engine.engine_process_titles)
    def duration(name: str) -> float:
        if fast:
            return 60.0
        return 30.0 if name == "overload" else 20.0   # overload: 30 s at REALTIME_SLOTS

    phases = [Phase(name, PRESETS[name].rate, PRESETS[name].prompt_tokens, PRESETS[name].output_tokens,
                    duration(name), drain_s=30.0 if fast else 8.0, shared_prompt=name == "long-prompt")
              for name in SCENARIOS]
    normal = PRESETS["normal"]
    phases.append(Phase("stall", normal.rate, normal.prompt_tokens, 512, duration_s=30.0 if fast else 14.0,
                        fault={"kind": "stall"}, fault_after_s=4.0,
                        expect=("alive_health_ok_no_progress",), wait_for_verdicts_s=20.0, drain_s=20.0 if fast else 8.0))
    phases.append(Phase("idle-wedge", 0.5, normal.prompt_tokens, 16, duration_s=30.0 if fast else 20.0,
                        fault={"kind": "wedge-idle"}, fault_after_s=4.0, expect=("not_serving",),
                        wait_for_verdicts_s=PROBE_INTERVAL_S + PROBE_DEADLINE_S + 10.0, drain_s=10.0 if fast else 6.0))
    phases.append(Phase("engine-death", normal.rate, normal.prompt_tokens, 512, duration_s=10.0,
                        fault={"kind": "engine-death", "exit_code": 0}, fault_after_s=4.0,
                        expect=("engine_dead", "process_exit") if dies_alone else ("process_exit",),
                        wait_for_verdicts_s=15.0))
    return phases
