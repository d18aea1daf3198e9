"""A prefill/decode pair of simulators for tests, in this process over real HTTP (issue 52).

    async with pd_pair("vllm") as pair:                 # or "sglang"; keyword arguments go to both SimConfigs
        answer = await pair.complete(session, prompt="hello " * 40, max_tokens=8)
        pair.prefill.url, pair.decode.url                # each a tests.serve_harness.Sim (engine, url, scrapes)
        await pair.decode.fault(session, "kv-stall")     # the simulator's P/D faults: kv-stall, kv-fail and
        await pair.prefill.fault(session, "kv-expire")   # pd-bypass on decode, kv-expire on prefill

`pd_pair(dialect="vllm", *, prefill=None, decode=None, **config)`: `prefill` / `decode` are dicts of SimConfig
fields for one side only (e.g. `decode={"kv_wait_timeout": 2.0}`); `config` goes to both (e.g. `profile=`).
`Pair.complete(session, prompt=..., max_tokens=16, timeout=30.0, **body)` routes one request as vLLM's toy
disaggregation proxy does: to the prefill with `max_tokens` 1 and `kv_transfer_params` {"do_remote_decode":
true}, then to decode with the `kv_transfer_params` of the prefill's answer; it returns a `Legs` record. While the
decode has the pd-bypass fault (the router went decode-only), it sends the request to decode alone.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import aiohttp

from tests.serve_harness import Sim, sim_target

REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                 "remote_block_ids": None, "remote_host": None, "remote_port": None}


@dataclass
class Legs:
    """One routed request: each leg's HTTP status and seconds, and what decode answered."""

    prefill_status: int | None          # None: the prefill was not asked (decode-only)
    prefill_s: float | None
    decode_status: int | None           # None: decode was not asked (the prefill leg failed)
    decode_s: float | None
    kv_transfer_params: dict | None     # what the prefill answered for decode
    body: dict | None                   # decode's answer (JSON), or the failed leg's error body

    @property
    def ok(self) -> bool:
        return self.decode_status == 200


class Pair:
    def __init__(self, prefill: Sim, decode: Sim):
        self.prefill, self.decode = prefill, decode

    async def complete(self, session: aiohttp.ClientSession, *, prompt: str, max_tokens: int = 16,
                       timeout: float = 30.0, **body) -> Legs:
        model = self.decode.engine.config.model_name
        limit = aiohttp.ClientTimeout(total=timeout)
        params = None
        prefill_status = prefill_s = None
        if not self.decode.engine.pd.bypass:
            started = time.monotonic()
            async with session.post(self.prefill.url + "/v1/completions", timeout=limit, json={
                    **body, "model": model, "prompt": prompt, "max_tokens": 1, "stream": False,
                    "kv_transfer_params": dict(REMOTE_DECODE)}) as response:
                prefill_status, answer = response.status, await response.json()
            prefill_s = time.monotonic() - started
            if prefill_status != 200:
                return Legs(prefill_status, prefill_s, None, None, None, answer)
            params = answer.get("kv_transfer_params")
        started = time.monotonic()
        request = {**body, "model": model, "prompt": prompt, "max_tokens": max_tokens}
        if params is not None:
            request["kv_transfer_params"] = params
        async with session.post(self.decode.url + "/v1/completions", json=request, timeout=limit) as response:
            status, answer = response.status, await response.json()
        return Legs(prefill_status, prefill_s, status, time.monotonic() - started, params, answer)


@contextlib.asynccontextmanager
async def pd_pair(dialect: str = "vllm", *, prefill: dict | None = None, decode: dict | None = None, **config):
    async with sim_target(dialect=dialect, pd_role="prefill", **{**config, **(prefill or {})}) as p, \
            sim_target(dialect=dialect, pd_role="decode", **{**config, **(decode or {})}) as d:
        for sim in (p, d):
            host, _, port = sim.url.removeprefix("http://").rpartition(":")
            sim.engine.pd.host, sim.engine.pd.port = host, int(port)
        yield Pair(p, d)
