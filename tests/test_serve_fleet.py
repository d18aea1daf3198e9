"""`serve` over real HTTP, in this process: simulators and hostile servers as targets. A stall on one
target shows in its verdict gauge and fails its livez while the healthy one stays 0 and 200; hostile
targets are typed failures that never slow the others down; a dead target backs off and shows up 0;
file_sd changes are followed and a broken file keeps the last good set."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
import os
import time

import aiohttp

from servewatch.clock import iso8601
from servewatch.detectors import registry
from servewatch.serve.config import FLEET_RECORDING, ServeConfig
from servewatch.serve.targets import spec_for
from servewatch.bundle.verify import verify_bundle
from tests.serve_harness import hostile_target, running_serve, sim_target, until

STALL = "alive_health_ok_no_progress"
INTERVAL = 0.3


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=100))


def name_of(url: str) -> str:
    return url.split("://", 1)[1]


def test_stall_shows_in_the_gauge_and_livez_while_hostile_targets_fail_typed_and_delay_nothing(tmp_path, capfd):
    async def main():
        async with contextlib.AsyncExitStack() as stack:
            a = await stack.enter_async_context(sim_target())
            b = await stack.enter_async_context(sim_target())
            hostile = {kind: await stack.enter_async_context(hostile_target(kind))
                       for kind in ("hang", "garbage", "huge", "series")}
            dead = "http://127.0.0.1:1"
            config = ServeConfig(targets=tuple(spec_for(u) for u in (a.url, b.url, *hostile.values(), dead)),
                                 listen="127.0.0.1:0", recording=replace(FLEET_RECORDING, interval=INTERVAL), out=str(tmp_path / "bundles"),
                                 sinks={"alertmanager": "http://127.0.0.1:1"})     # unreachable: said, watching goes on
            session = await stack.enter_async_context(aiohttp.ClientSession())
            serve = await stack.enter_async_context(running_serve(config))
            load = a.load(session) + b.load(session)
            try:
                # every registered verdict has a 0 gauge per target from the start (the alert rules rely on it)
                for spec in registry.specs():
                    assert await serve.metric("servewatch_verdict_active", target=name_of(b.url),
                                              verdict=spec.name, severity=spec.severity) == 0

                async def moving():
                    targets = (await serve.json("/api/v1/targets"))["targets"]
                    rates = {t["name"]: t["signals"].get("tokens_per_s", 0) for t in targets}
                    return rates[name_of(a.url)] > 0 and rates[name_of(b.url)] > 0
                await until(moving, 30, "tokens moving on both simulators")
                assert (await serve.get(f"/targets/{name_of(a.url)}/livez"))[0] == 200

                await a.fault(session, "stall")

                async def stalled():
                    return await serve.metric("servewatch_verdict_active", target=name_of(a.url), verdict=STALL,
                                              severity="page") == 1
                await until(stalled, 30, "the stall gauge at 1")
                status, text = await serve.get(f"/targets/{name_of(a.url)}/livez")
                assert status == 503 and text.startswith(f"{STALL} (restart): ")
                assert (await serve.get(f"/targets/{name_of(b.url)}/livez"))[0] == 200
                assert (await serve.get(f"/targets/{name_of(b.url)}/readyz"))[0] == 200
                assert await serve.metric("servewatch_verdict_active", target=name_of(b.url), verdict=STALL) == 0
                assert await serve.metric("servewatch_verdicts_fired_total", target=name_of(a.url),
                                          verdict=STALL) == 1
                assert await serve.metric("servewatch_seconds_since_progress", target=name_of(a.url)) >= 1.0
                verdicts = await serve.json("/api/v1/verdicts")
                active = [v for v in verdicts["active"] if v["verdict"] == STALL]
                assert [v["target"] for v in active] == [name_of(a.url)] and active[0]["evidence"]
                assert (await serve.get("/targets/nope/livez"))[0] == 404
                # its incident bundle, under the target's own directory, verifies
                recent = [v for v in verdicts["recent"] if v["verdict"] == STALL]
                bundle = recent[0]["bundle"]
                assert os.path.dirname(bundle) == str(tmp_path / "bundles" / name_of(a.url))
                assert verify_bundle(bundle).verdicts_checked >= 1

                # hostile targets: typed failures, up 0
                for kind, failure in (("garbage", "parse"), ("huge", "too_large"), ("series", "too_many_series")):
                    target = name_of(hostile[kind])
                    assert await serve.metric("servewatch_scrape_failures_total", target=target, kind=failure) >= 1
                    assert await serve.metric("servewatch_target_up", target=target) == 0

                # the dead target: failed probes counted, backing off, up 0
                async def backing_off():
                    targets = {t["name"]: t for t in (await serve.json("/api/v1/targets"))["targets"]}
                    return targets[name_of(dead)]["state"] == "backoff"
                await until(backing_off, 20, "the dead target backing off")
                assert await serve.metric("servewatch_probe_failures_total", target=name_of(dead)) >= 3
                assert await serve.metric("servewatch_target_up", target=name_of(dead)) == 0
                assert await serve.metric("servewatch_targets", state="backoff") >= 1

                # the hanging target never delayed the healthy one's scrapes (its own take 5 s to time out)
                async def hang_timed_out():
                    return await serve.metric("servewatch_scrape_failures_total", target=name_of(hostile["hang"]),
                                              kind="timeout")
                await until(hang_timed_out, 20, "the hanging target's scrape timing out")

                async def enough_scrapes():     # evidence over the hang's time-outs, however slow the machine
                    return len(b.scrapes) >= 16
                await until(enough_scrapes, 30, "16 scrapes of the healthy target")
                gaps = [later - earlier for earlier, later in zip(b.scrapes, b.scrapes[1:])]
                assert len(gaps) >= 15 and max(gaps) < INTERVAL + 1.5, max(gaps)

                await a.fault(session, "clear")

                async def cleared():
                    return await serve.metric("servewatch_verdict_active", target=name_of(a.url), verdict=STALL) == 0
                await until(cleared, 30, "the stall gauge back at 0")
                assert (await serve.get(f"/targets/{name_of(a.url)}/livez"))[0] == 200
                # the clearing, at the time serve's recorder saw it end: after the stall began, before now
                ended = [v for v in (await serve.json("/api/v1/verdicts"))["cleared"]
                         if v["verdict"] == STALL and v["target"] == name_of(a.url)]
                assert len(ended) == 1 and ended[0]["onset"] == active[0]["onset"]
                assert active[0]["onset"] < ended[0]["t"] <= iso8601(time.time())
                assert ended[0]["duration_s"] > 0
                said = [line for line in capfd.readouterr().err.splitlines() if "alertmanager" in line]
                assert said == ["servewatch serve: alertmanager http://127.0.0.1:1/api/v2/alerts: unreachable "
                                "(connection refused); retrying with backoff, watching continues"]
            finally:
                for task in load:
                    task.cancel()
                await asyncio.gather(*load, return_exceptions=True)
    run(main())


def test_file_sd_changes_are_followed_and_a_broken_file_keeps_the_last_good_set(tmp_path):
    sd = tmp_path / "targets.json"

    def write(text):
        before = os.stat(sd).st_mtime_ns if sd.exists() else 0
        sd.write_text(text)
        if before:
            os.utime(sd, ns=(before + 10**9, before + 10**9))

    async def main():
        async with sim_target() as a, sim_target() as b:
            write(f'[{{"targets": ["{name_of(a.url)}"]}}]')
            config = ServeConfig(file_sd=(str(sd),), listen="127.0.0.1:0", recording=replace(FLEET_RECORDING, interval=INTERVAL))
            async with running_serve(config) as serve:
                async def names():
                    return sorted(t["name"] for t in (await serve.json("/api/v1/targets"))["targets"])
                assert await names() == [name_of(a.url)]
                write(f'[{{"targets": ["{name_of(a.url)}", "{name_of(b.url)}"]}}]')
                await until(lambda: _equals(names, sorted([name_of(a.url), name_of(b.url)])), 20, "b added")
                write(f'[{{"targets": ["{name_of(a.url)}"],\n  "labels": 7}}]')

                async def counted():
                    return await serve.metric("servewatch_config_reload_errors_total") == 1
                await until(counted, 20, "the reload error counted")
                assert await names() == sorted([name_of(a.url), name_of(b.url)])
                write("[]")
                await until(lambda: _equals(names, []), 20, "both removed")
                assert await serve.metric("servewatch_target_up", target=name_of(a.url)) is None
    run(main())


async def _equals(get, expected):
    return await get() == expected
