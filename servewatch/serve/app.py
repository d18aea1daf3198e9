"""The serve process: discovery, the fleet, the alert clients and the HTTP surface, until stopped."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from servewatch import stopping
from servewatch.errors import ServewatchError
from servewatch.serve.config import ServeConfig, parse_listen

if TYPE_CHECKING:
    from servewatch.serve.discovery import FileSd
    from servewatch.serve.fleet import Fleet
    from servewatch.serve.prometheus_sd import PrometheusSd
    from servewatch.serve.targets import TargetSpec
    from servewatch.sinks.export.exporter import FleetExporter
    from servewatch.transport.contract import Transport
    from servewatch.watch.event_lines import EventLines

LAG_PERIOD_S = 0.5


async def serve(config: ServeConfig, *, stop: asyncio.Event | None = None, tool: str = "serve",
                on_listening: Callable[[int], None] | None = None, events: EventLines | None = None) -> int:
    """Run until `stop` is set; `on_listening(port)` once the HTTP surface is up and the fleet started;
    `events` writes a line per verdict fired (with its bundle) and cleared, each naming its target."""
    # aiohttp: serve's HTTP server (aiohttp.web); every request serve makes goes through transport.contract.
    from aiohttp import web

    from servewatch.clock import RealClock
    from servewatch.serve.discovery import FileSd
    from servewatch.serve.fleet import Fleet
    from servewatch.serve.http_api import build_app
    from servewatch.sinks.export.exporter import FleetExporter
    from servewatch.sinks.delivery.registry import SinkContext, build_clients, sinks_for

    say = f"servewatch {tool}:"
    stop = stop or asyncio.Event()
    file_sd = FileSd(config.file_sd)
    file_sd.load_strict()                                 # a bad file at start: one line, exit 2
    prometheus_sd = None
    if config.prometheus_sd is not None:
        from servewatch.serve.prometheus_sd import PrometheusSd
        prometheus_sd = PrometheusSd(config.prometheus_sd)
    clock = RealClock()
    fleet: Fleet | None = None

    def derived():
        """(target, its signals): none for a target that does not answer (TargetRun.live_signals)."""
        now = clock.now()
        return [(name, run.live_signals(now)) for name, run in fleet.runs.items()]

    def newest_process():
        """(target, its newest recent process sample, or None): the ranks' states (TargetRun.live_process)."""
        now = clock.now()
        return [(name, run.live_process(now)) for name, run in fleet.runs.items()]

    exporter = FleetExporter(derived, newest_process)
    node_view = None
    if config.node is not None:         # the engines on this node, by process title (serve.node)
        from servewatch.serve.node import NodeView
        from servewatch.sinks.export.exporter import label
        from servewatch.sinks.export.rank_series import NodeRankCollector

        node_view = NodeView(config.node, max(config.recording.interval, 1.0))
        exporter.registry.register(NodeRankCollector(config.node, lambda: node_view.samples, label,
                                                     lambda: node_view.errors))
    clients = build_clients(config.sinks, lambda name: SinkContext(tool, exporter.sink_failures.labels(name).inc))
    host, port = parse_listen(config.listen)
    from servewatch.transport.contract import Http1Transport

    runner = None
    try:
        # A keep-alive pool per target (health, metrics), a fresh connection per probe, no limit shared across
        # targets: one slow target holds no slot another needs.
        async with Http1Transport(max_idle=4) as transport:
            def extra_sinks(spec):
                lines = [events.for_target(spec.name, bundles=bool(config.out)).sink()] if events else []
                return [*sinks_for(clients, spec.name), *lines]

            def extra_evidence(spec):
                return [events.for_target(spec.name, bundles=bool(config.out)).evidence] if events else []

            fleet = Fleet(config, transport, clock, exporter, extra_sinks=extra_sinks,
                          extra_evidence=extra_evidence, tool=tool)
            runner = web.AppRunner(build_app(fleet, exporter), access_log=None, shutdown_timeout=2.0)
            await runner.setup()
            site = web.TCPSite(runner, host, port)
            try:
                await site.start()
            except OSError as exc:
                raise ServewatchError(f"--listen {config.listen}: {exc.strerror or exc}") from None
            bound = site._server.sockets[0].getsockname()[1] if site._server and site._server.sockets else port
            discovery = _Discovery(config, file_sd, prometheus_sd)
            lag = node_task = None
            try:
                if prometheus_sd is not None:
                    await discovery.refresh_prometheus(transport, exporter, say)
                await fleet.apply(discovery.specs(say))     # a sidecar proxy that cannot listen: one line, exit 2
                shard = f" (shard {config.shard.index}/{config.shard.count})" if config.shard.count > 1 else ""
                node = f", and every engine on node {config.node} by its process titles" if config.node else ""
                print(f"{say} listening on http://{host}:{bound}, watching {len(fleet.runs)} target(s){shard}{node}",
                      file=sys.stderr, flush=True)
                if on_listening is not None:
                    on_listening(bound)
                lag = asyncio.create_task(_measure_lag(exporter))
                node_task = asyncio.create_task(node_view.run()) if node_view is not None else None
                await _rediscover(config, discovery, fleet, exporter, transport, stop, say)
            finally:
                for task in (lag, node_task):
                    if task is not None:
                        task.cancel()
                await fleet.close()
    finally:
        if runner is not None:
            await runner.cleanup()
        for client in clients:
            await asyncio.get_running_loop().run_in_executor(None, client.close)
    if stopping.received() is not None:       # ^C, SIGTERM or SIGHUP (servewatch.stopping): what was kept
        from servewatch.watch.session import bundles_kept

        stopping.say(tool, bundles_kept(sum(w.bundles_written for w in fleet.writers), config.out))
    return 0


class _Discovery:
    def __init__(self, config: ServeConfig, file_sd: FileSd, prometheus_sd: PrometheusSd | None):
        self.config, self.file_sd, self.prometheus_sd = config, file_sd, prometheus_sd
        self._said: set[str] = set()

    async def refresh_prometheus(self, transport: Transport, exporter: FleetExporter, say: str) -> bool:
        errors = self.prometheus_sd.errors
        changed, problem = await self.prometheus_sd.refresh(transport)
        if self.prometheus_sd.errors > errors:
            exporter.config_errors.inc()
        if problem:
            print(f"{say} {problem}", file=sys.stderr, flush=True)
        return changed

    def specs(self, say: str) -> list[TargetSpec]:
        """Every source's targets, duplicates merged (and said)."""
        from servewatch.serve.targets import merge

        found = [*self.config.targets, *self.file_sd.targets(),
                 *(self.prometheus_sd.targets() if self.prometheus_sd else ())]
        specs, duplicates = merge(found)
        for line in duplicates:
            if line not in self._said:
                self._said.add(line)
                print(f"{say} {line}", file=sys.stderr, flush=True)
        return specs


async def _rediscover(config: ServeConfig, discovery: _Discovery, fleet: Fleet, exporter: FleetExporter,
                      transport: Transport, stop: asyncio.Event, say: str) -> None:
    period = max(1.0, min(5.0, config.recording.interval))
    sd = discovery.prometheus_sd
    next_sd = time.monotonic() + (sd.config.refresh_s if sd else 0)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), period)
            return
        except asyncio.TimeoutError:
            pass
        fleet.refresh_states()
        changed = False
        if config.file_sd:
            result = discovery.file_sd.refresh()
            for line in result.errors:
                exporter.config_errors.inc()
                print(f"{say} {line}", file=sys.stderr, flush=True)
            changed = result.changed
        if sd is not None and time.monotonic() >= next_sd:
            next_sd = time.monotonic() + sd.config.refresh_s
            changed = await discovery.refresh_prometheus(transport, exporter, say) or changed
        if changed:
            started, stopped = await fleet.apply(discovery.specs(say))
            if started or stopped:
                print(f"{say} targets changed: +{len(started)} -{len(stopped)}, watching {len(fleet.runs)}",
                      file=sys.stderr, flush=True)


def loop_factory():
    """serve's event loop: uvloop's when it is installed (a dependency): its C timers, futures and transports cost
    serve's transport a fifth less CPU a request than asyncio's (/metrics 97-106 against 116-124 us, /health 74-78
    against 100-103: docs/site/figures.md, "Where the hot paths' time goes"); None (asyncio's own) where it is
    not."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _measure_lag(exporter: FleetExporter) -> None:
    while True:
        asked = time.monotonic()
        await asyncio.sleep(LAG_PERIOD_S)
        exporter.loop_lag.set(max(0.0, time.monotonic() - asked - LAG_PERIOD_S))
