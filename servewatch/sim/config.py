"""The simulator's configuration: one plain dataclass, built from the CLI or directly by tests."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servewatch.sim.behaviour import behaviour_for, engine_names
from servewatch.sim.profiles import DEFAULT_PROFILE, Profile, get_profile


PD_ROLES = (None, "prefill", "decode")


@dataclass
class SimConfig:
    dialect: str = "vllm"
    profile: str = DEFAULT_PROFILE
    model_name: str | None = None          # default: the profile's model
    max_num_seqs: int = 256
    kv_tokens: int | None = None           # default: the profile's pool
    block_size: int | None = None          # default: the profile's block size
    max_batched_tokens: int = 8192
    max_model_len: int | None = None       # default: the profile's
    seed: int = 0
    enable_prefix_caching: bool = True
    tokens_per_chunk: int = 1              # SSE: pack up to K tokens per chunk (HTTP layer)
    log_stats_interval: float = 10.0       # vLLM's VLLM_LOG_STATS_INTERVAL
    decode_log_interval: int = 40          # SGLang's --decode-log-interval
    startup_seconds: float = 0.0           # time before the engine is ready (SGLang: 503 meanwhile)
    health_timeout: float = 20.0           # SGLang /health generation timeout
    enable_server_load_tracking: bool = False   # vLLM: /load counts in-flight requests only with this flag
    watchdog_timeout: float = 300.0        # SGLang --watchdog-timeout: a hung batch kills the server
    exit_delay: float = 2.0                # engine death -> API process exit (vLLM: up to ~5 s)
    faults: list[str] = field(default_factory=list)   # start-time fault specs, e.g. "stall@30s"
    # Prefill/decode disaggregation (servewatch.sim.pd): None (a whole engine), "prefill" or "decode".
    pd_role: str | None = None
    kv_lease_seconds: float = 30.0         # vLLM NIXL kv_lease_duration: how long a prefill keeps blocks for decode
    kv_wait_timeout: float = 50.0          # decode gives up on a KV transfer after this long (vLLM ~50 s seen)

    def __post_init__(self) -> None:
        if behaviour_for(self.dialect) is None:
            raise ValueError(f"dialect must be one of {', '.join(engine_names())}, not {self.dialect!r}")
        hw = get_profile(self.profile)
        if self.model_name is None:
            self.model_name = hw.model_name
        if self.kv_tokens is None:
            self.kv_tokens = hw.kv_tokens
        if self.block_size is None:
            self.block_size = hw.block_size
        if self.max_model_len is None:
            self.max_model_len = hw.max_model_len
        for name in ("max_num_seqs", "kv_tokens", "block_size", "max_batched_tokens", "max_model_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name.replace('_', '-')} must be positive")
        if self.tokens_per_chunk < 1:
            raise ValueError("tokens-per-chunk must be at least 1")
        # Seconds: NaN and infinity fail these comparisons too (a NaN start would never be ready).
        for name, least in (("log_stats_interval", 0.0), ("health_timeout", 0.0), ("watchdog_timeout", 0.0)):
            if not least < getattr(self, name) < math.inf:
                raise ValueError(f"{name.replace('_', '-')} must be a number of seconds above 0, "
                                 f"not {getattr(self, name)}")
        if self.pd_role not in PD_ROLES:
            raise ValueError(f"pd-role must be prefill or decode, not {self.pd_role!r}")
        for name in ("kv_lease_seconds", "kv_wait_timeout"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name.replace('_', '-')} must be a number of seconds above 0, "
                                 f"not {getattr(self, name)}")
        for name in ("startup_seconds", "exit_delay"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name.replace('_', '-')} must be a number of seconds, 0 or more, "
                                 f"not {getattr(self, name)}")

    @property
    def hw(self) -> Profile:
        return get_profile(self.profile)

    @property
    def num_blocks(self) -> int:
        return max(1, self.kv_tokens // self.block_size)
