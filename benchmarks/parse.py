"""Parse speed against prometheus_client, and scrape text -> canonical state, on the real vLLM captures.

Run: .venv/bin/python benchmarks/parse.py [--reps N]
Contenders: prometheus_client's parser; ours asked for the dialects' families (memos warm or cold), in
full, and through the layout of the same server's previous scrape (`exposition.layout`); then scrape
text -> canonical engine states by each route.
Every contender runs on the same text, interleaved round by round (so machine load hits all of them
alike); the figures are medians of time.perf_counter() over the rounds, with the best round (min, the
least load-sensitive figure on a shared machine) alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servewatch.exposition.layout import RepeatingParser  # noqa: E402
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


def read_families(families):
    from servewatch.dialects import read_families as read

    return read(families)


def read_scrape_or_none():
    try:
        from servewatch.dialects import read_scrape
    except ImportError as error:
        print(f"note: servewatch.dialects.read_scrape is not importable ({error}); skipping text -> state")
        return None
    return read_scrape


def interleaved_times(contenders: dict[str, tuple], reps: int) -> dict[str, list[float]]:
    """contenders: name -> (setup, run); setup runs untimed before each timed run."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(reps):
        for name, (setup, run) in contenders.items():
            setup()
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def forget_memos() -> None:
    try:
        from servewatch.exposition.parser import forget_memos as forget
    except ImportError:
        return
    forget()


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--reps", type=int, default=200, help="rounds per fixture (default 200)")
    cli.add_argument("--json", type=Path, help="also write the median speed ratios vs prometheus_client here")
    args = cli.parse_args()

    families, source = wanted_families()
    read_scrape = read_scrape_or_none()
    print(f"families asked for: {len(families)} (from {source}); {args.reps} interleaved rounds per fixture; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("warm: the parser remembers the sample heads (name + labels) of an earlier scrape of the same server, "
          "as in `watch` after its first scrape; cold: forgotten before the round (a first scrape)")
    print("layout: the scrape read through the layout of the same server's previous scrape (what `watch` and "
          "`serve` do from the second scrape on; the full parse when the layout changed)")
    columns = ("prometheus_client", "fast", "fast_cold", "full", "layout", "state", "state_cold", "state_layout")
    print(f"{'fixture':26} {'prometheus_client':>17} {'families= warm':>21} {'families= cold':>21} "
          f"{'parse() warm':>21} {'layout':>21} {'state warm':>11} {'state cold':>11} {'state layout':>12}")
    figures_by: dict[str, dict[str, list[float]]] = {"median": {c: [] for c in columns},
                                                     "best": {c: [] for c in columns}}
    nothing = lambda: None  # noqa: E731
    for fixture in VLLM_FIXTURES:
        text = (FIXTURES / fixture).read_text(encoding="utf-8")
        contenders = {
            "prometheus_client": (nothing, lambda: list(text_string_to_metric_families(text))),
            "fast": (nothing, lambda: parse(text, families)),
            "fast_cold": (forget_memos, lambda: parse(text, families)),
            "full": (nothing, lambda: parse(text)),
        }
        repeating = RepeatingParser()
        repeating.parse(text, families)
        contenders["layout"] = (nothing, lambda: repeating.parse(text, families))
        if read_scrape is not None:
            contenders["state"] = (nothing, lambda: read_scrape(text))
            contenders["state_cold"] = (forget_memos, lambda: read_scrape(text))
            contenders["state_layout"] = (nothing, lambda: read_families(repeating.parse(text, families)))
        times = interleaved_times(contenders, args.reps)
        for statistic, reduce in (("median", statistics.median), ("best", min)):
            figures = {name: reduce(values) for name, values in times.items()}
            for name, value in figures.items():
                figures_by[statistic][name].append(value)
            base = figures["prometheus_client"]

            def cell(name: str) -> str:
                if name not in figures:
                    return f"{'skipped':>21}"
                return f"{figures[name] * 1e3:10.3f} ms {base / figures[name]:6.1f}x"

            def state(name: str) -> str:
                return f"{figures[name] * 1e3:8.3f} ms" if name in figures else f"{'skipped':>11}"

            label = fixture if statistic == "median" else "  (best round)"
            print(f"{label:26} {base * 1e3:14.3f} ms {cell('fast')} {cell('fast_cold')} {cell('full')} "
                  f"{cell('layout')} {state('state')} {state('state_cold')} {state('state_layout'):>12}")
    for statistic in ("median", "best"):
        got = {name: values for name, values in figures_by[statistic].items() if values}
        ratio = {name: statistics.median(b / v for b, v in zip(got["prometheus_client"], values))
                 for name, values in got.items()}
        line = (f"[{statistic}] speed ratio vs prometheus_client: parse(families=…) {ratio['fast']:.1f}x warm, "
                f"{ratio['fast_cold']:.1f}x cold (target >= 10x); through the layout {ratio['layout']:.1f}x; "
                f"full parse() {ratio['full']:.1f}x (target > 1x)")
        if "state" in got:
            line += (f"; scrape text -> canonical state {statistics.median(got['state']) * 1e3:.3f} ms warm, "
                     f"{statistics.median(got['state_cold']) * 1e3:.3f} ms cold, "
                     f"{statistics.median(got['state_layout']) * 1e3:.3f} ms through the layout (target <= 2 ms)")
        print(line)
        if args.json:
            written = json.loads(args.json.read_text()) if statistic == "best" else {}
            suffix = "_speedup" if statistic == "median" else "_speedup_best"
            written.update({name + suffix: value for name, value in ratio.items()
                            if name in ("fast", "fast_cold", "full", "layout")})
            args.json.write_text(json.dumps(written) + "\n")
    if read_scrape is not None:
        consecutive_scrapes(read_scrape, args.reps)
    return 0


def consecutive_scrapes(read_scrape, reps: int) -> None:
    """Text -> state as `watch` meets it: one scrape after another (the three captures in turn), with
    nothing else running in between; the interleaved table above runs prometheus_client's parse between
    our calls, whose garbage and cache traffic land on the next contender."""
    texts = [(FIXTURES / fixture).read_text(encoding="utf-8") for fixture in VLLM_FIXTURES]
    for label, setup in (("warm", lambda: None), ("cold", forget_memos)):
        times = []
        for i in range(3 * reps):
            setup()
            start = time.perf_counter()
            read_scrape(texts[i % 3])
            times.append(time.perf_counter() - start)
        times.sort()
        p10, p50, p90 = (times[int(q * (len(times) - 1))] * 1e3 for q in (0.1, 0.5, 0.9))
        print(f"scrape text -> canonical state, {len(times)} consecutive scrapes ({label}): p10 {p10:.3f} ms, "
              f"p50 {p50:.3f} ms, p90 {p90:.3f} ms (target <= 2 ms)")


if __name__ == "__main__":
    sys.exit(main())
