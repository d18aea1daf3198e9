"""Nothing stale exported as live: when a target stops answering, `serve` stops exporting its rates and state
(generation tokens/s, steps/s, KV, queue, seconds since progress) within one poll interval, and keeps
`servewatch_target_up 0` and its verdict series; when it answers again they come back. A target's rank series go
with its process. Over real HTTP, in this process (the Prometheus side: tests/test_serve_stale_prometheus.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import aiohttp

from servewatch.detectors import registry
from servewatch.serve.config import FLEET_RECORDING, ServeConfig
from servewatch.serve.targets import spec_for
from servewatch.sinks.export.exporter import DERIVED, PREFIX
from tests.serve_harness import long_requests, running_serve, sim_target, until
from tests.test_node_view import API, CORE, RANK

INTERVAL = 0.3
DERIVED_NAMES = [PREFIX + name for name, _ in DERIVED.values()]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=150))


@contextlib.asynccontextmanager
async def sim_on(port: int = 0):
    """A simulator on 127.0.0.1:port (0: any): its URL, engine and the times of the /metrics scrapes it answered."""
    async with sim_target(port) as sim:
        yield sim.url, sim.engine, sim.scrapes


async def series_of(serve, target: str) -> dict[str, float]:
    """Every sample of serve's /metrics labelled target=..., by name and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    _, text = await serve.get("/metrics")
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("target") == target:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "target")
                out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def derived(series: dict[str, float]) -> list[str]:
    return sorted(key for key in series if key.split("{")[0] in DERIVED_NAMES)


def test_a_stopped_target_loses_its_rates_and_state_within_an_interval_and_gets_them_back(tmp_path):
    async def main():
        async with contextlib.AsyncExitStack() as stack:
            session = await stack.enter_async_context(aiohttp.ClientSession())
            dying = contextlib.AsyncExitStack()
            a_url, _, a_scrapes = await dying.enter_async_context(sim_on())
            b_url, _, _ = await stack.enter_async_context(sim_on())
            a, b = a_url.split("://")[1], b_url.split("://")[1]
            config = ServeConfig(targets=(spec_for(a_url), spec_for(b_url)), listen="127.0.0.1:0",
                                 recording=replace(FLEET_RECORDING, interval=INTERVAL, probe=False))
            serve = await stack.enter_async_context(running_serve(config))
            tasks = long_requests(session, a_url) + long_requests(session, b_url)
            try:
                async def both_generating():
                    rates = [await serve.metric(PREFIX + "generation_tokens_per_second", target=t) for t in (a, b)]
                    return all(r is not None and r > 0 for r in rates) and len(a_scrapes) >= 10
                await until(both_generating, 40, "tokens/s above 0 for both simulators and 10 scrapes of one")
                live = await series_of(serve, a)
                assert {PREFIX + "generation_tokens_per_second{}", PREFIX + "engine_steps_per_second{}",
                        PREFIX + "kv_usage_mean_ratio{}", PREFIX + "seconds_since_progress{}"} <= set(derived(live))
                # the allowance over one interval, measured here: how late this machine ran the recorder's scrapes,
                # and what one read of serve's /metrics takes
                gaps = [later - earlier for earlier, later in zip(a_scrapes, a_scrapes[1:])]
                asked = time.monotonic()
                await serve.get("/metrics")
                read_s = time.monotonic() - asked
                allowance = max(gaps) - INTERVAL + 2 * read_s + 0.1      # 0.1: until()'s own poll period

                await dying.aclose()                       # the simulator stops: connections refused
                stopped = time.monotonic()

                async def gone():
                    series = await series_of(serve, a)
                    return series if not derived(series) else None
                after = await until(gone, 20, "no rate or state series for the stopped target")
                took = time.monotonic() - stopped
                assert took <= INTERVAL + allowance, (took, INTERVAL, allowance)
                assert after[PREFIX + "target_up{}"] == 0
                verdicts = [key for key in after if key.startswith(PREFIX + "verdict_active{")]
                assert len(verdicts) == len(registry.specs())        # its verdict series stay
                assert (await serve.metric(PREFIX + "generation_tokens_per_second", target=b)) > 0
                assert await serve.metric(PREFIX + "target_up", target=b) == 1
                # the targets API says the same: no signals for a target that does not answer
                targets = {t["name"]: t for t in (await serve.json("/api/v1/targets"))["targets"]}
                assert targets[a]["up"] is False and targets[a]["signals"] == {}
                assert targets[b]["signals"]["tokens_per_s"] > 0

                # it comes back on the same port: so do its series
                port = int(a.rsplit(":", 1)[1])
                back_url, _, _ = await stack.enter_async_context(sim_on(port))
                tasks += long_requests(session, back_url)

                async def back():
                    series = await series_of(serve, a)
                    return (series.get(PREFIX + "target_up{}") == 1
                            and PREFIX + "generation_tokens_per_second{}" in series
                            and PREFIX + "kv_usage_mean_ratio{}" in series)
                await until(back, 40, "the restarted target's rates exported again")
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await dying.aclose()
    run(main())


def test_the_rank_series_of_a_process_that_is_gone_go_with_it():
    """A target with a PID: its ranks' series while the tree runs (its API server speaks no HTTP: up 0 the
    whole time, the process view alone says the ranks' state); the tree killed, the ranks' series go within an
    interval, and target_up 0 stays."""
    api = subprocess.Popen([sys.executable, "-c", API, CORE, RANK], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        port = int(api.stdout.readline().split()[0])

        async def main():
            target = spec_for(f"http://127.0.0.1:{port}", name="ranks", pid=api.pid)
            config = ServeConfig(targets=(target,), listen="127.0.0.1:0",
                                 recording=replace(FLEET_RECORDING, interval=INTERVAL, probe=False))
            async with running_serve(config) as serve:
                async def three_ranks():
                    ranks = [k for k in await series_of(serve, "ranks") if k.startswith(PREFIX + "rank_state{")]
                    return ranks if len(ranks) == 3 else None
                ranks = await until(three_ranks, 30, "the engine core's and both workers' rank series")
                assert {k.split("rank=")[1].split(",")[0] for k in ranks} == {"none", "TP0", "TP1"}
                asked = time.monotonic()
                await serve.get("/metrics")
                read_s = time.monotonic() - asked
                lateness = await _process_lateness(serve, api.pid)

                os.killpg(api.pid, signal.SIGKILL)
                api.wait(timeout=10)
                killed = time.monotonic()

                async def no_ranks():
                    series = await series_of(serve, "ranks")
                    return series if not any(k.startswith(PREFIX + "rank_state{") for k in series) else None
                after = await until(no_ranks, 20, "no rank series for the killed tree")
                took = time.monotonic() - killed
                assert took <= INTERVAL + lateness + 2 * read_s + 0.1, (took, lateness, read_s)
                assert after[PREFIX + "target_up{}"] == 0
        run(main())
    finally:
        if api.poll() is None:
            os.killpg(api.pid, signal.SIGKILL)
            api.wait(timeout=10)


async def _process_lateness(serve, pid: int) -> float:
    """How late this machine runs a process sample: the largest event-loop lag serve measured over five reads,
    and what one sample of the tree takes here."""
    from servewatch.sources.process import PsutilProbe

    lags = []
    for _ in range(5):
        lags.append(await serve.metric(PREFIX + "event_loop_lag_seconds") or 0.0)
    probe = PsutilProbe(pid)
    asked = time.monotonic()
    await asyncio.to_thread(probe.snapshot, time.time())
    return max(lags) + time.monotonic() - asked


def test_a_node_view_kept_after_failed_cycles_exports_no_rank_once_its_samples_are_old():
    """`serve --node` keeps its last good view when a cycle fails; a view older than SAMPLE_MAX_AGE_S is no
    state: its ranks' series go (they could be of processes long gone)."""
    from types import SimpleNamespace

    from servewatch.sinks.export.exporter import label
    from servewatch.sinks.export.rank_series import SAMPLE_MAX_AGE_S, NodeRankCollector
    from tests.test_detectors_ranks import T0, tree

    engine = SimpleNamespace(engine="8000", pod_uid=None)
    now = [T0 + 1.0]
    collector = NodeRankCollector("n", lambda: [(engine, tree(T0))], label, clock=lambda: now[0])

    def rows():
        return sorted((s.labels["role"], s.labels["rank"], s.labels["state"]) for s in collector.collect()[0].samples)
    assert rows() == [("engine_core", "none", "S"), ("worker", "TP0", "R"), ("worker", "TP1", "R")]
    now[0] = T0 + SAMPLE_MAX_AGE_S
    assert len(rows()) == 3                              # at the limit: still the state
    now[0] = T0 + SAMPLE_MAX_AGE_S + 0.5
    assert rows() == []
