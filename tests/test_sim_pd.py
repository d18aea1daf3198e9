"""The simulator's prefill/decode mode (servewatch.sim.pd, issue 52), a pair over real HTTP in this process
(tests/pd_harness.py): vLLM's connector protocol (prefill with max_tokens 1 answers kv_transfer_params; decode given
them reads the KV and counts the prompt as transferred, without them computes it), the series each side renders as
the dialects read them back, and the P/D faults: KV that never comes, expired leases, failed transfers, bypass."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from servewatch.dialects import read_scrape
from servewatch.sources.logs import parse_line
from tests.pd_harness import pd_pair
from tests.processes import stop

ROOT = Path(__file__).resolve().parents[1]

PROMPT = "hello world " * 40          # 160 prompt tokens by the simulator's counter
TOKENS = 160
DEADLINE_S = 20.0


def _kv(sim):
    [engine] = read_scrape(sim.engine.metrics_text()).engines
    return engine


def _log(sim) -> io.StringIO:
    stream = io.StringIO()
    sim.engine.log.sink.stream = stream
    return stream


def _events(stream: io.StringIO) -> list[tuple[str, dict]]:
    return [(e.kind, e.fields) for line in stream.getvalue().splitlines() for e in parse_line(line, 0.0)]


async def _until(condition, what: str, deadline_s: float = DEADLINE_S):
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"{what} not within {deadline_s} s"
        await asyncio.sleep(0.02)


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_the_prompt_is_computed_by_prefill_and_transferred_to_decode(dialect):
    async def go():
        async with pd_pair(dialect) as pair, aiohttp.ClientSession() as s:
            legs = await pair.complete(s, prompt=PROMPT, max_tokens=8, ignore_eos=True)
            return legs, _kv(pair.prefill), _kv(pair.decode), dict(pair.prefill.engine.pd.leases)

    legs, prefill, decode, leases = _run(go())
    assert (legs.prefill_status, legs.decode_status) == (200, 200)
    assert legs.kv_transfer_params["do_remote_prefill"] is True and legs.kv_transfer_params["remote_port"]
    assert legs.body["usage"]["completion_tokens"] == 8
    assert leases == {}                                       # decode read the lease
    assert (prefill.kv_transfer.role, decode.kv_transfer.role) == ("prefill", "decode")
    assert prefill.counters.prompt_tokens == TOKENS
    if dialect == "vllm":
        assert (decode.kv_transfer.external_prompt_tokens, decode.kv_transfer.local_prompt_tokens) == (TOKENS, 0)
        assert decode.kv_transfer.transfers == 1 and decode.kv_transfer.bytes_transferred > 0
    else:
        assert prefill.kv_transfer.transfers == 1 and prefill.kv_transfer.bytes_transferred > 0
        assert decode.kv_transfer.local_prompt_tokens <= 1     # the one token it samples from


def test_decode_without_transfer_parameters_computes_the_prompt_itself():
    async def go():
        async with pd_pair("vllm") as pair, aiohttp.ClientSession() as s:
            async with s.post(pair.decode.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}) as r:
                assert r.status == 200
            return _kv(pair.decode).kv_transfer

    kv = _run(go())
    assert (kv.external_prompt_tokens, kv.local_prompt_tokens, kv.transfers) == (0, TOKENS, 0)


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_kv_that_never_comes_piles_up_waiting_while_health_answers_200(dialect):
    async def go():
        async with pd_pair(dialect) as pair, aiohttp.ClientSession() as s:
            await pair.decode.fault(s, "kv-stall")
            tasks = [asyncio.create_task(pair.complete(s, prompt=PROMPT, max_tokens=4)) for _ in range(3)]
            idle_kv = _kv(pair.decode).kv_usage
            await _until(lambda: pair.decode.engine.pd.waiting_for_kv == 3, "3 requests waiting for KV")
            waiting = _kv(pair.decode)
            if dialect == "vllm":      # their blocks are held while the KV is awaited (SGLang's gauge lags its log)
                assert waiting.kv_usage > idle_kv
            async with s.get(pair.decode.url + "/health") as r:
                health = r.status
            await pair.decode.fault(s, "clear")
            legs = await asyncio.gather(*tasks)
            return waiting, health, legs, _kv(pair.decode)

    waiting, health, legs, after = _run(go())
    assert health == 200
    assert waiting.kv_transfer.waiting_for_kv == 3
    if dialect == "vllm":
        assert (waiting.kv_transfer.fetch_in_progress, waiting.waiting) == (3, 3)
    assert [leg.decode_status for leg in legs] == [200, 200, 200]
    assert after.kv_transfer.waiting_for_kv == 0


def test_vllm_an_expired_lease_is_counted_on_prefill_and_decode_still_answers_200():
    async def go():
        async with pd_pair("vllm") as pair, aiohttp.ClientSession() as s:
            log = _log(pair.prefill)
            await pair.prefill.fault(s, "kv-expire")
            legs = await pair.complete(s, prompt=PROMPT, max_tokens=4)
            text = pair.prefill.engine.metrics_text()
            return legs, _kv(pair.prefill).kv_transfer, _events(log), text

    legs, prefill, events, text = _run(go())
    assert legs.decode_status == 200                           # the silent wrong answer the issue reports
    assert prefill.expired == 1
    assert ("kv_expired", {"dialect": "vllm", "retrieved_by": 0}) in events
    assert 'vllm:nixl_num_notifications_after_expiry_total{engine="0"' in text


def test_sglang_an_expired_bootstrap_fails_the_request_on_both_sides():
    async def go():
        async with pd_pair("sglang") as pair, aiohttp.ClientSession() as s:
            log = _log(pair.decode)
            await pair.prefill.fault(s, "kv-expire")
            legs = await pair.complete(s, prompt=PROMPT, max_tokens=4)
            return legs, _kv(pair.prefill).kv_transfer, _kv(pair.decode).kv_transfer, _events(log)

    legs, prefill, decode, events = _run(go())
    assert legs.decode_status == 500
    assert (prefill.bootstrap_failed, decode.failed_transfers) == (1, 1)
    assert [f for k, f in events if k == "kv_transfer_failure"][0]["poll"] == "WaitingForInput"


def test_vllm_a_failed_transfer_fails_the_request_and_is_counted():
    async def go():
        async with pd_pair("vllm") as pair, aiohttp.ClientSession() as s:
            log = _log(pair.decode)
            await pair.decode.fault(s, "kv-fail")
            legs = await pair.complete(s, prompt=PROMPT, max_tokens=4)
            return legs, _kv(pair.decode), _events(log)

    legs, decode, events = _run(go())
    assert legs.decode_status == 500 and legs.body["error"]["code"] == 500
    assert decode.kv_transfer.failed_transfers == 1
    assert decode.counters.finished.get("error") == 1
    failed = [f for k, f in events if k == "kv_load_failed"]
    assert failed == [{"dialect": "vllm", "requests": 1, "tokens": TOKENS, "recovered": False}]
    assert ("kv_transfer_failure", {"dialect": "vllm", "failure_type": "transfer_failed"}) in events


def test_bypass_leaves_the_prefill_idle_while_decode_computes_every_prompt():
    async def go():
        async with pd_pair("vllm", enable_prefix_caching=False) as pair, aiohttp.ClientSession() as s:
            await pair.decode.fault(s, "pd-bypass")
            legs = [await pair.complete(s, prompt=PROMPT, max_tokens=2) for _ in range(2)]
            return legs, _kv(pair.prefill), _kv(pair.decode).kv_transfer

    legs, prefill, decode = _run(go())
    assert [(leg.prefill_status, leg.decode_status) for leg in legs] == [(None, 200), (None, 200)]
    assert prefill.counters.prompt_tokens == 0
    assert (decode.external_prompt_tokens, decode.local_prompt_tokens) == (0, 2 * TOKENS)


def test_a_dead_prefill_fails_decode_after_its_wait_and_decode_stays_healthy():
    wait_s = 1.0

    async def go():
        async with pd_pair("vllm", decode={"kv_wait_timeout": wait_s}) as pair, aiohttp.ClientSession() as s:
            async with s.post(pair.prefill.url + "/v1/completions", json={
                    "prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}) as r:
                params = (await r.json())["kv_transfer_params"]
            await pair.prefill.fault(s, "engine-death")
            started = time.monotonic()
            async with s.post(pair.decode.url + "/v1/completions", json={
                    "prompt": PROMPT, "max_tokens": 2, "kv_transfer_params": params}) as r:
                status = r.status
            took = time.monotonic() - started
            async with s.get(pair.decode.url + "/health") as r:
                health = r.status
            return status, took, health, _kv(pair.decode).kv_transfer

    status, took, health, kv = _run(go())
    assert status == 500 and health == 200
    assert took >= wait_s
    assert (kv.failed_transfers, kv.waiting_for_kv) == (1, 0)


def test_a_prefill_killed_after_decode_read_from_it_fails_decode_at_once_as_the_real_pair_did():
    """tests/fixtures/pd/kvboth-nixl-prefill-killed-after-handshake-decode.*: HTTP 500 at once (0.2 s), failed transfers
    2 of which notifications 1, and the same three connector lines."""
    wait_s = 30.0

    async def go():
        async with pd_pair("vllm", decode={"kv_wait_timeout": wait_s}) as pair, aiohttp.ClientSession() as s:
            first = await pair.complete(s, prompt=PROMPT, max_tokens=2)
            async with s.post(pair.prefill.url + "/v1/completions", json={
                    "prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}) as r:
                params = (await r.json())["kv_transfer_params"]
            await pair.prefill.fault(s, "engine-death")
            log = _log(pair.decode)
            started = time.monotonic()
            async with s.post(pair.decode.url + "/v1/completions", json={
                    "prompt": PROMPT, "max_tokens": 2, "kv_transfer_params": params}) as r:
                status = r.status
            return first, status, time.monotonic() - started, _kv(pair.decode).kv_transfer, _events(log)

    first, status, took, kv, events = _run(go())
    assert first.decode_status == 200 and status == 500
    assert took < wait_s / 2                      # not the wait of a prefill never reached
    assert (kv.failed_transfers, kv.failed_notifications) == (2, 1)
    assert [(k, f.get("failure_type", f.get("requests"))) for k, f in events if k.startswith("kv_")] == [
        ("kv_transfer_failure", "transfer_setup_failed"), ("kv_load_failed", 1),
        ("kv_transfer_failure", "notification_failed")]


def test_a_fault_for_the_other_side_is_refused():
    async def go():
        async with pd_pair("vllm") as pair, aiohttp.ClientSession() as s:
            async with s.post(pair.prefill.url + "/_sim/fault", json={"kind": "kv-stall"}) as r:
                return r.status, (await r.json())["error"]["message"]

    status, message = _run(go())
    assert status == 400 and "kv-stall applies to a decode instance" in message


# --- `servewatch sim --pd-role` as processes ----------------------------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["--pd-role", "prefill", "--fault", "kv-stall"], "kv-stall applies to a decode instance (--pd-role decode)"),
    (["--fault", "kv-expire"], "kv-expire applies to a prefill instance (--pd-role prefill)"),
    (["--pd-role", "prefill", "--kv-lease-seconds", "0"], "kv-lease-seconds must be a number of seconds above 0"),
    (["--pd-role", "decode", "--kv-wait-timeout", "nan"], "kv-wait-timeout must be a number of seconds above 0"),
])
def test_bad_pd_arguments_fail_with_one_line(args, needle):
    proc = subprocess.run([sys.executable, "-m", "servewatch", "sim", "--port", "0", "--log-file", os.devnull, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("servewatch sim: ") and needle in lines[0], proc.stderr


def _start(role: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", "0", "--profile", "tiny-cpu",
                             "--log-file", os.devnull, "--pd-role", role],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()            # the server prints its address once it listens
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise AssertionError(f"no address line: {line!r}")
    return proc, int(match.group(1))


def _post(port: int, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_pair_of_sim_processes_names_its_own_address_for_decode_to_read_from():
    procs = []
    try:
        prefill, prefill_port = _start("prefill")
        procs.append(prefill)
        decode, decode_port = _start("decode")
        procs.append(decode)
        status, answer = _post(prefill_port, {"prompt": PROMPT, "max_tokens": 1,
                                              "kv_transfer_params": {"do_remote_decode": True}})
        params = answer["kv_transfer_params"]
        assert status == 200 and (params["remote_host"], params["remote_port"]) == ("127.0.0.1", prefill_port)
        status, answer = _post(decode_port, {"prompt": PROMPT, "max_tokens": 3, "kv_transfer_params": params})
        assert status == 200 and answer["usage"]["completion_tokens"] >= 1
        with urllib.request.urlopen(f"http://127.0.0.1:{decode_port}/metrics", timeout=10) as response:
            [engine] = read_scrape(response.read()).engines
        assert (engine.kv_transfer.external_prompt_tokens, engine.kv_transfer.transfers) == (TOKENS, 1)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            stop(proc)
            proc.stderr.close()
