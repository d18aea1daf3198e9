"""Scenario presets (the four workloads measured on an RTX 3060 serving Qwen2.5-7B-Instruct-AWQ), the
run configuration, and seeded arrival processes.

Arrival times are precomputed on an absolute timeline (seconds after the run's start): request i
is due at t_i, with t_0 = 0 and t_i = t_{i-1} + interval_i. Intervals are never rescaled, so a
Poisson run is a Poisson run (vLLM's bench rescales so the last arrival lands on N/rate).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

from servewatch.transport.http1 import checked_headers

MAX_ARRIVALS = 1_000_000


@dataclass(frozen=True, slots=True)
class Preset:
    rate: float | None
    prompt_tokens: int
    output_tokens: int
    prompt_pool: int = 256    # distinct prompts, cycled; 1 = every request sends the same prompt


# The four workloads measured on one RTX 3060 serving Qwen2.5-7B-Instruct-AWQ with vLLM: Normal 2 req/s,
# short prompts (44 tokens), 128 out; Overload 14 req/s; Long prompt 1 req/s, 2,905 tokens in, 64 out;
# Long output 1 req/s, 1,024 out. That long-prompt run sent one prompt to every request, so the prefix
# cache swallowed the prefill (0.082 s, where a ~2,843-token prompt took 1.55 s uncached); the preset
# does the same (--prompt-pool N sends N distinct prompts instead, the more common and much slower case).
PRESETS: dict[str, Preset] = {
    "normal": Preset(rate=2.0, prompt_tokens=44, output_tokens=128),
    "overload": Preset(rate=14.0, prompt_tokens=44, output_tokens=128),
    "long-prompt": Preset(rate=1.0, prompt_tokens=2905, output_tokens=64, prompt_pool=1),
    "long-output": Preset(rate=1.0, prompt_tokens=44, output_tokens=1024),
    "custom": Preset(rate=None, prompt_tokens=44, output_tokens=128),
}
SCENARIOS = tuple(PRESETS)
DEFAULT_DURATION_S = 60.0


@dataclass(frozen=True, slots=True)
class Goodput:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    @classmethod
    def parse(cls, text: str) -> "Goodput":
        """`ttft=MS,tpot=MS,e2e=MS` (any subset), milliseconds."""
        values: dict[str, float] = {}
        for part in text.split(","):
            key, sep, value = part.strip().partition("=")
            key = key.strip().lower()
            if not sep or key not in ("ttft", "tpot", "e2e"):
                raise ValueError(f"goodput item {part.strip()!r}: expected ttft=MS, tpot=MS or e2e=MS")
            try:
                ms = float(value)
            except ValueError:
                raise ValueError(f"goodput item {part.strip()!r}: {value!r} is not a number") from None
            if not ms > 0:
                raise ValueError(f"goodput item {part.strip()!r}: must be > 0 ms")
            values[f"{key}_s"] = ms / 1000.0
        return cls(**values)

    def to_json(self) -> dict:
        return {"ttft_ms": _ms(self.ttft_s), "tpot_ms": _ms(self.tpot_s), "e2e_ms": _ms(self.e2e_s)}


@dataclass(frozen=True, slots=True)
class LoadConfig:
    url: str
    scenario: str = "normal"
    rate: float | None = None               # None: the preset's rate
    concurrency: int | None = None          # fixed concurrency instead of a rate
    arrival: str = "poisson"                # poisson | constant | gamma:SHAPE
    duration_s: float | None = None
    requests: int | None = None
    prompt_tokens: int | None = None        # None: the preset's
    prompt_stdev: float = 0.0
    output_tokens: int | None = None
    tokenizer: str = "auto"                 # DIR or tokenizer.json | auto | approx
    model: str | None = None                # None: the first id of /v1/models
    api: str = "completions"                # completions | chat
    goodput: Goodput | None = None
    metrics_interval_s: float = 0.5         # 0 disables the server view
    seed: int = 0
    keep_text: bool = False
    request_timeout_s: float = 600.0
    idle_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    client: str = "http1"                   # http1 (our own) | aiohttp
    event_loop: str = "auto"                # auto (uvloop if installed) | asyncio | uvloop
    prompt_pool: int | None = None          # distinct prompts per run (cycled); None: the preset's
    sender_priority: str = "realtime"       # realtime (SCHED_FIFO, only where permitted) | normal
    # Request headers sent with every request (an API key, a routing header): never stored or printed
    headers: tuple[tuple[str, str], ...] = ()
    extra: dict = field(default_factory=dict)
    # Trace replay (servewatch.load.trace): the rows of FILE at their arrival times / speed, instead of a rate
    trace: str | None = None
    speed: float = 1.0
    window: tuple[float, float | None] | None = None   # (A, B) seconds of the trace, B None: to its end
    max_rows: int | None = None
    trace_block: int = 512                  # tokens per hash id in a Mooncake trace

    def resolved(self) -> "LoadConfig":
        """Fill preset values and validate; raises ValueError with one clear line."""
        if self.scenario not in PRESETS:
            raise ValueError(f"unknown scenario {self.scenario!r}; choose from {', '.join(SCENARIOS)}")
        if self.sender_priority not in ("realtime", "normal"):
            raise ValueError(f"unknown sender priority {self.sender_priority!r}; choose realtime or normal")
        preset = PRESETS[self.scenario]
        if self.trace is not None:
            return self._resolved_trace(preset)
        rate = self.rate if self.rate is not None else (None if self.concurrency else preset.rate)
        if rate is None and self.concurrency is None:
            raise ValueError("scenario custom needs --rate R or --concurrency C")
        if rate is not None and self.concurrency is not None and self.rate is not None:
            raise ValueError("give --rate or --concurrency, not both")
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"--rate must be a positive number, got {rate}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {self.concurrency}")
        parse_arrival(self.arrival)
        duration, requests = self.duration_s, self.requests
        if duration is not None and requests is not None:
            raise ValueError("give --duration or --requests, not both")
        if duration is None and requests is None:
            duration = DEFAULT_DURATION_S
        if duration is not None and not (duration > 0 and math.isfinite(duration)):
            raise ValueError(f"--duration must be a finite number > 0, got {duration}")
        if requests is not None and requests < 1:
            raise ValueError(f"--requests must be >= 1, got {requests}")
        prompt = self.prompt_tokens if self.prompt_tokens is not None else preset.prompt_tokens
        output = self.output_tokens if self.output_tokens is not None else preset.output_tokens
        if prompt < 1 or output < 1:
            raise ValueError("--prompt-tokens and --output-tokens must be >= 1")
        if not (self.prompt_stdev >= 0 and math.isfinite(self.prompt_stdev)):
            raise ValueError(f"--prompt-tokens: the stdev after N: must be a number >= 0, got {self.prompt_stdev}")
        if self.client not in ("http1", "aiohttp"):
            raise ValueError(f"client must be http1 or aiohttp, got {self.client!r}")
        pool = self.prompt_pool if self.prompt_pool is not None else preset.prompt_pool
        if pool < 1:
            raise ValueError(f"--prompt-pool must be >= 1, got {pool}")
        if self.event_loop not in ("auto", "asyncio", "uvloop"):
            raise ValueError(f"event loop must be auto, asyncio or uvloop, got {self.event_loop!r}")
        self._check_common()
        return replace(self, rate=rate if self.concurrency is None else None, duration_s=duration,
                       requests=requests, prompt_tokens=prompt, output_tokens=output, prompt_pool=pool)

    def _check_common(self) -> None:
        """What a synthetic run and a trace replay both check: the API, the metrics cadence, the timeout, headers."""
        if self.api not in ("completions", "chat"):
            raise ValueError(f"--api must be completions or chat, got {self.api!r}")
        if not (self.metrics_interval_s >= 0 and math.isfinite(self.metrics_interval_s)):
            raise ValueError(f"--metrics-interval must be >= 0, got {self.metrics_interval_s}")
        if not (self.request_timeout_s > 0 and math.isfinite(self.request_timeout_s)):
            raise ValueError(f"--timeout must be a positive number of seconds, got {self.request_timeout_s}")
        try:
            checked_headers(self.headers)
        except ValueError as exc:
            raise ValueError(f"--header: {exc}") from None

    def _resolved_trace(self, preset: Preset) -> "LoadConfig":
        if self.rate is not None or self.concurrency is not None:
            raise ValueError("--trace sends at the trace's own times: not with --rate or --concurrency")
        if self.duration_s is not None or self.requests is not None:
            raise ValueError("--trace: use --window A:B and --max-rows N, not --duration or --requests")
        if self.prompt_tokens is not None or self.output_tokens is not None:
            raise ValueError("--trace: the lengths come from the trace, not --prompt-tokens / --output-tokens")
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise ValueError(f"--speed must be a positive number, got {self.speed}")
        if self.max_rows is not None and self.max_rows < 1:
            raise ValueError(f"--max-rows must be >= 1, got {self.max_rows}")
        if self.trace_block < 1:
            raise ValueError(f"--trace-block must be >= 1, got {self.trace_block}")
        if self.window is not None:
            a, b = self.window
            if not (a >= 0 and math.isfinite(a)) or (b is not None and not b > a):
                raise ValueError(f"--window A:B needs 0 <= A < B, got {a}:{b}")
        self._check_common()
        return replace(self, prompt_pool=1)


def parse_window(text: str) -> tuple[float, float | None]:
    """`A:B` seconds (either may be empty: `:60`, `30:`), as (A, B or None)."""
    a, sep, b = text.partition(":")
    try:
        lo = float(a) if a.strip() else 0.0
        hi = float(b) if b.strip() else None
    except ValueError:
        raise ValueError(f"--window {text!r}: expected A:B in seconds (30:90, :60, 30:)") from None
    if not sep:
        raise ValueError(f"--window {text!r}: expected A:B in seconds (30:90, :60, 30:)")
    return lo, hi


def parse_arrival(text: str) -> tuple[str, float | None]:
    kind, _, arg = text.partition(":")
    if kind in ("poisson", "constant") and not arg:
        return kind, None
    if kind == "gamma":
        try:
            shape = float(arg)
        except ValueError:
            raise ValueError(f"--arrival gamma:SHAPE needs a number, got {text!r}") from None
        if not (shape > 0 and math.isfinite(shape)):
            raise ValueError(f"--arrival gamma shape must be > 0, got {text!r}")
        return kind, shape
    raise ValueError(f"--arrival must be poisson, constant or gamma:SHAPE, got {text!r}")


def arrival_times(arrival: str, rate: float, *, seed: int, requests: int | None = None,
                  duration_s: float | None = None) -> list[float]:
    """Offsets (s) from the run's start; stops at `requests` or before `duration_s`."""
    kind, shape = parse_arrival(arrival)
    rng = random.Random(f"arrivals:{seed}")
    limit = requests if requests is not None else MAX_ARRIVALS
    out: list[float] = []
    t = 0.0
    while len(out) < limit:
        if duration_s is not None and t >= duration_s:
            break
        out.append(t)
        if kind == "constant":
            t = len(out) / rate       # no float drift over long runs
        elif kind == "poisson":
            t += rng.expovariate(rate)
        else:
            t += rng.gammavariate(shape, 1.0 / (rate * shape))
    return out


def prompt_lengths(mean: int, stdev: float, count: int, *, seed: int) -> list[int]:
    """Per-prompt token targets: a seeded normal around `mean`, clipped to >= 1."""
    if stdev <= 0:
        return [mean] * count
    rng = random.Random(f"prompt-lengths:{seed}")
    return [max(1, round(rng.gauss(mean, stdev))) for _ in range(count)]


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1000.0
