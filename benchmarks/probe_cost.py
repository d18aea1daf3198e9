"""The active probe's cost and speed, the new defaults beside the old, in one run (virtual time, the simulator):

- cost: one-token requests an hour on an idle server and on a busy one (2 requests/s), per setting, counted over
  SPAN_S and scaled to the hour;
- speed: seconds from an engine wedging while idle to not_serving, and to its evidence (the second miss); the wedge
  lands 1.5 s after a probe was sent, the worst placement: the next probe is a whole interval away.

Old defaults: every 30 s, a fixed 10 s deadline. New: every 10 s, the deadline learned from the server's answers
(sources.probe: 4 x the slowest of the last 8 served, 3-10 s). Ratios are new / old, from the same run.

    .venv/bin/python benchmarks/probe_cost.py [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servewatch.clock import VirtualClock  # noqa: E402
from servewatch.sim import SimConfig, SimEngine  # noqa: E402
from servewatch.sources.probe import DEFAULT_DEADLINE_S, DEFAULT_PROBE_INTERVAL_S  # noqa: E402
from servewatch.watch import Recorder  # noqa: E402
from servewatch.watch.sim_target import sim_sources  # noqa: E402
from tests.sim_harness import Phase, Workload  # noqa: E402

HOUR_S = 3600.0
SPAN_S = 600.0             # each cost run: 10 minutes of virtual time, scaled to the hour
SETTINGS = {"old (30 s, 10 s fixed)": (30.0, 10.0), "new (10 s, learned)": (DEFAULT_PROBE_INTERVAL_S, DEFAULT_DEADLINE_S)}


def run(phases, every: float, deadline, faults=()) -> tuple[Recorder, float, list]:
    clock = VirtualClock()
    engine = SimEngine(SimConfig(seed=1), clock)
    start = clock.now()
    for at, fault in faults:
        engine.inject({**fault, "at": at})
    workload = Workload(engine, phases, seed=1)
    heard: list = []
    recorder = Recorder(sim_sources(engine, clock, 0.5, probe_interval_s=every, probe_deadline=deadline), clock,
                        history_s=600.0)
    recorder.evidence_listeners.append(lambda verdict, now: heard.append(verdict))
    asyncio.run(recorder.run_virtual(workload.end - start, advance=workload.advance))
    return recorder, start, heard


def sent(recorder: Recorder) -> int:
    return next(s for s in recorder.sources if s.kind == "probe").sent


def measure() -> dict:
    out: dict = {}
    for name, (every, deadline) in SETTINGS.items():
        idle, _, _ = run([Phase(SPAN_S)], every, deadline)
        busy, _, _ = run([Phase(SPAN_S, rate=2)], every, deadline)
        wedge_at = 300.0 + 1.5     # probes go out at 0.5 s and every interval after it (all intervals divide 300)
        wedged, start, heard = run([Phase(wedge_at + 120.0)], every, deadline,
                                   faults=((wedge_at, {"kind": "wedge-idle"}),))
        fired = next((f.verdict.t - start - wedge_at for f in wedged.fired if f.verdict.name == "not_serving"), None)
        held = next((v.t - start - wedge_at for v in heard if v.name == "not_serving"), None)
        out[name] = {"idle_per_hour": round(sent(idle) * HOUR_S / SPAN_S), "busy_in_span": sent(busy),
                     "named_s": None if fired is None else round(fired, 2),
                     "evidence_s": None if held is None else round(held, 2)}
    old, new = out["old (30 s, 10 s fixed)"], out["new (10 s, learned)"]
    out["ratio new/old"] = {"idle_per_hour": round(new["idle_per_hour"] / old["idle_per_hour"], 2),
                            "named_s": round(new["named_s"] / old["named_s"], 2)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = measure()
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'setting':<24} {'idle/h':>7} {'busy/10m':>8} {'named':>8} {'evidence':>9}")
    for name, row in out.items():
        if name.startswith("ratio"):
            print(f"{name:<24} {row['idle_per_hour']:>7g} {'':>8} {row['named_s']:>8g}")
            continue
        print(f"{name:<24} {row['idle_per_hour']:>7} {row['busy_in_span']:>8} {row['named_s']:>7}s "
              f"{row['evidence_s']:>8}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
