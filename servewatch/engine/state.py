"""One canonical view of an engine's state, produced by a dialect from one scrape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Canonical histogram keys. A dialect maps its families onto these.
HISTOGRAM_KINDS = ("ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode")


@dataclass(frozen=True, slots=True, eq=False)
class Histogram:
    """A cumulative Prometheus histogram for one label set.

    `edges` are the finite upper bounds, ascending; `cumulative[i]` is the count of observations
    <= edges[i]; `count` includes the +Inf bucket. A scrape's histograms hold `cumulative` as an
    `array("d")` (8 bytes a bucket: a recorder keeps hundreds of scrapes); any float sequence will do.
    """

    edges: tuple[float, ...]
    cumulative: Sequence[float]
    count: float
    sum: float

    def _values(self) -> tuple:
        return (self.edges, tuple(self.cumulative), self.count, self.sum)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self):
        return hash(self._values())


@dataclass(slots=True)
class Counters:
    """Monotonic counters (None when the engine does not expose them)."""

    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None          # vLLM preemptions / SGLang retractions
    steps: float | None = None                # engine iterations (vllm:iteration_tokens_total_count)
    finished: dict[str, float] = field(default_factory=dict)  # by finish reason
    # HTTP responses of the API server's request handlers (its health, metrics and model-list endpoints
    # left out) by status: a class such as "4xx" where the engine counts classes, else the code ("404").
    # Server-wide: every engine of one scrape carries the same counts.
    responses: dict[str, float] = field(default_factory=dict)
    # Request bodies those handlers received: total bytes and how many (None where not exported).
    request_bytes: float | None = None
    request_bytes_count: float | None = None
    # 2xx responses of the handlers that run the engine (completions, chat), where the engine counts its
    # finished requests without those whose client hung up (vLLM): the difference is the hang-ups.
    answered: float | None = None
    # prompt_tokens and generation_tokens are the model's, counted where every rank's requests pass (SGLang's
    # tokenizer process at DP > 1): each engine of the model carries the same values, so they tell nothing of
    # this engine's own progress; `steps` does.
    tokens_shared: bool = False

    def progress(self) -> tuple[float | None, float | None, float | None]:
        """The counters whose movement means this engine did work: steps, generation and prompt tokens. Tokens
        counted for the whole model (SGLang at DP > 1) move while this rank is stopped, so where the engine also
        counts its own steps, only those tell (a stopped DP rank 1 read as moving for 4 s on 2026-12-05)."""
        if self.tokens_shared and self.steps is not None:
            return (self.steps, None, None)
        return (self.steps, self.generation_tokens, self.prompt_tokens)


@dataclass(slots=True)
class KvTransfer:
    """An engine's side of a KV connector (prefill/decode disaggregation); EngineState.kv_transfer is None when
    the engine has none. Gauges are the scrape's values, counters are cumulative; None where not exported."""

    role: str | None = None                    # "prefill" | "decode" | None (when the series cannot tell)
    waiting_for_kv: float | None = None        # decode requests waiting for remote KV (vLLM waiting_by_reason
                                               # "deferred"; SGLang num_decode_prealloc+transfer queue)
    fetch_in_progress: float | None = None     # vLLM num_requests_kv_fetch_by_stage{in_progress}
    prefill_queue: float | None = None         # SGLang num_prefill_bootstrap+inflight queue
    external_prompt_tokens: float | None = None  # counter: prompt tokens that came by KV transfer
    local_prompt_tokens: float | None = None     # counter: prompt tokens computed locally
    transfers: float | None = None               # counter: finished transfers (nixl_xfer_time_seconds_count,
                                                 # SGLang kv_transfer_latency_ms count)
    bytes_transferred: float | None = None       # counter
    failed_transfers: float | None = None        # counter (vLLM nixl_num_failed_transfers_total,
                                                 # SGLang num_transfer_failed_reqs_total)
    failed_notifications: float | None = None    # counter (nixl_num_failed_notifications_total)
    bootstrap_failed: float | None = None        # counter (SGLang num_bootstrap_failed_reqs_total)
    expired: float | None = None                 # counter (nixl_num_kv_expired_reqs_total)


@dataclass(slots=True)
class EngineState:
    """One engine (model x engine index / rank) as seen in one scrape."""

    dialect: str                               # a registered dialect's name: "vllm", "sglang", ...
    naming: str                            # metric naming (which names the engine exports), e.g. "vllm-0.32", "vllm-0.11", "sglang-0.5.23"
    labels: dict[str, str]                     # identifying labels (model_name, engine / tp_rank, ...)
    running: float | None = None
    waiting: float | None = None
    waiting_by_reason: dict[str, float] = field(default_factory=dict)
    slot_limit: int | None = None              # max_num_seqs / max_running_requests when knowable
    kv_usage: float | None = None              # fraction 0..1
    kv_used_tokens: float | None = None
    kv_total_tokens: float | None = None
    counters: Counters = field(default_factory=Counters)
    histograms: dict[str, Histogram] = field(default_factory=dict)  # keys from HISTOGRAM_KINDS
    kv_transfer: KvTransfer | None = None      # the KV connector's side, None when the engine has none
