"""serve's HTTP surface (aiohttp): /metrics, /api/v1/targets, /api/v1/verdicts, and per-target
/targets/NAME/livez and /targets/NAME/readyz for Kubernetes probes, /node/drain for node-problem-detector, and
/targets/NAME/proxy/metrics (the GenAI histograms and live state of a target's sidecar proxy)."""

from __future__ import annotations

from aiohttp import web

from servewatch.detectors import registry
from servewatch.serve import probes
from servewatch.sinks.export.rank_series import SAMPLE_MAX_AGE_S
from servewatch.bundle.serialize import verdict_to_dict
from servewatch.clock import iso8601

RECENT_PER_TARGET = 20
FLEET = web.AppKey("fleet", object)
EXPORTER = web.AppKey("exporter", object)


def build_app(fleet, exporter) -> web.Application:
    app = web.Application(client_max_size=1024)
    app[FLEET], app[EXPORTER] = fleet, exporter
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/targets", targets)
    app.router.add_get("/api/v1/verdicts", verdicts)
    app.router.add_get("/targets/{name}/livez", livez)
    app.router.add_get("/targets/{name}/readyz", readyz)
    app.router.add_get("/targets/{name}/proxy/metrics", proxy_metrics)
    app.router.add_get("/node/drain", node_drain)
    return app


async def metrics(request: web.Request) -> web.Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    request.app[FLEET].refresh_states()
    body = request.app[EXPORTER].exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


RANK_SAMPLE_MAX_AGE_S = SAMPLE_MAX_AGE_S     # as servewatch_rank_state: an older process view is no state


async def targets(request: web.Request) -> web.Response:
    fleet = request.app[FLEET]
    out = []
    for name, run in sorted(fleet.runs.items()):
        s = run.status
        window = run.recorder.ring.window()
        values = run.live_signals(fleet.clock.now())        # none while it does not answer, as /metrics
        engine = next((m.dialect for m in reversed(window.metrics) if m.dialect), None)   # as its scrapes name it
        out.append({"name": name, "url": run.spec.url, "engine": engine, "state": s.state, "up": s.up,
                    "health_ok": s.health_ok,
                    "scrape_ok": s.scrape_ok, "last_error": s.last_error, "backoff_s": s.backoff_s,
                    "active": [v.name for v in run.recorder.latch.active],
                    "signals": {k: v for k, v in vars(values).items() if v is not None},
                    "ranks": _ranks(window.process[-1] if window.process else None, fleet.clock.now(),
                                    window.gpu[-1] if window.gpu else None),
                    **({"proxy_port": run.sidecar.port} if run.sidecar is not None else {})})
    return web.json_response({"targets": out})


def _ranks(sample, now: float, gpu=None) -> list[dict]:
    """Each engine rank of a target's newest process sample (none older than RANK_SAMPLE_MAX_AGE_S): its
    role, rank, process state letter, title and pid — what servewatch_rank_state exports, and which process —
    and, where NVML lists the process on a device, that GPU's index and the device memory the rank holds."""
    from servewatch.sinks.export.rank_series import MAX_RANKS, rank_label
    from servewatch.timeline.ranks import gpu_of, rank_view

    if sample is None or not sample.alive or sample.error is not None or now - sample.t > RANK_SAMPLE_MAX_AGE_S:
        return []
    ranks = sorted(rank_view(sample), key=lambda r: (r.kind, rank_label(r.axes), r.pid))
    out = []
    for r in ranks[:MAX_RANKS]:
        on = gpu_of(r.pid, gpu)
        out.append({"role": r.kind, "rank": rank_label(r.axes), "state": r.state, "title": r.title, "pid": r.pid,
                    "cpu_percent": r.member.cpu_percent, "gpu": on[0] if on else None,
                    "gpu_memory_bytes": on[1] if on else None})
    return out


def _verdict(name: str, verdict, bundle=None) -> dict:
    spec = registry.spec(verdict.name)
    return {"target": name, "verdict": verdict.name, "severity": spec.severity if spec else None,
            "action": registry.action_for(verdict), "evidence_held": registry.evidence_holds(verdict),
            "onset": iso8601(verdict.onset), "t": iso8601(verdict.t), "since_s": round(verdict.since_s, 3),
            "why": verdict.why, "details": verdict_to_dict(verdict)["details"], "bundle": bundle,
            "evidence": [{"source": e.source, "t": iso8601(e.t), "field": e.field, "value": e.value}
                         for e in verdict.evidence]}


def _cleared(name: str, cleared) -> dict:
    """A verdict that stopped holding: when the recorder saw it end (the newest sample then, serve's own clock),
    how long it had held."""
    return {"target": name, "verdict": cleared.verdict.name, "onset": iso8601(cleared.verdict.onset),
            "t": iso8601(cleared.t), "duration_s": round(cleared.duration_s, 3)}


async def verdicts(request: web.Request) -> web.Response:
    active, recent, cleared = [], [], []
    for name, run in sorted(request.app[FLEET].runs.items()):
        active += [_verdict(name, v) for v in run.recorder.latch.active]
        recent += [_verdict(name, f.verdict, f.bundle) for f in run.recorder.fired[-RECENT_PER_TARGET:]]
        cleared += [_cleared(name, c) for c in run.recorder.cleared[-RECENT_PER_TARGET:]]
    recent.sort(key=lambda item: item["t"], reverse=True)
    cleared.sort(key=lambda item: item["t"], reverse=True)
    return web.json_response({"active": active, "recent": recent, "cleared": cleared})


def _run(request: web.Request):
    run = request.app[FLEET].runs.get(request.match_info["name"])
    if run is None:
        raise web.HTTPNotFound(text="no such target\n")
    return run


def _instance(request: web.Request, run) -> str | None:
    """A deployment's instance named by `?instance=HOST:PORT` (None: the target itself); 404 for one it lacks."""
    name = request.query.get("instance")
    if name is None:
        return None
    if not any(member.name == name for member, _ in getattr(run.recorder.ring, "rings", ())):
        raise web.HTTPNotFound(text="no such instance of this target\n")
    return name


async def livez(request: web.Request) -> web.Response:
    """A deployment's instance (?instance=): only verdicts about its own side fail it (a dead prefill never fails
    decode's livez)."""
    run = _run(request)
    answer = probes.livez(run.recorder.latch.active, instance=_instance(request, run))
    return web.Response(status=answer.status, text=answer.reason + "\n")


async def readyz(request: web.Request) -> web.Response:
    """A deployment: its instance's (?instance=), from that instance's newest /health and /metrics; the pair's
    without: not ready while no prefill (or no decode) is ready."""
    run = _run(request)
    active = run.recorder.latch.active
    rings = getattr(run.recorder.ring, "rings", None)
    if rings is not None:
        wanted = _instance(request, run)
        answers = [(i.name, i.role, probes.readyz(active, *probes.newest_answers(i.window), instance=i.name))
                   for i in run.recorder.ring.window(since=run.clock.now() - 60.0).instances
                   if wanted is None or i.name == wanted]
        answer = answers[0][2] if wanted is not None else probes.deployment_readyz(answers)
        return web.Response(status=answer.status, text=answer.reason + "\n")
    s = run.status
    answer = probes.readyz(active, s.health_ok, s.scrape_ok, s.last_error)
    return web.Response(status=answer.status, text=answer.reason + "\n")


async def node_drain(request: web.Request) -> web.Response:
    """503 while a target here holds a verdict of the `drain` action class (the hardware under it is at fault):
    what node-problem-detector's custom plugin reads (deploy/kubernetes/node-problem-detector.yaml)."""
    answer = probes.node_drain({name: run.recorder.latch.active for name, run in request.app[FLEET].runs.items()})
    return web.Response(status=answer.status, text=answer.reason + "\n")


async def proxy_metrics(request: web.Request) -> web.Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    run = _run(request)
    if run.sidecar is None:
        raise web.HTTPNotFound(text="this target has no proxy\n")
    return web.Response(body=run.sidecar.telemetry.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})
