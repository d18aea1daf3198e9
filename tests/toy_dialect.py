"""A third engine, defined only here: the whole of what servewatch needs to know about it.

With `servewatch.dialects.register(ToyDialect())` (one call, in the test that uses it) `inspect` reads
it, `watch` records it and its bundles verify; no file under servewatch/ names it.
"""

from __future__ import annotations

import re

from servewatch.dialects import base
from servewatch.engine.state import Counters, EngineState

RUNNING = "toy_busy_requests"
WAITING = "toy_queued_requests"
TOKENS = "toy_tokens_out_total"
STEPS = "toy_steps_total"
READY_LINE = "toy engine ready"


class ToyDialect(base.Dialect):
    name = "toy"
    identity_labels = ("replica",)
    process_roles = {"toy::core": "engine_core"}
    engine_process_titles = (("toy::core", "engine_core"),)
    slot_limit_flag = "--toy-slots"
    health_dead_status = 410
    latency_edges = {"ttft": (0.1, 1.0), "itl": (0.01, 0.1), "e2e": (1.0, 10.0)}
    log_prefix = re.compile(r"^toy\| (?P<msg>.*)$")

    def detect(self, families):
        return "toy-1" if RUNNING in families else None

    def wanted_families(self):
        return (RUNNING, WAITING, TOKENS, "toy_tokens_out", STEPS, "toy_steps")

    def read(self, families, generation):
        ids = self.identity_labels
        running = base.sum_by(families.get(RUNNING), ids)
        waiting = base.sum_by(families.get(WAITING), ids)
        tokens = base.sum_counter(families, TOKENS, ids)
        steps = base.sum_counter(families, STEPS, ids)
        return [EngineState(dialect=self.name, generation=generation, labels=dict(key), running=running.get(key),
                            waiting=waiting.get(key),
                            counters=Counters(generation_tokens=tokens.get(key), steps=steps.get(key)))
                for key in sorted(running)]

    def parse_log_message(self, msg):
        return [("startup", {"stage": "ready"})] if READY_LINE in msg else []

    def grammar_literals(self):
        return frozenset({READY_LINE})
