"""dcgm-exporter in `serve`: a target's `gpu_metrics` (or this node's, where NVML cannot be loaded) puts the
exporter's page in NVML's place for that target. Over real HTTP in this process: a fake dcgm-exporter serving
the recorded page (tests/fixtures/dcgm/dcgm_exporter_h100x2.prom, written from dcgm-exporter's documented
default counters), simulators as targets, the fleet as serve builds it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from servewatch.clock import RealClock
from servewatch.commands.serve import config_from_args
from servewatch.errors import ServewatchError
from servewatch.serve import config as serve_config
from servewatch.serve.config import FLEET_RECORDING, ServeConfig
from servewatch.serve.fleet import Fleet
from servewatch.serve.targets import TargetSpec, spec_for
from servewatch.sinks.export.exporter import FleetExporter
from servewatch.sources import dcgm
from servewatch.sources.dcgm import DcgmSource
from servewatch.transport.contract import Http1Transport
from tests.serve_harness import _site, sim_target, until

PAGE = (Path(__file__).parent / "fixtures" / "dcgm" / "dcgm_exporter_h100x2.prom").read_text()
UUID0, UUID1 = "GPU-11111111-2222-3333-4444-555555555555", "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
GPU1_NO_XID = 'device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="vllm",' \
              'namespace="llm",pod="vllm-0",err_code="0",err_msg="No Error"} 0'
GPU1_XID_79 = GPU1_NO_XID.replace('err_code="0",err_msg="No Error"} 0',
                                  'err_code="79",err_msg="GPU has fallen off the bus"} 79')
INTERVAL = 0.3
QUIET = replace(FLEET_RECORDING, interval=INTERVAL, probe=False)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


class Exporter:
    def __init__(self, url: str, state: dict):
        self.url, self.state = url + "/metrics", state


@contextlib.asynccontextmanager
async def fake_exporter(page: str = PAGE, hang: bool = False):
    """dcgm-exporter's /metrics: `state["page"]` (changeable), or no answer while `state["hang"]`."""
    state = {"page": page, "hang": hang, "reads": []}
    released = asyncio.Event()

    async def metrics(request):
        state["reads"].append(time.monotonic())
        if state["hang"]:
            await released.wait()           # until the test ends (the runner cancels the handler)
        return web.Response(text=state["page"], content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner, url = await _site(app)
    try:
        yield Exporter(url, state)
    finally:
        released.set()
        await runner.cleanup()


def fleet_of(config: ServeConfig, session=None, nvml_error=lambda: "unavailable: no driver") -> Fleet:
    return Fleet(config, session, RealClock(), FleetExporter(lambda: []), extra_sinks=lambda spec: [],
                 nvml_error=nvml_error)


def gpu_sources(fleet: Fleet, spec: TargetSpec) -> list[str]:
    """The target's GPU source: "dcgm URL" or "nvml"."""
    out = []
    for source in fleet._recorder_for(spec, lambda source: source).sources:
        if isinstance(source, DcgmSource):
            out.append("dcgm")
        elif source.kind == "gpu":
            out.append("nvml")
    return out


# --- which GPU source each target gets -----------------------------------------------------------------------

def test_a_target_naming_gpu_metrics_reads_its_gpus_from_there_in_nvmls_place(capfd):
    fleet = fleet_of(ServeConfig(recording=QUIET))
    assert gpu_sources(fleet, spec_for("http://10.0.0.7:8000", gpu_metrics="http://10.0.0.7:9400/metrics")) == ["dcgm"]
    assert gpu_sources(fleet, spec_for("http://127.0.0.1:8000", pid=1, gpu_metrics="http://x:9400/metrics")) == ["dcgm"]
    assert gpu_sources(fleet, spec_for("http://127.0.0.1:8000", pid=1)) == ["nvml"]
    assert gpu_sources(fleet, spec_for("http://10.0.0.7:8000")) == []
    assert capfd.readouterr().err == ""          # no node-level exporter: nothing said


def test_this_nodes_exporter_stands_in_for_nvml_on_this_nodes_targets_only_where_nvml_cannot_load(capfd):
    node = "http://127.0.0.1:9400/metrics"
    without = fleet_of(ServeConfig(recording=QUIET, gpu_metrics=node), nvml_error=lambda: "unavailable: no driver")
    said = capfd.readouterr().err
    assert said == (f"servewatch serve: NVML cannot be loaded here: no driver; the GPUs of the targets on this node "
                    f"come from dcgm-exporter at {node}\n")
    assert without.gpu_metrics_of(spec_for("http://127.0.0.1:8000", pid=1)) == node
    assert without.gpu_metrics_of(spec_for("http://localhost:8000")) == node
    assert without.gpu_metrics_of(spec_for("http://10.0.0.7:8000")) is None        # another machine's GPUs
    assert without.gpu_metrics_of(spec_for("http://10.0.0.7:8000", gpu_metrics="http://b:9400/metrics")) == \
        "http://b:9400/metrics"
    assert gpu_sources(without, spec_for("http://127.0.0.1:8000", pid=1)) == ["dcgm"]

    with_nvml = fleet_of(ServeConfig(recording=QUIET, gpu_metrics=node), nvml_error=lambda: None)
    assert "GPUs from NVML (it loads here)" in capfd.readouterr().err
    assert gpu_sources(with_nvml, spec_for("http://127.0.0.1:8000", pid=1)) == ["nvml"]
    assert with_nvml.gpu_metrics_of(spec_for("http://127.0.0.1:8000")) is None


# --- the config and the command line ----------------------------------------------------------------------------

def test_gpu_metrics_in_the_config_per_target_and_for_the_node(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("gpu_metrics: http://127.0.0.1:9400\n"
                    "targets:\n  - url: http://10.0.0.7:8000\n    name: llama-a\n"
                    "    gpu_metrics: http://10.0.0.7:9400/metrics\n  - url: http://10.0.0.8:8000\n")
    config = serve_config.load(str(path))
    assert config.gpu_metrics == "http://127.0.0.1:9400/metrics"          # a bare exporter address gets /metrics
    assert [t.gpu_metrics for t in config.targets] == ["http://10.0.0.7:9400/metrics", None]


@pytest.mark.parametrize("text, expected", [
    ("targets:\n  - url: http://a:1\n    name: llama-a\n    gpu_metrics: ftp://a:9400\n",
     ":4: targets[0].gpu_metrics: target llama-a: 'ftp://a:9400': not an http(s) URL of dcgm-exporter's page"),
    ("targets:\n  - url: http://a:1\n    gpu_metrics: [http://a:9400]\n",
     ":3: targets[0].gpu_metrics: target http://a:1: dcgm-exporter's /metrics URL is expected"),
    ("targets:\n  - url: http://a:1\n    gpu_metrics: http://a:port/metrics\n",
     ":3: targets[0].gpu_metrics: target http://a:1: 'http://a:port/metrics': not an http(s) URL"),
    ("gpu_metrics: 9400\ntargets: [http://a:1]\n", ":1: gpu_metrics: dcgm-exporter's /metrics URL is expected"),
])
def test_a_bad_gpu_metrics_is_one_line_naming_the_target_and_key_and_a_non_zero_exit(tmp_path, capfd, text, expected):
    from servewatch.cli import main

    path = tmp_path / "serve.yaml"
    path.write_text(text)
    code = main(["serve", "--config", str(path)])
    err = capfd.readouterr().err
    assert code != 0 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"servewatch serve: {path}{expected}"), err


def test_the_command_line_names_a_targets_exporter_or_this_nodes(capfd):
    from servewatch.cli import build_parser, main

    args = build_parser().parse_args(["serve", "--target", "llama-a=http://10.0.0.7:8000", "--target",
                                      "http://10.0.0.8:8000", "--gpu-metrics", "llama-a=http://10.0.0.7:9400/metrics",
                                      "--gpu-metrics", "http://127.0.0.1:9400"])
    config = config_from_args(args)
    assert [(t.name, t.gpu_metrics) for t in config.targets] == [("llama-a", "http://10.0.0.7:9400/metrics"),
                                                                 ("10.0.0.8:8000", None)]
    assert config.gpu_metrics == "http://127.0.0.1:9400/metrics"
    for bad, said in ((["--gpu-metrics", "other=http://b:9400/metrics"],
                       "--gpu-metrics 'other=http://b:9400/metrics': no target named other (targets: llama-a)"),
                      (["--gpu-metrics", "llama-a=b:9400"], "--gpu-metrics 'b:9400': not an http(s) URL")):
        assert main(["serve", "--target", "llama-a=http://10.0.0.7:8000", *bad]) == 2
        err = capfd.readouterr().err
        assert err.startswith(f"servewatch serve: {said}") and err.count("\n") == 1, err


# --- live: the GPU picture, gpu_fault, and a hanging exporter -------------------------------------------------

def test_a_target_with_gpu_metrics_carries_the_exporters_gpus_and_a_new_xid_is_its_gpu_fault():
    """The target has no PID (no process list): dcgm-exporter lists no processes either, so every GPU of the page
    counts as the target's (the gpu_fault rule without a process list)."""
    async def main():
        async with contextlib.AsyncExitStack() as stack:
            sim = await stack.enter_async_context(sim_target())
            exporter = await stack.enter_async_context(fake_exporter())
            session = await stack.enter_async_context(Http1Transport())
            spec = spec_for(sim.url, "llama-a", gpu_metrics=exporter.url)
            fleet = fleet_of(ServeConfig(targets=(spec,), recording=QUIET), session)
            try:
                await fleet.apply([spec])
                recorder = fleet.runs["llama-a"].recorder

                async def read():
                    gpu = recorder.ring.window().gpu
                    return gpu[-1] if gpu and gpu[-1].available else None
                first = await until(read, 10, "a GPU sample from dcgm-exporter")
                assert [(d.index, d.uuid, d.pci_bus_id, d.sm_clock_mhz) for d in first.devices] == [
                    (0, UUID0, "00000000:17:00.0", 1980), (1, UUID1, "00000000:2A:00.0", 1100)]
                assert first.devices[1].why_unavailable("power_limit_w") == "not_exported"
                exporter.state["page"] = PAGE.replace(GPU1_NO_XID, GPU1_XID_79)      # Xid 79 on GPU 1 now
                series = ('servewatch_gpu_fault{action="reboot",gpu_uuid="%s",target="llama-a",xid="79"} 1.0'
                          % UUID1)

                async def exported():
                    return series in fleet.exporter.exposition().decode()
                # the exporter is read every gpu_interval (5 s at this cadence); detection follows within a second
                await until(exported, 5.0 + 3.0, "servewatch_gpu_fault for GPU 1's Xid 79")
                (fault,) = [v for v in fleet.runs["llama-a"].recorder.latch.active if v.name == "gpu_fault"]
                assert fault.why.startswith(f"GPU 1 ({UUID1}, bus 00000000:2A:00.0, NVIDIA H100 80GB HBM3, "
                                            "pod vllm-0, namespace llm, container vllm): Xid 79")
                assert "vllm-0" not in fleet.exporter.exposition().decode()     # pods: in why lines, never labels
            finally:
                await fleet.close()
    run(main())


def test_a_hanging_exporter_delays_no_other_source_and_no_other_target(monkeypatch):
    monkeypatch.setattr(dcgm, "READ_TIMEOUT_S", 1.0)
    # scrape gaps measured 0.300-0.305 s at the 0.3 s cadence (3 runs, this 2-core machine); the rest is room for load
    allowance = 0.5

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            a = await stack.enter_async_context(sim_target())
            b = await stack.enter_async_context(sim_target())
            hung = await stack.enter_async_context(fake_exporter(hang=True))
            good = await stack.enter_async_context(fake_exporter())
            session = await stack.enter_async_context(Http1Transport())
            specs = [spec_for(a.url, "a", gpu_metrics=hung.url), spec_for(b.url, "b", gpu_metrics=good.url)]
            fleet = fleet_of(ServeConfig(targets=tuple(specs), recording=QUIET), session)
            try:
                await fleet.apply(specs)

                async def hanging():
                    return hung.state["reads"]
                (asked,) = await until(hanging, 5, "target a's read of the hanging exporter")

                async def timed_out():
                    gpu = fleet.runs["a"].recorder.ring.window().gpu
                    return gpu[-1] if gpu else None
                failed = await until(timed_out, dcgm.READ_TIMEOUT_S + 2 * allowance, "a's dcgm read timing out")
                assert not failed.available
                assert failed.error == "unavailable: dcgm-exporter timeout (no page within 1 s)"
                gpu_b = fleet.runs["b"].recorder.ring.window().gpu
                assert gpu_b and gpu_b[-1].available and [d.uuid for d in gpu_b[-1].devices] == [UUID0, UUID1]
                # while a's read hung, both targets' scrapes went on at their cadence
                for sim in (a, b):
                    during = [t for t in sim.scrapes if asked <= t <= asked + dcgm.READ_TIMEOUT_S]
                    assert len(during) >= int(dcgm.READ_TIMEOUT_S / INTERVAL) - 1, (sim.url, during)
                    gaps = [later - earlier for earlier, later in zip(during, during[1:])]
                    assert max(gaps) <= INTERVAL + allowance, gaps
            finally:
                await fleet.close()
    run(main())


def test_a_huge_or_foreign_exporter_page_is_a_typed_unavailable_sample(monkeypatch):
    from servewatch.clock import VirtualClock
    from servewatch.sources.http import in_process_transport

    monkeypatch.setattr(dcgm, "MAX_SERIES", 10)
    clock = VirtualClock(1_800_000_000.0)
    (many,) = asyncio.run(DcgmSource(in_process_transport(lambda: PAGE), clock, 5.0).poll())
    assert many.error == "unavailable: dcgm-exporter too_many_series (over 10)"
    monkeypatch.setattr(dcgm, "MAX_PAGE_BYTES", 1000)
    (huge,) = asyncio.run(DcgmSource(in_process_transport(lambda: PAGE), clock, 5.0).poll())
    assert huge.error == "unavailable: dcgm-exporter too_large (a page over 1,000 bytes)"
