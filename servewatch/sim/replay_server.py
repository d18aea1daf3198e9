"""`servewatch sim --replay`: an HTTP server that serves a bundle's /health and /metrics over time
(`servewatch.sim.replay`), and its position at `/_sim/replay` (loopback only) for `watch --replay`."""

from __future__ import annotations

import asyncio
import ipaddress

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from servewatch.sim.replay import Playhead, state

PLAYHEAD_KEY = web.AppKey("playhead", Playhead)


def build_app(playhead: Playhead) -> web.Application:
    app = web.Application()
    app[PLAYHEAD_KEY] = playhead
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/_sim/replay", position)
    return app


def _drop(request: web.Request) -> web.Response:
    """A recorded 'no answer' (refused, timed out, reset): the connection closes without a response."""
    if request.transport is not None:
        request.transport.close()
    raise asyncio.CancelledError


async def health(request: web.Request) -> web.Response:
    playhead = request.app[PLAYHEAD_KEY]
    answer = playhead.telemetry.health_at(playhead.position().b)
    if answer is None:
        return web.Response(status=200)
    if answer.status is None:
        return _drop(request)
    return web.Response(status=int(answer.status))


async def metrics(request: web.Request) -> web.Response:
    playhead = request.app[PLAYHEAD_KEY]
    text, _ = playhead.metrics_text()
    if text is None:
        return _drop(request)
    return web.Response(body=text.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def position(request: web.Request) -> web.Response:
    try:
        loopback = ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return web.json_response({"error": "the replay's position is loopback-only"}, status=403)
    return web.json_response(state(request.app[PLAYHEAD_KEY]))


async def serve(playhead: Playhead, host: str, port: int, *, on_listening=None, stop: asyncio.Event) -> int:
    runner = web.AppRunner(build_app(playhead), handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1] if site._server and site._server.sockets else port
        playhead.began = playhead.clock()        # the replay starts once it can be read
        if on_listening is not None:
            on_listening(bound)
        await stop.wait()
        return 0
    finally:
        await runner.cleanup()
