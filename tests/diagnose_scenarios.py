"""The six recorded real-vLLM scenarios (tests/fixtures/vllm_real) as the doctor's inputs, with their truth.

The recorded scrapes are single moments; each scenario's window is that scrape as the recorder would have
seen it across a few seconds: the same scrape again where the engine was frozen (its counters did not move,
the stalled worker), the two recorded moments of the KV-pressure run, and the recorded death (the scrape
before the SIGKILL, then /health 503 and the log's own death lines). The long-output scenario is the
recorded `servewatch load` signature row.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from servewatch.dialects import read_scrape
from servewatch.doctor.diagnose import Readings, readings_from_load, readings_from_window
from servewatch.sources.logs import parse_line
from servewatch.timeline.samples import HealthSample, MetricsSample
from servewatch.timeline.window import Window

REAL = Path(__file__).resolve().parent / "fixtures" / "vllm_real"
SMALL_SLOTS = 4      # the small-slots server ran with --max-num-seqs 4 (observations.json)


def _scrape(name: str, t: float, slot_limit: int | None = None) -> MetricsSample:
    scrape = read_scrape((REAL / name).read_text(encoding="utf-8"))
    engines = tuple(dataclasses.replace(e, slot_limit=slot_limit) for e in scrape.engines)
    return MetricsSample(t, scrape.dialect, scrape.naming, engines)


def _ok(t: float) -> HealthSample:
    return HealthSample(t, 200, 0.002)


def _window(*samples) -> Window:
    return Window.from_samples(samples)


def stalled_worker_window() -> Window:
    return _window(*[s for t in range(0, 12, 2) for s in (_scrape("stall_sigstop.prom", float(t)), _ok(float(t)))])


def scenarios() -> dict[str, tuple[str, Readings]]:
    """name → (labelled truth, readings)."""
    death_log = (REAL / "engine_death_by_worker_sigkill.log").read_text(encoding="utf-8").splitlines()
    death_events = [e for line in death_log for e in parse_line(line, 12.0) if e.kind == "engine_dead"]
    signature = json.loads((REAL / "signatures.json").read_text(encoding="utf-8"))["long-output"]
    return {
        "idle": ("idle", readings_from_window(_window(
            _scrape("idle.prom", 0.0), _ok(0.0), _scrape("idle.prom", 5.0), _ok(5.0)))),
        "long output": ("long_output", readings_from_load({"signature": signature, "output_tokens_requested": 1024})),
        "slot overload": ("overload", readings_from_window(_window(
            _scrape("overload_slots.prom", 0.0, SMALL_SLOTS), _ok(0.0)))),
        "KV pressure": ("kv_pressure", readings_from_window(_window(
            _scrape("kv_pressure_t0.prom", 0.0), _ok(0.0), _scrape("kv_pressure_t1.prom", 10.0), _ok(10.0)))),
        "stalled worker": ("stall", readings_from_window(stalled_worker_window())),
        "dead engine": ("engine_dead", readings_from_window(_window(
            _scrape("before_worker_sigkill.prom", 0.0, SMALL_SLOTS), _ok(0.0),
            HealthSample(12.0, 503, 0.001), HealthSample(12.5, 503, 0.001), HealthSample(13.0, 503, 0.001),
            *death_events))),
    }
