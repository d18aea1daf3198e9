"""A third engine, defined only here: the whole of what servewatch needs to know about it.

With `servewatch.dialects.register(ToyDialect())` (one call, in the test that uses it) `inspect` reads
it, `watch` records it and its bundles verify, `postmortem` reads its log and `advise` prints its bucket
flags; no file under servewatch/ names it.
"""

from __future__ import annotations

import re
import sys

from servewatch.dialects import base
from servewatch.engine.state import Counters, EngineState

NAME = "toy"
IDENTITY_LABELS = ("replica",)
PROCESS_ROLES = {"toy::core": "engine_core"}
SLOT_LIMIT_FLAG = "--toy-slots"
HEALTH_DEAD_STATUS = 410

RUNNING = "toy_busy_requests"
WAITING = "toy_queued_requests"
TOKENS = "toy_tokens_out_total"
STEPS = "toy_steps_total"

# --- bucket edges: one flag per histogram, each followed by its edges ------------------------------
BUCKET_FLAGS = {"ttft": "--toy-ttft-buckets", "itl": "--toy-itl-buckets", "e2e": "--toy-e2e-buckets"}

# --- log grammar: "toy| 2026-01-01 00:00:03 [core] message" (stamp and process optional) -------------
LOG_PREFIX = re.compile(r"^toy\| (?:(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) )?(?:\[(?P<process>\w+)\] )?(?P<msg>.*)$")
READY_LINE = "toy engine ready"
CORE_DIED_LINE = "toy core died"
STATS_LINE = re.compile(r"toy stats: busy=(?P<busy>\d+) queued=(?P<queued>\d+)")
RECORD_GRAMMAR = base.RecordGrammar(
    engine_processes=("core",),
    packages=("toyengine",),
    startup_stages=(("weights", re.compile(r"toy weights loaded in (?P<seconds>[\d.]+) s")),),
    settings_marker="toy args:",
    settings=(("slots", re.compile(r"slots=(?P<value>\d+)"), int),),
)


def detect(families):
    return "toy-1" if RUNNING in families else None


def wanted_families():
    return (RUNNING, WAITING, TOKENS, "toy_tokens_out", STEPS, "toy_steps")


def read(families, naming):
    running = base.sum_by(families.get(RUNNING), IDENTITY_LABELS)
    waiting = base.sum_by(families.get(WAITING), IDENTITY_LABELS)
    tokens = base.sum_counter(families, TOKENS, IDENTITY_LABELS)
    steps = base.sum_counter(families, STEPS, IDENTITY_LABELS)
    return [EngineState(dialect=NAME, naming=naming, labels=dict(key), running=running.get(key),
                        waiting=waiting.get(key),
                        counters=Counters(generation_tokens=tokens.get(key), steps=steps.get(key)))
            for key in sorted(running)]


def parse_log_message(msg):
    match = STATS_LINE.search(msg)
    if match:
        return [("stats", base.numbers(match, {"busy": int, "queued": int}))]
    if CORE_DIED_LINE in msg:
        return [("engine_dead", {"reason": CORE_DIED_LINE})]
    return [("startup", {"stage": "ready"})] if READY_LINE in msg else []


def stats_reading(fields):
    return base.StatsReading("toy stats line", "toy-1", {"running": fields.get("busy"), "waiting": fields.get("queued")})


class ToyDialect(base.Dialect, module=sys.modules[__name__]):
    engine_process_titles = (("toy::core", "engine_core"),)
    latency_edges = {"ttft": (0.1, 1.0), "itl": (0.01, 0.1), "e2e": (1.0, 10.0)}
