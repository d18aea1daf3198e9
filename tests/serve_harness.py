"""Targets for serve's tests, in this process over real HTTP: simulators (with a count of the scrapes
each answered) and hostile servers; and serve itself on an ephemeral port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import aiohttp
from aiohttp import web

from servewatch.clock import RealClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.server import build_app


async def _site(app: web.Application, port: int = 0) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


class Sim:
    def __init__(self, engine, url, scrapes):
        self.engine, self.url, self.scrapes = engine, url, scrapes

    async def fault(self, session, kind: str) -> None:
        async with session.post(self.url + "/_sim/fault", json={"kind": kind}) as response:
            assert response.status == 200, await response.text()

    def load(self, session, n: int = 4) -> list[asyncio.Task]:
        return long_requests(session, self.url, n, self.engine.config.model_name)


def long_requests(session, url: str, n: int = 4, model: str = SimConfig().model_name) -> list[asyncio.Task]:
    """`n` completions of 1,500 tokens sent to `url` as tasks (their failures ignored: the target may die)."""
    async def one():
        body = {"model": model, "prompt": "hello", "max_tokens": 1500, "ignore_eos": True}
        with contextlib.suppress(Exception):
            async with session.post(url + "/v1/completions", json=body,
                                    timeout=aiohttp.ClientTimeout(total=120)) as response:
                await response.read()
    return [asyncio.create_task(one()) for _ in range(n)]


@contextlib.asynccontextmanager
async def sim_target(port: int = 0, **config):
    """A simulator on 127.0.0.1:port (0: any) with `config`, and the times of the /metrics scrapes it answered."""
    engine = SimEngine(SimConfig(max_num_seqs=8, **config), RealClock())
    scrapes: list[float] = []

    @web.middleware
    async def count(request, handler):
        if request.path == "/metrics":
            scrapes.append(time.monotonic())
        return await handler(request)

    app = build_app(engine)
    app.middlewares.append(count)
    runner, url = await _site(app, port)
    stepping = asyncio.create_task(engine.run_realtime())
    try:
        yield Sim(engine, url, scrapes)
    finally:
        await runner.cleanup()
        # Python 3.11's wait_for can swallow a cancel that lands as its inner wait completes (the engine's
        # step loop waits on a wake event in one): cancel again until the task has ended
        while not stepping.done():
            stepping.cancel()
            await asyncio.wait([stepping], timeout=0.5)
        await asyncio.gather(stepping, return_exceptions=True)


@contextlib.asynccontextmanager
async def hostile_target(kind: str):
    """"hang": answers nothing for a minute; "garbage": 200 with text that is not an exposition;
    "huge": a 50 MB body; "series": 200,000 series."""
    huge = b"# " + b"x" * (50 * 2**20)
    many = "".join(f"vllm:num_requests_running{{engine=\"{i}\"}} 0\n" for i in range(200_000))

    async def handler(request):
        if kind == "hang":
            await asyncio.sleep(60)
        if request.path == "/health":
            return web.Response(text="")
        if kind == "garbage":
            return web.Response(text="<html><body>not metrics {{{</body></html>\n")
        if kind == "huge":
            return web.Response(body=huge)
        return web.Response(text=many)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner, url = await _site(app)
    try:
        yield url
    finally:
        await runner.cleanup()


class Serve:
    def __init__(self, url: str, session: aiohttp.ClientSession):
        self.url, self.session = url, session

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(self.url + path, timeout=aiohttp.ClientTimeout(total=10)) as response:
            return response.status, await response.text()

    async def json(self, path: str):
        status, text = await self.get(path)
        assert status == 200, text
        return json.loads(text)

    async def metric(self, name: str, **labels) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        _, text = await self.get("/metrics")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return None


@contextlib.asynccontextmanager
async def running_serve(config):
    from servewatch.serve.app import serve

    stop = asyncio.Event()
    port: asyncio.Future = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(config, stop=stop, on_listening=port.set_result))
    done, _ = await asyncio.wait({task, port}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    assert port in done, "serve did not start listening"
    try:
        async with aiohttp.ClientSession() as session:
            yield Serve(f"http://127.0.0.1:{port.result()}", session)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def until(predicate, seconds: float, what: str):
    """Await `predicate()` (an async callable) being truthy, polling, within `seconds`."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = await predicate()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not within {seconds} s (last: {last!r})")
