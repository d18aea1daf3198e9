"""A deployment watched as one target: the prefill and decode instances of a disaggregated pair (`watch --prefill
URL --decode URL`, each repeatable). Each instance is recorded as a target of its own — its own sources (health,
/metrics, the active probe) and its own ring, its own timeline — and one recorder judges them together: each
instance's verdicts on its own window (named by the instance), the pair's on all of them with each one's role
(`timeline.window.InstanceWindow`, `detectors.pd`)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from servewatch.bundle.serialize import safe_token
from servewatch.errors import ServewatchError
from servewatch.timeline.ring import Ring
from servewatch.timeline.window import InstanceWindow, Window
from servewatch.watch.recorder import Recorder

ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class PairMember:
    """One instance of a deployment as given: its name (host:port, a token: what verdicts and lines call it),
    its role and its URL."""

    name: str
    role: str
    url: str


def members_from(prefill: Sequence[str], decode: Sequence[str]) -> tuple[PairMember, ...]:
    """The deployment the flags name; ServewatchError (one line, exit 2) for a bad URL, a URL given twice, or a
    deployment without a prefill or without a decode."""
    from servewatch.transport.urls import check
    from servewatch.watch.targets import base_url

    if not prefill or not decode:
        raise ServewatchError("a deployment takes both sides: --prefill URL and --decode URL (each may repeat)")
    out: list[PairMember] = []
    for role, urls in zip(ROLES, (prefill, decode)):
        for url in urls:
            check(url, f"--{role}")
            base = base_url(url)
            name = safe_token(base.split("://", 1)[-1], None) or f"{role}-{len(out)}"
            if any(m.name == name for m in out):
                raise ServewatchError(f"--{role} {url}: {name} is named twice in the deployment")
            out.append(PairMember(name, role, base))
    return tuple(out)


class DeploymentRing:
    """The instances' rings side by side: `window()` is the deployment's window (Window.instances), each
    instance's own timeline with its role."""

    def __init__(self, rings: Sequence[tuple[PairMember, Ring]]):
        self.rings = tuple(rings)

    def window(self, since: float | None = None) -> Window:
        return Window(instances=tuple(InstanceWindow(m.name, m.role, ring.window(since)) for m, ring in self.rings))

    @property
    def overwritten(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, ring in self.rings:
            for kind, n in ring.overwritten.items():
                out[kind] = out.get(kind, 0) + n
        return out

    def __len__(self) -> int:
        return sum(len(ring) for _, ring in self.rings)


class DeploymentRecorder(Recorder):
    """One recorder over every instance's sources; each source's samples go on its own instance's ring (the
    active probe reads its own instance's counters there)."""

    def __init__(self, members: Sequence[tuple[PairMember, Sequence]], clock, **kwargs):
        super().__init__([s for _, sources in members for s in sources], clock, **kwargs)
        from servewatch.detectors import ranks

        history_s = kwargs.get("history_s")
        rings = []
        self._ring_of: dict[int, Ring] = {}
        for member, sources in members:
            ring = Ring.for_history(history_s or 600.0, {s.kind: s.interval for s in sources})
            for source in sources:
                self._ring_of[id(source)] = ring
                bind = getattr(source, "bind_timeline", None)
                if bind is not None:
                    bind(ring, partial(ranks.suspicion, config=self.config), reads=ranks.SUSPICION_READS)
            rings.append((member, ring))
        self.ring = DeploymentRing(rings)

    def keep(self, source, samples) -> None:
        self._ring_of[id(source)].extend(samples)


def build(members: Sequence[PairMember], options, transport, clock, *, sinks=(), stop_when=None,
          tool: str = "watch", held: tuple[str, object] | None = None) -> DeploymentRecorder:
    """The deployment's recorder: each instance's sources built exactly as `watch` builds one target's (health,
    /metrics, the active probe when options.probe), without a process tree, GPU or log (an instance may run
    elsewhere) — but for `held` (instance name, its PsutilProbe), the one instance whose process tree a guard holds:
    its tree is recorded on its own timeline (how it lives: exited, stopped)."""
    from servewatch.watch.session import build_recorder

    def probe_of(member: PairMember):
        return held[1] if held is not None and held[0] == member.name else None

    per = [(m, build_recorder(dataclasses.replace(options, url=m.url, gpu=False, gpu_metrics=None, log_file=None),
                              transport, clock, probe=probe_of(m), tool=f"{tool} {m.role} {m.name}").sources)
           for m in members]
    return DeploymentRecorder(per, clock, history_s=options.history_s, config=options.detectors, sinks=list(sinks),
                              stop_when=stop_when, tool=tool)


async def watch_deployment(options, prefill: tuple[str, ...], decode: tuple[str, ...], run) -> int:
    """`servewatch watch --prefill URL --decode URL`: the deployment recorded until --duration or a stop; one line
    per event (JSON with `run.json`, a lifecycle.WatchRun). `options`: the RecordingOptions, its URL the first
    instance's. Exit status as watch's."""
    from servewatch.clock import RealClock
    from servewatch.transport.contract import Http1Transport
    from servewatch.detectors.registry import is_incident
    from servewatch.sinks.base import CallbackSink
    from servewatch.watch.event_lines import EventLines
    from servewatch.watch.lifecycle import StopOnSignal

    members = members_from(prefill, decode)
    options = dataclasses.replace(options, url=members[0].url)
    lines = EventLines(json_lines=run.json)
    bundles = _bundle_sink(options)       # --out: a bundle per verdict, both instances' evidence (exit 2 unwritable)
    sinks = [*([bundles] if bundles else []), CallbackSink(lines.fired, on_loop=True),
             CallbackSink(on_cleared=lines.cleared, on_loop=True)]
    stop_when = (lambda fired: is_incident(fired.verdict.name)) if run.stop_on_incident else None
    clock = RealClock()
    transport = Http1Transport()          # health, metrics and the probe of every instance
    recorder = build(members, options, transport, clock, sinks=sinks, stop_when=stop_when)
    if bundles is not None:
        bundles.recorder = recorder
    recorder.evidence_listeners.append(lines.evidence)
    said = asyncio.create_task(_announce(recorder))
    stop = StopOnSignal(recorder)
    try:
        await recorder.run(options.duration)
    finally:
        said.cancel()
        stop.close()
        await asyncio.get_running_loop().run_in_executor(None, recorder.close_sinks)
        await transport.close()
    if stop.received:
        from servewatch import stopping
        from servewatch.watch.session import bundles_kept

        stopping.say("watch", bundles_kept(bundles.writer.bundles_written if bundles else 0, options.out))
        return stopping.status()
    return 1 if recorder.stopped else 0


def _bundle_sink(options):
    """The deployment's bundle sink where --out is given: each bundle holds every instance's evidence, each sample
    named by its instance and role (bundle.layout.deployment_dicts); None without --out."""
    from servewatch.sinks.bundle_sink import bundle_sink

    return bundle_sink(options.out, None, options.detectors) if options.out else None


def held_member(members: Sequence[PairMember], given: str | None) -> PairMember:
    """The instance a guard holds, named by --instance as its URL or its name (host:port); ServewatchError (one
    line, exit 2) when it is not one of the deployment's."""
    from servewatch.watch.targets import base_url

    if not given:
        raise ServewatchError("guard on a deployment holds one instance's server: --instance URL (one of the "
                              "--prefill or --decode URLs) names it")
    for member in members:
        if given == member.name or given.startswith(("http://", "https://")) and base_url(given) == member.url:
            return member
    raise ServewatchError(f"--instance {given}: not an instance of the deployment (its instances: "
                          f"{', '.join(f'{m.role} {m.name}' for m in members)})")


def role_mismatch(instance: InstanceWindow) -> str | None:
    """A line when the instance's own series say it is the other role (its KV connector's side): the deployment's
    word is used all the same (a kv_both instance, or a series that cannot tell, says nothing)."""
    scrapes = instance.window.good_metrics()
    roles = {e.kv_transfer.role for e in (scrapes[-1].engines if scrapes else ())
             if e.kv_transfer is not None and e.kv_transfer.role}
    if roles and instance.role not in roles:
        return (f"{instance.role} {instance.name}: its series say it is a {' and '.join(sorted(roles))} instance; "
                f"judged as the {instance.role} the deployment names")
    return None


async def _announce(recorder: DeploymentRecorder) -> None:
    """One stderr line per instance once its first /health and /metrics answers are in."""
    from servewatch.watch.session import first_answers

    waiting = {m.name for m, _ in recorder.ring.rings}
    while waiting:
        for instance in recorder.ring.window().instances:
            answers = first_answers(instance.window) if instance.name in waiting else None
            if answers is not None:
                waiting.discard(instance.name)
                print(f"servewatch watch: recording {instance.role} {instance.name}: {answers}", file=sys.stderr,
                      flush=True)
                said = role_mismatch(instance)
                if said:
                    print(f"servewatch watch: {said}", file=sys.stderr, flush=True)
        await asyncio.sleep(0.1)
