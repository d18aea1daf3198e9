"""Recorder memory is bounded by --history: RSS after one virtual hour at 1 Hz vs after 10 minutes,
against the built-in engine under steady load (virtual time).

    .venv/bin/python benchmarks/recorder_memory.py [--history 600] [--minutes 60]

With --history 600 the ring is full after 10 minutes; after that memory must stay flat (ratio ~1.0),
while the samples seen keep growing 6x.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servewatch.clock import VirtualClock  # noqa: E402
from servewatch.sim import SimConfig, SimEngine  # noqa: E402
from servewatch.watch import Recorder  # noqa: E402
from servewatch.watch.sim_target import sim_sources  # noqa: E402
from tests.sim_harness import Phase, Workload  # noqa: E402


def rss_mib() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=float, default=600.0)
    parser.add_argument("--minutes", type=float, default=60.0)
    args = parser.parse_args()

    clock = VirtualClock()
    engine = SimEngine(SimConfig(seed=3), clock)
    total = args.minutes * 60
    workload = Workload(engine, [Phase(total, rate=2)], seed=3)
    recorder = Recorder(sim_sources(engine, clock, 1.0), clock, history_s=args.history)
    baseline = rss_mib()
    checkpoints = sorted({args.history, args.history + 600, total / 2, total})
    start = clock.now()
    started = time.perf_counter()
    print(f"history {args.history:g} s at 1 Hz; ring capacity {recorder.ring.capacity}")
    print(f"RSS before recording: {baseline:.1f} MiB")
    results = {}
    for checkpoint in checkpoints:
        asyncio.run(recorder.run_virtual(start + checkpoint - clock.now(), advance=workload.advance))
        results[checkpoint] = rss_mib()
        print(f"after {checkpoint / 60:5.1f} virtual min: RSS {results[checkpoint]:7.1f} MiB, ring holds "
              f"{len(recorder.ring):5d} samples, {recorder.samples_seen:6d} seen, overwritten "
              f"{sum(recorder.ring.overwritten.values()):6d}  ({time.perf_counter() - started:.0f} s wall)")
    first, last = results[checkpoints[0]], results[checkpoints[-1]]
    grown = last - first
    print(f"RSS after {total / 60:g} min / after {checkpoints[0] / 60:g} min = {last / first:.3f} "
          f"(+{grown:.1f} MiB while samples seen grew {total / checkpoints[0]:.0f}x): "
          f"{'PASS' if grown <= max(5.0, 0.1 * (first - baseline)) else 'FAIL'} (bounded by --history)")


if __name__ == "__main__":
    main()
