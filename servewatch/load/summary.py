"""Run summary: percentiles, goodput, error counts and the signature row. Pure functions.

Latency statistics are over successful requests only; every failed request is counted in
`errors` by class and in `requests`, never averaged into latencies.
Percentiles use linear interpolation between closest ranks (numpy's default, R type 7).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from servewatch.load.itl import ITL_RULE
from servewatch.load.records import ERROR_CLASSES, RequestRecord
from servewatch.load.scenarios import Goodput, LoadConfig


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """q in [0, 100] over an ascending sequence; None when empty."""
    n = len(sorted_values)
    if n == 0:
        return None
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def stats(values: Iterable[float]) -> dict:
    data = sorted(values)
    if not data:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    return {"count": len(data), "mean": math.fsum(data) / len(data), "p50": percentile(data, 50),
            "p90": percentile(data, 90), "p99": percentile(data, 99), "max": data[-1]}


def is_good(rec: RequestRecord, slo: Goodput) -> bool:
    """A request is good iff it succeeded and meets every SLO given. TPOT of a 1-token answer is 0."""
    if not rec.ok:
        return False
    if slo.ttft_s is not None and (rec.ttft_s is None or rec.ttft_s > slo.ttft_s):
        return False
    if slo.tpot_s is not None and (rec.tpot_s or 0.0) > slo.tpot_s:
        return False
    if slo.e2e_s is not None and (rec.e2e_s is None or rec.e2e_s > slo.e2e_s):
        return False
    return True


def summarize(config: LoadConfig, records: Sequence[RequestRecord], *, wall_s: float,
              prompt_source: str, prompts_exact: bool, server: dict | None = None,
              client_name: str = "http1") -> dict:
    ok = [r for r in records if r.ok]
    errors = {name: 0 for name in ERROR_CLASSES}
    for r in records:
        if r.error is not None:
            errors[r.error] = errors.get(r.error, 0) + 1
    sent_times = sorted(r.sent for r in records if r.sent is not None)
    achieved = None
    if len(sent_times) >= 2 and sent_times[-1] > sent_times[0]:
        achieved = (len(sent_times) - 1) / (sent_times[-1] - sent_times[0])
    delays = [r.schedule_delay_s for r in records if r.sent is not None]
    delay_stats = stats(delays)
    itl_tokens: list[float] = []
    itl_chunks: list[float] = []
    for r in ok:
        itl_tokens.extend(r.itl_token_s)
        itl_chunks.extend(r.itl_chunk_s)
    goodput = goodput_fraction = None
    if config.goodput is not None:
        good = sum(1 for r in records if is_good(r, config.goodput))
        goodput_fraction = good / len(records) if records else None
        goodput = good / wall_s if wall_s > 0 else None
    server_tokens = bool(ok) and all(r.token_source == "server" for r in ok)
    tokens_in = sum(r.input_tokens or 0 for r in ok)
    tokens_out = sum(r.output_tokens or 0 for r in ok)
    client_view = _client_view(ok, tokens_in, tokens_out)
    return {
        "scenario": config.scenario,
        "api": config.api,
        "client": client_name,
        "arrival": None if config.concurrency else config.arrival,
        "concurrency": config.concurrency,
        "seed": config.seed,
        "requests": len(records),
        "ok": len(ok),
        "errors": errors,
        "requested_rate": config.rate,
        "achieved_rate": achieved,
        "wall_s": wall_s,
        "schedule_delay_s": {"p50": delay_stats["p50"], "p99": delay_stats["p99"],
                             "max": delay_stats["max"], "mean": delay_stats["mean"]},
        "ttft_s": stats(r.ttft_s for r in ok if r.ttft_s is not None),
        "itl_s": stats(itl_tokens),
        "itl_chunk_s": stats(itl_chunks),
        "itl_rule": ITL_RULE,
        "itl_exact": all(r.itl_exact is not False for r in ok),
        "tpot_s": stats(r.tpot_s for r in ok if r.tpot_s is not None),
        "e2e_s": stats(r.e2e_s for r in ok if r.e2e_s is not None),
        "goodput": goodput,
        "goodput_fraction": goodput_fraction,
        "goodput_slo": None if config.goodput is None else config.goodput.to_json(),
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "token_count_source": "server" if server_tokens else prompt_source,
        "prompt_token_source": prompt_source,
        "prompts_exact": prompts_exact,
        "output_tokens_requested": config.output_tokens,
        "prompt_tokens_requested": config.prompt_tokens,
        "signature": signature(client_view, server),
        "server_view": server,
    }


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _client_view(ok: Sequence[RequestRecord], tokens_in: int, tokens_out: int) -> dict:
    n = len(ok)
    itl = [x for r in ok for x in r.itl_token_s]
    gen = [r.e2e_s - r.ttft_s for r in ok if r.e2e_s is not None and r.ttft_s is not None]
    return {
        "tokens_in": tokens_in / n if n else None,
        "tokens_out": tokens_out / n if n else None,
        "ttft_s": _mean([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_s": _mean(itl),
        "generation_s": _mean(gen),
        "e2e_s": _mean([r.e2e_s for r in ok if r.e2e_s is not None]),
    }


SIGNATURE_FIELDS = ("tokens_in", "tokens_out", "queue_wait_s", "prefill_s", "ttft_s", "itl_s",
                    "generation_s", "e2e_s", "max_running", "max_waiting", "max_kv")


def signature(client: dict, server: dict | None) -> dict:
    """The row that told four workloads apart on an RTX 3060 serving Qwen2.5-7B-AWQ: tokens in and out,
    queue wait, prefill, TTFT, time between tokens, generation, E2E, and the maxima of running, waiting and
    KV use. Server values (means of histogram deltas over the run, maxima of the
    sampled gauges) are preferred; the client's means fill what the server does not expose.
    `sources` says where each value came from."""
    server = server or {}
    means = server.get("means") or {}
    row: dict = {}
    sources: dict = {}

    def put(name: str, server_value, client_value=None):
        if server_value is not None:
            row[name], sources[name] = server_value, "server"
        elif client_value is not None:
            row[name], sources[name] = client_value, "client"
        else:
            row[name], sources[name] = None, None

    put("tokens_in", means.get("tokens_in"), client.get("tokens_in"))
    put("tokens_out", means.get("tokens_out"), client.get("tokens_out"))
    put("queue_wait_s", means.get("queue"))
    put("prefill_s", means.get("prefill"))
    put("ttft_s", means.get("ttft"), client.get("ttft_s"))
    put("itl_s", means.get("itl"), client.get("itl_s"))
    put("generation_s", means.get("decode"), client.get("generation_s"))
    put("e2e_s", means.get("e2e"), client.get("e2e_s"))
    put("max_running", server.get("max_running"))
    put("max_waiting", server.get("max_waiting"))
    put("max_kv", server.get("max_kv"))
    row["sources"] = sources
    row["client"] = client
    return row
