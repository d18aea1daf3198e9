"""The proxy's limits and timeouts: every one bounded, every one with a default that serves an LLM
engine (a long prefill or a long queue can hold the first byte for minutes)."""

from __future__ import annotations

from dataclasses import dataclass

# The shared recording flags `proxy --watch` takes (servewatch.watch.options).
WATCH_FLAGS = ("interval", "out", "detector_settings")


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    upstream: str                              # base URL of the engine, e.g. http://127.0.0.1:8000
    max_connections: int = 4096                # client connections; over it: 503 with Retry-After
    retry_after_s: int = 1
    max_request_bytes: int = 32 * 2**20        # a request body over it: 413
    max_response_bytes: int = 2**30            # an upstream response over it is cut (stream_cut)
    max_head_bytes: int = 64 * 2**10           # request head over it: 431
    parse_bytes: int = 4 * 2**20               # request bodies up to this are read for model/max_tokens
    head_timeout_s: float = 10.0               # a request head must arrive whole within this (slow drip: 408)
    body_idle_timeout_s: float = 30.0          # a request body that stalls this long: 408
    keepalive_timeout_s: float = 75.0          # an idle client connection is closed after this
    # upstream TCP connect: nginx's proxy_connect_timeout. An engine's backlog takes connections even while
    # its event loop is busy, so only an unreachable host waits this long; at 5 s (until 2026-12-03) a proxy
    # starved of CPU for longer ran the expired timer before seeing the connect done: a 502 for a request
    # the engine would have served (1 of 55 in a CI run)
    connect_timeout_s: float = 60.0
    first_byte_timeout_s: float = 900.0        # upstream: request written -> first response byte (504)
    read_idle_timeout_s: float = 300.0         # upstream: silence between two response reads
    tenant_header: str = "x-tenant"            # tenant from this header, else from the API key (hashed)
    keep_text: bool = False                    # records carry the prompt and completion text (never telemetry)
    keep_itl: bool = False                     # records carry every chunk's time and every inter-token gap
    sweep_interval_s: float = 0.25             # how often deadlines are checked
