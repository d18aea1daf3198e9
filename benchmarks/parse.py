"""Parse speed against prometheus_client, and scrape text -> canonical state, on the real vLLM captures.

Run: .venv/bin/python benchmarks/parse.py [--reps N]
Every contender runs on the same text, interleaved round by round (so machine load hits all of them
alike); the figures are medians of time.perf_counter() over the rounds, with the best round (min, the
least load-sensitive figure on a shared machine) alongside.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servewatch.exposition.parser import parse  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "metrics"
VLLM_FIXTURES = ("vllm_idle.prom", "vllm_kv_pressure_t0.prom", "vllm_kv_pressure_t1.prom")

# Used only when servewatch.dialects.wanted_families() is unavailable.
FALLBACK_FAMILIES = frozenset({
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason",
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cache_config_info",
    "vllm:engine_sleep_state", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:prompt_tokens_by_source_total", "vllm:num_preemptions_total", "vllm:request_success_total",
    "vllm:iteration_tokens_total", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds", "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
    "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:gen_throughput",
})


def wanted_families() -> tuple[frozenset[str], str]:
    try:
        from servewatch.dialects import wanted_families as from_dialects
    except ImportError:
        return FALLBACK_FAMILIES, "the benchmark's own list"
    return frozenset(from_dialects()), "servewatch.dialects.wanted_families()"


def read_scrape_or_none():
    try:
        from servewatch.dialects import read_scrape
    except ImportError as error:
        print(f"note: servewatch.dialects.read_scrape is not importable ({error}); skipping text -> state")
        return None
    return read_scrape


def interleaved_times(contenders: dict[str, callable], reps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(reps):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--reps", type=int, default=200, help="rounds per fixture (default 200)")
    args = cli.parse_args()

    families, source = wanted_families()
    read_scrape = read_scrape_or_none()
    print(f"families asked for: {len(families)} (from {source}); {args.reps} interleaved rounds per fixture; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'fixture':26} {'prometheus_client':>17} {'parse(families=)':>23} {'parse()':>22} {'text->state':>12}")
    fast_ratios: dict[str, list[float]] = {"median": [], "best": []}
    full_ratios: dict[str, list[float]] = {"median": [], "best": []}
    state_times: dict[str, list[float]] = {"median": [], "best": []}
    for fixture in VLLM_FIXTURES:
        text = (FIXTURES / fixture).read_text(encoding="utf-8")
        contenders = {
            "prometheus_client": lambda: list(text_string_to_metric_families(text)),
            "fast": lambda: parse(text, families),
            "full": lambda: parse(text),
        }
        if read_scrape is not None:
            contenders["state"] = lambda: read_scrape(text)
        times = interleaved_times(contenders, args.reps)
        for statistic, reduce in (("median", statistics.median), ("best", min)):
            figures = {name: reduce(values) for name, values in times.items()}
            fast_ratios[statistic].append(figures["prometheus_client"] / figures["fast"])
            full_ratios[statistic].append(figures["prometheus_client"] / figures["full"])
            state = "skipped"
            if "state" in figures:
                state_times[statistic].append(figures["state"])
                state = f"{figures['state'] * 1e3:.3f} ms"
            label = fixture if statistic == "median" else "  (best round)"
            print(f"{label:26} {figures['prometheus_client'] * 1e3:14.3f} ms "
                  f"{figures['fast'] * 1e3:10.3f} ms {fast_ratios[statistic][-1]:6.1f}x "
                  f"{figures['full'] * 1e3:9.3f} ms {full_ratios[statistic][-1]:6.1f}x {state:>12}")
    for statistic in ("median", "best"):
        print(f"[{statistic}] speed ratio vs prometheus_client: parse(families=…) "
              f"{statistics.median(fast_ratios[statistic]):.1f}x (target >= 10x), full parse() "
              f"{statistics.median(full_ratios[statistic]):.1f}x (target > 1x)"
              + (f"; scrape text -> canonical state {statistics.median(state_times[statistic]) * 1e3:.3f} ms "
                 f"(target <= 2 ms)" if state_times[statistic] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
