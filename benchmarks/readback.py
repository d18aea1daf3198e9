"""`servewatch requests` reading records back: memory and time per record, the figures' reader (per-token
gaps only, compact) against reading every sequence back as lists (the round trip), on the same file.

    .venv/bin/python benchmarks/readback.py [--records 20000] [--tokens 128]

The file is `servewatch load`'s records of the overload scenario against the simulator in virtual time
(every token its own chunk: the longest records load writes for that many tokens), repeated to --records.
Each reading runs in a fresh process, so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_file(path: Path, records: int, tokens: int) -> int:
    from servewatch.clock import VirtualClock
    from servewatch.load.scenarios import LoadConfig
    from servewatch.load.virtual import run_load_virtual
    from servewatch.sim import SimConfig, SimEngine

    engine = SimEngine(SimConfig(profile="rtx3060-7b"), VirtualClock())
    run = run_load_virtual(LoadConfig(url="sim://in-process", scenario="custom", rate=20, requests=200,
                                      prompt_tokens=64, output_tokens=tokens, metrics_interval_s=0), engine)
    lines = [json.dumps(r.to_json(), separators=(",", ":")) for r in run.records]
    with path.open("w") as fh:
        for i in range(records):
            fh.write(lines[i % len(lines)] + "\n")
    return path.stat().st_size


CHILD = """
import resource, sys, time
sys.path.insert(0, {root!r})
from servewatch.load.readback import read_records, summarize_records
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
read = read_records([{path!r}], sequences={sequences})
summary = summarize_records(read.records, "all")
took = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(read.records), took, (peak - base) * 1024, summary["total"]["itl_s"]["p99"])
"""


def reading(path: Path, sequences: bool) -> tuple[int, float, float, float]:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), path=str(path), sequences=sequences)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2]), float(out[3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        size = make_file(path, args.records, args.tokens)
        print(f"{args.records:,} records of {args.tokens} tokens each, {size / 2**20:.1f} MiB")
        light = reading(path, sequences=False)
        full = reading(path, sequences=True)
    for name, (n, took, grown, p99) in (("figures' reader", light), ("every sequence", full)):
        print(f"{name:16s} {took:6.2f} s ({1e6 * took / n:5.1f} µs a record), peak RSS grew "
              f"{grown / 2**20:7.1f} MiB ({grown / n / 1024:5.2f} kB a record); ITL p99 {1000 * p99:.3f} ms")
    assert light[3] == full[3], "the two readers must give the same figures"
    print(f"memory, figures' reader / every sequence: {light[2] / full[2]:.2f}x; "
          f"time: {light[1] / full[1]:.2f}x")


if __name__ == "__main__":
    main()
