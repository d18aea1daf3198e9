"""Run the selected benchmarks, each twice; keep the figures in benchmarks/results.json and fail on a
regression beyond each figure's noise band.

    .venv/bin/python benchmarks/run.py [NAME ...] [--runs 2] [--results FILE] [--previous FILE]
                                       [--accept] [--no-write] [--list]

Every figure is measured against a baseline run in the same invocation: a timing is a ratio (ours over
the other contender's, or the other way round for a speed-up), so the machine's speed and load cancel;
a memory figure is absolute MB with its same-run baseline written beside it (and their ratio as a
figure of its own).

Each benchmark runs --runs times (2 by default). A figure's value is the mean of its runs; its spread is
(max - min) / mean of those runs: the noise measured now (for an `absolute` figure, one whose value may be
near or below zero, such as milliseconds the proxy adds beyond what nginx adds, max - min in its unit, and
its floor, band and "worse by" are in that unit too). Its band is the larger of that spread and the
figure's stated floor (the least noise it is granted, below which two runs agreeing by chance would
make the next invocation fail on noise). The figure regresses when it is worse than the previous
results by more than the larger of the previous band and this one, relative to the previous value.

The previous results are the committed benchmarks/results.json (`git show HEAD:...`), else the file
on disk. On a regression nothing is written (unless --accept) and the exit status is 1; otherwise the
file is rewritten with this invocation's figures (the figures of benchmarks not selected are kept),
the date and the machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results.json"


@dataclass(frozen=True)
class Figure:
    key: str                 # the field of the benchmark's JSON output (dots go into nested objects)
    unit: str
    better: str              # "lower" or "higher"
    floor: float             # the least relative band granted to this figure
    what: str
    baseline: str | None = None   # the figure measured in the same invocation that this one is read beside
    absolute: bool = False        # spread, floor and band in the figure's unit, not relative to its value


@dataclass(frozen=True)
class Benchmark:
    name: str
    args: tuple[str, ...]    # the script and its arguments; --json FILE is added
    figures: dict[str, Figure]
    about: str = ""
    run: Callable[[], dict] | None = field(default=None, compare=False)   # for tests: figures without a process
    needs: tuple[str, ...] = ()   # programs the baseline needs (nginx, prometheus): without one it is skipped


# The floors of the proxy's and the fleet's figures: the run-to-run spread of these figures on a quiet machine
# (three runs each: docs/site/figures.md, "The proxy's overhead", 2026-12-04, and issue 54's serve / Prometheus
# ratios of three days), the least noise a figure is granted. The committed results carry the spread measured
# when they were taken (4 runs, 2026-12-06, load average 16 to 28: far wider); CI's one run is judged against
# the larger of the two, so a quiet re-measurement (`benchmarks/run.py proxy fleet --runs 4`) narrows them.
PROXY_CPU_FLOOR = 0.12          # CPU per token / nginx's: 1.42x to 1.60x
PROXY_P50_FLOOR = 0.5           # ms: added TTFT p50 minus nginx's, 0.20 to 0.28 ms
PROXY_P99_FLOOR = 2.0           # ms: the same at p99, 1.3 to 3.0 ms
PROXY_ITL_FLOOR = 0.5           # ms: added per-token p99 minus nginx's, -0.36 to 0.02 ms
FLEET_CPU_FLOOR = 0.12          # serve / Prometheus CPU per target-scrape: 1.31x to 1.47x


def proxy_figures(condition: str) -> dict[str, Figure]:
    """The proxy's figures against nginx's in one condition of its run: "" quiet, "competitor" beside a CPU-bound
    competitor at the same priority (issue 54's targets hold in both; benchmarks/proxy.py --competitor both)."""
    key, name, beside = (f"{condition}.", f"_{condition}", " beside the competitor") if condition else ("", "", "")
    return {
        f"cpu_ratio{name}": Figure(f"{key}vs_nginx.cpu_per_token_ratio", "x", "lower", PROXY_CPU_FLOOR,
                                   "servewatch proxy's CPU per streamed token / nginx's (proxy_buffering off), same "
                                   f"upstream, same run{beside}"),
        f"ttft_p50_vs_nginx{name}": Figure(f"{key}vs_nginx.added_ttft_p50_ms_minus_ms", "ms", "lower", PROXY_P50_FLOOR,
                                           f"TTFT the proxy adds at p50 minus what nginx adds{beside}", absolute=True),
        f"ttft_p99_vs_nginx{name}": Figure(f"{key}vs_nginx.added_ttft_p99_ms_minus_ms", "ms", "lower", PROXY_P99_FLOOR,
                                           f"TTFT the proxy adds at p99 minus what nginx adds{beside}", absolute=True),
        # beside the competitor, the better round's (proxy.best_round_token_p99: a stall of the whole proxy lands in
        # one round and took the pooled p99 to +175 ms in 1 of 8 runs, 2026-12-07)
        f"itl_p99_vs_nginx{name}": Figure(f"{key}vs_nginx.added_token_p99_ms_minus_ms" + ("_best_round" if condition else ""),
                                          "ms", "lower", PROXY_ITL_FLOOR,
                                          f"per-token latency the proxy adds at p99 minus what nginx adds{beside}"
                                          + (", the better round" if condition else ""), absolute=True),
    }


BENCHMARKS = [
    Benchmark(
        "serve_hostile",
        ("serve_hostile.py", "--duration", "30", "--interval", "0.5", "--history", "150s"),
        {
            "peak_mb": Figure("with_hostile.peak_mb", "MB", "lower", 0.08,
                              "serve's peak RSS beside 100 live + 5 hostile targets (0.5 s cadence, 30 s)",
                              baseline="live_only_peak_mb"),
            "live_only_peak_mb": Figure("live_only.peak_mb", "MB", "lower", 0.08,
                                        "the same serve over the 100 live targets alone, same invocation"),
            "peak_ratio": Figure("peak_ratio", "x", "lower", 0.08, "peak with hostile / alone"),
        },
        "serve over 100 fake vLLM targets with and without five hostile ones, each its own serve process",
    ),
    Benchmark(
        "scrape_bound",
        ("scrape_bound.py", "--reps", "40"),
        {
            "time_ratio": Figure("time_ratio_best", "x", "lower", 0.30,
                                 "refusing a 200,000-series body / reading a normal vLLM scrape, best round of "
                                 "each (the least load-sensitive time)"),
            "memory_ratio": Figure("memory_ratio", "x", "lower", 0.10,
                                   "the same, tracemalloc peak of what the read allocated"),
        },
        "the series bound against a normal read, interleaved in one process",
    ),
    Benchmark(
        "parse",
        ("parse.py", "--reps", "100"),
        {
            "layout_speedup": Figure("layout_speedup_best", "x", "higher", 0.15,
                                     "prometheus_client's parse time / ours through the previous scrape's layout (best rounds)"),
            "fast_speedup": Figure("fast_speedup_best", "x", "higher", 0.15,
                                   "prometheus_client / ours asked for the dialects' families, warm (best rounds)"),
            "full_speedup": Figure("full_speedup_best", "x", "higher", 0.15, "prometheus_client / our full parse (best rounds)"),
        },
        "the exposition parser against prometheus_client on the real vLLM captures, interleaved",
    ),
    Benchmark(
        "proxy",
        ("proxy.py", "--streams", "100", "--tokens", "128", "--step-ms", "5", "--rounds", "2", "--seconds", "3",
         "--warmup", "1", "--hold", "0", "--competitor", "both"),
        {**proxy_figures(""), **proxy_figures("competitor")},
        "servewatch proxy beside nginx in front of one SSE upstream: 100 streams of 128 tokens, a token every 5 ms; "
        "each round quiet and beside a CPU-bound competitor at the same priority (stress-ng --cpu 1)",
        needs=("nginx", "stress-ng"),
    ),
    Benchmark(
        "fleet",
        ("fleet.py", "--targets", "200", "--interval", "2", "--duration", "16", "--stalled", "0"),
        {
            "cpu_ratio": Figure("cpu_ratio", "x", "lower", FLEET_CPU_FLOOR,
                                "serve's CPU per target-scrape / Prometheus's, the same 200 fake vLLM targets at 2 s"),
        },
        "serve and Prometheus scraping the same fake vLLM fleet, CPU from /proc over the same 16 s",
        needs=("prometheus",),
    ),
    Benchmark(
        "ring_memory",
        ("recorder_memory.py", "--scrape-bytes", "300"),
        {
            "bytes_per_scrape": Figure("ring_bytes_per_scrape", "B", "lower", 0.05,
                                       "what a busy vLLM scrape holds while a ring keeps it (tracemalloc; serve keeps "
                                       "300 a target at a 600 s history)", baseline="as_read_bytes_per_scrape"),
            "as_read_bytes_per_scrape": Figure("as_read_bytes_per_scrape", "B", "lower", 0.05,
                                               "the same scrapes with each histogram an object of its own (as the "
                                               "dialect gave them until 2026-12-07), same invocation"),
            "ratio": Figure("ring_ratio", "x", "lower", 0.05, "held in the ring / as read"),
        },
        "300 scrapes of fleet.py's moving vLLM 0.32 scrape read through serve's metrics source, held in a ring "
        "and as read",
    ),
]


# --- figures, bands and the comparison (pure: tests/test_benchmarks_runner.py) -----------------------

def pick(data: dict, key: str) -> float:
    for part in key.split("."):
        data = data[part]
    return float(data)


def spread(values: list[float]) -> float:
    """The relative spread of repeated runs: (max - min) / mean; 0 for a single run."""
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / abs(mean) if mean else 0.0


def summarize(benchmark: Benchmark, outputs: list[dict]) -> dict[str, dict]:
    """The figures of one benchmark from its runs' outputs, each with its runs, spread and band."""
    figures = {}
    for name, figure in benchmark.figures.items():
        runs = [float(f"{pick(output, figure.key):.4g}") for output in outputs]
        measured = max(runs) - min(runs) if figure.absolute else spread(runs)
        figures[f"{benchmark.name}.{name}"] = {
            "value": round(sum(runs) / len(runs), 4), "unit": figure.unit, "better": figure.better,
            "runs": runs, "spread": round(measured, 4), "floor": figure.floor,
            "band": round(max(measured, figure.floor), 4), "what": figure.what,
            **({"absolute": True} if figure.absolute else {}),
        }
    for name, figure in benchmark.figures.items():
        if figure.baseline:
            base = figures[f"{benchmark.name}.{figure.baseline}"]
            figures[f"{benchmark.name}.{name}"]["baseline"] = {
                "figure": f"{benchmark.name}.{figure.baseline}", "value": base["value"]}
    return figures


def worse_by(previous: dict, current: dict) -> float:
    """How much worse the current figure is than the previous, relative to the previous value, or in its
    unit for an absolute figure (negative: better)."""
    before, now = previous["value"], current["value"]
    if current.get("absolute"):
        return now - before if current["better"] == "lower" else before - now
    if before == 0:
        return 0.0
    change = (now - before) / abs(before)
    return change if current["better"] == "lower" else -change


def compare(previous: dict[str, dict], current: dict[str, dict]) -> list[dict]:
    """Each figure present in both, judged: regressed when worse by more than the larger band."""
    verdicts = []
    for name, now in current.items():
        before = previous.get(name)
        if before is None:
            verdicts.append({"figure": name, "status": "new"})
            continue
        band = max(before.get("band", 0.0), now.get("band", 0.0))
        worse = worse_by(before, now)
        status = "regressed" if worse > band else "improved" if worse < -band else "within"
        verdicts.append({"figure": name, "status": status, "previous": before["value"], "value": now["value"],
                         "worse_by": round(worse, 4), "band": round(band, 4)})
    return verdicts


# --- running ----------------------------------------------------------------------------------------

def run_once(benchmark: Benchmark) -> dict:
    if benchmark.run is not None:
        return benchmark.run()
    with tempfile.TemporaryDirectory(prefix="servewatch-bench-") as work:
        out = Path(work) / "figures.json"
        command = [sys.executable, str(HERE / benchmark.args[0]), *benchmark.args[1:], "--json", str(out)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"benchmark {benchmark.name} failed (exit {done.returncode}):\n"
                             f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return json.loads(out.read_text())


def machine() -> dict:
    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    return {"host": platform.node(), "cpu": model or platform.processor(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "system": platform.platform()}


def load_previous(path: Path, explicit: bool) -> dict:
    if not explicit:
        try:
            relative = path.resolve().relative_to(ROOT)
            shown = subprocess.run(["git", "show", f"HEAD:{relative}"], cwd=ROOT, capture_output=True, text=True)
            if shown.returncode == 0:
                return json.loads(shown.stdout)
        except (ValueError, OSError):
            pass
    return json.loads(path.read_text()) if path.exists() else {}


ENTRY = ("date", "machine", "command", "runs", "seconds", "figures")   # one machine's results


def baseline(previous: dict, cpu: str) -> dict:
    """The previous results measured on this CPU: the file's own where they came from it, else its entry under
    other_machines, else the file's own (another CPU's, said as such). CI's machine is drawn from more than one
    kind of VM: a band measured on one CPU held nothing on another (the proxy's CPU ratio 1.20x nginx's on an AMD
    EPYC VM, 1.11-1.71x on an Intel Xeon VM)."""
    if (previous.get("machine") or {}).get("cpu") == cpu:
        return previous
    return previous.get("other_machines", {}).get(cpu, previous)


def others_after(previous: dict, cpu: str) -> dict:
    """other_machines once this CPU's results are the file's own: the previous file's own results kept there
    when they came from another CPU, and this CPU's old entry gone."""
    others = {k: v for k, v in previous.get("other_machines", {}).items() if k != cpu}
    before = (previous.get("machine") or {}).get("cpu")
    if before and before != cpu and previous.get("figures"):
        others[before] = {k: previous[k] for k in ENTRY if k in previous}
    return dict(sorted(others.items()))


def main(argv: list[str] | None = None, benchmarks: list[Benchmark] | None = None) -> int:
    benchmarks = BENCHMARKS if benchmarks is None else benchmarks
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--runs", type=int, default=2, help="runs of each benchmark (default 2: the band is measured)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file written (default %(default)s)")
    parser.add_argument("--previous", type=Path, help="compare with this file (default: the committed --results)")
    parser.add_argument("--accept", action="store_true", help="write the results even on a regression")
    parser.add_argument("--no-write", action="store_true", help="compare only")
    parser.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).date().isoformat())
    parser.add_argument("--list", action="store_true", help="list the benchmarks and their figures")
    args = parser.parse_args(argv)
    by_name = {b.name: b for b in benchmarks}
    if args.list:
        for b in benchmarks:
            print(f"{b.name}: {b.about}")
            for name, figure in b.figures.items():
                floor = f"{figure.floor:g} {figure.unit}" if figure.absolute else f"{figure.floor:.0%}"
                print(f"  {name:20s} {figure.better} is better, floor {floor}: {figure.what}")
        return 0
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(by_name)}")
    selected = [by_name[n] for n in args.names] if args.names else benchmarks
    for benchmark in [b for b in selected if any(shutil.which(program) is None for program in b.needs)]:
        print(f"{benchmark.name}: skipped, its baseline needs {' and '.join(benchmark.needs)} on the PATH")
        selected.remove(benchmark)
    if not selected:
        print(f"nothing measured: every benchmark asked for was skipped ({args.results} left as it was)")
        return 1

    whole = load_previous(args.results, explicit=False) if args.previous is None \
        else load_previous(args.previous, explicit=True)
    here = machine()
    previous = baseline(whole, here["cpu"])
    figures: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    for benchmark in selected:
        started = time.monotonic()
        outputs = []
        for i in range(args.runs):
            print(f"{benchmark.name}: run {i + 1} of {args.runs}", flush=True)
            outputs.append(run_once(benchmark))
        figures.update(summarize(benchmark, outputs))
        seconds[benchmark.name] = round(time.monotonic() - started, 1)

    verdicts = compare(previous.get("figures", {}), figures)
    before = previous.get("machine") or {}
    if before and before.get("cpu") != here["cpu"]:
        print(f"note: no previous results from this CPU ({here['cpu']}): compared with another machine's "
              f"({before.get('host')}, {before.get('cpu')}, {previous.get('date')}); ratios and MB travel, but read "
              f"the bands with that in mind")
    elif before and before is not whole.get("machine"):
        print(f"note: compared with the results of this CPU ({here['cpu']}, {previous.get('date')}), kept beside "
              f"the last written ({(whole.get('machine') or {}).get('cpu')}, {whole.get('date')})")
    print(f"{'figure':34} {'previous':>10} {'now':>10} {'worse by':>9} {'band':>6}  verdict")
    def amount(value: float, name: str, width: int) -> str:    # a share, or the unit of an absolute figure
        now = figures[name]
        return f"{value:{width - 3}.2f} {now['unit']:2}" if now.get("absolute") else f"{value:{width}.1%}"

    for v in verdicts:
        if v["status"] == "new":
            now = figures[v["figure"]]
            print(f"{v['figure']:34} {'-':>10} {now['value']:10.4g} {'':>9} {amount(now['band'], v['figure'], 6)}  new")
        else:
            print(f"{v['figure']:34} {v['previous']:10.4g} {v['value']:10.4g} {amount(v['worse_by'], v['figure'], 9)} "
                  f"{amount(v['band'], v['figure'], 6)}  {v['status']}")
    regressed = [v for v in verdicts if v["status"] == "regressed"]

    if not args.no_write and (not regressed or args.accept):
        kept = {name: f for name, f in previous.get("figures", {}).items()
                if name.split(".", 1)[0] not in {b.name for b in selected}}
        document = {
            "date": args.date,
            "machine": here,
            "command": "benchmarks/run.py" + "".join(f" {n}" for n in args.names),
            "runs": args.runs,
            "seconds": {**previous.get("seconds", {}), **seconds},
            "figures": dict(sorted({**kept, **figures}.items())),
        }
        others = others_after(whole, here["cpu"])
        if others:
            document["other_machines"] = others
        args.results.write_text(json.dumps(document, indent=1) + "\n")
        print(f"written: {args.results}")
    if regressed:
        print(f"REGRESSION: {', '.join(v['figure'] for v in regressed)} worse than the previous results beyond "
              f"the noise band" + ("" if args.accept else f" ({args.results} left as it was)"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
