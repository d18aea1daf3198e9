"""Detectors: pure functions of a timeline window → typed verdicts with evidence pointers.

    run_detectors(window, config) -> list[Verdict]

No clock reads, no I/O: a verdict depends only on the window's samples and the config, so `verify`
recomputes the same verdicts from a bundle's stored samples. Detectors look only at the samples
newer than `window.end - config.lookback_s`; `evidence_window` returns that slice (with latency
histograms kept only where histogram_blind reads them), the smallest window that gives the same
verdicts — what a bundle needs to store.
"""

from __future__ import annotations

import dataclasses

from servewatch.detectors import registry
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.series import engine_series
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

__all__ = ["DetectorConfig", "Evidence", "Verdict", "Window", "evidence_window", "registry", "run_detectors",
           "verdict_key"]


def run_detectors(window: Window, config: DetectorConfig | None = None) -> list[Verdict]:
    """Every verdict the window supports, in registry order (then by engine)."""
    config = config or DetectorConfig()
    recent = _recent(window, config)
    if recent is None:
        return []
    if window.instances:
        return _deployment(window, recent, config)
    verdicts: list[Verdict] = []
    for spec in registry.specs():
        if not spec.pair:
            verdicts.extend(spec.detect(recent, config))
    return yield_way(verdicts)


def _deployment(window: Window, recent: Window, config: DetectorConfig) -> list[Verdict]:
    """A deployment's verdicts: each instance's own (judged on its window as on a target's, each named by its
    `instance` and `role` details and in its words), then the pair's (judged on the instances together)."""
    verdicts: list[Verdict] = []
    for instance in window.instances:
        own = run_detectors(instance.window, config)
        verdicts.extend(dataclasses.replace(v, why=f"{instance.role} {instance.name}: {v.why}",
                                            details={**v.details, "instance": instance.name, "role": instance.role})
                        for v in own)
    pair: list[Verdict] = []
    for spec in registry.specs():
        if spec.pair:
            pair.extend(spec.detect(recent, config))
    return verdicts + yield_way(pair)


def yield_way(verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts less those that give way to another present (their spec's yields_to): precedence, declared in
    the registry and applied here only."""
    present = {v.name for v in verdicts}
    out = []
    for verdict in verdicts:
        spec = registry.spec(verdict.name)
        if spec is None or not present.intersection(spec.yields_to):
            out.append(verdict)
    return out


def verdict_key(verdict: Verdict) -> tuple:
    """What makes two verdicts "the same condition" for firing once: the name and what it is about."""
    return (verdict.name, verdict.details.get("engine"), verdict.details.get("histogram"),
            verdict.details.get("instance"))


def evidence_window(window: Window, config: DetectorConfig | None = None) -> Window:
    """The smallest window with the same verdicts: the lookback slice, latency histograms kept only on
    the first and last scrape of each engine (histogram_blind compares those two)."""
    config = config or DetectorConfig()
    recent = _recent(window, config)
    if recent is None:
        return Window()
    keep: set[tuple[int, str]] = set()  # (index of the scrape, engine key) whose histograms stay
    index = {id(sample): i for i, sample in enumerate(recent.metrics)}
    for key, points in engine_series(recent.metrics).items():
        for kind in config.blind_kinds:
            having = [p for p in points if kind in p[1].histograms]
            if having:
                keep.add((index[id(having[0][0])], key))
                keep.add((index[id(having[-1][0])], key))
    return dataclasses.replace(recent, metrics=tuple(_strip(i, m, keep) for i, m in enumerate(recent.metrics)))


def _recent(window: Window, config: DetectorConfig) -> Window | None:
    """The lookback slice, plus the startup stage lines before it (a few lines per start, which a start
    that hangs longer than the lookback still needs to name its stage)."""
    end = window.end
    if end is None:
        return None
    since = end - config.lookback_s
    recent = window.since(since)
    older_stages = tuple(e for e in window.logs if e.t < since and e.kind == "startup")
    if older_stages:
        recent = dataclasses.replace(recent, logs=older_stages + recent.logs)
    return recent


def _strip(i: int, sample: MetricsSample, keep: set[tuple[int, str]]) -> MetricsSample:
    from servewatch.detectors.series import engine_key

    if not sample.engines:
        return sample
    engines = tuple(state if (i, engine_key(state.labels)) in keep or not state.histograms
                    else dataclasses.replace(state, histograms={}) for state in sample.engines)
    return dataclasses.replace(sample, engines=engines)
