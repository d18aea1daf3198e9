"""The bounded fetch and the HTTP sources against a local server: answers, failures as typed samples,
and a slow scrape that does not delay the health probe."""

import asyncio
import time

import pytest
from aiohttp import web

from servewatch.clock import RealClock
from servewatch.sources.health import HealthSource
from servewatch.sources.http import FetchFailure, FetchResponse, fetch, http_transport
from servewatch.transport.contract import Http1Transport
from servewatch.sources.metrics import MetricsSource
from servewatch.watch import Recorder
from tests.conftest import FIXTURES

VLLM_TEXT = (FIXTURES / "metrics" / "vllm_kv_pressure_t0.prom").read_text()


async def serve(routes):
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _handlers_case():
    async def ok(request):
        return web.Response(text="fine")

    async def dead(request):
        return web.Response(status=503)

    async def slow(request):
        await asyncio.sleep(1.5)
        return web.Response(text="late")

    async def huge(request):
        return web.Response(body=b"x" * 300_000)

    async def huge_chunked(request):
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(40):
            await response.write(b"y" * 10_000)
        return response

    runner, base = await serve({"/ok": ok, "/dead": dead, "/slow": slow, "/huge": huge, "/chunked": huge_chunked})
    try:
        async with Http1Transport() as transport:
            def get(url: str, **bounds):
                return fetch(transport, url, **bounds)
            results = {name: await get(base + "/" + name, timeout_s=0.5, max_bytes=100_000)
                       for name in ("ok", "dead", "slow", "huge", "chunked")}
            results["refused"] = await get("http://127.0.0.1:1/health", timeout_s=0.5)
    finally:
        await runner.cleanup()
    return results


def test_fetch_answers_and_typed_failures():
    results = run(_handlers_case())
    assert isinstance(results["ok"], FetchResponse) and results["ok"].body == b"fine" and results["ok"].status == 200
    assert isinstance(results["dead"], FetchResponse) and results["dead"].status == 503
    assert isinstance(results["slow"], FetchFailure) and results["slow"].kind == "timeout"
    assert results["slow"].elapsed_s < 2.0
    assert results["huge"].kind == "too_large"          # declared length over the bound
    assert results["chunked"].kind == "too_large"       # no length: cut off while reading
    assert results["refused"].kind == "connect"


async def _sources_case():
    async def health(request):
        return web.Response(status=503)

    async def metrics(request):
        return web.Response(text=VLLM_TEXT)

    async def garbage(request):
        return web.Response(text="<html>not metrics{{{</html>\n")

    async def broken(request):
        return web.Response(text='vllm:num_requests_running{engine="0",model_name="t\n')

    runner, base = await serve({"/health": health, "/metrics": metrics, "/garbage": garbage, "/broken": broken})
    clock = RealClock()
    try:
        async with Http1Transport() as session:          # the transport `watch` and `serve` use
            h = await HealthSource(http_transport(session, base + "/health", timeout_s=1), clock, 1).poll()
            m = await MetricsSource(http_transport(session, base + "/metrics", timeout_s=1), clock, 1,
                                    slot_limit=16).poll()
            g = await MetricsSource(http_transport(session, base + "/garbage", timeout_s=1), clock, 1).poll()
            b = await MetricsSource(http_transport(session, base + "/broken", timeout_s=1), clock, 1).poll()
            small = await MetricsSource(http_transport(session, base + "/metrics", timeout_s=1, max_bytes=1000),
                                        clock, 1).poll()
            refused = http_transport(session, "http://127.0.0.1:1/health", timeout_s=1)
            down = await HealthSource(refused, clock, 1).poll()
    finally:
        await runner.cleanup()
    return h[0], m[0], g[0], b[0], small[0], down[0]


def test_http_sources_make_typed_samples():
    health, metrics, garbage, broken, small, down = run(_sources_case())
    assert health.status == 503 and health.error == "http_503" and not health.ok
    assert metrics.error is None and metrics.dialect == "vllm"
    (engine,) = metrics.engines
    assert (engine.running, engine.waiting, engine.slot_limit) == (7, 9, 16)
    assert engine.kv_usage == pytest.approx(0.8889, abs=1e-4)
    # HTML: the parser may reject it outright or find no engine family in it; either way a typed sample
    assert garbage.error in ("parse", "no_engine_metrics") and garbage.engines == ()
    assert broken.error == "parse" and broken.engines == ()
    assert small.error == "too_large"
    assert down.status is None and down.error == "connect"


async def _slow_scrape_case():
    async def health(request):
        return web.Response(text="")

    async def metrics(request):
        await asyncio.sleep(1.5)       # a saturated API server answering a scrape late
        return web.Response(text=VLLM_TEXT)

    runner, base = await serve({"/health": health, "/metrics": metrics})
    clock = RealClock()
    try:
        async with Http1Transport() as session:
            sources = [HealthSource(http_transport(session, base + "/health", timeout_s=1), clock, 0.1),
                       MetricsSource(http_transport(session, base + "/metrics", timeout_s=5), clock, 0.1)]
            recorder = Recorder(sources, clock)
            asked = time.time()
            await recorder.run(duration=1.7)
    finally:
        await runner.cleanup()
    return recorder.ring.window(), asked


def test_a_slow_scrape_does_not_delay_health_probes_and_is_stamped_on_arrival():
    window, asked = run(_slow_scrape_case())
    during = [h for h in window.health if h.t < asked + 1.5]
    assert len(during) >= 8                  # probes kept their 0.1 s cadence while the scrape hung
    assert len(window.metrics) == 1
    assert window.metrics[0].t >= asked + 1.5  # the time the answer arrived, not when it was asked


async def _connections_after_a_recording():
    from servewatch.watch.targets import http_sources

    async def health(request):
        return web.Response(text="")

    async def metrics(request):
        return web.Response(text=VLLM_TEXT)

    runner, base = await serve({"/health": health, "/metrics": metrics})
    clock = RealClock()
    try:
        async with Http1Transport() as session:
            recorder = Recorder(http_sources(session, base, clock, 0.1, gpu=False), clock)
            await recorder.run(duration=0.5)
            open_during = len(recorder.ring.window().metrics)
            deadline = time.monotonic() + 5
            while runner.server.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)          # the server notices the closes on its own loop turns
            return open_during, len(runner.server.connections)
    finally:
        await runner.cleanup()


def test_a_recording_that_ends_closes_its_keep_alive_connections():
    scraped, still_open = run(_connections_after_a_recording())
    assert scraped >= 2            # keep-alive connections were used...
    assert still_open == 0         # ... and none is left open once the recording is over


def test_a_host_name_that_does_not_resolve_is_a_dns_sample_not_connect():
    """A target whose name stops resolving mid-run (issue 50: it was worded "could not connect"): health's sample
    says dns, and the words every reader uses say the name was not resolved."""
    from servewatch.kinds import failure_words

    async def main():
        async with Http1Transport() as transport:
            get = http_transport(transport, "http://servewatch-no-such-host.invalid:9/health", timeout_s=2)
            return (await HealthSource(get, RealClock(), 1).poll())[0]

    sample = run(main())
    assert (sample.status, sample.error, sample.ok) == (None, "dns", False)
    assert failure_words(sample.error) == "host name not resolved"
