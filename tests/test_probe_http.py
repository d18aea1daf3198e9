"""The probe over real HTTP: the simulator serving and wedged, and the servers a probe cannot use (no
/v1/models, an unknown model, a 5xx, a non-JSON answer, nobody listening) — typed samples and one line."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from aiohttp import web

from servewatch.clock import RealClock, VirtualClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.server import build_app
from servewatch.sources.probe import HttpProber, ProbeSource
from servewatch.transport.contract import Http1Transport
from servewatch.timeline.samples import DEADLINE, FAILED, SERVED, UNAVAILABLE


@contextlib.asynccontextmanager
async def serving(app: web.Application, engine: SimEngine | None = None):
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    loop_task = asyncio.create_task(engine.run_realtime()) if engine is not None else None
    try:
        async with Http1Transport() as session:
            yield session, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        if loop_task is not None:
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task


async def ask(prober: HttpProber, deadline_s: float = 5.0):
    attempt = prober(deadline_s)
    await attempt.task
    return attempt.answer()


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_the_simulator_serves_the_probe_and_a_wedge_makes_it_miss_its_deadline():
    async def main():
        engine = SimEngine(SimConfig(startup_seconds=0.0), RealClock())
        async with serving(build_app(engine), engine) as (session, url):
            prober = HttpProber(session, url, RealClock())
            served = await ask(prober)
            engine.inject({"kind": "wedge-idle"})
            missed = await ask(prober, deadline_s=0.3)
        return served, missed, prober.model

    served, missed, model = _run(main())
    assert (served.outcome, served.status, served.tokens) == (SERVED, 200, 1)
    assert model == SimConfig().model_name
    assert missed.outcome == DEADLINE and missed.error == "timeout" and 0.3 <= missed.latency_s < 1.0


CALLS = web.AppKey("calls", list)


def _app(routes: dict) -> web.Application:
    app = web.Application()
    calls = app[CALLS] = []

    def handler(status, body, content_type="application/json"):
        async def handle(request):
            calls.append(request.path)
            return web.Response(status=status, text=body, content_type=content_type)
        return handle

    for (method, path), (status, body, *rest) in routes.items():
        app.router.add_route(method, path, handler(status, body, *rest))
    return app


MODELS = ("GET", "/v1/models"), (200, '{"object": "list", "data": [{"id": "m"}]}')


def probe_through_source(routes: dict, times: int = 3):
    """Probe `times` times through a ProbeSource; (samples, the lines it said, the server's calls)."""
    async def main():
        app = _app(routes)
        lines: list[str] = []
        samples = []
        async with serving(app) as (session, url):
            clock = VirtualClock()
            source = ProbeSource(HttpProber(session, url, clock), clock, probe_interval_s=1.0, deadline_s=2.0, check_s=0.5,
                                 say=lines.append)
            for _ in range(times):
                assert await source.poll() == []
                await source.pending.task
                samples += await source.poll()
                clock.advance(1.0)
        return samples, lines, list(app[CALLS])
    return _run(main())


def test_a_server_without_v1_models_is_unavailable_with_one_clear_line_and_no_failure():
    samples, lines, calls = probe_through_source({("GET", "/health"): (200, "")})
    assert [(s.outcome, s.error) for s in samples] == [(UNAVAILABLE, "http_404")] * 3
    assert lines == ["probe unavailable: GET /v1/models: HTTP 404 (the server has no OpenAI model list); "
                     "no probe verdict until it answers"]
    assert "/v1/completions" not in calls


def test_a_model_that_404s_is_unavailable_and_looked_up_again():
    samples, lines, calls = probe_through_source(
        dict([MODELS, (("POST", "/v1/completions"), (404, '{"message": "The model `m` does not exist."}'))]), 2)
    assert [(s.outcome, s.status) for s in samples] == [(UNAVAILABLE, 404)] * 2
    assert calls == ["/v1/models", "/v1/completions"] * 2
    assert len(lines) == 1 and "HTTP 404" in lines[0] and "does not exist" in lines[0]


def test_a_5xx_is_a_failed_probe_and_says_nothing_on_stderr():
    samples, lines, _ = probe_through_source(dict([MODELS, (("POST", "/v1/completions"), (503, "{}"))]), 1)
    assert [(s.outcome, s.status, s.error) for s in samples] == [(FAILED, 503, "http_503")]
    assert lines == []


def test_an_answer_that_is_not_the_apis_json_is_unavailable_not_a_failure():
    samples, lines, _ = probe_through_source(
        dict([MODELS, (("POST", "/v1/completions"), (200, "<html>hi</html>", "text/html"))]), 1)
    assert [(s.outcome, s.error) for s in samples] == [(UNAVAILABLE, "protocol")]
    assert len(lines) == 1


def test_nobody_listening_is_unavailable_without_a_line():
    async def main():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        lines: list[str] = []
        async with Http1Transport() as session:
            clock = VirtualClock()
            source = ProbeSource(HttpProber(session, f"http://127.0.0.1:{port}", clock), clock, probe_interval_s=1.0,
                                 deadline_s=2.0, say=lines.append)
            await source.poll()
            await source.pending.task
            return await source.poll(), lines

    samples, lines = _run(main())
    assert [(s.outcome, s.error) for s in samples] == [(UNAVAILABLE, "connect")]
    assert lines == []


def test_a_routed_probe_carries_the_dialects_header_and_a_routine_one_none():
    """The urgent probe at a data-parallel rank sends the header the dialect names; the routine probe sends
    none (the server balances it)."""
    seen = []

    async def models(request):
        return web.json_response({"data": [{"id": "m"}]})

    async def completions(request):
        seen.append(request.headers.get("X-data-parallel-rank"))
        return web.json_response({"choices": [{"text": " blue"}], "usage": {"completion_tokens": 1}})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)

    async def main():
        async with serving(app) as (session, url):
            prober = HttpProber(session, url, RealClock())
            routine = await ask(prober)
            attempt = prober(5.0, route={"X-data-parallel-rank": "1"})
            await attempt.task
            return routine, attempt.answer()

    routine, routed = _run(main())
    assert (routine.outcome, routed.outcome) == (SERVED, SERVED)
    assert seen == [None, "1"]
