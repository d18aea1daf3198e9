"""A deployment watched as one target (issue 52): `watch --prefill URL --decode URL`'s recorder over a simulator pair
in this process (tests/pd_harness.py): each instance on its own timeline, the pair's verdicts on its faults, the side
at fault named, and none on a healthy pair under steady load."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import pytest

from servewatch.actions.policy import GuardConfig, action_for
from servewatch.clock import RealClock
from servewatch.detectors import DetectorConfig, registry
from servewatch.detectors.verdict import PAGE, RESTART
from servewatch.errors import ServewatchError
from servewatch.transport.contract import Http1Transport
from servewatch.watch.deployment import PairMember, build, members_from
from servewatch.watch.options import RecordingOptions
from tests.pd_harness import REMOTE_DECODE, Pair, pd_pair
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.server import build_app
from tests.serve_harness import _site, sim_target

PAIR = ("kv_transfer_stall", "kv_expired", "pd_bypass", "kv_transfer_failures")
PROMPT = "hello world " * 40
INTERVAL = 0.2
# The bounds shortened for a test (each a setting): the stall after 2 s of waiting, counters over 10 s.
CONFIG = DetectorConfig(kv_stall_s=2.0, pd_window_s=10.0, pd_bypass_min_tokens=200.0)
DEADLINE_S = 20.0          # the longest bound here (10 s) plus the scrape cadence and a loaded machine's allowance


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


def members(pair_urls) -> tuple[PairMember, ...]:
    prefill, decode = pair_urls
    return members_from([prefill], [decode])


@contextlib.asynccontextmanager
async def recording(pair_urls, config: DetectorConfig = CONFIG):
    options = RecordingOptions(url="", interval=INTERVAL, probe=False, detectors=config)
    transport = Http1Transport()
    recorder = build(members(pair_urls), options, transport, RealClock())
    task = asyncio.create_task(recorder.run(None))
    try:
        yield recorder
    finally:
        recorder.stop()
        await asyncio.gather(task, return_exceptions=True)
        await transport.close()


async def fired(recorder, name: str, deadline_s: float = DEADLINE_S):
    """The first firing of `name`, waited for on the recorder's own record with a deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for record in recorder.fired:
            if record.verdict.name == name:
                return record.verdict
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} did not fire in {deadline_s} s; fired: {[f.verdict.name for f in recorder.fired]}")


async def steady(pair: Pair, session, seconds: float, every_s: float = 0.3) -> int:
    ok = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        legs = await pair.complete(session, prompt=PROMPT, max_tokens=4)
        ok += legs.ok
        await asyncio.sleep(every_s)
    return ok


def test_members_are_named_by_host_and_port_and_a_bad_deployment_is_one_line():
    found = members_from(["http://127.0.0.1:8100"], ["http://127.0.0.1:8200/", "http://127.0.0.1:8201"])
    assert [(m.name, m.role, m.url) for m in found] == [
        ("127.0.0.1:8100", "prefill", "http://127.0.0.1:8100"), ("127.0.0.1:8200", "decode", "http://127.0.0.1:8200"),
        ("127.0.0.1:8201", "decode", "http://127.0.0.1:8201")]
    with pytest.raises(ServewatchError, match="takes both sides"):
        members_from(["http://127.0.0.1:8100"], [])
    with pytest.raises(ServewatchError, match="named twice"):
        members_from(["http://127.0.0.1:8100"], ["http://127.0.0.1:8100"])


def test_a_healthy_pair_under_steady_load_gives_no_pair_verdict():
    run(_healthy())


async def _healthy():
    async with pd_pair("vllm") as pair, aiohttp.ClientSession() as session:
        async with recording((pair.prefill.url, pair.decode.url)) as recorder:
            ok = await steady(pair, session, 12.0)     # longer than every pair verdict's window (10 s)
            window = recorder.ring.window()
    assert ok >= 10
    assert [(i.role, len(i.window.metrics) > 20) for i in window.instances] == [("prefill", True), ("decode", True)]
    decode = window.instances[1].window.good_metrics()[-1].engines[0].kv_transfer
    assert decode.external_prompt_tokens > 0           # the KV did come by transfer
    assert [f.verdict.name for f in recorder.fired if f.verdict.name in PAIR or registry.action_for(f.verdict)
            == RESTART] == []


def test_a_prefill_killed_after_its_step_stalls_decode_and_only_the_prefill_is_to_restart():
    run(_killed_prefill())


async def _killed_prefill():
    engine = SimEngine(SimConfig(max_num_seqs=8, dialect="vllm", pd_role="prefill", kv_lease_seconds=300.0),
                       RealClock())
    runner, prefill_url = await _site(build_app(engine))
    stepping = asyncio.create_task(engine.run_realtime())
    host, _, port = prefill_url.removeprefix("http://").rpartition(":")
    engine.pd.host, engine.pd.port = host, int(port)
    try:
        async with sim_target(dialect="vllm", pd_role="decode", kv_wait_timeout=60.0) as decode, \
                aiohttp.ClientSession() as session:
            async with recording((prefill_url, decode.url)) as recorder:
                model = decode.engine.config.model_name
                async with session.post(prefill_url + "/v1/completions", json={
                        "model": model, "prompt": PROMPT, "max_tokens": 1,
                        "kv_transfer_params": dict(REMOTE_DECODE)}) as response:
                    params = (await response.json())["kv_transfer_params"]
                await runner.cleanup()            # the prefill dies after its step: decode finds nobody to read from
                stepping.cancel()
                waiting = asyncio.create_task(_post(session, decode.url, {
                    "model": model, "prompt": PROMPT, "max_tokens": 4, "kv_transfer_params": params}))
                stall = await fired(recorder, "kv_transfer_stall")
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
    finally:
        await runner.cleanup()
        stepping.cancel()
        await asyncio.gather(stepping, return_exceptions=True)
    prefill_name = prefill_url.removeprefix("http://")
    assert stall.details["prefill"] == prefill_name and stall.details["act_on"] == prefill_name
    assert stall.details["prefill_state"] == "silent" and stall.action == RESTART
    assert 2.0 <= stall.since_s <= 2.0 + 1.0                   # the bound, plus the scrape cadence and load
    assert f"prefill {prefill_name}: /health has not answered 2xx" in stall.why
    decode_name = decode.url.removeprefix("http://")
    assert action_for(stall.name, GuardConfig(instance=prefill_name), stall.details, RESTART) is not None
    assert action_for(stall.name, GuardConfig(instance=decode_name), stall.details, RESTART) is None


async def _post(session, url: str, body: dict):
    with contextlib.suppress(Exception):
        async with session.post(url + "/v1/completions", json=body) as response:
            await response.read()


@pytest.mark.parametrize("fault, side, verdict", [
    ("pd-bypass", "decode", "pd_bypass"), ("kv-expire", "prefill", "kv_expired"),
    ("kv-fail", "decode", "kv_transfer_failures")])
def test_each_pair_fault_gives_its_verdict_as_a_page(fault, side, verdict):
    run(_fault(fault, side, verdict))


async def _fault(fault, side, verdict):
    async with pd_pair("vllm", prefill={"kv_lease_seconds": 0.05} if fault == "kv-expire" else None) as pair, \
            aiohttp.ClientSession() as session:
        async with recording((pair.prefill.url, pair.decode.url)) as recorder:
            await steady(pair, session, 1.0)
            await getattr(pair, side).fault(session, fault)
            load = asyncio.create_task(steady(pair, session, DEADLINE_S, every_s=0.1))
            try:
                found = await fired(recorder, verdict)
            finally:
                load.cancel()
                await asyncio.gather(load, return_exceptions=True)
            others = [f.verdict.name for f in recorder.fired if f.verdict.name in PAIR and f.verdict.name != verdict]
    assert registry.action_for(found) == PAGE and "act_on" not in found.details
    assert others == []


# --- serve: a deployment target -----------------------------------------------------------------------------

def test_serves_config_takes_a_deployment_target_and_says_a_bad_one_in_one_line(tmp_path):
    from servewatch.serve import config as serve_config
    from servewatch.serve.document import DocumentError

    path = tmp_path / "serve.yaml"
    path.write_text("targets:\n  - name: pair-a\n    prefill: [http://127.0.0.1:8100]\n"
                    "    decode: [http://127.0.0.1:8200, http://127.0.0.1:8201]\n")
    [spec] = serve_config.load(str(path)).targets
    assert (spec.name, spec.url, spec.prefill, spec.decode) == (
        "pair-a", "http://127.0.0.1:8100", ("http://127.0.0.1:8100",), ("http://127.0.0.1:8200", "http://127.0.0.1:8201"))
    path.write_text("targets:\n  - prefill: [http://127.0.0.1:8100]\n")
    with pytest.raises(DocumentError, match="decode instances' URLs"):
        serve_config.load(str(path))
    path.write_text("targets:\n  - prefill: [http://127.0.0.1:8100]\n    decode: [http://127.0.0.1:8200]\n    pid: 7\n")
    with pytest.raises(DocumentError, match="name, prefill and decode only"):
        serve_config.load(str(path))


def test_serve_a_dead_prefill_fails_the_pairs_readiness_and_its_own_livez_never_decodes():
    run(_serve_dead_prefill())


async def _serve_dead_prefill():
    from dataclasses import replace

    from servewatch.serve.config import FLEET_RECORDING, ServeConfig
    from servewatch.serve.targets import spec_for
    from tests.serve_harness import running_serve, until

    engine = SimEngine(SimConfig(max_num_seqs=8, dialect="vllm", pd_role="prefill", kv_lease_seconds=300.0),
                       RealClock())
    runner, prefill_url = await _site(build_app(engine))
    stepping = asyncio.create_task(engine.run_realtime())
    host, _, port = prefill_url.removeprefix("http://").rpartition(":")
    engine.pd.host, engine.pd.port = host, int(port)
    try:
        async with sim_target(dialect="vllm", pd_role="decode", kv_wait_timeout=60.0) as decode, \
                aiohttp.ClientSession() as session:
            spec = replace(spec_for(prefill_url, "pair-a"), prefill=(prefill_url,), decode=(decode.url,))
            config = ServeConfig(targets=(spec,), listen="127.0.0.1:0",
                                 recording=replace(FLEET_RECORDING, interval=INTERVAL, probe=False, detectors=CONFIG))
            p, d = prefill_url.removeprefix("http://"), decode.url.removeprefix("http://")
            async with running_serve(config) as serve:
                async def status(path):
                    return (await serve.get(path))[0]
                await until(lambda: _is(status("/targets/pair-a/readyz"), 200), 20, "the pair ready")
                model = decode.engine.config.model_name
                async with session.post(prefill_url + "/v1/completions", json={
                        "model": model, "prompt": PROMPT, "max_tokens": 1,
                        "kv_transfer_params": dict(REMOTE_DECODE)}) as response:
                    params = (await response.json())["kv_transfer_params"]
                await runner.cleanup()          # the prefill dies after its step
                stepping.cancel()
                waiting = asyncio.create_task(_post(session, decode.url, {
                    "model": model, "prompt": PROMPT, "max_tokens": 4, "kv_transfer_params": params}))
                await until(lambda: _is(status(f"/targets/pair-a/livez?instance={p}"), 503), DEADLINE_S,
                            "the prefill's livez failing on kv_transfer_stall")
                said = await serve.get("/targets/pair-a/readyz")
                decode_live = await serve.get(f"/targets/pair-a/livez?instance={d}")
                decode_ready = await serve.get(f"/targets/pair-a/readyz?instance={d}")
                prefill_live = await serve.get(f"/targets/pair-a/livez?instance={p}")
                unknown = await serve.get("/targets/pair-a/livez?instance=nobody:1")
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
    finally:
        await runner.cleanup()
        stepping.cancel()
        await asyncio.gather(stepping, return_exceptions=True)
    assert said[0] == 503 and said[1].startswith(f"no prefill instance is ready ({p}: ")
    assert decode_live == (200, "ok\n") and decode_ready == (200, "ok\n")
    assert prefill_live[1].startswith("kv_transfer_stall (restart): decode ")
    assert unknown[0] == 404


async def _is(awaitable, wanted) -> bool:
    return await awaitable == wanted


def test_an_instance_whose_series_say_the_other_role_is_said():
    from servewatch.engine.state import EngineState, KvTransfer
    from servewatch.timeline.samples import MetricsSample
    from servewatch.timeline.window import InstanceWindow, Window
    from servewatch.watch.deployment import role_mismatch

    def said(role: str, series_role: str | None):
        state = EngineState("vllm", "vllm-0.32", {"engine": "0"}, kv_transfer=KvTransfer(role=series_role))
        window = Window(metrics=(MetricsSample(1.0, "vllm", "vllm-0.32", (state,)),))
        return role_mismatch(InstanceWindow("127.0.0.1:8200", role, window))

    assert said("decode", "prefill") == ("decode 127.0.0.1:8200: its series say it is a prefill instance; judged as "
                                         "the decode the deployment names")
    assert said("decode", "decode") is None and said("decode", None) is None
