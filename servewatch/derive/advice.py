"""Advice: the capacity figures, bucket edges placed around them (and around what a live server shows),
the flags that install those edges, and each disagreement between derivation and server explained."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from servewatch import dialects
from servewatch.derive import buckets as b
from servewatch.derive import quantities as q
from servewatch.derive.capacity import Capacity, Deployment
from servewatch.derive.observed import Observed
from servewatch.engine.histogram import BLIND_FRACTION   # the share in bucket one at which quantiles mean nothing

DENSE_SPAN = 4.0           # around a live server's mean, dense edges cover mean ÷ 4 … mean × 4
QUEUE_ALLOWANCE_S = 60.0   # e2e includes queueing, which no step time bounds: cover at least a minute


@dataclass(frozen=True, slots=True)
class LatencyTargets:
    ttft: float | None = None
    itl: float | None = None
    e2e: float | None = None

    def get(self, kind: str) -> float | None:
        return getattr(self, kind)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    derived: str
    observed: str
    agrees: bool | None          # None: nothing to compare
    explanation: str

    def as_json(self) -> dict:
        return {"name": self.name, "derived": self.derived, "observed": self.observed, "agrees": self.agrees,
                "explanation": self.explanation}


@dataclass(slots=True)
class Advice:
    capacity: Capacity
    plans: dict[str, b.EdgePlan]
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def flags(self, dialect: str) -> list[str]:
        """The arguments that install the planned edges on the named engine."""
        return dialects.by_name(dialect).bucket_args({kind: plan.edges for kind, plan in self.plans.items()})


def plan_edges(capacity: Capacity, slo: LatencyTargets, observed: Observed | None = None) -> tuple[dict[str, b.EdgePlan], list[str]]:
    """ITL, TTFT and e2e edges: the lowest below the decode floor, dense where healthy values live — around
    a live server's honest mean when one was read, else from the floor to the full-pool step — and up to
    a ceiling that covers the longest healthy value, with each SLO threshold an edge."""
    floor = float(capacity.decode_floor_s) if capacity.decode_floor_s is not None else None
    full_step = float(capacity.full_pool_step_s) if capacity.full_pool_step_s is not None else None
    means = {kind: s.mean_s for kind, s in (observed.histograms.items() if observed else ()) if s.mean_s}
    plans: dict[str, b.EdgePlan] = {}
    floor_text = f"the decode floor ({q.duration(floor)})" if floor else ""

    def plan(kind: str, model_range: tuple[float, float] | None, model_text: str, ceiling: float,
             ceiling_text: str) -> None:
        mean = means.get(kind)
        if mean:
            dense = (mean / DENSE_SPAN, mean * DENSE_SPAN)
            dense_text = f"dense within {DENSE_SPAN:g}× of the server's mean {kind.upper()} ({q.duration(mean)})"
        elif model_range:
            dense, dense_text = model_range, model_text
        else:
            return
        lowest = min(dense[0], floor / 2 if floor else dense[0])
        reason = (f"lowest edge below {floor_text}; " if floor else "") + dense_text + f"; up to {ceiling_text}"
        plans[kind] = b.latency_edges(kind, lowest, dense[0], dense[1], ceiling, slo.get(kind), reason)

    plan("itl", (floor / 2, full_step * 1.25) if floor and full_step else None,
         f"dense from half the floor to 1.25 × the decode step with the whole pool resident "
         f"({q.duration(full_step) if full_step else ''})",
         max(1.0, 4 * (slo.itl or 0)), "1 s (preemption and recompute stalls)")
    plan("ttft", (floor / 2, 20 * floor) if floor else None,
         "dense from half a decode step (a first token takes at least one) to twenty steps",
         max(10.0, 4 * (slo.ttft or 0)), "10 s")
    longest = capacity.max_model_len * full_step if full_step else 0.0
    plan("e2e", (10 * floor, 10 * floor) if floor else None, "from ten decode steps",
         max(longest, QUEUE_ALLOWANCE_S, 4 * (slo.e2e or 0)),
         f"the longer of a maximum-length generation at the full-pool step "
         f"({capacity.max_model_len:,} × {q.duration(full_step)} = {q.duration(longest)}) and "
         f"{QUEUE_ALLOWANCE_S:g} s of queueing" if full_step else f"{QUEUE_ALLOWANCE_S:g} s of queueing")
    notes = [] if plans else ["no bucket edges: give --bandwidth (or a known --gpu) for the decode floor, or "
                              "--against a live server for its observed latencies"]
    return plans, notes


def checks(deployment: Deployment, capacity: Capacity, observed: Observed) -> list[Check]:
    """Derived figures against what the live server reports, each disagreement explained."""
    out: list[Check] = []
    out.append(_cache_size_check(capacity, observed))
    out.append(_itl_check(capacity, observed))
    out.append(_slot_check(deployment, observed))
    if observed.memory_utilization is not None and observed.kv_cache_memory_bytes is None \
            and not math.isclose(observed.memory_utilization, float(deployment.memory_utilization)):
        out.append(Check("memory utilisation", f"{float(deployment.memory_utilization):g}",
                         f"{observed.memory_utilization:g}", False,
                         "the server runs another --gpu-memory-utilization; rerun advise with the server's value"))
    return out


def _cache_size_check(capacity: Capacity, observed: Observed) -> Check:
    name = "KV cache size (tokens)"
    if observed.kv_total_tokens is None:
        return Check(name, f"{capacity.engine_pool_tokens:,}", "not reported", None,
                     "the server exports no cache size (vLLM: cache_config_info; SGLang: max_total_num_tokens)")
    seen = observed.kv_total_tokens
    block = observed.block_size or 1
    if observed.kv_cache_memory_bytes:
        implied = math.floor(Fraction(observed.kv_cache_memory_bytes, capacity.kv_bytes_per_token)) // block * block
        budget_text = f"{observed.kv_cache_memory_bytes:,} B"
        if implied == seen:
            same_budget = observed.kv_cache_memory_bytes == capacity.kv_budget
            return Check(name, f"{implied:,} from the server's {budget_text} budget", f"{seen:,}", True,
                         f"⌊{budget_text} ÷ {capacity.kv_bytes_per_token:,} B per token⌋"
                         + (f" in whole {block}-token blocks" if block > 1 else "") + f" = {implied:,}: the KV bytes per token agree exactly"
                         + ("" if same_budget else f"; the estimated budget ({q.binary(capacity.kv_budget)}) differs "
                            f"from the server's ({q.binary(observed.kv_cache_memory_bytes)}), so rerun with "
                            f"--kv-cache-memory-bytes {observed.kv_cache_memory_bytes}"))
        per_token = Fraction(observed.kv_cache_memory_bytes, seen)
        return Check(name, f"{implied:,} from the server's {budget_text} budget", f"{seen:,}", False,
                     f"the server stores {float(per_token):,.0f} B per token, the derivation "
                     f"{capacity.kv_bytes_per_token:,} B: a different KV dtype (--kv-cache-dtype), TP, or model")
    derived = capacity.engine_pool_tokens if block == 1 else capacity.pool_tokens // block * block
    agrees = derived == seen
    ratio = seen / derived if derived else math.inf
    return Check(name, f"{derived:,}", f"{seen:,}", agrees,
                 "exact" if agrees else
                 f"the server's pool is {ratio:.2f}× the estimate: its budget comes from its own profiling run "
                 f"(activation peak, graphs), not the assumed reserve; the figures above use the estimate, "
                 f"so give --kv-cache-memory-bytes {math.floor(seen * capacity.kv_bytes_per_token)} "
                 f"(or --reserve) to match it")


def _itl_check(capacity: Capacity, observed: Observed) -> Check:
    name = "ITL first bucket vs decode floor"
    summary = observed.histograms.get("itl")
    floor = float(capacity.decode_floor_s) if capacity.decode_floor_s is not None else None
    if summary is None or summary.first_bucket_fraction is None:
        return Check(name, q.duration(floor) if floor else "no floor", "no ITL observations", None,
                     "the ITL histogram is empty: drive some load first")
    edge, fraction, mean = summary.first_bucket_le, summary.first_bucket_fraction, summary.mean_s
    seen = f"{fraction:.1%} of {summary.count:,.0f} ≤ {q.duration(edge)}; mean {q.duration(mean)}"
    if floor is None:
        return Check(name, "no floor (no bandwidth)", seen, None,
                     "blind: quantiles print ≤ the first edge whatever the truth" if fraction >= BLIND_FRACTION
                     else "the first bucket does not swallow the distribution")
    derived = f"floor {q.duration(floor)}; first edge {q.duration(edge)}"
    if mean is not None and mean < floor * 0.95:
        return Check(name, derived, seen, False,
                     f"the mean ITL is below the derived floor: the bandwidth given is too low, or fewer bytes are "
                     f"streamed per step than derived (quantised weights, speculative decoding)")
    if floor < edge and fraction >= BLIND_FRACTION:
        return Check(name, derived, seen, True,
                     f"as derived: healthy steps ({q.duration(floor)} and up) fall under the first edge "
                     f"({q.duration(edge)}), so the quantile panels are blind; install the proposed edges")
    if floor < edge:
        return Check(name, derived, seen, True,
                     f"steps run at {mean / floor:.1f}× the floor on average (batching, scheduling and framework "
                     f"overhead), so {1 - fraction:.1%} of them clear the first edge")
    return Check(name, derived, seen, fraction < BLIND_FRACTION,
                 "the floor is above the first edge, so bucket one should stay nearly empty"
                 + ("" if fraction < BLIND_FRACTION else "; it does not: the floor is overstated"))


def _slot_check(deployment: Deployment, observed: Observed) -> Check:
    name = "slot limit (max running)"
    assumed = deployment.max_num_seqs
    running = observed.running
    if observed.slot_limit is not None:
        agrees = observed.slot_limit == assumed
        return Check(name, f"{assumed}", f"{observed.slot_limit}", agrees,
                     "the same" if agrees else f"the server runs --max-num-seqs {observed.slot_limit}; rerun advise "
                     f"with it (the logits temporary and the binding limit depend on it)")
    if running is not None and running > assumed:
        return Check(name, f"{assumed}", f"{running:.0f} running now", False,
                     "more requests run than the assumed limit: give the server's --max-num-seqs")
    return Check(name, f"{assumed}", "not exported" + (f"; {running:.0f} running now" if running is not None else ""),
                 None, "vLLM does not export its slot limit; give --log with the server's startup log to read it")
