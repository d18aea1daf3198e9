"""One canonical view of an engine's state, produced by a dialect from one scrape."""

from __future__ import annotations

from array import array
from itertools import repeat
from collections.abc import Iterator, Mapping, Sequence
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


class PackedHistograms(Mapping):
    """A scrape's histograms of one engine, as `EngineState.histograms` reads them (a mapping of kind to
    Histogram), held as one `array("d")` of every kind's buckets, count and sum: a recorder keeps hundreds of
    scrapes, and the seven latency histograms of a vLLM scrape held as objects took 2.5 kB of its 4.4 (a
    Histogram, its array and two floats each). Each Histogram is made again when asked for, equal to the one
    packed (`pack_histograms` packs only what it gives back exactly). The layout (each kind's edges and place)
    is one object shared by every scrape of the same histograms."""

    __slots__ = ("_layout", "_values")

    def __init__(self, layout: dict[str, tuple[tuple[float, ...], int, int]], values: array):
        self._layout = layout      # kind -> (edges, start of its buckets in values, how many buckets)
        self._values = values      # each kind's buckets, then its count, then its sum

    def __getitem__(self, kind: str) -> Histogram:
        edges, start, n = self._layout[kind]
        values = self._values
        end = start + n
        return Histogram(edges, values[start:end], values[end], values[end + 1])

    def get(self, kind, default=None):
        return self[kind] if kind in self._layout else default

    def __contains__(self, kind) -> bool:
        return kind in self._layout

    def __iter__(self) -> Iterator[str]:
        return iter(self._layout)

    def __len__(self) -> int:
        return len(self._layout)

    def __repr__(self) -> str:
        return f"PackedHistograms({dict(self.items())!r})"


_LAYOUTS: dict[tuple, tuple[dict[str, tuple[tuple[float, ...], int, int]], array]] = {}
_LAYOUTS_KEPT = 1024


def pack_histograms(histograms: Mapping[str, Histogram]) -> Mapping[str, Histogram]:
    """`histograms` packed (PackedHistograms), or as given where packing would not give back the same values:
    a histogram whose buckets are not an `array("d")`, or whose count or sum is not a float (an int would come
    back a float), or one that is not a plain Histogram; and an empty mapping."""
    if not histograms or type(histograms) is not dict:
        return histograms
    key = []
    for kind, h in histograms.items():
        cumulative = h.cumulative
        if (type(h) is not Histogram or type(cumulative) is not array or cumulative.typecode != "d"
                or type(h.count) is not float or type(h.sum) is not float):
            return histograms
        key.append((kind, id(h.edges), len(cumulative)))
    key = tuple(key)
    found = _LAYOUTS.get(key)       # (a kept layout holds its edges: no other tuple has their id meanwhile)
    if found is None:
        if len(_LAYOUTS) >= _LAYOUTS_KEPT:
            _LAYOUTS.clear()
        layout, start = {}, 0
        for kind, h in histograms.items():
            layout[kind] = (h.edges, start, len(h.cumulative))
            start += len(h.cumulative) + 2
        found = _LAYOUTS[key] = (layout, array("d", repeat(0.0, start)))
    layout, blank = found
    values = blank[:]                # a copy of the right size, no room to spare
    for kind, h in histograms.items():
        _, start, end = layout[kind]
        end += start
        values[start:end] = h.cumulative
        values[end] = h.count
        values[end + 1] = h.sum
    return PackedHistograms(layout, values)


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
