"""The detectors' CPU per run, as `serve` and `watch` call them: once per scrape over a growing window.

    .venv/bin/python benchmarks/detectors.py [--calls 150] [--history 600] [--interval 2]
                                             [--scenarios healthy,stalled,erroring] [--compare OTHER_CHECKOUT]

Each scenario fills a ring (as the recorder does: `--history` seconds of scrapes and /health probes at
`--interval`) with a real 51 kB vLLM 0.32 scrape (tests/fixtures/vllm_real/kv_pressure_t1.prom) read
into engine states through the dialect, every counter moving at every scrape (each `_total`, histogram
bucket, `_count` and `_sum` grows 0.1 % a step, as benchmarks/fleet.py serves it). Then, per call, one
new scrape and one probe go into the ring and `run_detectors(ring.window(), config)` runs: the window
is a new object every call, as in the recorder. Scenarios:

- healthy: the capture as it is (12 running, 1 waiting, KV 95 %: kv_pressure fires);
- stalled: the counters froze a minute before the first timed call, requests still running
  (alive_health_ok_no_progress fires);
- erroring: a 5xx response counter rises by one a scrape next to the 2xx one (server_errors fires).

Figures are CPU time of the calling thread (time.thread_time), median and best over the calls, and the
same split per verdict's detector (each run on its own fresh lookback slice; detectors that share
per-window helpers are charged for what they compute first). With `--compare`, the same scenarios
run on another checkout's servewatch too, each checkout in its own process, batches interleaved so
machine load hits both alike; the verdicts of every call are compared and must be identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from moving_scrape import body_at, split_capture

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("healthy", "stalled", "erroring")
FIVE_XX = 'http_requests_total{handler="/v1/completions",method="POST",status="5xx"}'
STALLED_FOR_S = 60.0


# --- the scenario's scrapes --------------------------------------------------------------------------

def scenario_body(parts, moving, at: int, scenario: str) -> str:
    body = body_at(parts, moving, at)
    return body + f"{FIVE_XX} {float(at):.10g}\n" if scenario == "erroring" else body


class Scenario:
    """A ring filled with `history_s` of the scenario, and the samples each later call adds."""

    def __init__(self, name: str, history_s: float, interval: float, calls: int):
        from servewatch.dialects import read_scrape
        from servewatch.timeline.ring import Ring
        from servewatch.timeline.samples import HealthSample, MetricsSample

        self.name = name
        parts, moving = split_capture()
        warm = int(history_s / interval)
        frozen_from = warm - int(STALLED_FOR_S / interval)
        t0 = 1_800_000_000.0
        self.ring = Ring.for_history(history_s, {"metrics": interval, "health": interval})
        self.pending = []
        for i in range(warm + calls):
            at = min(i, frozen_from) if name == "stalled" else i
            scrape = read_scrape(scenario_body(parts, moving, at, name))
            t = t0 + i * interval
            samples = (HealthSample(t=t - 0.3, status=200, latency_s=0.002),
                       MetricsSample(t=t, dialect=scrape.dialect, naming=scrape.naming,
                                     engines=tuple(scrape.engines), scrape_s=0.01))
            if i < warm:
                self.ring.extend(samples)
            else:
                self.pending.append(samples)
        self.pending.reverse()

    def step(self):
        self.ring.extend(self.pending.pop())
        return self.ring.window()


# --- one checkout's measurement (a worker process) ---------------------------------------------------

def digest(verdicts) -> str:
    return hashlib.sha256(repr([(v.name, v.t, v.onset, v.why, v.evidence, sorted(v.details.items()))
                                for v in verdicts]).encode()).hexdigest()[:16]


def run_batch(scenario: Scenario, calls: int) -> dict:
    from servewatch.detectors import DetectorConfig, _recent, registry, run_detectors

    config = DetectorConfig()
    totals, split, digests, fired = [], {}, [], set()
    specs = registry.specs()
    for _ in range(calls):
        window = scenario.step()
        start = time.thread_time_ns()
        verdicts = run_detectors(window, config)
        totals.append(time.thread_time_ns() - start)
        digests.append(digest(verdicts))
        fired.update(v.name for v in verdicts)
        recent = _recent(window, config)
        for spec in specs:
            start = time.thread_time_ns()
            spec.detect(recent, config)
            split.setdefault(spec.name, []).append(time.thread_time_ns() - start)
    return {"totals": totals, "split": split, "digests": digests, "fired": sorted(fired)}


def worker(args) -> int:
    sys.path.insert(0, args.root)
    scenarios = {name: Scenario(name, args.history, args.interval, args.calls) for name in args.scenarios}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        name, calls = line.split()
        print(json.dumps(run_batch(scenarios[name], int(calls))), flush=True)
    return 0


# --- the driver ---------------------------------------------------------------------------------------

def start_worker(root: str, args) -> subprocess.Popen:
    command = [sys.executable, __file__, "--worker", "--root", root, "--calls", str(args.calls),
               "--history", str(args.history), "--interval", str(args.interval),
               "--scenarios", ",".join(args.scenarios)]
    env = {**os.environ, "PYTHONPATH": root}
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root)
    if not json.loads(process.stdout.readline()).get("ready"):
        raise SystemExit(f"the worker for {root} did not start")
    return process


def ask(process: subprocess.Popen, scenario: str, calls: int) -> dict:
    process.stdin.write(f"{scenario} {calls}\n")
    process.stdin.flush()
    line = process.stdout.readline()
    if not line:
        raise SystemExit("a worker ended early (see its stderr above)")
    return json.loads(line)


def ms(ns_values: list[int]) -> str:
    return f"{statistics.median(ns_values) / 1e6:7.3f} ms (best {min(ns_values) / 1e6:.3f})"


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--calls", type=int, default=150, help="timed calls per scenario (default 150)")
    cli.add_argument("--batch", type=int, default=10, help="calls per interleaved batch (default 10)")
    cli.add_argument("--history", type=float, default=600.0, help="seconds the ring holds (default 600, serve's)")
    cli.add_argument("--interval", type=float, default=2.0, help="scrape and probe cadence (default 2 s)")
    cli.add_argument("--scenarios", default=",".join(SCENARIOS))
    cli.add_argument("--compare", metavar="CHECKOUT", help="another servewatch checkout to measure alongside")
    cli.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    cli.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    args = cli.parse_args()
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        cli.error(f"unknown scenarios: {', '.join(sorted(unknown))} (known: {', '.join(SCENARIOS)})")
    if args.worker:
        return worker(args)

    roots = {"this": str(ROOT)}
    if args.compare:
        roots["other"] = str(Path(args.compare).resolve())
    print(f"{args.calls} calls per scenario, ring of {args.history:g} s at {args.interval:g} s (lookback slice of "
          f"the default config), load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name, root in roots.items():
        print(f"  {name}: {root}")
    workers = {name: start_worker(root, args) for name, root in roots.items()}
    results = {name: {s: {"totals": [], "split": {}, "digests": [], "fired": set()} for s in args.scenarios}
               for name in roots}
    done = 0
    while done < args.calls:
        calls = min(args.batch, args.calls - done)
        for scenario in args.scenarios:
            for name, process in workers.items():
                batch = ask(process, scenario, calls)
                into = results[name][scenario]
                into["totals"] += batch["totals"]
                into["digests"] += batch["digests"]
                into["fired"].update(batch["fired"])
                for spec, values in batch["split"].items():
                    into["split"].setdefault(spec, []).extend(values)
        done += calls
    for process in workers.values():
        process.stdin.close()
        process.wait(timeout=30)

    identical = True
    for scenario in args.scenarios:
        print(f"\n{scenario}: fired {', '.join(sorted(results['this'][scenario]['fired'])) or 'nothing'}")
        for name in roots:
            print(f"  run_detectors {name:>5}: {ms(results[name][scenario]['totals'])}")
        if "other" in roots:
            this, other = (statistics.median(results[n][scenario]["totals"]) for n in ("this", "other"))
            same = results["this"][scenario]["digests"] == results["other"][scenario]["digests"]
            identical &= same
            print(f"  this / other: {this / other:.2f}; verdicts of every call identical: {same}")
        print(f"  {'detector':32} " + " ".join(f"{name + ' median ms':>18}" for name in roots))
        for spec in results["this"][scenario]["split"]:
            cells = []
            for name in roots:
                values = results[name][scenario]["split"].get(spec)
                cells.append(f"{statistics.median(values) / 1e6:18.3f}" if values else f"{'-':>18}")
            print(f"  {spec:32} " + " ".join(cells))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
