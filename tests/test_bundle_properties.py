"""Properties of the allow-list: whatever text the samples carry, what the writer stores passes the closed
schema, is stable under a second pass, and carries none of the free text."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servewatch import dialects
from servewatch.detectors import registry
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.bundle import layout, serialize
from servewatch.bundle.verify import _validate
from servewatch.timeline.samples import (
    GpuDevice,
    GpuSample,
    HealthSample,
    RequestsSample,
    LogEvent,
    MetricsSample,
    ProcessMember,
    ProcessSample,
)

def _verdict_validator():
    import jsonschema

    from servewatch.bundle.verify import _validator

    schema = _validator("incident", registry.names(), dialects.identity_labels()).schema
    verdict_schema = {**schema["$defs"]["verdict"], "$defs": schema["$defs"]}
    return jsonschema.validators.validator_for(schema)(verdict_schema)


VERDICT_VALIDATOR = _verdict_validator()
MARK = "QX9"   # planted in every free-text field; the allow-list must drop or reduce all of it
text = st.text(min_size=0, max_size=30).map(lambda s: f"{s} {MARK}/{s}?k={MARK}")
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
maybe = st.one_of(st.none(), floats)
times = st.floats(min_value=1e9, max_value=2e9, allow_nan=False)
counts = st.one_of(st.none(), st.integers(min_value=0, max_value=2**40))

histograms = st.builds(lambda edges, c: Histogram(edges=tuple(sorted(edges)), cumulative=tuple(c[:len(edges)]),
                                                  count=float(sum(c)), sum=1.5),
                       st.lists(st.floats(0.001, 100, allow_nan=False), min_size=1, max_size=6, unique=True),
                       st.lists(st.floats(0, 1e6, allow_nan=False), min_size=6, max_size=6))
engines = st.builds(
    EngineState, dialect=st.one_of(st.just("vllm"), text), naming=text,
    labels=st.dictionaries(st.one_of(st.sampled_from(["model_name", "engine", "tp_rank"]), text), text, max_size=4),
    running=maybe, waiting=maybe, waiting_by_reason=st.dictionaries(text, floats, max_size=2),
    slot_limit=st.one_of(st.none(), st.integers(0, 4096)), kv_usage=maybe,
    counters=st.builds(Counters, prompt_tokens=maybe, generation_tokens=maybe, finished=st.dictionaries(
        st.sampled_from(["stop", "length", "x y"]), floats, max_size=2)),
    histograms=st.dictionaries(st.sampled_from(["itl", "ttft", "bogus"]), histograms, max_size=2))
members = st.builds(ProcessMember, pid=st.integers(1, 2**22), create_time=times,
                    role=st.one_of(st.sampled_from(["api", "worker"]), text), title=text, status=text,
                    rss_bytes=counts, threads=counts, cpu_percent=maybe)
samples = st.one_of(
    st.builds(HealthSample, t=times, status=st.one_of(st.none(), st.integers(100, 599)), latency_s=maybe,
              error=st.one_of(st.none(), text)),
    st.builds(MetricsSample, t=times, dialect=st.one_of(st.none(), text), naming=st.one_of(st.none(), text),
              engines=st.lists(engines, max_size=2).map(tuple), scrape_s=maybe, error=st.one_of(st.none(), text)),
    st.builds(ProcessSample, t=times, root_pid=st.integers(1, 2**22), root_create_time=st.one_of(st.none(), times),
              alive=st.booleans(), members=st.lists(members, max_size=3).map(tuple),
              exit_code=st.one_of(st.none(), st.integers(-255, 255)), error=st.one_of(st.none(), text)),
    st.builds(GpuSample, t=times, available=st.booleans(), devices=st.lists(st.builds(
        GpuDevice, index=st.integers(0, 7), utilization_pct=maybe, memory_used_bytes=counts,
        memory_total_bytes=counts, power_w=maybe), max_size=2).map(tuple), error=st.one_of(st.none(), text)),
    st.builds(LogEvent, t=times, kind=st.one_of(st.just("stats"), text), fields=st.dictionaries(
        st.one_of(st.sampled_from(["reason", "running", "prompt", "exception"]), text),
        st.one_of(text, floats, st.integers(-10, 10), st.booleans()), max_size=4)),
    st.builds(RequestsSample, t=times, in_flight=st.integers(0, 10**6), waiting_first_token=st.integers(0, 10**6),
              oldest_s=maybe, oldest_waiting_s=maybe, quiet_s=maybe, ttft_p99_s=maybe, ttft_count=st.integers(0, 256),
              expected_ttft_s=maybe, outcomes=st.dictionaries(st.one_of(st.sampled_from(["ok", "timeout"]), text),
                                                               st.integers(0, 2**40), max_size=3),
              error=st.one_of(st.none(), text)),
)
verdicts = st.builds(Verdict, name=st.sampled_from(registry.names()), t=times, onset=times, why=text,
                     evidence=st.lists(st.builds(Evidence, source=st.sampled_from(["health", "metrics"]), t=times,
                                                 field=text, value=st.one_of(text, floats, st.booleans())),
                                       max_size=3).map(tuple),
                     details=st.dictionaries(st.one_of(st.just("cause"), text),
                                             st.one_of(text, floats, st.booleans(), st.none()), max_size=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(samples, min_size=1, max_size=6))
def test_stored_samples_pass_the_schema_carry_no_free_text_and_are_stable(items):
    dicts = [serialize.sample_to_dict(s) for s in items]
    data = layout.encode({"schema": layout.SAMPLES_SCHEMA, "part": 0, "parts": 1, "samples": dicts})
    assert MARK.encode() not in data
    document = json.loads(data)
    _validate(document, "samples", "samples-000.json")
    again = [serialize.sample_to_dict(serialize.sample_from_dict(d)) for d in document["samples"]]
    assert layout.encode(again) == layout.encode(document["samples"])


@settings(max_examples=120, deadline=None)
@given(verdicts)
def test_stored_verdicts_pass_the_schema_carry_no_free_text_and_are_stable(verdict):
    stored = json.loads(layout.encode(serialize.verdict_to_dict(verdict)))
    assert MARK not in json.dumps(stored)
    errors = list(VERDICT_VALIDATOR.iter_errors(stored))
    assert errors == []
    assert serialize.verdict_to_dict(serialize.verdict_from_dict(stored)) == stored
    assert all(not isinstance(v, float) or math.isfinite(v) for v in stored["details"].values())
