"""serve with the real tools it speaks to (Debian packages `prometheus` and `prometheus-alertmanager`):
Prometheus scrapes serve, which watches two simulators, and a stall injected into one shows in a PromQL
query of the verdict gauge; Alertmanager receives serve's alert and delivers it, then its resolution,
to a webhook receiver written here."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
import socket
import subprocess

import aiohttp
import pytest
from aiohttp import web

from servewatch.serve.config import FLEET_RECORDING, ServeConfig
from servewatch.serve.targets import spec_for
from tests.serve_harness import running_serve, sim_target, until
from tests.processes import stop
from tests.tools import needs_tool, tool_path

pytestmark = pytest.mark.prometheus
STALL = "alive_health_ok_no_progress"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def process(args, ready_url: str, log):
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        async with aiohttp.ClientSession() as session:
            async def ready():
                if proc.poll() is not None:
                    raise AssertionError(f"{args[0]} exited with {proc.returncode}")
                try:
                    async with session.get(ready_url, timeout=aiohttp.ClientTimeout(total=2)) as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False
            await until(ready, 60, f"{args[0]} ready")
        yield proc
    finally:
        stop(proc, timeout=20)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=150))


@needs_tool("prometheus")
def test_prometheus_sees_the_stall_in_a_promql_query(tmp_path):
    async def main():
        async with sim_target() as a, sim_target() as b, aiohttp.ClientSession() as session:
            config = ServeConfig(targets=(spec_for(a.url, "sim-a"), spec_for(b.url, "sim-b")),
                                 listen="127.0.0.1:0", recording=replace(FLEET_RECORDING, interval=0.3))
            async with running_serve(config) as serve:
                serve_port = serve.url.rsplit(":", 1)[1]
                (tmp_path / "prometheus.yml").write_text(
                    "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    "scrape_configs:\n  - job_name: servewatch\n"
                    f"    static_configs: [{{targets: ['127.0.0.1:{serve_port}']}}]\n")
                port = free_port()
                api = f"http://127.0.0.1:{port}"
                with open(tmp_path / "prometheus.log", "wb") as log:
                    async with process([tool_path("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                                        f"--storage.tsdb.path={tmp_path / 'data'}",
                                        f"--web.listen-address=127.0.0.1:{port}"], api + "/-/ready", log):
                        load = a.load(session) + b.load(session)
                        try:
                            async def query(promql):
                                async with session.get(api + "/api/v1/query", params={"query": promql}) as response:
                                    body = await response.json()
                                return {r["metric"].get("target"): float(r["value"][1])
                                        for r in body["data"]["result"]}

                            async def both_moving():
                                rates = await query("servewatch_generation_tokens_per_second")
                                return rates.get("sim-a", 0) > 0 and rates.get("sim-b", 0) > 0
                            await until(both_moving, 40, "Prometheus seeing tokens move on both")
                            await a.fault(session, "stall")
                            stall_query = f'servewatch_verdict_active{{verdict="{STALL}"}}'

                            async def stalled():
                                values = await query(stall_query)
                                return values if values.get("sim-a") == 1 else None
                            values = await until(stalled, 40, "the stall in PromQL")
                            assert values == {"sim-a": 1.0, "sim-b": 0.0}
                            up = await query("servewatch_target_up")
                            assert up == {"sim-a": 1.0, "sim-b": 1.0}    # a stalled server still answers
                        finally:
                            for task in load:
                                task.cancel()
                            await asyncio.gather(*load, return_exceptions=True)
    run(main())


@needs_tool("prometheus")
def test_the_fleets_prometheus_is_service_discovery(tmp_path):
    from servewatch.serve.prometheus_sd import PrometheusSdConfig

    async def main():
        async with sim_target() as a, sim_target() as b:
            (tmp_path / "prometheus.yml").write_text(
                "global: {scrape_interval: 1s}\nscrape_configs:\n"
                f"  - job_name: vllm\n    static_configs: [{{targets: ['{a.url[7:]}', '{b.url[7:]}']}}]\n"
                "  - job_name: prometheus\n    static_configs: [{targets: ['127.0.0.1:1']}]\n")
            port = free_port()
            api = f"http://127.0.0.1:{port}"
            with open(tmp_path / "prometheus.log", "wb") as log:
                async with process([tool_path("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={tmp_path / 'data'}",
                                    f"--web.listen-address=127.0.0.1:{port}"], api + "/-/ready", log):
                    config = ServeConfig(prometheus_sd=PrometheusSdConfig(api, job="vllm", refresh_s=1.0),
                                         listen="127.0.0.1:0", recording=replace(FLEET_RECORDING, interval=0.5))
                    async with running_serve(config) as serve:
                        async def both():
                            targets = (await serve.json("/api/v1/targets"))["targets"]
                            up = sorted(t["url"] for t in targets if t["up"])
                            return up if len(up) == 2 else None
                        assert await until(both, 40, "both simulators discovered and up") == sorted([a.url, b.url])
                        assert len((await serve.json("/api/v1/targets"))["targets"]) == 2   # not the other job
    run(main())


@needs_tool("alertmanager")
def test_alertmanager_delivers_the_alert_and_its_resolution(tmp_path):
    async def main():
        received: list[dict] = []

        async def hook(request):
            received.append(await request.json())
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_post("/hook", hook)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        hook_port = site._server.sockets[0].getsockname()[1]
        port = free_port()
        am = f"http://127.0.0.1:{port}"
        (tmp_path / "alertmanager.yml").write_text(
            "route: {receiver: hook, group_by: [alertname, target], group_wait: 0s, group_interval: 1s, "
            "repeat_interval: 1h}\n"
            f"receivers:\n  - name: hook\n    webhook_configs: [{{url: 'http://127.0.0.1:{hook_port}/hook', "
            "send_resolved: true}]\n")
        try:
            with open(tmp_path / "alertmanager.log", "wb") as log:
                async with process([tool_path("alertmanager"), f"--config.file={tmp_path / 'alertmanager.yml'}",
                                    f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{port}",
                                    "--cluster.listen-address="], am + "/-/ready", log):
                    async with sim_target() as a, aiohttp.ClientSession() as session:
                        config = ServeConfig(targets=(spec_for(a.url, "sim-a"),), listen="127.0.0.1:0",
                                             recording=replace(FLEET_RECORDING, interval=0.3),
                                             sinks={"alertmanager": am})
                        async with running_serve(config) as serve:
                            load = a.load(session)
                            try:
                                async def moving():
                                    targets = (await serve.json("/api/v1/targets"))["targets"]
                                    return targets[0]["signals"].get("tokens_per_s", 0) > 0
                                await until(moving, 30, "tokens moving")
                                await a.fault(session, "stall")

                                def notified(status):
                                    async def check():
                                        return [alert for message in received for alert in message["alerts"]
                                                if alert["status"] == status and alert["labels"]["alertname"] == STALL]
                                    return check
                                firing = (await until(notified("firing"), 60, "a firing notification"))[0]
                                assert firing["labels"] == {"alertname": STALL, "target": "sim-a", "severity": "page", "action": "restart"}
                                assert "no token" in firing["annotations"]["summary"]
                                assert firing["annotations"]["description"]          # the why line, with numbers
                                assert "drain" in firing["annotations"]["safe_action"]
                                await a.fault(session, "clear")
                                resolved = (await until(notified("resolved"), 60, "a resolved notification"))[0]
                                assert resolved["labels"] == firing["labels"]
                            finally:
                                for task in load:
                                    task.cancel()
                                await asyncio.gather(*load, return_exceptions=True)
        finally:
            await runner.cleanup()
    run(main())
