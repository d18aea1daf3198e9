"""serve's sidecar form of `servewatch proxy`: a target's `proxy:` (config) or `--proxy NAME=HOST:PORT`
runs the proxy in front of it; its requests are one more source of that target's recorder, so a stalled
engine behind it fires requests_no_token in serve's verdict gauge; its records and GenAI metrics are
the proxy's own. Bad proxy settings are one line naming file, line and key."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
from dataclasses import replace

import aiohttp
import pytest

from servewatch.commands.serve import config_from_args
from servewatch.detectors.config import DetectorConfig
from servewatch.errors import ServewatchError
from servewatch.serve import config as serve_config
from servewatch.serve.config import FLEET_RECORDING, ServeConfig
from servewatch.serve.targets import ProxySpec, spec_for
from tests.serve_harness import running_serve, sim_target, until

pytestmark = pytest.mark.timeout(90)
VERDICT = "requests_no_token"


def _args(*argv):
    from servewatch.commands import add_command, serve

    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(), serve)
    return parser.parse_args(["serve", *argv])


def test_a_targets_proxy_is_read_from_the_config_and_the_command_line(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("targets:\n"
                    "  - url: http://10.0.0.7:8000\n    name: a\n    proxy: 0.0.0.0:8080\n"
                    "  - url: http://10.0.0.8:8000\n    name: b\n    proxy:\n      listen: 127.0.0.1:8081\n"
                    "      records: /tmp/b.jsonl\n      records_keep: 2\n      first_byte_timeout: 2m\n      keep_itl: true\n"
                    "      tenant_key_file: /etc/servewatch/tenant.key\n"
                    "  - url: http://10.0.0.9:8000\n    name: c\n")
    cfg = serve_config.load(str(path))
    a, b, c = cfg.targets
    assert a.proxy == ProxySpec(listen="0.0.0.0:8080")
    assert (b.proxy.listen, b.proxy.records, b.proxy.records_keep, b.proxy.first_byte_timeout_s, b.proxy.keep_itl) == \
        ("127.0.0.1:8081", "/tmp/b.jsonl", 2, 120.0, True)
    assert a.proxy.keep_itl is False and b.proxy.tenant_key_file == "/etc/servewatch/tenant.key"
    from servewatch.serve.sidecar import Sidecar

    assert Sidecar(b).proxy.config.keep_itl and not Sidecar(a).proxy.config.keep_itl
    assert c.proxy is None
    cfg = config_from_args(_args("--config", str(path), "--target", "d=http://10.0.0.10:8000",
                                       "--proxy", "d=127.0.0.1:8082"))
    assert [t.proxy.listen if t.proxy else None for t in cfg.targets] == \
        ["0.0.0.0:8080", "127.0.0.1:8081", None, "127.0.0.1:8082"]


@pytest.mark.parametrize("text, expected", [
    ("    proxy: '8080'\n", ":4: targets[0].proxy.listen: '8080': expected HOST:PORT"),
    ("    proxy: 8080\n", ":4: targets[0].proxy: a listen address (HOST:PORT) or a mapping"),
    ("    proxy: {listen: 'a:1', colour: red}\n", ":4: targets[0].proxy.colour: unknown key (known: listen,"),
    ("    proxy: {records: /x}\n", ":4: targets[0].proxy.listen: HOST:PORT is required"),
    ("    proxy: {listen: 'a:1', records_keep: 0}\n", ":4: targets[0].proxy.records_keep: a positive whole number"),
    ("    proxy: {listen: 'a:1', read_timeout: soon}\n", ":4: targets[0].proxy.read_timeout: 'soon' is not a duration"),
    ("    proxy: [a]\n", ":4: targets[0].proxy: a listen address (HOST:PORT) or a mapping"),
    ("    proxy: {listen: 'a:1', keep_itl: 'yes'}\n", ":4: targets[0].proxy.keep_itl: true or false is expected"),
    ("    proxy: {listen: 'a:1', tenant_key_file: 3}\n", ":4: targets[0].proxy.tenant_key_file: a file path"),
])
def test_bad_proxy_settings_name_file_line_and_key(tmp_path, text, expected):
    path = tmp_path / "serve.yaml"
    path.write_text("targets:\n  - url: http://10.0.0.7:8000\n    name: a\n" + text)
    with pytest.raises(ServewatchError, match=":[0-9]+: ") as info:
        serve_config.load(str(path))
    assert expected in str(info.value)


def test_bad_proxy_flags_are_one_line():
    with pytest.raises(ServewatchError, match="no target named x \\(targets: a\\)"):
        config_from_args(_args("--target", "a=http://10.0.0.7:8000", "--proxy", "x=127.0.0.1:1"))
    with pytest.raises(ServewatchError, match="expected NAME=HOST:PORT"):
        config_from_args(_args("--target", "a=http://10.0.0.7:8000", "--proxy", "127.0.0.1:1"))
    with pytest.raises(ServewatchError, match="plain http:// URL only"):
        config_from_args(_args("--target", "a=https://10.0.0.7:8000", "--proxy", "a=127.0.0.1:1"))


def test_a_proxy_that_cannot_listen_stops_serve_with_one_line():
    from tests.test_serve_cli import cli, one_line

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_line(cli("--target", "a=http://127.0.0.1:1", "--proxy", f"a=127.0.0.1:{port}",
                            "--listen", "127.0.0.1:0"))
    assert line.startswith(f"servewatch serve: a: proxy listen 127.0.0.1:{port}: ") and "in use" in line


def test_a_sidecar_tenant_key_that_cannot_be_read_stops_serve_with_one_line(tmp_path):
    from tests.test_serve_cli import cli, one_line

    path = tmp_path / "serve.yaml"
    key = tmp_path / "short.key"
    key.write_text("abc\n")
    path.write_text(f"targets:\n  - url: http://127.0.0.1:1\n    name: a\n    proxy:\n      listen: 127.0.0.1:0\n"
                    f"      tenant_key_file: {key}\n")
    line = one_line(cli("--config", str(path), "--listen", "127.0.0.1:0"))
    assert line == f"servewatch serve: a: proxy tenant_key_file {key}: holds 3 bytes; a key of at least 16 is expected"


async def _stream(url: str, session: aiohttp.ClientSession, model: str, max_tokens: int) -> dict | None:
    body = {"model": model, "prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
        async with session.post(url + "/v1/completions", json=body,
                                timeout=aiohttp.ClientTimeout(total=60)) as response:
            payload = await response.read()
            return {"status": response.status, "done": payload.rstrip().endswith(b"data: [DONE]")}
    return None


def test_the_sidecar_records_requests_and_its_stalled_engine_fires_requests_no_token(tmp_path):
    records = tmp_path / "a.jsonl"
    floor = 1.0

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            sim = await stack.enter_async_context(sim_target())
            model = sim.engine.config.model_name
            spec = spec_for(sim.url, "a", proxy=ProxySpec(listen="127.0.0.1:0", records=str(records)))
            config = ServeConfig(targets=(spec,), listen="127.0.0.1:0",
                                 recording=replace(FLEET_RECORDING, interval=0.2, probe=False,
                                                   detectors=DetectorConfig(no_token_floor_s=floor)))
            serve = await stack.enter_async_context(running_serve(config))
            session = await stack.enter_async_context(aiohttp.ClientSession())

            async def proxy_port():
                status, text = await serve.get("/targets/a/proxy/metrics")
                return status == 200 and "servewatch_proxy_in_flight 0" in text
            await until(proxy_port, 10, "the sidecar's metrics")
            [target] = (await serve.json("/api/v1/targets"))["targets"]
            port = target["proxy_port"]
            proxied = f"http://127.0.0.1:{port}"

            # requests through the sidecar are answered as the engine answers them, and recorded
            answers = await asyncio.gather(*(_stream(proxied, session, model, 8) for _ in range(6)))
            assert all(a == {"status": 200, "done": True} for a in answers), answers
            _, text = await serve.get("/targets/a/proxy/metrics")
            assert 'servewatch_proxy_requests_total{outcome="ok"} 6' in text
            assert "gen_ai_server_time_to_first_token_seconds_bucket" in text

            # the engine stalls under load through the proxy: the target's recorder fires requests_no_token
            load = [asyncio.create_task(_stream(proxied, session, model, 3000)) for _ in range(4)]

            async def streaming():
                _, text = await serve.get("/targets/a/proxy/metrics")
                return "servewatch_proxy_in_flight 4" in text and "servewatch_proxy_waiting_first_token 0" in text
            await until(streaming, 20, "four streams flowing through the sidecar")
            assert await serve.metric("servewatch_verdict_active", target="a", verdict=VERDICT) == 0
            await sim.fault(session, "stall")

            async def fired():
                return await serve.metric("servewatch_verdict_active", target="a", verdict=VERDICT) == 1
            await until(fired, 20, VERDICT)
            verdict = next(v for v in (await serve.json("/api/v1/verdicts"))["active"] if v["verdict"] == VERDICT)
            for task in load:
                task.cancel()
            await asyncio.gather(*load, return_exceptions=True)
            return verdict

    verdict = asyncio.run(asyncio.wait_for(main(), 80))
    assert verdict["target"] == "a" and verdict["details"]["in_flight"] == 4
    assert verdict["details"]["quiet_s"] > floor
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(lines) >= 6 and sum(1 for r in lines if r.get("error") is None) >= 6
    assert all("prompt" not in r and "text" not in r for r in lines)       # no text in the records

