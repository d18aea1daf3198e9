"""A /metrics body with 200,000 series is refused by the series bound, in time and memory comparable
to reading a normal vLLM capture; both measured in the same run, through the one scrape path
(`servewatch.sources.scrape.read_metrics`) that inspect, watch and the load generator share.

    .venv/bin/python benchmarks/scrape_bound.py [--reps 30] [--series 200000] [--unbounded]

The big body is the real vLLM capture with 200,000 more engines that each report one gauge (about
12.9 MB, under the 16 MiB byte bound, so only the series bound stands in its way). Times are medians of
interleaved rounds; peak memory is tracemalloc's peak of what the read allocated (the body itself was
allocated before). --unbounded also reads the big body with the bound lifted, once (slow: on the
development machine inspect --json spent 16.7 s and 400 MB on such a body before the bound existed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servewatch.sources.scrape import ScrapeBounds, ScrapeFailure, read_metrics  # noqa: E402

CAPTURE = ROOT / "tests" / "fixtures" / "metrics" / "vllm_kv_pressure_t0.prom"
TIME_TARGET = 10.0       # refusing the big body costs at most this many normal reads
MEMORY_TARGET = 2.0      # and at most this many times a normal read's peak allocation


def many_series(capture: bytes, extra: int) -> bytes:
    lines = capture.decode().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("vllm:num_requests_running{")) + 1
    added = [f'vllm:num_requests_running{{engine="{i}",model_name="tiny"}} 0.0' for i in range(1, extra + 1)]
    return "\n".join(lines[:at] + added + lines[at:]).encode()


def peak_bytes(run) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--reps", type=int, default=30, help="interleaved rounds (default 30)")
    cli.add_argument("--series", type=int, default=200_000, help="series added to the capture (default 200,000)")
    cli.add_argument("--unbounded", action="store_true", help="also read the big body with the bound lifted")
    cli.add_argument("--json", type=Path, help="also write the two ratios here")
    args = cli.parse_args()

    capture = CAPTURE.read_bytes()
    big = many_series(capture, args.series)
    bounds = ScrapeBounds()
    normal = read_metrics(200, capture, bounds)
    refused = read_metrics(200, big, bounds)
    assert not isinstance(normal, ScrapeFailure), normal
    assert isinstance(refused, ScrapeFailure) and refused.kind == "too_many_series", refused
    print(f"normal: {CAPTURE.name}, {len(capture) / 1e3:.0f} kB, {len(normal.engines)} engine(s); "
          f"big: {len(big) / 1e6:.1f} MB, {args.series:,} more series; series bound {bounds.max_series:,}; "
          f"{args.reps} interleaved rounds; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"big body: {refused.kind} ({refused.detail})")

    contenders = {"normal": lambda: read_metrics(200, capture, bounds),
                  "refused": lambda: read_metrics(200, big, bounds)}
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.reps):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in times.items()}
    peaks = {name: max(peak_bytes(run) for _ in range(3)) for name, run in contenders.items()}

    time_ratio = median["refused"] / median["normal"]
    memory_ratio = peaks["refused"] / peaks["normal"]
    print(f"{'':28} {'median time':>12} {'peak allocated':>15}")
    print(f"{'read the normal capture':28} {median['normal'] * 1e3:9.2f} ms {peaks['normal'] / 2**10:11.1f} KiB")
    print(f"{'refuse the big body':28} {median['refused'] * 1e3:9.2f} ms {peaks['refused'] / 2**10:11.1f} KiB")
    print(f"ratio refused / normal: time {time_ratio:.2f}x (target <= {TIME_TARGET:g}x), "
          f"peak memory {memory_ratio:.2f}x (target <= {MEMORY_TARGET:g}x)")
    if args.json:
        best = {name: min(values) for name, values in times.items()}    # the least load-sensitive figure
        args.json.write_text(json.dumps({"time_ratio": time_ratio, "memory_ratio": memory_ratio,
                                         "time_ratio_best": best["refused"] / best["normal"],
                                         "normal_ms": median["normal"] * 1e3, "refused_ms": median["refused"] * 1e3,
                                         "normal_peak_bytes": peaks["normal"],
                                         "refused_peak_bytes": peaks["refused"]}) + "\n")
    if args.unbounded:
        lifted = ScrapeBounds(max_series=args.series + 10_000)
        start = time.perf_counter()
        read = read_metrics(200, big, lifted)
        spent = time.perf_counter() - start
        peak = peak_bytes(lambda: read_metrics(200, big, lifted))
        print(f"{'read the big body, unbounded':28} {spent * 1e3:9.0f} ms {peak / 2**10:11.0f} KiB "
              f"({len(read.engines):,} engines; {spent / median['refused']:.0f}x the refusal's time)")
    ok = time_ratio <= TIME_TARGET and memory_ratio <= MEMORY_TARGET
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
