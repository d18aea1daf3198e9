"""The series an alert rule or a dashboard reads, per engine and metric-name generation.

Names and bucket edges come from the dialect modules; what is added here is which of them a rule uses
for each signal (availability, request success, latency, queue, slots, KV, preemption), the flag that
changes a histogram's edges, and which generations lack a signal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.dialects import sglang, vllm

# How to add a bucket edge (engine flags; vLLM 0.33 `--custom-histogram-buckets` replaces one whole
# bucket family, SGLang 0.5.23 has one flag per latency histogram).
_VLLM_BUCKET_FLAG = "--custom-histogram-buckets '{{\"{family}\": [...]}}'"


@dataclass(frozen=True)
class LatencyHistogram:
    kind: str                   # ttft | tpot | itl | e2e | queue
    name: str                   # the family name, without _bucket/_count/_sum
    edges: tuple[float, ...]
    edge_flag: str              # the engine flag that sets these edges


@dataclass(frozen=True)
class RatioSeries:
    """A counter split into bad and all events by one label (an SLI's numerator and denominator)."""

    counter: str                # exposed sample name (…_total)
    bad: str                    # label matchers selecting the bad events, e.g. status="5xx"
    total: str                  # label matchers selecting all counted events ('' for every series)
    bad_counter: str = ""       # when bad events live in another counter (SGLang's aborted requests)
    good_labels: tuple[tuple[str, str], ...] = ()   # what one good / one bad event's series carries
    bad_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EngineSeries:
    dialect: str
    generation: str
    running: str
    waiting: str
    kv_usage: str
    preemptions: str            # a counter (or cumulative gauge) of preempted / retracted requests
    preemptions_lazy: bool      # the engine creates the series only at the first preemption
    availability: RatioSeries | None
    success: RatioSeries | None
    histograms: dict[str, LatencyHistogram] = field(default_factory=dict)
    slot_limit_flag: str = ""
    default_slot_limit: int | None = None
    engine_labels: tuple[str, ...] = ()   # labels the engine adds (never on its HTTP counters)

    def histogram(self, kind: str) -> LatencyHistogram | None:
        return self.histograms.get(kind)


GENERATIONS = {
    "vllm": ("vllm-0.32", "vllm-0.11", "vllm-legacy"),
    "sglang": ("sglang-0.5.23",),
}
GENERATION_HELP = ("vllm-0.32 (current names), vllm-0.11, vllm-legacy (before 0.11: gpu_cache_usage_perc, "
                   "time_per_output_token_seconds), sglang-0.5.23")


def default_generation(dialect: str) -> str:
    return GENERATIONS[dialect][0]


def _vllm_hist(kind: str, name: str, family: str) -> LatencyHistogram:
    return LatencyHistogram(kind, name, tuple(float(e) for e in vllm.BUCKETS[family]),
                            _VLLM_BUCKET_FLAG.format(family=family))


def _vllm(generation: str) -> EngineSeries:
    legacy = generation == "vllm-legacy"
    itl = vllm.HISTOGRAMS["itl"][1 if legacy else 0]
    return EngineSeries(
        dialect="vllm", generation=generation,
        running=vllm.RUNNING, waiting=vllm.WAITING,
        kv_usage=vllm.KV_USAGE_LEGACY if legacy else vllm.KV_USAGE,
        preemptions=vllm.PREEMPTIONS, preemptions_lazy=False,
        # prometheus-fastapi-instrumentator's counter on vLLM's API server: status is the class (2xx…5xx).
        availability=RatioSeries(
            "http_requests_total", bad='status="5xx"', total="",
            good_labels=(("handler", "/v1/completions"), ("method", "POST"), ("status", "2xx")),
            bad_labels=(("handler", "/v1/completions"), ("method", "POST"), ("status", "5xx"))),
        success=RatioSeries(vllm.REQUEST_SUCCESS, bad='finished_reason=~"abort|error"', total="",
                            good_labels=(("finished_reason", "stop"),), bad_labels=(("finished_reason", "error"),)),
        histograms={
            "ttft": _vllm_hist("ttft", vllm.HISTOGRAMS["ttft"][0], "time_to_first_token"),
            "tpot": _vllm_hist("tpot", vllm.HISTOGRAMS["tpot"][0], "inter_token_latency"),
            "itl": _vllm_hist("itl", itl, "inter_token_latency"),
            "e2e": _vllm_hist("e2e", vllm.HISTOGRAMS["e2e"][0], "request_latency"),
            "queue": _vllm_hist("queue", vllm.HISTOGRAMS["queue"][0], "request_latency"),
        },
        slot_limit_flag=vllm.SLOT_LIMIT_FLAG, default_slot_limit=vllm.DEFAULT_MAX_NUM_SEQS,
        engine_labels=vllm.IDENTITY_LABELS,
    )


def _sglang_hist(kind: str, name: str, edges, flag: str) -> LatencyHistogram:
    return LatencyHistogram(kind, name, tuple(float(e) for e in edges), flag)


def _sglang(generation: str) -> EngineSeries:
    b = sglang.BUCKETS
    return EngineSeries(
        dialect="sglang", generation=generation,
        running=sglang.RUNNING, waiting=sglang.WAITING, kv_usage=sglang.TOKEN_USAGE,
        preemptions=sglang.RETRACTED_REQUESTS, preemptions_lazy=True,
        # SGLang's HTTP middleware counts every route with its exact status code; probes and scrapes
        # are not user traffic.
        availability=RatioSeries(
            "sglang:http_responses_total", bad='status_code=~"5.."',
            total='endpoint!~"/metrics|/health|/health_generate|/ready|/ping"',
            good_labels=(("endpoint", "/v1/completions"), ("method", "POST"), ("status_code", "200")),
            bad_labels=(("endpoint", "/v1/completions"), ("method", "POST"), ("status_code", "503"))),
        success=RatioSeries(sglang.NUM_REQUESTS, bad="", total="", bad_counter=sglang.NUM_ABORTED),
        histograms={
            "ttft": _sglang_hist("ttft", sglang.HISTOGRAMS["ttft"][0], b["time_to_first_token"],
                                 "--bucket-time-to-first-token"),
            "itl": _sglang_hist("itl", sglang.HISTOGRAMS["itl"][0], b["inter_token_latency"],
                                "--bucket-inter-token-latency"),
            "tpot": _sglang_hist("tpot", sglang.HISTOGRAMS["tpot"][0], b["inter_token_latency"],
                                 "--bucket-inter-token-latency"),
            "e2e": _sglang_hist("e2e", sglang.HISTOGRAMS["e2e"][0], b["e2e_request_latency"],
                                "--bucket-e2e-request-latency"),
            "queue": _sglang_hist("queue", sglang.HISTOGRAMS["queue"][0], b["queue_time"],
                                  "(none: fixed in SGLang's metrics collector)"),
        },
        slot_limit_flag=sglang.SLOT_LIMIT_FLAG, default_slot_limit=None,
        engine_labels=sglang.IDENTITY_LABELS,
    )


def engine_series(dialect: str, generation: str | None = None) -> EngineSeries:
    """The series for `dialect` at `generation` (default: the current names). KeyError on an unknown pair."""
    generation = generation or default_generation(dialect)
    if generation not in GENERATIONS.get(dialect, ()):
        raise KeyError(generation)
    return _vllm(generation) if dialect == "vllm" else _sglang(generation)
