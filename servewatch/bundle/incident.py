"""A bundle read back for reporting: its metadata, decoded samples and verdicts, and chart series."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servewatch.detectors.verdict import Verdict
from servewatch.engine.state import Histogram
from servewatch.bundle import serialize, series
from servewatch.bundle.verify import load_bundle
from servewatch.timeline.samples import Sample
from servewatch.words import field_words


@dataclass(frozen=True)
class Incident:
    name: str                       # the bundle's directory name
    meta: dict                      # incident.json
    samples: tuple[Sample, ...]
    verdicts: tuple[Verdict, ...]

    # a deployment's instances, each (its role and name in words: "prefill 10.0.0.8:8100", its own samples)
    instances: tuple[tuple[str, tuple[Sample, ...]], ...] = ()

    @property
    def main_instance(self) -> tuple[str, tuple[Sample, ...]] | None:
        """The deployment instance read as the target where one must be (its first decode instance, where requests
        wait): (its role and name in words, its own samples); None for a single target."""
        if not self.instances:
            return None
        return next((x for x in self.instances if x[0].startswith("decode ")), self.instances[0])

    @property
    def series(self) -> dict[str, list[series.Point]]:
        """The target's series (a deployment's: its main instance's; each instance's are in `timelines`)."""
        main = self.main_instance
        return series.timeline_series(main[1] if main is not None else self.samples)

    @property
    def timelines(self) -> list[tuple[str | None, dict[str, list[series.Point]]]]:
        """(whose, series): the target's alone (None), or each deployment instance's ("prefill 10.0.0.8:8100")."""
        if self.instances:
            return [(who, series.timeline_series(samples)) for who, samples in self.instances]
        return [(None, self.series)]

    @property
    def markers(self) -> list[series.Marker]:
        return [series.Marker(t=v.t, onset=v.onset, label=v.name) for v in self.verdicts]


def load_incident(path: str | Path) -> Incident:
    """Read a bundle whose hashes, schema and identity check out (recomputation is `verify`'s job)."""
    path = Path(path)
    meta, sample_dicts = load_bundle(path)
    return Incident(
        name=path.name,
        meta=meta,
        samples=tuple(serialize.sample_from_dict(d) for d in sample_dicts),
        verdicts=tuple(serialize.verdict_from_dict(d) for d in meta["verdicts"]),
        instances=tuple((f"{i['role']} {i['name']}", tuple(serialize.sample_from_dict(d) for d in sample_dicts
                                                          if d.get("instance") == i["name"]))
                        for i in meta["target"].get("deployment", ())),
    )


def deployment_words(meta: dict) -> str | None:
    """"prefill 10.0.0.8:8100, decode 10.0.0.9:8200": a deployment's instances by role (None: one target)."""
    instances = meta["target"].get("deployment")
    return ", ".join(f"{i['role']} {i['name']}" for i in instances) if instances else None


def fault_words(verdict: Verdict) -> str | None:
    """Which side of a deployment a verdict puts at fault, and whether it is acted on (None: not a deployment's
    verdict). A pair verdict names the one instance to act on in `act_on` (registry.may_act_on); an instance's own
    verdict is about that instance alone."""
    from servewatch.detectors import registry

    details = verdict.details
    if isinstance(details.get("instance"), str) and isinstance(details.get("role"), str):
        return f"{details['role']} {details['instance']}: its own verdict, about that instance alone"
    found = registry.spec(verdict.name)
    if found is None or not found.pair:
        return None
    sides = [(role, details[role]) for role in ("prefill", "decode") if isinstance(details.get(role), str)]

    def named(role: str, name: str) -> str:
        state = details.get(f"{role}_state")
        return f"{role} {name}" + (f" ({state})" if isinstance(state, str) else "")

    act_on = details.get("act_on")
    if isinstance(act_on, str):
        role = next((r for r, n in sides if n == act_on), "instance")
        others = [f"{r} {n}" for r, n in sides if n != act_on]
        return (f"{named(role, act_on)}: the side to restart"
                + (f"; {' and '.join(others)} is not acted on" if others else ""))
    return (f"neither side is restarted ({', '.join(named(r, n) for r, n in sides) or 'no instance named'}): "
            f"a person decides")


def detail_words(key: str, value) -> str:
    """A verdict detail's value as a reader says it (the engine key in words, no Python None or True)."""
    from servewatch.detectors.series import engine_words

    if key == "engine" and isinstance(value, str):
        return engine_words(value)
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, tuple)):
        return ", ".join(str(x) for x in value) or "none"
    return str(value)


STAGE_WORDS = {"process_up": "process up", "engine_start": "engine starting", "weights_loading": "loading weights",
               "weights_loaded": "weights loaded", "compiling": "compiling", "compiled": "compiled",
               "kv_cache_size": "KV cache sized", "graphs_capturing": "capturing graphs",
               "graphs_captured": "graphs captured", "engine_ready": "engine ready",
               "api_listening": "API listening", "ready": "ready", "health_ok": "first /health 200"}
STAGE_HEADERS = ("stage", "at (s from the start)", "since the previous stage (s)", "the log said")


def stage_rows(incident: Incident) -> list[tuple]:
    """The newest start's stages in the bundle (process up, weights loaded, KV cache sized, ..., first
    /health 200): when each came and what its line said; empty when the bundle shows no start."""
    from servewatch.detectors.evidence.stages import stages
    from servewatch.timeline.window import Window

    window = Window.from_samples(incident.samples)
    found = stages(window)
    if found and found[-1].name == "health_ok":
        # A /health that answered 200 at its first ask is when the watch began, not a stage of the start.
        first = next((h for h in window.health if h.t >= found[0].t), None)
        if first is not None and first.ok:
            found = found[:-1]
    if len(found) < 2:
        return []
    start = found[0].t
    rows, previous = [], start
    for stage in found:
        rows.append((STAGE_WORDS.get(stage.name, stage.name.replace("_", " ")), round(stage.t - start, 1),
                     round(stage.t - previous, 1), field_words(stage.fields) or "–"))
        previous = stage.t
    return rows


PROCESS_HEADERS = ("pid", "role", "title", "status", "RSS (MiB)", "threads", "CPU %")
LOG_HEADERS = ("time (s)", "kind", "fields")


def process_rows(incident: Incident) -> tuple[float | None, list[tuple]]:
    """(time, rows) of the newest process sample: each member's identity and state."""
    from servewatch.timeline.samples import ProcessSample

    last = next((s for s in reversed(incident.samples) if isinstance(s, ProcessSample)), None)
    if last is None:
        return None, []
    rows = [(str(m.pid), m.role, m.title, m.status,
             None if m.rss_bytes is None else round(m.rss_bytes / 2**20, 1), m.threads, m.cpu_percent)
            for m in last.members]
    if not last.alive:
        rows.append((str(last.root_pid), "root", "–", "gone", None, None, None))
    return last.t, rows


COLLECTIVE_HEADERS = ("group", "rank", "last completed", "last entered", "waiting in")


def collective_rows(incident: Incident) -> tuple[float | None, list[tuple]]:
    """(time, rows) of the newest Flight Recorder collection in the bundle: each rank's position per process
    group (the "position" events the collective source keeps; numbers and the op's name only)."""
    from servewatch.timeline.samples import LogEvent

    positions = [s for s in incident.samples if isinstance(s, LogEvent) and s.kind == "collective"
                 and s.fields.get("state") == "position"]
    if not positions:
        return None, []
    t = positions[-1].t
    rows = []
    for e in positions:
        if e.t != t:
            continue
        f = e.fields
        entered, completed = f.get("entered"), f.get("completed")
        rows.append((_whole(f.get("group")), _whole(f.get("rank")), _whole(completed), _whole(entered),
                     str(f["op"]) if isinstance(f.get("op"), str) and entered != completed else ""))
    return t, sorted(rows, key=lambda r: (str(r[0]), str(r[1])))


def _whole(value) -> str:
    return str(int(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def log_rows(incident: Incident, limit: int = 20) -> list[tuple]:
    """The newest `limit` log events: time from the window start, kind, and their parsed fields."""
    from servewatch.timeline.samples import LogEvent

    start = incident.meta["window"]["start_t"] or 0.0
    events = [s for s in incident.samples if isinstance(s, LogEvent)][-limit:]
    return [(round(e.t - start, 3), e.kind.replace("_", " "), field_words(e.fields))
            for e in events]


def latency_histograms(incident: Incident) -> list[tuple[str, str, Histogram]]:
    """(engine, kind, histogram of the window) for each latency histogram the bundle holds at both ends of
    the window: the newest minus the oldest scrape (a counter reset in between gives nothing)."""
    from servewatch.engine.histogram import delta
    from servewatch.engine.state import HISTOGRAM_KINDS
    from servewatch.timeline.samples import MetricsSample

    first: dict[tuple[str, str], Histogram] = {}
    last: dict[tuple[str, str], Histogram] = {}
    for sample in incident.samples:
        if not isinstance(sample, MetricsSample):
            continue
        for engine in sample.engines:
            name = ",".join(f"{k}={v}" for k, v in sorted(engine.labels.items()) if k != "model_name") or "engine"
            for kind, histogram in engine.histograms.items():
                first.setdefault((name, kind), histogram)
                last[(name, kind)] = histogram
    out = []
    for (name, kind), newest in sorted(last.items(), key=lambda x: (x[0][0], HISTOGRAM_KINDS.index(x[0][1])
                                                                   if x[0][1] in HISTOGRAM_KINDS else 99)):
        window = delta(newest, first[(name, kind)]) if first[(name, kind)] is not newest else None
        if window is not None and window.count > 0:
            out.append((name, kind, window))
    return out
