"""One request's state inside the simulated engine. Read-only to callers (it is the submit handle)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

WAITING = "waiting"
RUNNING = "running"
FINISHED = "finished"

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_ABORT = "abort"
FINISH_ERROR = "error"


@dataclass(eq=False)
class Request:
    rid: int
    arrival: float
    prompt_len: int
    max_tokens: int
    ignore_eos: bool
    eos_at: int | None                    # output length at which the model emits EOS (None: never)
    block_hashes: list[Hashable]          # one per full prompt block, chained
    stream_seed: int
    is_streaming: bool = True
    count_in_metrics: bool = True         # False for SGLang's internal health probe
    status: str = WAITING
    num_computed: int = 0
    output_len: int = 0
    blocks: list[int] = field(default_factory=list)
    num_cached_blocks: int = 0            # prompt blocks already published to the prefix cache
    prefix_hit_tokens: int = 0            # cached tokens found at first admission
    external_tokens: int = 0              # prompt tokens whose KV came by transfer (a P/D decode), not computed
    preemptions: int = 0
    queued_ts: float = 0.0
    scheduled_ts: float | None = None     # first scheduling only (preemptions ignored, as in vLLM)
    first_token_ts: float | None = None
    last_token_ts: float | None = None
    finished_ts: float | None = None
    finish_reason: str | None = None
    token_times: list[float] = field(default_factory=list)
    listener: Callable[[Request], None] | None = None
    stop_at: int = field(init=False)      # output length at which it finishes (EOS or max_tokens)

    def __post_init__(self) -> None:
        eos = self.eos_at if self.eos_at is not None and not self.ignore_eos else self.max_tokens
        self.stop_at = min(self.max_tokens, eos)

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.output_len

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    def notify(self) -> None:
        if self.listener is not None:
            self.listener(self)
