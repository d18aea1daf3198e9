"""The metrics and health sources through in-process transports, and the GPU source on a machine
without NVIDIA: every failure is a typed sample."""

import asyncio

from servewatch.clock import VirtualClock
from servewatch.sources.gpu import GpuSource, NvmlProbe
from servewatch.sources.health import HealthSource
from servewatch.sources.http import in_process_transport
from servewatch.sources.metrics import MetricsSource
from tests.conftest import FIXTURES

METRICS = FIXTURES / "metrics"


def poll(source):
    (sample,) = asyncio.run(source.poll())
    return sample


def metrics_from(value, **kwargs):
    return poll(MetricsSource(in_process_transport(lambda: value, **kwargs), VirtualClock(), 1.0))


def test_vllm_and_sglang_scrapes_become_engine_states():
    vllm = metrics_from((METRICS / "vllm_kv_pressure_t1.prom").read_text())
    assert vllm.error is None and vllm.dialect == "vllm" and vllm.engines[0].counters.steps is not None
    sglang = metrics_from((METRICS / "synthetic_from_registration_code.prom").read_text())
    assert sglang.error is None and sglang.dialect == "sglang"


def test_bad_scrapes_are_typed_samples():
    assert metrics_from((500, "oops")).error == "http_500"
    assert metrics_from(b"\xff\xfe vllm:x 1\n").error == "parse"
    assert metrics_from('vllm:num_requests_running{engine="0\n').error == "parse"
    process_only = "# HELP process_cpu_seconds_total x\nprocess_cpu_seconds_total 3\n"
    assert metrics_from(process_only).error == "no_engine_metrics"
    big = (METRICS / "vllm_idle.prom").read_text()
    assert metrics_from(big, max_bytes=10_000).error == "too_large"


def test_a_raising_target_is_a_connect_failure_sample():
    def down():
        raise ConnectionRefusedError()
    sample = poll(HealthSource(in_process_transport(down), VirtualClock(), 1.0))
    assert sample.status is None and sample.error == "connect"
    ok = poll(HealthSource(in_process_transport(lambda: 200), VirtualClock(), 1.0))
    assert ok.ok and ok.error is None


def test_the_sample_is_stamped_when_the_answer_arrives():
    clock = VirtualClock()

    async def slow_answer():
        clock.advance(3.0)    # the scrape took 3 virtual seconds
        return (METRICS / "vllm_idle.prom").read_text()
    asked = clock.now()
    (sample,) = asyncio.run(MetricsSource(in_process_transport(slow_answer), clock, 1.0).poll())
    assert sample.t == asked + 3.0


def test_no_gpu_is_a_typed_unavailable_sample():
    probe = NvmlProbe()
    sample = poll(GpuSource(probe, VirtualClock(), 5.0))
    if probe.error is None:   # a machine with a driver: devices are read
        assert sample.available and sample.devices
    else:
        assert not sample.available and sample.error.startswith("unavailable")
