"""Recorder memory is bounded by --history: RSS after one virtual hour at 1 Hz vs after 10 minutes,
against the built-in engine under steady load (virtual time).

    .venv/bin/python benchmarks/recorder_memory.py [--history 600] [--minutes 60]
    .venv/bin/python benchmarks/recorder_memory.py --scrape-bytes 300 [--json FILE]

With --history 600 the ring is full after 10 minutes; after that memory must stay flat (ratio ~1.0),
while the samples seen keep growing 6x.

--scrape-bytes N: what one scrape of a busy vLLM server holds while a ring keeps it, the most of a target's
memory in `serve` (its ring keeps 300 at a 600 s history and a 2 s cadence): N successive scrapes of
benchmarks/fleet.py's moving vLLM 0.32 scrape (every counter and histogram moving), read as serve's metrics
source reads them (through the previous scrape's layout) and put in a Ring, against the same scrapes kept with
each histogram a Histogram object of its own, as the dialect gave them before it packed a laid-out scrape's
histograms itself (the same run, the same process); tracemalloc's count of what each set holds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import sys
import time
import tracemalloc
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


def held_bytes(keep) -> float:
    """The bytes that `keep()` leaves allocated (tracemalloc), what it returns kept alive meanwhile."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = keep()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del kept
    return held


def scrape_bytes(n: int) -> dict:
    """What a scrape holds in a ring, against the same scrape as read (the module's docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from moving_scrape import body_at, split_capture
    from servewatch.sources.metrics import MetricsSource
    from servewatch.timeline.ring import Ring
    from servewatch.timeline.samples import MetricsSample

    parts, moving = split_capture()
    bodies = [body_at(parts, moving, at) for at in range(n + 2)]

    def scrapes(first: int, as_objects: bool = False) -> list[MetricsSample]:
        source = MetricsSource(None, None, 2.0)
        source.read_scrape(bodies[first], max_bytes=2**24)        # the layout learnt, as after a first scrape
        out = []
        for i in range(n):
            scrape = source.read_scrape(bodies[first + 1 + i], max_bytes=2**24)
            engines = tuple(scrape.engines)
            if as_objects:     # each histogram a Histogram of its own (the dialect packs a laid-out scrape's itself)
                engines = tuple(dataclasses.replace(state, histograms=dict(state.histograms)) for state in engines)
            out.append(MetricsSample(t=1_800_000_000.0 + 2 * i, dialect=scrape.dialect, naming=scrape.naming,
                                     engines=engines, scrape_s=0.01))
        return out

    def in_ring() -> Ring:
        ring = Ring({"metrics": n})
        ring.extend(scrapes(0))
        return ring

    scrapes(1)                                  # plans, layouts and interned objects made before either count
    ring = held_bytes(in_ring) / n
    as_read = held_bytes(lambda: scrapes(1, as_objects=True)) / n
    return {"scrapes": n, "ring_bytes_per_scrape": ring, "as_read_bytes_per_scrape": as_read,
            "ring_ratio": ring / as_read}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=float, default=600.0)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--scrape-bytes", type=int, metavar="N", help="what a scrape holds in a ring (above)")
    parser.add_argument("--json", metavar="FILE", help="with --scrape-bytes: also write the figures to FILE")
    args = parser.parse_args()
    if args.scrape_bytes:
        found = scrape_bytes(args.scrape_bytes)
        print(f"a busy vLLM scrape held in a ring: {found['ring_bytes_per_scrape']:.0f} bytes, as read "
              f"{found['as_read_bytes_per_scrape']:.0f} ({found['ring_ratio']:.2f}x); {found['scrapes']} scrapes, "
              f"{found['ring_bytes_per_scrape'] * 300 / 2**10:.0f} KiB for a 600 s history at 2 s")
        if args.json:
            Path(args.json).write_text(json.dumps(found, indent=1) + "\n")
        return

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
