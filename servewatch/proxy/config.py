"""The proxy's limits and timeouts: every one bounded, every one with a default that serves an LLM
engine (a long prefill or a long queue can hold the first byte for minutes)."""

from __future__ import annotations

from dataclasses import dataclass

# The shared recording flags `proxy --watch` takes (servewatch.watch.options).
WATCH_FLAGS = ("interval", "out", "detector_settings")
# The key of the tenant's hash without a key file of one's own: public, so a record's tenant can be confirmed
# by whoever guesses the header; a key file makes it a pseudonym only its holder can link to a name.
DEFAULT_TENANT_KEY = b"servewatch-proxy-tenant"
TENANT_KEY_BYTES = 32


def tenant_key(path: str) -> bytes:
    """The secret in `path` (its bytes, surrounding whitespace stripped), made of 32 random bytes (hex, file
    mode 0600) when the file does not exist yet. OSError when it cannot be read or made; ValueError when
    what it holds is under 16 bytes."""
    import os
    import secrets

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with open(path, "rb") as fh:
            key = fh.read(4096).strip()
        if len(key) < 16:
            raise ValueError(f"holds {len(key)} bytes; a key of at least 16 is expected") from None
        return key
    key = secrets.token_hex(TENANT_KEY_BYTES).encode()
    with os.fdopen(fd, "wb") as fh:
        fh.write(key + b"\n")
    return key


# A prefill/decode pair (servewatch.proxy.pair): each leg's own bound, where the toy router of vLLM's tests waits
# forever. The prefill leg is one whole answer (max_tokens 1, not streamed): its first byte is its last, so it has
# the single path's first-byte bound, for the same reason (a long queue and a long prompt hold it for minutes).
FIRST_BYTE_TIMEOUT_S = 900.0
PREFILL_TIMEOUT_S = FIRST_BYTE_TIMEOUT_S
# Decode's first byte after its request: its queue, the KV transfer and one step (no prompt is computed there).
# Above the engines' own bound on that wait, so that their error, which says why, arrives first: SGLang 0.5.23's
# SGLANG_DISAGGREGATION_WAITING_TIMEOUT is 300 s; vLLM 0.32's NIXL decode failed its request ~50 s after the
# prefill died (issue 52). The proxy's bound only catches a decode that never answers.
DECODE_FIRST_BYTE_TIMEOUT_S = 360.0


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
    first_byte_timeout_s: float = FIRST_BYTE_TIMEOUT_S   # upstream: request written -> first response byte (504)
    read_idle_timeout_s: float = 300.0         # upstream: silence between two response reads
    tenant_header: str = "x-tenant"            # tenant from this header, else from the API key (hashed)
    tenant_key: bytes = DEFAULT_TENANT_KEY     # the hash's key (tenant_key(FILE) for one's own)
    keep_text: bool = False                    # records carry the prompt and completion text (never telemetry)
    keep_itl: bool = False                     # records carry every chunk's time and every inter-token gap
    sweep_interval_s: float = 0.25             # how often deadlines are checked
    # a prefill/decode pair instead of one upstream (servewatch.proxy.pair): base URLs, round-robin on each side
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    prefill_timeout_s: float = PREFILL_TIMEOUT_S                 # prefill leg: request written -> answer's end
    decode_first_byte_timeout_s: float = DECODE_FIRST_BYTE_TIMEOUT_S   # decode leg: request written -> first body byte
