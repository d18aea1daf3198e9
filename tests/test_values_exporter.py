"""Values of serve's Prometheus exporter, servewatch/sinks/export/exporter.py (issue 50): each metric's name, help
and type, the scrape histogram's buckets, the derived signals' series, a verdict's active/fired series as it fires
and clears on one engine or several, servewatch_gpu_fault's labels, and what removing a target takes away. The
exposition is parsed and each value compared."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from servewatch.serve.signals import Signals
from servewatch.sinks.export import exporter as X
from servewatch.sinks.export.exporter import ExporterSink, FleetExporter, label

HELP = {
    "servewatch_target_up": "1 when the newest /health probe got an HTTP answer and the newest /metrics scrape "
                            "succeeded, else 0",
    "servewatch_probe_failures_total": "Health probes that failed (no answer, or not 2xx)",
    "servewatch_scrape_failures_total": "Failed /metrics scrapes by failure kind",
    "servewatch_scrape_duration_seconds": "Time to fetch a target's /metrics",
    "servewatch_targets": "Targets by state (up, down, backoff)",
    "servewatch_event_loop_lag_seconds": "How late the event loop woke a timer, newest measurement",
    "servewatch_config_reload_errors_total": "Discovery refreshes that failed (a file_sd file or Prometheus service "
                                             "discovery; the last good targets were kept)",
    "servewatch_sink_failures_total": "Alert or webhook deliveries given up",
    "servewatch_gpu_fault": "1 while a gpu_fault verdict holds on a GPU a target's engine holds: the GPU's UUID, the "
                            "Xid (\"none\" for an ECC, row-remap or off-the-bus fault without one) and NVIDIA's action "
                            "(restart_app, reset_gpu, reboot, workflow, recovery, unknown)",
    "servewatch_seconds_since_progress": "Seconds since any progress counter (engine steps, generation or prompt "
                                         "tokens) last moved, over the kept history",
    "servewatch_generation_tokens_per_second": "Generation tokens per second over the newest 10 s",
    "servewatch_engine_steps_per_second": "Engine steps per second over the newest 10 s",
    "servewatch_preemptions_per_second": "Preemptions (vLLM) or retractions (SGLang) per second",
    "servewatch_kv_usage_mean_ratio": "KV cache usage, 0..1, averaged over the kept history",
    "servewatch_requests_waiting": "Requests waiting in the engine queue, newest scrape",
    "servewatch_running_over_slot_limit_ratio": "Running requests divided by the slot limit (max_num_seqs), newest "
                                                "scrape",
    "servewatch_queue_wait_mean_seconds": "Mean time in queue of the requests seen over the history",
    "servewatch_verdict_active": "1 while the verdict holds for the target, else 0",
    "servewatch_verdicts_fired_total": "Verdicts that started holding",
}
TYPES = {"servewatch_target_up": "gauge", "servewatch_probe_failures_total": "counter",
         "servewatch_scrape_failures_total": "counter", "servewatch_scrape_duration_seconds": "histogram",
         "servewatch_targets": "gauge", "servewatch_event_loop_lag_seconds": "gauge",
         "servewatch_config_reload_errors_total": "counter", "servewatch_sink_failures_total": "counter",
         "servewatch_gpu_fault": "gauge"}


def _lines(e: FleetExporter, prefix: str) -> list[str]:
    return [line for line in e.exposition().decode().splitlines() if line.startswith(prefix)]


def _samples(e: FleetExporter, name: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(e.exposition().decode()):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_names_help_and_types():
    e = FleetExporter(derived=lambda: [])
    helps = {}
    for line in _lines(e, "# HELP "):
        name, text = line[len("# HELP "):].split(" ", 1)
        helps[name] = text
    assert helps == HELP
    types = dict(line[len("# TYPE "):].split(" ", 1) for line in _lines(e, "# TYPE "))
    for name, kind in TYPES.items():
        assert types[name] == kind, name
    assert X.PREFIX == "servewatch_"
    assert "_created" not in e.exposition().decode()


def test_the_scrape_histogram_buckets():
    assert X.SCRAPE_BUCKETS == (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
    e = FleetExporter()
    e.scrape_duration.observe(0.2)
    buckets = {dict(k)["le"]: v for k, v in _samples(e, "servewatch_scrape_duration_seconds_bucket").items()}
    assert list(buckets) == [*(repr(b) for b in X.SCRAPE_BUCKETS), "+Inf"]
    assert buckets["0.1"] == 0 and buckets["0.25"] == 1


def test_label_is_a_safe_token_or_other():
    assert label("host:8000") == "host:8000"
    assert label("") == "other"
    assert label("a b") == "other"
    assert label(None) == "other"                               # no value at all: "other" too


def test_the_derived_signals_become_gauges_by_target():
    values = Signals(seconds_since_progress=12.5, tokens_per_s=300, steps_per_s=20.0, preemptions_per_s=0.5,
                     kv_usage_mean=0.25, waiting=3, running_over_slot_limit=1.0, queue_wait_mean_s=0.75)
    e = FleetExporter(derived=lambda: [("a:1", values), ("b:2", Signals(waiting=7))])
    got = {}
    for family in text_string_to_metric_families(e.exposition().decode()):
        for s in family.samples:
            if "target" in s.labels and s.name.removeprefix("servewatch_") in {n for n, _ in X.DERIVED.values()}:
                got[(s.name, s.labels["target"])] = s.value
    assert got == {
        ("servewatch_seconds_since_progress", "a:1"): 12.5, ("servewatch_generation_tokens_per_second", "a:1"): 300.0,
        ("servewatch_engine_steps_per_second", "a:1"): 20.0, ("servewatch_preemptions_per_second", "a:1"): 0.5,
        ("servewatch_kv_usage_mean_ratio", "a:1"): 0.25, ("servewatch_requests_waiting", "a:1"): 3.0,
        ("servewatch_running_over_slot_limit_ratio", "a:1"): 1.0, ("servewatch_queue_wait_mean_seconds", "a:1"): 0.75,
        ("servewatch_requests_waiting", "b:2"): 7.0}
    assert {f: n for f, (n, _) in X.DERIVED.items()} == {
        "seconds_since_progress": "seconds_since_progress", "tokens_per_s": "generation_tokens_per_second",
        "steps_per_s": "engine_steps_per_second", "preemptions_per_s": "preemptions_per_second",
        "kv_usage_mean": "kv_usage_mean_ratio", "waiting": "requests_waiting",
        "running_over_slot_limit": "running_over_slot_limit_ratio", "queue_wait_mean_s": "queue_wait_mean_seconds"}
    empty = X.DerivedSeries(lambda: []).exposition()
    assert empty == "".join(f"# HELP servewatch_{n} {h}\n# TYPE servewatch_{n} gauge\n" for n, h in X.DERIVED.values())


def _as_prometheus_client_writes(rows) -> str:
    """The derived gauges as prometheus_client's own collector writes them (what serve exported before it wrote
    them itself)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily

    class Collector:
        def describe(self):
            return []

        def collect(self):
            families = {field: GaugeMetricFamily(X.PREFIX + name, help_text, labels=["target"])
                        for field, (name, help_text) in X.DERIVED.items()}
            for target, values in rows:
                for field, family in families.items():
                    if getattr(values, field) is not None:
                        family.add_metric([label(target)], float(getattr(values, field)))
            return list(families.values())

    registry = CollectorRegistry()
    registry.register(Collector())
    return generate_latest(registry).decode()


def test_the_derived_text_is_what_prometheus_client_writes():
    odd = [0.0, -0.0, 1, 300, 2.5, 1e-7, 123456.789, 999999.9999, 1e6, 1234567.5, 1e16, 1.5e300, -2e6,
           float("inf"), float("-inf"), float("nan"), True]
    rows = [(f"t{i}:{i}", Signals(**{field: odd[(i + k) % len(odd)] if (i + k) % 5 else None
                                     for k, field in enumerate(X.DERIVED)}))
            for i in range(len(odd) * 2)]
    rows += [("a b", Signals(waiting=1.0)), ('q"\\x', Signals(waiting=2.0)), ("", Signals())]
    series = X.DerivedSeries(lambda: rows)
    assert series.exposition() == _as_prometheus_client_writes(rows)
    assert series.exposition() == _as_prometheus_client_writes(rows)        # the targets' label text kept
    assert X._escape('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert X._help("a\\b\nc") == "a\\\\b\\nc"          # HELP: a backslash and a newline escaped, a quote not
    assert X._help('say "x"') == 'say "x"'


def test_the_derived_label_text_kept_is_bounded(monkeypatch):
    monkeypatch.setattr(X, "_TARGETS_KEPT", 2)
    rows = []
    series = X.DerivedSeries(lambda: rows)
    for name in ("a:1", "b:2", "c:3"):
        rows[:] = [(name, Signals(waiting=1.0))]
        assert f'servewatch_requests_waiting{{target="{name}"}} 1.0\n' in series.exposition()
        assert len(series._starts) <= 2


def test_a_target_starts_down_with_every_verdict_at_zero():
    from servewatch.detectors import registry

    e = FleetExporter()
    e.add_target("t:1")
    assert _samples(e, "servewatch_target_up") == {(("target", "t:1"),): 0.0}
    assert _samples(e, "servewatch_probe_failures_total") == {(("target", "t:1"),): 0.0}
    active = _samples(e, "servewatch_verdict_active")
    assert len(active) == len(registry.specs()) and set(active.values()) == {0.0}
    key = (("severity", "page"), ("target", "t:1"), ("verdict", "engine_dead"))
    assert active[key] == 0.0
    assert e.verdicts.value("t:1", "engine_dead") == (0, 0.0)


def _sink_event(name, details=None):
    return SimpleNamespace(verdict=SimpleNamespace(name=name, details=details or {}))


def test_a_verdict_on_two_engines_clears_when_both_have_cleared():
    e = FleetExporter()
    e.add_target("t:1")
    sink = e.sink("t:1")
    assert isinstance(sink, ExporterSink) and sink.target == "t:1" and sink.exporter is e
    assert sink.on_fired(_sink_event("overload")) is None
    assert e.verdicts.value("t:1", "overload") == (1, 1.0)
    sink.on_fired(_sink_event("overload"))                      # the second engine
    assert e.verdicts.value("t:1", "overload") == (1, 2.0)
    sink.on_cleared(_sink_event("overload"))
    assert e.verdicts.value("t:1", "overload") == (1, 2.0)      # one engine still holds it
    sink.on_cleared(_sink_event("overload"))
    assert e.verdicts.value("t:1", "overload") == (0, 2.0)
    sink.on_cleared(_sink_event("overload"))                    # a clear too many stays at 0
    assert e._active[("t:1", "overload")] == 0
    sink.on_fired(_sink_event("overload"))
    assert e.verdicts.value("t:1", "overload") == (1, 3.0)
    sink.close()


def test_the_targets_and_sink_failures_are_labelled():
    e = FleetExporter()
    e.targets.labels("up").set(3)
    e.sink_failures.labels("webhook").inc()
    assert _samples(e, "servewatch_targets") == {(("state", "up"),): 3.0}
    assert _samples(e, "servewatch_sink_failures_total") == {(("sink", "webhook"),): 1.0}


def test_severity_of_a_verdict():
    from servewatch.detectors import registry

    assert X._severity("engine_dead") == registry.spec("engine_dead").severity == "page"
    assert X._severity("no_such_verdict") == "info"


def test_gpu_fault_series_follows_the_verdict():
    e = FleetExporter()
    e.add_target("t:1")
    sink = e.sink("t:1")
    sink.on_fired(_sink_event("gpu_fault", {"gpu_uuid": "GPU-1", "xid": 79, "action": "reset_gpu"}))
    assert _samples(e, "servewatch_gpu_fault") == {
        (("action", "reset_gpu"), ("gpu_uuid", "GPU-1"), ("target", "t:1"), ("xid", "79")): 1.0}
    assert e.verdicts.value("t:1", "gpu_fault") == (1, 1.0)
    # the same target's fault moves to another GPU: one series, the new one
    sink.on_fired(_sink_event("gpu_fault", {"gpu_uuid": None, "xid": "79", "action": None}))
    assert _samples(e, "servewatch_gpu_fault") == {
        (("action", "unknown"), ("gpu_uuid", "unknown"), ("target", "t:1"), ("xid", "none")): 1.0}
    # the same labels again: kept
    sink.on_fired(_sink_event("gpu_fault", {"gpu_uuid": None, "xid": "79", "action": None}))
    assert len(_samples(e, "servewatch_gpu_fault")) == 1
    sink.on_cleared(_sink_event("overload"))                    # another verdict: the GPU series stays
    assert len(_samples(e, "servewatch_gpu_fault")) == 1
    sink.on_cleared(_sink_event("gpu_fault"))
    assert _samples(e, "servewatch_gpu_fault") == {}
    e.gpu_fault_cleared("t:1")                                  # twice: nothing to remove
    e._remove(e.gpu_fault, ("t:1", "x", "y", "z"))              # a series never made: no error
    sink.on_fired(_sink_event("overload"))
    assert _samples(e, "servewatch_gpu_fault") == {}            # another verdict makes no GPU series


def test_removing_a_target_takes_its_series():
    e = FleetExporter()
    for t in ("t:1", "u:2"):
        e.add_target(t)
        e.scrape_failures.labels(t, "timeout").inc()
        e.fired(t, "overload")
        e.gpu_fault_fired(t, {"gpu_uuid": "G", "xid": 48, "action": "reboot"})
    e.target_up.labels("t:1").set(1)
    e.remove_target("t:1")
    text = e.exposition().decode()
    assert 'target="t:1"' not in text
    assert _samples(e, "servewatch_target_up") == {(("target", "u:2"),): 0.0}
    assert _samples(e, "servewatch_scrape_failures_total") == {(("kind", "timeout"), ("target", "u:2")): 1.0}
    assert list(e._active) == [("u:2", "overload")]
    assert list(e._gpu_faults) == ["u:2"]
    e.remove_target("t:1")                                      # again: nothing left, no error
    e.fired("t:1", "overload")                                  # a fresh count after removal
    assert e._active[("t:1", "overload")] == 1


def test_ranks_are_exported_through_the_label_function():
    from tests.test_values_rank_series import _tree

    e = FleetExporter(ranks=lambda: [("a b", _tree())])
    rows = sorted(tuple(dict(k)[x] for x in ("target", "role", "rank", "state"))
                  for k in _samples(e, "servewatch_rank_state"))
    assert rows == [("other", "engine_core", "none", "S"), ("other", "worker", "TP0", "R"),
                    ("other", "worker", "TP1", "T")]
    assert "servewatch_rank_state" not in FleetExporter().exposition().decode()
