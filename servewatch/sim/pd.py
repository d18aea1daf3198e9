"""Prefill/decode disaggregation in the simulator: one instance's side of a KV connector.

A simulator started with `pd_role` ("prefill" or "decode") speaks the protocol vLLM's NIXL connector and its toy
proxy use, over the simulator's own HTTP:

* prefill: a request whose `kv_transfer_params` has `do_remote_decode` runs as usual (the router asks for one
  token) and its answer carries `kv_transfer_params` for decode (`do_remote_prefill`, the prefill's
  `remote_host`/`remote_port`, `remote_request_id`, `remote_engine_id`, `remote_block_ids`). The prefill holds the
  request's blocks on a lease (`kv_lease_seconds`, vLLM's `kv_lease_duration`); a lease that runs out before
  decode read it is counted expired (vLLM: `nixl_num_kv_expired_reqs`; SGLang: a bootstrap failure);
* decode: a request with `do_remote_prefill` waits for its KV (vLLM: waiting, reason "deferred", KV fetch "in
  progress"; SGLang: the decode transfer queue), reads it from the prefill named in the parameters (POST
  /_sim/kv_read on the prefill), then runs with its prompt counted as transferred
  (`prompt_tokens_by_source{source="external_kv_transfer"}`), computing only what it samples. A read the prefill
  cannot answer is retried until `kv_wait_timeout`, then the request fails (HTTP 500) and the failure is
  counted. Without parameters decode computes the prompt itself (`local_compute`), as a real one does.

Faults (servewatch.sim.faults): kv-stall (decode: transfers never finish; requests pile up waiting, /health 200),
kv-expire (prefill: every lease expires before decode reads it; vLLM's decode still answers 200 from the
released blocks), kv-fail (decode: every transfer fails), pd-bypass (decode: the router went decode-only —
parameters ignored, every prompt computed locally, the prefill left idle).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque

PREFILL, DECODE = "prefill", "decode"
READ_PATH = "/_sim/kv_read"
RETRY_S = 0.25                     # decode's pause between reads of a prefill that does not answer
EXPIRED_KEPT = 4096                # expired lease ids remembered (a late read of one is "after expiry")
_ids = itertools.count()


class PdSide:
    """One instance's side of the KV connector: its counters, leases (prefill) and waiting requests (decode)."""

    def __init__(self, engine):
        self.engine = engine
        self.role = engine.config.pd_role
        self.engine_id = f"sim-{self.role}-{engine.config.seed}-{next(_ids)}"
        self.host: str | None = None       # where this instance listens (the server fills it in)
        self.port: int | None = None
        # decode
        self.waiting_for_kv = 0            # requests whose KV has not arrived (vLLM deferred, SGLang transfer queue)
        self.received = 0                  # transfers read (vLLM counts them on decode, SGLang on prefill: `sent`)
        self.bytes_received = 0.0
        self.failed_transfers = 0
        self.failed_notifications = 0
        self.bootstrap_failed = 0
        # prefill
        self.leases: dict[str, float] = {}     # remote request id -> when its lease runs out
        self._lease_of: dict[str, tuple[float, int]] = {}   # remote request id -> (leased at, prompt tokens)
        self.expired_ids: deque[str] = deque(maxlen=EXPIRED_KEPT)
        self.expired = 0
        self.notifications_after_expiry = 0
        self.sent = 0
        self.bytes_sent = 0.0
        # interval accumulators for vLLM's "KV Transfer metrics" log line
        self.interval: dict[str, list] = _empty_interval()
        # faults
        self.kv_stall = False
        self.kv_fail = False
        self.lease_expire = False
        self.bypass = False
        self._changed: asyncio.Event | None = None
        self._next = itertools.count()
        self._peers: set[tuple[str, int]] = set()     # prefills this decode has read from (NIXL's handshake done)

    # --- faults -------------------------------------------------------------------------------------------
    def apply(self, kind: str) -> None:
        if kind == "kv-stall":
            self.kv_stall = True
        elif kind == "kv-fail":
            self.kv_fail = True
        elif kind == "kv-expire":
            self.lease_expire = True
            for rid in list(self.leases):
                self.leases[rid] = self.engine.clock.now()
        elif kind == "pd-bypass":
            self.bypass = True
        elif kind == "clear":
            self.kv_stall = self.kv_fail = self.lease_expire = self.bypass = False
        self._wake()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    # --- prefill --------------------------------------------------------------------------------------------
    def lease(self, request) -> dict:
        """A prefill finished a request for decode: hold its blocks on a lease; the parameters decode needs."""
        now = self.engine.clock.now()
        rid = f"{self.engine_id}-{next(self._next)}"
        self.leases[rid] = now if self.lease_expire else now + self.engine.config.kv_lease_seconds
        self._lease_of[rid] = (now, request.prompt_len)
        blocks = max(1, -(-request.prompt_len // self.engine.config.block_size))
        self.engine._wake()
        return {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": self.engine_id,
                "remote_request_id": rid, "remote_host": self.host, "remote_port": self.port,
                "remote_block_ids": list(range(blocks)), "tp_size": 1, "prompt_tokens": request.prompt_len}

    def next_expiry(self) -> float | None:
        return min(self.leases.values()) if self.leases else None

    def expire_due(self, now: float) -> None:
        """Leases that ran out: vLLM releases the blocks (a WARNING, nixl_num_kv_expired_reqs + 1); SGLang's
        prefill gives up bootstrapping (a bootstrap failure)."""
        for rid, until in list(self.leases.items()):
            if until <= now:
                del self.leases[rid]
                started, _ = self._lease_of.pop(rid, (until, 0))
                self.expired_ids.append(rid)
                self.expired += 1
                self.interval["expired"].append(1)
                if self.engine.config.dialect == "sglang":
                    self.bootstrap_failed += 1
                self.engine.log.kv_expired(rid, now - started)

    def read(self, rid: str) -> str:
        """Decode reads a lease: "ok", "expired" (the blocks were released; vLLM's decode reads them anyway and
        answers from whatever they now hold) or "unknown"."""
        self.expire_due(self.engine.clock.now())     # a lease past its time is gone, whether or not the loop ran
        if rid in self.leases:
            del self.leases[rid]
            started, tokens = self._lease_of.pop(rid, (self.engine.clock.now(), 0))
            seconds = self.engine.clock.now() - started
            nbytes = self._bytes_of(tokens)
            self.sent += 1
            self.bytes_sent += nbytes
            hook = getattr(self.engine.metrics, "on_kv_sent", None)
            if hook is not None:
                hook(seconds, nbytes)
            return "ok"
        if rid in self.expired_ids:
            self.notifications_after_expiry += 1
            self.interval["after_expiry"].append(1)
            return "expired"
        return "unknown"

    # --- decode -------------------------------------------------------------------------------------------
    def wants_remote_kv(self, params) -> bool:
        return (self.role == DECODE and not self.bypass and isinstance(params, dict)
                and bool(params.get("do_remote_prefill")))

    async def fetch(self, params: dict, prompt_tokens: int) -> str | None:
        """Wait for a request's KV: None once it arrived, else why it failed (the request then fails)."""
        engine = self.engine
        clock = engine.clock
        started = clock.now()
        deadline = started + engine.config.kv_wait_timeout
        self.waiting_for_kv += 1
        if self._changed is None:
            self._changed = asyncio.Event()
        # the blocks the remote KV will land in are held while it is awaited (vLLM allocates them before the load,
        # so KV usage shows a decode's waiting requests; when none are free the request waits without them)
        pool = engine.pool
        held = pool.allocate(-(-prompt_tokens // engine.config.block_size)) or []
        try:
            while self.kv_stall:       # KV that never comes: the request waits, deferred, for as long as the fault
                self._changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=1.0)
            if self.kv_fail:
                return self._failed(prompt_tokens, "transfer_failed")
            outcome = await self._read_remote(params, deadline)
            if outcome == "ok" or outcome == "expired" and engine.config.dialect != "sglang":
                seconds = clock.now() - started
                nbytes = self._bytes_of(prompt_tokens)
                self.received += 1
                self.bytes_received += nbytes
                self.interval["xfer"].append((seconds, nbytes))
                hook = getattr(engine.metrics, "on_kv_received", None)
                if hook is not None:
                    hook(seconds, nbytes)
                return None
            if outcome == "disconnected":
                # a prefill already handshaken went away: NIXL fails the read at once (NIXL_ERR_REMOTE_DISCONNECT)
                # and the completion notification too, as a real decode did when its prefill was killed
                return self._failed(prompt_tokens, "transfer_setup_failed", notification=True)
            return self._failed(prompt_tokens, "transfer_exception")
        finally:
            self.waiting_for_kv -= 1
            if held and engine.pool is pool:      # (a restarted engine has a new pool)
                pool.release(held)
            engine._wake()

    async def _read_remote(self, params: dict, deadline: float) -> str:
        host, port, rid = params.get("remote_host"), params.get("remote_port"), params.get("remote_request_id")
        if not host or not isinstance(port, int) or not isinstance(rid, str):
            return "ok"                 # no peer named (a connector through shared storage): the KV is there
        # aiohttp, as the simulator's server: one small request to the peer simulator on its own event loop
        import aiohttp

        url = f"http://{host}:{port}{READ_PATH}"
        peer = (host, port)
        clock = self.engine.clock
        async with aiohttp.ClientSession() as session:
            while True:
                left = deadline - clock.now()
                if left <= 0:
                    return "timeout"
                try:
                    async with session.post(url, json={"remote_request_id": rid},
                                            timeout=aiohttp.ClientTimeout(total=left)) as response:
                        if response.status == 200:
                            self._peers.add(peer)
                            return (await response.json()).get("outcome", "ok")
                        if response.status == 404:
                            return "unknown"
                        gone = True              # 503: the prefill's engine is dead
                except asyncio.TimeoutError:
                    gone = False                 # a stopped prefill: the read hangs, decode keeps waiting
                except aiohttp.ClientError:
                    gone = True                  # nothing listens there any more
                if gone and peer in self._peers:
                    return "disconnected"
                if self.kv_fail:
                    return "failed"
                await asyncio.sleep(min(RETRY_S, max(0.0, deadline - clock.now())))

    def _failed(self, prompt_tokens: int, failure_type: str, *, notification: bool = False) -> str:
        self.failed_transfers += 1
        self.interval["failed"].append(1)
        if notification:
            self.failed_notifications += 1
            self.interval["failed"].append(1)
        self.engine.log.kv_failed(failure_type, prompt_tokens, self.engine.config.kv_wait_timeout,
                                  notification=notification)
        hook = getattr(self.engine.metrics, "on_kv_failed", None)
        if hook is not None:
            hook(prompt_tokens)
        return failure_type

    def _bytes_of(self, tokens: int) -> float:
        return float(tokens * self.engine.config.hw.kv_bytes_per_token)

    def take_interval(self) -> dict[str, list]:
        interval, self.interval = self.interval, _empty_interval()
        return interval


def _empty_interval() -> dict[str, list]:
    return {"xfer": [], "failed": [], "expired": [], "after_expiry": []}
