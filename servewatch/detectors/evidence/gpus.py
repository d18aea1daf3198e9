"""The GPU each rank holds, as the stall and the rank verdicts tell it (and the GPU readings gpu_fault reads)."""

from __future__ import annotations

from servewatch.detectors.series import num
from servewatch.timeline.ranks import rank_view
from servewatch.timeline.samples import GpuDevice, GpuSample
from servewatch.timeline.window import Window


def _readings(window: Window) -> list[GpuSample]:
    return [g for g in window.gpu if g.available and g.devices]


# --- the GPU of each rank, in the stall and rank verdicts -------------------------------------------------

IDLE_PCT = 10.0          # under this a GPU launches (almost) no work
BUSY_PCT = 50.0          # at or over this a kernel is resident most of the time
SPIN_POWER_SHARE = 0.35  # busy under this share of the power limit: resident but not computing (spinning, waiting)


def _rank_state(device: GpuDevice) -> str:
    util = device.utilization_pct
    if util is None:
        return "unknown"
    if util < IDLE_PCT:
        return "idle"
    if util >= BUSY_PCT and device.power_w is not None and device.power_limit_w:
        return "spin" if device.power_w < SPIN_POWER_SHARE * device.power_limit_w else "busy"
    return "busy"


def rank_gpu_evidence(window: Window, process) -> tuple[str, str | None]:
    """The GPU each rank of `process` holds, from the newest GPU reading: a clause for a why line ("; GPUs: TP
    rank 1 GPU 1 idle 0 % while TP rank 0 GPU 0 98 % at 85 of 700 W (spinning or waiting): TP rank 1 is not
    launching work") and a token for the details ("TP0=spin,TP1=idle"). ("", None) when no rank holds a GPU
    (no NVML, CPU engines, another PID namespace)."""
    readings = _readings(window)
    if not readings or process is None:
        return "", None
    last = readings[-1]
    ranks = [r for r in rank_view(process) if r.kind in ("worker", "engine_core", "scheduler")]
    on = {r.pid: [d for d in last.devices if any(p.pid == r.pid for p in d.processes)] for r in ranks}
    holding = [r for r in ranks if on[r.pid]]
    if not holding:
        return "", None
    # the ranks of the kind that holds GPUs (TP workers, or SGLang's schedulers), each once
    kinds = {r.kind for r in holding}
    ranks = sorted((r for r in ranks if r.kind in kinds), key=lambda r: (r.axes, r.pid))
    parts, tokens, states = [], [], {}
    for r in ranks:
        name = " ".join(f"{a} rank {n}" for a, n in r.own_axes) or f"{r.title} (pid {r.pid})"
        token = ",".join(f"{a}{n}" for a, n in r.axes) or str(r.pid)
        devices = on[r.pid]
        if not devices:
            states[name] = "absent"
            parts.append(f"{name} on no GPU (absent from NVML's process lists)")
            tokens.append(f"{token}=absent")
            continue
        d = devices[0]
        state = _rank_state(d)
        states[name] = state
        power = (f" at {num(d.power_w)} of {num(d.power_limit_w)} W" if d.power_w is not None and d.power_limit_w
                 else f" at {num(d.power_w)} W" if d.power_w is not None else "")
        how = {"idle": "", "spin": " (spinning or waiting)", "busy": "", "unknown": ""}[state]
        parts.append(f"{name} GPU {d.index} {'idle ' if state == 'idle' else ''}{num(d.utilization_pct)} %{power}{how}")
        tokens.append(f"{token}={state}")
    clause = "; GPUs: " + ", ".join(parts)
    quiet = [n for n, s in states.items() if s in ("idle", "absent")]
    working = [n for n, s in states.items() if s in ("spin", "busy")]
    if len(quiet) == 1 and working:
        clause += f": {quiet[0]} is not launching work"
    return clause, ",".join(tokens)[:128]
