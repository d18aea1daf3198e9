"""Did each workload have the shape the demo announces? The demo never ends green on a workload it did not
achieve: normal, long prompt and long output run without a queue (and with their token counts), overload runs
at the slot limit with a queue. Judged on the server's own signature row of the phase."""

from __future__ import annotations

from dataclasses import dataclass

LONG_PROMPT_TOKENS = 1000      # the doctor's ranges (servewatch.doctor.diagnose)
LONG_OUTPUT_TOKENS = 512
NEAR_LIMIT = 0.98              # "at the slot limit": within 2 % of it (detectors' overload_slots_slack)


@dataclass(frozen=True, slots=True)
class Shape:
    phase: str
    announced: str
    achieved: str
    ok: bool

    def line(self) -> str:
        return f"{self.phase}: {'achieved' if self.ok else 'NOT achieved'}: {self.announced} — {self.achieved}"

    def to_dict(self) -> dict:
        return {"phase": self.phase, "announced": self.announced, "achieved": self.achieved, "ok": self.ok}


def _n(value) -> str:
    return "not measured" if value is None else f"{value:,.0f}"


def shape_of(name: str, row: dict, slot_limit: int | None, verdicts: set[str]) -> Shape:
    running, waiting = row.get("max_running"), row.get("max_waiting")
    tokens_in, tokens_out, queue = row.get("tokens_in"), row.get("tokens_out"), row.get("queue_wait_s")
    queue_said = "not measured" if queue is None else f"{queue:.2f} s"
    no_queue = waiting is not None and waiting == 0
    if name == "overload":
        limit = f"{slot_limit:,}" if slot_limit else "unknown"
        at_limit = slot_limit is not None and running is not None and running >= slot_limit * NEAR_LIMIT
        queued = waiting is not None and waiting > 0
        return Shape(name, f"running at the slot limit ({limit}) with a queue",
                     f"running up to {_n(running)} of {limit}, up to {_n(waiting)} waiting, queue wait {queue_said}"
                     + ("; the overload verdict fired" if "overload" in verdicts else "; no overload verdict"),
                     at_limit and queued and "overload" in verdicts)
    if name == "long-prompt":
        ok = no_queue and tokens_in is not None and tokens_in >= LONG_PROMPT_TOKENS
        return Shape(name, f"prompts of {LONG_PROMPT_TOKENS:,}+ tokens, no queue",
                     f"{_n(tokens_in)} tokens in, up to {_n(waiting)} waiting", ok)
    if name == "long-output":
        ok = no_queue and tokens_out is not None and tokens_out >= LONG_OUTPUT_TOKENS
        return Shape(name, f"answers of {LONG_OUTPUT_TOKENS:,}+ tokens, no queue",
                     f"{_n(tokens_out)} tokens out, up to {_n(waiting)} waiting", ok)
    return Shape(name, "no queue", f"up to {_n(waiting)} waiting, up to {_n(running)} running", no_queue)


def check_shapes(scenarios, slot_limit: int | None) -> list[Shape]:
    """One Shape per load scenario of the demo (PhaseResults)."""
    return [shape_of(p.phase.name, p.summary.get("signature") or {}, slot_limit,
                     {f.verdict.name for f in p.fired}) for p in scenarios]
