"""Telemetry replay: an incident bundle's `/metrics`, `/health` and process view, served again over time.

A bundle keeps the parsed, allow-listed picture of each scrape (`EngineState` per engine), not the raw text:
the replay renders each stored scrape back as the engine's own Prometheus text (its metric names and
identity labels, through prometheus_client as the simulator does), so that the engine's dialect reads back
the very state the bundle holds (`tests/test_sim_replay.py` checks the round trip). Families the bundle never
kept (process collectors, HTTP latency, cache-config labels other than the KV size) are not invented.

Time: bundle time b = start + (now - began) x speed. At each request the newest stored sample at or before b
is served. After the bundle's end the last recorded state is held (the incident as it stood when the bundle
was written, unchanged) until stopped; with `loop`, the bundle plays again from its start, one scrape
interval after its end, every counter and histogram continuing from where the last loop left it (each loop
adds the bundle's own growth plus one step), so rates stay as recorded and nothing resets.

A stored /health or /metrics failure is served as one: an error status as that status; no answer (refused,
timed out, reset) as a dropped connection.
"""

from __future__ import annotations

import dataclasses
import math
import time
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric

from servewatch.bundle.serialize import DecodeError, engine_from_dict
from servewatch.dialects import sglang as sglang_names
from servewatch.dialects import vllm as vllm_names
from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.errors import ServewatchError
from servewatch.sim.metrics import counter, gauge, make_registry, render


class ReplayError(ServewatchError):
    """A bundle that cannot be replayed: one line."""


@dataclasses.dataclass(frozen=True)
class ReplayScrape:
    t: float
    engines: tuple[EngineState, ...]
    error: str | None


@dataclasses.dataclass(frozen=True)
class ReplayAnswer:
    t: float
    status: int | None
    error: str | None


class ReplayTelemetry:
    """One bundle's health, metrics and process samples in time order (bundle time)."""

    def __init__(self, incident: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]):
        self.incident = incident
        self.dialect = incident.get("target", {}).get("dialect")
        self.naming = incident.get("target", {}).get("generation")
        try:
            self.health = [ReplayAnswer(float(d["t"]), d.get("status"), d.get("error"))
                           for d in samples if d["source"] == "health"]
            self.metrics = [ReplayScrape(float(d["t"]), tuple(engine_from_dict(e) for e in d["engines"]), d.get("error"))
                            for d in samples if d["source"] == "metrics"]
            self.process = [d for d in samples if d["source"] == "process"]
        except (KeyError, TypeError, ValueError, DecodeError) as exc:
            raise ReplayError(f"the bundle's samples cannot be replayed: {exc}") from None
        for series in (self.health, self.metrics):
            series.sort(key=lambda s: s.t)
        self.process.sort(key=lambda d: float(d["t"]))
        if not self.metrics:
            raise ReplayError("the bundle holds no /metrics scrape to replay")
        times = [s.t for s in self.metrics] + [a.t for a in self.health]
        self.start = min(times)
        self.end = max(times)
        gaps = sorted(b.t - a.t for a, b in zip(self.metrics, self.metrics[1:]) if b.t > a.t)
        self.cadence = gaps[len(gaps) // 2] if gaps else 1.0
        self.period = (self.end - self.start) + self.cadence     # one loop, in bundle seconds
        self._health_t = [a.t for a in self.health]
        self._metrics_t = [s.t for s in self.metrics]
        self._process_t = [float(d["t"]) for d in self.process]
        self.growth = _growth(self.metrics)
        names = {e.dialect for s in self.metrics for e in s.engines}
        unknown = names - set(RENDERERS)
        if unknown:
            raise ReplayError(f"the bundle's engine {', '.join(sorted(unknown))} has no replay renderer "
                              f"(known: {', '.join(sorted(RENDERERS))})")

    @property
    def verdicts(self) -> list[dict]:
        return list(self.incident.get("verdicts", []))

    def slot_limit(self) -> int | None:
        limits = [e.slot_limit for s in self.metrics for e in s.engines if e.slot_limit is not None]
        return limits[-1] if limits else None

    @staticmethod
    def _at(times: list[float], items: list, b: float):
        i = bisect_right(times, b) - 1
        return items[max(i, 0)] if items else None

    def health_at(self, b: float) -> ReplayAnswer | None:
        return self._at(self._health_t, self.health, b)

    def scrape_at(self, b: float) -> ReplayScrape:
        return self._at(self._metrics_t, self.metrics, b)

    def process_at(self, b: float) -> dict | None:
        return self._at(self._process_t, self.process, b)


def load(path: str | Path) -> ReplayTelemetry:
    """A bundle that passes `verify`'s file checks, as replayable telemetry; ReplayError (one line) otherwise."""
    from servewatch.bundle.verify import load_bundle
    from servewatch.errors import BundleInvalid

    path = Path(path)
    if not path.is_dir():
        raise ReplayError(f"{path}: not a bundle directory")
    try:
        incident, samples = load_bundle(path)
    except BundleInvalid as exc:
        raise ReplayError(f"{path.name}: {exc}") from None
    return ReplayTelemetry(incident, samples)


@dataclasses.dataclass(frozen=True)
class ReplayPosition:
    b: float            # the bundle time being shown
    loop: int           # 0 for the first play
    held: bool          # past the bundle's end, its last state held


class Playhead:
    """Where in the bundle a moment of real time falls: `start_offset` seconds into the bundle at `began`,
    moving `speed` bundle seconds a second."""

    def __init__(self, telemetry: ReplayTelemetry, *, speed: float = 1.0, loop: bool = False, start_offset: float = 0.0,
                 clock: Callable[[], float] = time.monotonic):
        if not (speed > 0 and math.isfinite(speed)):
            raise ReplayError(f"--speed {speed:g}: must be a positive number")
        if not 0 <= start_offset < telemetry.period:
            raise ReplayError(f"--start {start_offset:g} s: the bundle is {telemetry.end - telemetry.start:.1f} s long")
        self.telemetry = telemetry
        self.speed = speed
        self.loop = loop
        self.start_offset = start_offset
        self.clock = clock
        self.began = clock()

    def position(self, now: float | None = None) -> ReplayPosition:
        tel = self.telemetry
        elapsed = self.start_offset + max(0.0, (self.clock() if now is None else now) - self.began) * self.speed
        if self.loop:
            loop, into = divmod(elapsed, tel.period)
            return ReplayPosition(tel.start + min(into, tel.end - tel.start), int(loop), False)
        if elapsed > tel.end - tel.start:
            return ReplayPosition(tel.end, 0, True)
        return ReplayPosition(tel.start + elapsed, 0, False)

    def real_time_of(self, b: float) -> float:
        """The clock reading at which the first play shows bundle time b."""
        return self.began + (b - self.telemetry.start - self.start_offset) / self.speed

    def metrics_text(self, now: float | None = None) -> tuple[str | None, ReplayScrape]:
        """The text to serve (None: the stored scrape failed) and the scrape it renders."""
        pos = self.position(now)
        scrape = self.telemetry.scrape_at(pos.b)
        if scrape.error is not None:
            return None, scrape
        engines = [_advanced(e, self.telemetry.growth, pos.loop) for e in scrape.engines] if pos.loop else \
            list(scrape.engines)
        return render_engines(engines), scrape


# --- counters across loops ------------------------------------------------------------------------

def _key(e: EngineState) -> tuple:
    return (e.dialect, tuple(sorted(e.labels.items())))


def _counter_items(e: EngineState) -> dict[str, float]:
    """Every monotonic number of one engine's state, by a path name."""
    c = e.counters
    out = {}
    for name in ("prompt_tokens", "generation_tokens", "preemptions", "steps", "request_bytes",
                 "request_bytes_count", "answered"):
        value = getattr(c, name)
        if value is not None:
            out[name] = value
    out.update({f"finished.{k}": v for k, v in c.finished.items()})
    out.update({f"responses.{k}": v for k, v in c.responses.items()})
    for kind, h in e.histograms.items():
        out[f"h.{kind}.count"] = h.count
        out[f"h.{kind}.sum"] = h.sum
        out.update({f"h.{kind}.{i}": v for i, v in enumerate(h.cumulative)})
    return out


def _growth(scrapes: Sequence[ReplayScrape]) -> dict[tuple, dict[str, float]]:
    """Per engine and counter: what one loop adds (its growth over the bundle plus its last step), so the
    next loop's first scrape follows the last one as a step of the recording would."""
    first: dict[tuple, dict[str, float]] = {}
    last: dict[tuple, dict[str, float]] = {}
    before_last: dict[tuple, dict[str, float]] = {}
    for scrape in scrapes:
        for e in scrape.engines:
            key = _key(e)
            items = _counter_items(e)
            first.setdefault(key, items)
            if key in last:
                before_last[key] = last[key]
            last[key] = items
    out = {}
    for key, end in last.items():
        begin, previous = first[key], before_last.get(key, end)
        out[key] = {name: max(0.0, (value - begin.get(name, value)) + (value - previous.get(name, value)))
                    for name, value in end.items() if math.isfinite(value)}
    return out


def _advanced(e: EngineState, growth: Mapping[tuple, Mapping[str, float]], loops: int) -> EngineState:
    add = growth.get(_key(e))
    if not add or loops <= 0:
        return e

    def plus(name: str, value):
        return None if value is None else value + loops * add.get(name, 0.0)

    c = e.counters
    counters = Counters(
        prompt_tokens=plus("prompt_tokens", c.prompt_tokens), generation_tokens=plus("generation_tokens", c.generation_tokens),
        preemptions=plus("preemptions", c.preemptions), steps=plus("steps", c.steps),
        finished={k: plus(f"finished.{k}", v) for k, v in c.finished.items()},
        responses={k: plus(f"responses.{k}", v) for k, v in c.responses.items()},
        request_bytes=plus("request_bytes", c.request_bytes),
        request_bytes_count=plus("request_bytes_count", c.request_bytes_count), answered=plus("answered", c.answered),
        tokens_shared=c.tokens_shared)
    histograms = {kind: Histogram(edges=h.edges,
                                  cumulative=tuple(plus(f"h.{kind}.{i}", v) for i, v in enumerate(h.cumulative)),
                                  count=plus(f"h.{kind}.count", h.count), sum=plus(f"h.{kind}.sum", h.sum))
                  for kind, h in e.histograms.items()}
    return dataclasses.replace(e, counters=counters, histograms=histograms)


# --- rendering: the engine's own names ----------------------------------------------------------

def _histogram(name: str, help_text: str, rows: Sequence[tuple[Mapping[str, str], Histogram]]) -> Metric:
    metric = Metric(name, help_text, "histogram")
    for labels, h in rows:
        for edge, c in zip(h.edges, h.cumulative):
            metric.add_sample(name + "_bucket", {**labels, "le": _le(edge)}, float(c))
        metric.add_sample(name + "_bucket", {**labels, "le": "+Inf"}, float(h.count))
        metric.add_sample(name + "_count", dict(labels), float(h.count))
        metric.add_sample(name + "_sum", dict(labels), float(h.sum))
    return metric


def _le(edge: float) -> str:
    from prometheus_client.utils import floatToGoString

    return floatToGoString(edge)


def _stem(exposed: str) -> str:
    return exposed[:-len("_total")] if exposed.endswith("_total") else exposed


def _present(rows):
    return [(labels, value) for labels, value in rows if value is not None]


def _vllm(engines: Sequence[EngineState]) -> list[Metric]:
    n = vllm_names
    naming = engines[0].naming if engines else ""
    help_of = n.HELP.get
    fams: list[Metric] = []
    ids = [(dict(e.labels), e) for e in engines]
    fams.append(gauge(n.RUNNING, help_of(n.RUNNING, ""), _present((lb, e.running) for lb, e in ids)))
    fams.append(gauge(n.WAITING, help_of(n.WAITING, ""), _present((lb, e.waiting) for lb, e in ids)))
    by_reason = [({**lb, "reason": r}, v) for lb, e in ids for r, v in sorted(e.waiting_by_reason.items())]
    if by_reason or naming == "vllm-0.32":      # the 0.32 names' marker (its sum equals the waiting gauge)
        if not by_reason:
            by_reason = [({**lb, "reason": "capacity"}, e.waiting) for lb, e in ids if e.waiting is not None]
        fams.append(gauge(n.WAITING_BY_REASON, help_of(n.WAITING_BY_REASON, ""), by_reason))
    kv_name = n.KV_USAGE_LEGACY if naming == "vllm-legacy" else n.KV_USAGE
    fams.append(gauge(kv_name, help_of(n.KV_USAGE, ""), _present((lb, e.kv_usage) for lb, e in ids)))
    info = [({"engine": lb.get("engine", "0"), "kv_cache_size_tokens": str(int(e.kv_total_tokens))}, 1.0)
            for lb, e in ids if e.kv_total_tokens is not None]
    if info:
        fams.append(gauge(n.CACHE_CONFIG_INFO, help_of(n.CACHE_CONFIG_INFO, ""), info))
    for exposed, field in ((n.PROMPT_TOKENS, "prompt_tokens"), (n.GENERATION_TOKENS, "generation_tokens"),
                           (n.PREEMPTIONS, "preemptions")):
        rows = _present((lb, getattr(e.counters, field)) for lb, e in ids)
        if rows:
            fams.append(counter(_stem(exposed), help_of(_stem(exposed), ""), rows, None))
    finished = [({**lb, "finished_reason": r}, v) for lb, e in ids for r, v in sorted(e.counters.finished.items())]
    if finished:
        fams.append(counter(_stem(n.REQUEST_SUCCESS), help_of(_stem(n.REQUEST_SUCCESS), ""), finished, None))
    steps = [(lb, Histogram(edges=(), cumulative=(), count=e.counters.steps, sum=math.nan))
             for lb, e in ids if e.counters.steps is not None]
    if steps:      # the bundle keeps the step count (this histogram's _count), not its buckets or sum
        fams.append(_histogram(n.ITERATION_TOKENS, help_of(n.ITERATION_TOKENS, ""), steps))
    for kind, names in n.HISTOGRAMS.items():
        name = names[-1] if (naming == "vllm-legacy" and kind == "itl") else names[0]
        rows = [(lb, e.histograms[kind]) for lb, e in ids if kind in e.histograms]
        if rows:
            fams.append(_histogram(name, help_of(name, ""), rows))
    fams.extend(_vllm_http(engines[0] if engines else None))
    return fams


def _vllm_http(e: EngineState | None) -> list[Metric]:
    """The API server's counters the bundle keeps server-wide: answered generation requests (2xx of the
    completion handler) and the responses of every other status and handler, under the completion handler."""
    n = vllm_names
    if e is None:
        return []
    c = e.counters
    out = []
    if c.answered is not None or c.responses:
        metric = Metric(_stem(n.HTTP_REQUESTS), "Total number of requests by method, status and handler.", "counter")
        generation = n.HTTP_GENERATION_HANDLERS[0]
        answered = c.answered or 0.0
        for status, value in sorted(c.responses.items()):
            if status == "unrouted":
                metric.add_sample(n.HTTP_REQUESTS, {"handler": n.HTTP_UNROUTED_HANDLER, "method": "GET",
                                                   "status": "4xx"}, float(value))
            elif status == "2xx":
                metric.add_sample(n.HTTP_REQUESTS, {"handler": generation, "method": "POST", "status": "2xx"},
                                  float(answered))
                if value - answered > 0:
                    metric.add_sample(n.HTTP_REQUESTS, {"handler": "/tokenize", "method": "POST", "status": "2xx"},
                                      float(value - answered))
            else:
                metric.add_sample(n.HTTP_REQUESTS, {"handler": generation, "method": "POST", "status": status},
                                  float(value))
        if "2xx" not in c.responses and c.answered:
            metric.add_sample(n.HTTP_REQUESTS, {"handler": generation, "method": "POST", "status": "2xx"},
                              float(answered))
        out.append(metric)
    if c.request_bytes is not None and c.request_bytes_count is not None:
        metric = Metric(n.HTTP_REQUEST_SIZE, "Content length of incoming requests by handler.", "summary")
        metric.add_sample(n.HTTP_REQUEST_SIZE + "_count", {"handler": n.HTTP_GENERATION_HANDLERS[0]},
                          float(c.request_bytes_count))
        metric.add_sample(n.HTTP_REQUEST_SIZE + "_sum", {"handler": n.HTTP_GENERATION_HANDLERS[0]},
                          float(c.request_bytes))
        out.append(metric)
    return out


def _sglang(engines: Sequence[EngineState]) -> list[Metric]:
    n = sglang_names
    fams: list[Metric] = []
    ids = [(dict(e.labels), e) for e in engines]
    fams.append(gauge(n.RUNNING, "The number of running requests.", _present((lb, e.running) for lb, e in ids)))
    fams.append(gauge(n.WAITING, "The number of requests in the waiting queue.",
                      _present((lb, e.waiting) for lb, e in ids)))
    fams.append(gauge(n.TOKEN_USAGE, "The token usage.", _present((lb, e.kv_usage) for lb, e in ids)))
    fams.append(gauge(n.KV_USED_TOKENS, "The number of used KV tokens.",
                      _present((lb, e.kv_used_tokens) for lb, e in ids)))
    fams.append(gauge(n.MAX_TOTAL_NUM_TOKENS, "Maximum total number of tokens in the KV cache pool.",
                      _present((lb, e.kv_total_tokens) for lb, e in ids)))
    rows = _present((lb, e.counters.preemptions) for lb, e in ids)
    if rows:
        fams.append(counter(_stem(n.RETRACTED_REQUESTS), "Number of retracted requests.", rows, None))
    rows = _present((lb, e.counters.steps) for lb, e in ids)
    if rows:
        fams.append(counter(_stem(n.FORWARD_PASSES), "Number of forward passes.",
                            [({**lb, "mode": "decode"}, v) for lb, v in rows], None))
    per_model: dict[str, EngineState] = {}
    for lb, e in ids:                # tokenizer-process series: one per model, the same for its every rank
        per_model.setdefault(lb.get("model_name", ""), e)
    model_rows = [({"model_name": m}, e) for m, e in sorted(per_model.items())]
    for exposed, value_of, text in (
            (n.PROMPT_TOKENS, lambda e: e.counters.prompt_tokens, "Number of prefill tokens processed."),
            (n.GENERATION_TOKENS, lambda e: e.counters.generation_tokens, "Number of generation tokens processed."),
            (n.NUM_REQUESTS, lambda e: e.counters.finished.get("all"), "Number of requests processed."),
            (n.NUM_ABORTED, lambda e: e.counters.finished.get("abort"), "Number of requests aborted.")):
        rows = _present((lb, value_of(e)) for lb, e in model_rows)
        if rows:
            fams.append(counter(_stem(exposed), text, rows, None))
    for kind, names in n.HISTOGRAMS.items():
        source = ids if kind == "queue" else model_rows
        rows = [(lb, e.histograms[kind]) for lb, e in source if kind in e.histograms]
        if rows:
            fams.append(_histogram(names[0], f"Histogram of {kind}.", rows))
    first = engines[0] if engines else None
    if first is not None and first.counters.responses:
        metric = Metric(_stem(n.HTTP_RESPONSES), "Total number of HTTP responses.", "counter")
        for status, value in sorted(first.counters.responses.items()):
            code = {"2xx": "200", "4xx": "400", "5xx": "500"}.get(status, status)
            endpoint = "/unrouted" if status == "unrouted" else "/v1/completions"
            metric.add_sample(n.HTTP_RESPONSES, {n.HTTP_HANDLER_LABEL: endpoint, "method": "POST",
                                                n.HTTP_STATUS_LABEL: "404" if status == "unrouted" else code},
                              float(value))
        fams.append(metric)
    return [f for f in fams if f.samples or f.type == "counter"]


RENDERERS: dict[str, Callable[[Sequence[EngineState]], list[Metric]]] = {"vllm": _vllm, "sglang": _sglang}


def render_engines(engines: Sequence[EngineState]) -> str:
    """One scrape's engines as the engine's own Prometheus text (0.0.4, prometheus_client's writer)."""
    families: list[Metric] = []
    for dialect in dict.fromkeys(e.dialect for e in engines):
        families.extend(RENDERERS[dialect]([e for e in engines if e.dialect == dialect]))
    return render(make_registry(lambda: families, with_process=False))


# --- the process view, for `watch --replay` --------------------------------------------------------

class ReplayProcessProbe:
    """What `--pid` would have shown, from the bundle: the stored process sample at the replay's position
    (`playhead`), stamped with the watcher's own time. Stands where a PsutilProbe stands (snapshot, pid,
    slot_limit). `live` False: no process on this host stands behind its pids, so nothing reads their /proc."""

    live = False

    def __init__(self, telemetry: ReplayTelemetry, playhead: Playhead):
        self.telemetry = telemetry
        self.playhead = playhead
        first = telemetry.process[0] if telemetry.process else {}
        self.pid = int(first.get("root_pid") or 0)

    def slot_limit(self) -> int | None:
        return self.telemetry.slot_limit()

    def snapshot(self, t: float):
        from servewatch.bundle.serialize import sample_from_dict

        stored = self.telemetry.process_at(self.playhead.position().b)
        return sample_from_dict({**stored, "t": t})


def follow(telemetry: ReplayTelemetry, state: Mapping[str, Any], *, clock: Callable[[], float] = time.monotonic) -> Playhead:
    """A playhead that keeps in step with a replaying server, from its `/_sim/replay` answer (read once:
    the position then, the speed and whether it loops)."""
    playhead = Playhead(telemetry, speed=float(state["speed"]), loop=bool(state["loop"]), clock=clock)
    playhead.start_offset = float(state["elapsed_s"])
    return playhead


def state(playhead: Playhead, now: float | None = None) -> dict:
    """The replay's position, as `/_sim/replay` answers it (no sample text: identity and times only)."""
    tel = playhead.telemetry
    now = playhead.clock() if now is None else now
    pos = playhead.position(now)
    return {"incident_id": tel.incident.get("incident_id"), "dialect": tel.dialect, "naming": tel.naming,
            "start_t": tel.start, "end_t": tel.end, "period_s": tel.period, "cadence_s": tel.cadence,
            "speed": playhead.speed, "loop": playhead.loop,
            "elapsed_s": playhead.start_offset + max(0.0, now - playhead.began) * playhead.speed,
            "position_t": pos.b, "loops": pos.loop, "held": pos.held,
            "verdicts": [{"name": v["name"], "onset": v["onset"], "t": v["t"]} for v in tel.verdicts]}


async def attach(url: str, bundle: str | Path) -> ReplayProcessProbe:
    """`watch URL --replay BUNDLE`: the bundle's process view in step with the replaying server at URL
    (its position read once from `/_sim/replay`); ReplayError (one line) when URL replays another bundle
    or is no replay."""
    # aiohttp: one control request of the replay CLI to its server; no hot path for transport.http1 to serve.
    import aiohttp

    telemetry = load(bundle)
    where = url.rstrip("/") + "/_sim/replay"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0)) as session:
            async with session.get(where) as response:
                if response.status != 200:
                    raise ReplayError(f"{where} answered {response.status}: not a `servewatch sim --replay` "
                                      f"reachable from here (the position is served to loopback only)")
                answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ReplayError(f"{where}: no replay position ({type(exc).__name__})") from None
    if answer.get("incident_id") != telemetry.incident.get("incident_id"):
        raise ReplayError(f"{url} replays another bundle than {Path(bundle).name}")
    if not telemetry.process:
        raise ReplayError(f"{Path(bundle).name} holds no process view to replay (recorded without --pid)")
    return ReplayProcessProbe(telemetry, follow(telemetry, answer))
