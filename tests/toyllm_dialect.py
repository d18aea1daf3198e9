"""toyllm: a made-up engine with `toyllm:` metric names, defined only here. The whole of what servewatch
needs to know about it, and the whole of what the simulator needs to speak it.

With `servewatch.dialects.register(ToyllmDialect())` (one call, in the test that uses it) `inspect` tells it
by its names, `watch` records its progress and gives a stall verdict, `rules` writes alerts in its names, and
`servewatch.sim` serves its /metrics (rendered from `alert_series`, servewatch.sim.metrics_series); no file
under servewatch/ names it.
"""

from __future__ import annotations

import sys

from servewatch.dialects import base
from servewatch.dialects.series import EngineSeries, LatencyHistogram, RatioSeries
from servewatch.engine.state import Counters, EngineState

NAME = "toyllm"
TITLE = "ToyLLM"
IDENTITY_LABELS = ("model_name", "replica")
SLOT_LIMIT_FLAG = "--toyllm-max-running"
ALERT_NAMINGS = ("toyllm-1",)

RUNNING = "toyllm:requests_running"
WAITING = "toyllm:requests_waiting"
KV_USAGE = "toyllm:kv_usage_ratio"
PREEMPTED = "toyllm:preempted_total"
GENERATED = "toyllm:tokens_generated_total"
FINISHED = "toyllm:requests_finished_total"         # label outcome: ok | aborted
RESPONSES = "toyllm:http_responses_total"           # label code_class: 2xx | 5xx
TTFT = "toyllm:first_token_seconds"
E2E = "toyllm:request_seconds"
EDGES = {"ttft": (0.05, 0.1, 0.25, 0.5, 1.0, 2.5), "e2e": (0.5, 1.0, 2.5, 5.0, 10.0, 30.0)}
BUCKET_FLAGS = {"ttft": "--toyllm-ttft-buckets", "e2e": "--toyllm-e2e-buckets"}


def alert_series(naming):
    if naming not in ALERT_NAMINGS:
        raise KeyError(naming)
    return EngineSeries(
        dialect=NAME, naming=naming, running=RUNNING, waiting=WAITING, kv_usage=KV_USAGE,
        preemptions=PREEMPTED, preemptions_lazy=False, generation_tokens=GENERATED,
        availability=RatioSeries(RESPONSES, bad='code_class="5xx"', total="",
                                 good_labels=(("code_class", "2xx"),), bad_labels=(("code_class", "5xx"),)),
        success=RatioSeries(FINISHED, bad='outcome="aborted"', total="",
                            good_labels=(("outcome", "ok"),), bad_labels=(("outcome", "aborted"),)),
        histograms={kind: LatencyHistogram(kind, name, EDGES[kind], BUCKET_FLAGS[kind])
                    for kind, name in (("ttft", TTFT), ("e2e", E2E))},
        slot_limit_flag=SLOT_LIMIT_FLAG, default_slot_limit=64, engine_labels=IDENTITY_LABELS)


def detect(families):
    return ALERT_NAMINGS[0] if RUNNING in families else None


def wanted_families():
    names = (RUNNING, WAITING, KV_USAGE, PREEMPTED, GENERATED, FINISHED, RESPONSES, TTFT, E2E)
    return tuple(n for name in names for n in base.counter_names(name))


def read(families, naming):
    running = base.sum_by(families.get(RUNNING), IDENTITY_LABELS)
    waiting = base.sum_by(families.get(WAITING), IDENTITY_LABELS)
    kv = base.sum_by(families.get(KV_USAGE), IDENTITY_LABELS)
    generated = base.sum_counter(families, GENERATED, IDENTITY_LABELS)
    preempted = base.sum_counter(families, PREEMPTED, IDENTITY_LABELS)
    finished = base.sum_counter(families, FINISHED, IDENTITY_LABELS, label="outcome")
    hists = {kind: base.histograms_by(families.get(name), IDENTITY_LABELS) for kind, name in (("ttft", TTFT), ("e2e", E2E))}
    return [EngineState(dialect=NAME, naming=naming, labels=dict(key), running=running.get(key),
                        waiting=waiting.get(key), kv_usage=kv.get(key),
                        counters=Counters(generation_tokens=generated.get(key), preemptions=preempted.get(key),
                                          finished=finished.get(key, {})),
                        histograms={kind: h[key] for kind, h in hists.items() if key in h})
            for key in sorted(running)]


class ToyllmDialect(base.Dialect, module=sys.modules[__name__]):
    latency_edges = EDGES
