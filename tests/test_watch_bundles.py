"""The bundle sink writes incident bundles that `verify` accepts: the stored evidence
window recomputes the very verdicts that fired."""

import asyncio

from servewatch.clock import VirtualClock
from servewatch.detectors import DetectorConfig
from servewatch.sim import SimConfig, SimEngine
from servewatch.bundle.writer import BundleWriter
from servewatch.bundle.verify import verify_bundle
from servewatch.watch import Recorder
from servewatch.sinks.bundle_sink import BundleSink
from servewatch.watch.sim_target import sim_sources
from tests.sim_harness import Phase, Workload


def record(tmp_path, phases, faults, config=None):
    clock = VirtualClock()
    engine = SimEngine(config or SimConfig(), clock)
    for at, fault in faults:
        engine.inject({**fault, "at": at})
    detector_config = DetectorConfig()
    sink = BundleSink(BundleWriter(tmp_path, clock=clock), "http://127.0.0.1:8000", detector_config)
    recorder = Recorder(sim_sources(engine, clock, 0.5), clock, config=detector_config, sinks=[sink])
    sink.recorder = recorder
    workload = Workload(engine, phases)
    asyncio.run(recorder.run_virtual(workload.end - clock.now(), advance=workload.advance))
    return recorder


def test_every_bundle_written_for_a_stall_and_an_engine_death_verifies(tmp_path):
    recorder = record(tmp_path, [Phase(70, rate=2)], ((30, {"kind": "stall", "duration": 10}),
                                                      (55, {"kind": "engine-death", "exit_code": 0})))
    names = [f.verdict.name for f in recorder.fired]
    assert "alive_health_ok_no_progress" in names and "process_exit" in names
    bundles = [f.bundle for f in recorder.fired]
    assert all(bundles), bundles
    for path in bundles[-4:]:   # the writer keeps the newest four
        verified = verify_bundle(path)
        assert verified.verdicts_checked >= 1
