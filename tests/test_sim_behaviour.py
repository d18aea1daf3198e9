"""The simulator's per-engine behaviour objects: a new engine is one EngineBehaviour and one registry entry.

A third engine defined only here (registered for the test) is accepted by SimConfig, drives health,
logging and the HTTP surface through its own fields, and each flag changes what the engine does."""

from __future__ import annotations

import asyncio
import dataclasses
import io

import aiohttp
import pytest
from aiohttp import web

from servewatch import dialects
from servewatch.clock import VirtualClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.behaviour import BEHAVIOURS, SGLANG, VLLM, engine_names
from servewatch.sim.server import build_app


def _register(monkeypatch, behaviour):
    monkeypatch.setitem(BEHAVIOURS, behaviour.name, behaviour)
    return behaviour


def test_registry_names_match_the_engine_dialects():
    # every registered engine is simulated: vLLM and SGLang by hand-written behaviours, llama.cpp from its dialect
    assert set(BEHAVIOURS) == {"vllm", "sglang"}
    assert engine_names() == tuple(dialect.name for dialect in dialects.registered()) == ("vllm", "sglang", "llamacpp")
    for name, behaviour in BEHAVIOURS.items():
        assert behaviour.name == name


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_the_engine_process_titles_map_to_the_dialects_roles(name):
    dialect = dialects.by_name(name)
    for title, role in dialect.engine_process_titles:
        assert dialect.role_of(title) == role, title


def test_an_unregistered_dialect_is_refused_by_name():
    with pytest.raises(ValueError, match="dialect must be one of vllm, sglang, llamacpp, not 'toy'"):
        SimConfig(dialect="toy")


def test_a_third_engine_is_one_object_and_one_registry_entry(monkeypatch):
    toy = _register(monkeypatch, dataclasses.replace(VLLM, name="toy", version="9.9.9", model_owner="toy-org",
                                                     optional_endpoints=frozenset()))
    clock = VirtualClock()
    engine = SimEngine(SimConfig(dialect="toy", startup_seconds=1.0), clock)
    assert engine.behaviour is toy
    assert engine.health() == 0                       # vLLM-like: not listening while starting
    engine.run_until(clock.now() + 2.0)
    handle = engine.submit(prompt_tokens=32, max_tokens=8, ignore_eos=True)
    engine.run_until(clock.now() + 5.0)
    assert handle.output_len == 8 and engine.health() == 200

    async def scenario():
        runner = web.AppRunner(build_app(engine), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}",
                                             timeout=aiohttp.ClientTimeout(total=10)) as session:
                async with session.get("/version") as response:
                    version = await response.json()
                async with session.get("/v1/models") as response:
                    owner = (await response.json())["data"][0]["owned_by"]
                async with session.get("/load") as response:
                    load_status = response.status
                return version, owner, load_status
        finally:
            await runner.cleanup()

    version, owner, load_status = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert version == {"version": "9.9.9"}
    assert owner == "toy-org"
    assert load_status == 404                          # vLLM's /load is an optional endpoint this engine lacks


def test_health_semantics_follow_the_behaviour_not_the_engine_name(monkeypatch):
    # vLLM's metrics and logs with SGLang's health: listening while starting, a generation probe on /health
    _register(monkeypatch, dataclasses.replace(VLLM, name="probing", listens_while_starting=True,
                                               health_generates=True))
    clock = VirtualClock()
    engine = SimEngine(SimConfig(dialect="probing", startup_seconds=1.0, health_timeout=20.0), clock)
    assert engine.health() == 503                      # listening, not ready
    engine.run_until(clock.now() + 2.0)
    engine.submit(prompt_tokens=32, max_tokens=4000, ignore_eos=True)
    engine.inject({"kind": "stall"})
    engine.run_until(clock.now() + 19.0)
    assert engine.health() == 200
    engine.run_until(clock.now() + 2.0)
    assert engine.health() == 503                      # the stall outlasted the probe's timeout
    assert "vllm:num_requests_running" in engine.metrics_text()


def test_the_stall_watchdog_and_stats_lines_are_flags(monkeypatch):
    # vLLM with SGLang's watchdog and without the periodic stats line
    _register(monkeypatch, dataclasses.replace(VLLM, name="guarded", stall_watchdog=True, periodic_stats_log=False))
    clock = VirtualClock()
    log = io.StringIO()
    engine = SimEngine(SimConfig(dialect="guarded", watchdog_timeout=30.0, log_stats_interval=5.0), clock,
                       log_stream=log)
    engine.submit(prompt_tokens=32, max_tokens=4000, ignore_eos=True)
    engine.run_until(clock.now() + 12.0)
    assert "Avg prompt throughput" not in log.getvalue()
    engine.inject({"kind": "stall"})
    engine.run_until(clock.now() + 31.0)
    assert engine.state in ("dead", "exited") and engine.death_reason == "watchdog" and engine.exit_code == 137

    plain = SimEngine(SimConfig(dialect="vllm", watchdog_timeout=30.0, log_stats_interval=5.0), VirtualClock(),
                      log_stream=(plain_log := io.StringIO()))
    plain.submit(prompt_tokens=32, max_tokens=4000, ignore_eos=True)
    plain.run_until(plain.clock.now() + 12.0)
    assert "Avg prompt throughput" in plain_log.getvalue()
    plain.inject({"kind": "stall"})
    plain.run_until(plain.clock.now() + 31.0)
    assert plain.state == "ready"                      # vLLM has no stall watchdog: it hangs
