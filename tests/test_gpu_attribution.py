"""Which GPUs count as the engine's when the GPU source lists no processes (dcgm-exporter), and the pod labels it
gives: kept on the device, shown in the why line and the GPU panel, carried through a bundle (schema, round trip,
recomputed verdicts), never exported as series labels. The page is tests/fixtures/dcgm/dcgm_exporter_h100x2.prom
(written from dcgm-exporter's documented default counters, pod labels on: pod vllm-0, namespace llm, container
vllm), read through the real DcgmSource."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from servewatch.bundle import serialize
from servewatch.bundle.gpu_panel import gpu_panels
from servewatch.bundle.incident import load_incident
from servewatch.bundle.verify import verify_bundle
from servewatch.bundle.writer import BundleContext, BundleWriter
from servewatch.clock import VirtualClock
from servewatch.detectors import DetectorConfig, run_detectors
from servewatch.detectors.gpu import gpu_words, gpus_held, node_gpu_problems
from servewatch.sources.dcgm import DcgmSource, read_page, server_pod
from servewatch.sources.http import in_process_transport
from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample, ProcessMember, ProcessSample
from servewatch.timeline.window import Window

PAGE = (Path(__file__).parent / "fixtures" / "dcgm" / "dcgm_exporter_h100x2.prom").read_text()
T0 = 1_800_000_000.0
UUID0, UUID1 = "GPU-11111111-2222-3333-4444-555555555555", "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
GPU1 = f"GPU 1 ({UUID1}, bus 00000000:2A:00.0, NVIDIA H100 80GB HBM3, pod vllm-0, namespace llm, container vllm)"
XID79 = "Xid 79 (GPU has fallen off the bus; NVIDIA: reboot the node): do not restart on this GPU"
EVERY = "; dcgm-exporter lists no processes: every GPU on its page counted as this server's"
GPU1_NO_XID = 'pod="vllm-0",err_code="0",err_msg="No Error"} 0'
GPU1_XID_79 = 'pod="vllm-0",err_code="79",err_msg="GPU has fallen off the bus"} 79'


def page(*, xid_on: int | None = None, pods: tuple[str, str] = ("vllm-0", "vllm-0")) -> str:
    """The fixture page, with each GPU's pod label as given ("" for an unallocated GPU), and Xid 79 on GPU
    `xid_on` (its last-Xid gauge turned to 79)."""
    lines = []
    for line in PAGE.splitlines():
        index = 1 if 'gpu="1"' in line else 0 if 'gpu="0"' in line else None
        if index is not None:
            if index == xid_on and line.startswith("DCGM_FI_DEV_XID_ERRORS"):
                line = line.replace('err_code="0",err_msg="No Error"} 0',
                                    'err_code="79",err_msg="GPU has fallen off the bus"} 79')
            line = line.replace('pod="vllm-0"', f'pod="{pods[index]}"')
        lines.append(line)
    return "\n".join(lines) + "\n"


def proc_with(tmp_path, pid: int, environ: bytes | None) -> str:
    """A /proc stand-in holding `pid`'s environ (none: the file is absent, as when it cannot be read)."""
    root = tmp_path / "proc"
    (root / str(pid)).mkdir(parents=True)
    if environ is not None:
        (root / str(pid) / "environ").write_bytes(environ)
    return str(root)


def dcgm_samples(pages: list[str], *, pid: int | None = None, proc_root: str = "/proc") -> list[GpuSample]:
    clock = VirtualClock(T0)
    source = DcgmSource(in_process_transport(lambda: pages.pop(0)), clock, 5.0, pid=pid, proc_root=proc_root)
    samples = []
    for _ in range(len(pages)):
        samples += asyncio.run(source.poll())
        clock.advance(5.0)
    return samples


def engine_tree() -> tuple[ProcessSample, ...]:
    """A served engine's tree (pid 100 and its engine core): none of its pids is on any page."""
    members = (ProcessMember(100, 1.0, "api", "vllm", "sleeping"),
               ProcessMember(101, 1.0, "engine_core", "VLLM::EngineCore", "running", ppid=100))
    return (ProcessSample(T0 + 9, 100, 1.0, True, members),)


def faults(samples, process=engine_tree()):
    return [v for v in run_detectors(Window(gpu=tuple(samples), process=process), DetectorConfig())
            if v.name == "gpu_fault"]


# --- the page's pod labels -------------------------------------------------------------------------------------

def test_the_pages_pod_namespace_and_container_labels_are_kept_on_each_gpu():
    (gpu0, gpu1), _ = read_page(page(pods=("vllm-0", "")))
    assert (gpu0.pod, gpu0.namespace, gpu0.container) == ("vllm-0", "llm", "vllm")
    assert gpu1.pod is None and (gpu1.namespace, gpu1.container) == ("llm", "vllm")   # "": no pod holds it
    assert gpu0.why_unavailable("processes") == "not_exported" and gpu0.processes == ()
    (odd, _), _ = read_page(page(pods=("Not A Name; rm", "vllm-0")))
    assert odd.pod is None                           # a label that is no Kubernetes name is not kept
    assert gpu_words(gpu0, 0) == f"GPU 0 ({UUID0}, bus 00000000:17:00.0, NVIDIA H100 80GB HBM3, pod vllm-0, " \
                                  "namespace llm, container vllm)"
    assert gpu_words(gpu1, 1) == f"GPU 1 ({UUID1}, bus 00000000:2A:00.0, NVIDIA H100 80GB HBM3, namespace llm, " \
                                  "container vllm)"
    # the node check (node-problem-detector) is about the node's hardware: no pod words in its bounded message
    (problem,) = node_gpu_problems((gpu0, gpu1), {1: 79})
    assert problem.startswith(f"GPU 1 ({UUID1}, bus 00000000:2A:00.0, NVIDIA H100 80GB HBM3): last Xid 79")


def test_the_servers_pod_is_its_processes_hostname_read_once(tmp_path):
    root = proc_with(tmp_path, 100, b"PATH=/usr/bin\0HOSTNAME=vllm-0\0SECRET=x\0")
    assert server_pod(100, root) == "vllm-0"
    assert server_pod(101, root) is None                                   # unreadable
    assert server_pod(100, proc_with(tmp_path / "b", 100, b"PATH=/bin\0")) is None           # unset
    assert server_pod(100, proc_with(tmp_path / "c", 100, b"HOSTNAME=My Laptop\0")) is None   # no pod's name
    pages = [page(), page()]
    clock = VirtualClock(T0)
    source = DcgmSource(in_process_transport(lambda: pages.pop(0)), clock, 5.0, pid=100, proc_root=root)
    (first,) = asyncio.run(source.poll())
    (Path(root) / "100" / "environ").write_bytes(b"HOSTNAME=vllm-9\0")
    (second,) = asyncio.run(source.poll())
    assert (first.server_pod, second.server_pod) == ("vllm-0", "vllm-0")    # read once, not every page
    (none,) = dcgm_samples([page()])                                        # no pid: not read
    assert none.server_pod is None


# --- attribution: every GPU on the page, or by pod label ----------------------------------------------------------

def test_a_pid_target_on_a_dcgm_page_counts_every_gpu_and_says_how():
    samples = dcgm_samples([page(), page(), page(xid_on=1)])
    (fault,) = faults(samples)
    assert fault.why == f"{GPU1}: {XID79}{EVERY}"
    assert fault.details["gpu_index"] == 1 and fault.details["attributed"] == "every_gpu"
    assert fault.details["rank"] is None and fault.details["rank_pid"] is None
    held = gpus_held(samples, {100, 101})
    assert held.devices == {0: set(), 1: set()} and held.unlisted == {0, 1} and held.by == "every_gpu"


def test_without_a_process_list_every_gpu_counts_and_no_attribution_is_said():
    (fault,) = faults(dcgm_samples([page(), page(xid_on=1)]), process=())
    assert fault.why == f"{GPU1}: {XID79}" and "attributed" not in fault.details
    assert gpus_held(dcgm_samples([page()]), None).devices is None


@pytest.mark.parametrize("hostname, pods, fires", [
    (b"vllm-0", ("vllm-0", "vllm-0"), True),        # the server's pod holds GPU 1: it counts
    (b"vllm-1", ("vllm-0", "vllm-0"), False),       # another pod's GPUs: none counts, silent
    (b"vllm-0", ("vllm-0", "vllm-1"), False),       # GPU 1 is another pod's; GPU 0 is the server's but has no fault
    (b"vllm-0", ("vllm-0", ""), False),             # GPU 1 held by no pod (the kubelet's mapping says so)
])
def test_with_pod_labels_and_the_servers_pod_known_only_its_pods_gpus_count(tmp_path, hostname, pods, fires):
    root = proc_with(tmp_path, 100, b"HOSTNAME=" + hostname + b"\0")
    samples = dcgm_samples([page(pods=pods), page(pods=pods, xid_on=1)], pid=100, proc_root=root)
    found = faults(samples)
    assert bool(found) is fires
    held = gpus_held(samples, {100, 101})
    assert held.by == "pod" and held.unlisted == {0, 1}
    assert held.devices == {i: set() for i in (0, 1) if pods[i] == hostname.decode()}
    if fires:
        (fault,) = found
        assert fault.why == (f"{GPU1}: {XID79}; dcgm-exporter lists no processes: the GPUs whose pod label is "
                             "vllm-0 (the server's pod, its HOSTNAME) counted as this server's")
        assert fault.details["attributed"] == "pod"


def test_a_servers_pod_known_but_no_pod_labels_counts_every_gpu(tmp_path):
    root = proc_with(tmp_path, 100, b"HOSTNAME=vllm-0\0")
    samples = dcgm_samples([page(pods=("", "")), page(pods=("", ""), xid_on=1)], pid=100, proc_root=root)
    (fault,) = faults(samples)
    assert fault.why.endswith(EVERY) and fault.details["attributed"] == "every_gpu"


def _nvml(index: int, processes=(), unavailable=()) -> GpuDevice:
    return GpuDevice(index, 90.0, 1, 2, 300.0, processes, uuid=f"GPU-{index}", unavailable=unavailable)


def test_a_process_list_that_was_read_still_decides():
    other = (GpuProcess(999, 1),)           # a process that is not the engine's
    listed = [GpuSample(T0, True, (_nvml(0, other), _nvml(1, ())))]
    assert gpus_held(listed, {100}).devices == {} and gpus_held(listed, {100}).unlisted == frozenset()
    mine = [GpuSample(T0, True, (_nvml(0, (GpuProcess(100, 1),)), _nvml(1, other)))]
    assert gpus_held(mine, {100}).devices == {0: {100}}
    # a device whose list was read once and refused once is judged by the list it gave
    flaky = [GpuSample(T0, True, (_nvml(0, other),)),
             GpuSample(T0 + 5, True, (_nvml(0, unavailable=(("processes", "no_permission"),)),))]
    assert gpus_held(flaky, {100}).devices == {} and gpus_held(flaky, {100}).unlisted == frozenset()


def test_nvml_refusing_the_process_list_counts_every_gpu_in_its_own_words():
    refused = (("processes", "no_permission"),)
    held = gpus_held([GpuSample(T0, True, (_nvml(0, unavailable=refused), _nvml(1, (GpuProcess(100, 1),))))],
                     {100})
    assert held.devices == {0: set(), 1: {100}} and held.unlisted == {0}
    assert held.words(0) == ("; NVML could not list the GPUs' processes (no_permission): every GPU counted as "
                             "this server's")
    assert held.words(1) == "" and held.details(1) == {} and held.details(0) == {"attributed": "every_gpu"}


# --- the GPU panel and the bundle -------------------------------------------------------------------------------

def test_the_panel_shows_the_counted_gpus_with_their_pod(tmp_path):
    samples = [*engine_tree(), *dcgm_samples([page(), page(xid_on=1)])]
    zero, one = gpu_panels(samples)
    assert (zero.index, one.index, one.holder) == (0, 1, "")
    assert one.gpu == GPU1 and [x.xid for x in one.xids] == [79]
    root = proc_with(tmp_path, 100, b"HOSTNAME=vllm-0\0")
    mixed = [*engine_tree(), *dcgm_samples([page(pods=("vllm-1", "vllm-0"))], pid=100, proc_root=root)]
    assert [p.index for p in gpu_panels(mixed)] == [1]            # GPU 0 is another pod's


def test_a_bundle_keeps_the_pod_labels_and_recomputes_the_verdict(tmp_path):
    root = proc_with(tmp_path, 100, b"HOSTNAME=vllm-0\0")
    samples = dcgm_samples([page(), page(xid_on=1)], pid=100, proc_root=root)
    for s in samples:
        d = serialize.sample_to_dict(s)
        assert d["server_pod"] == "vllm-0" and d["devices"][1]["pod"] == "vllm-0"
        assert serialize.sample_from_dict(d) == s
    bad = GpuSample(T0, True, (GpuDevice(0, 1.0, 1, 2, 3.0, pod="Bad Name", namespace="llm"),), server_pod="x y")
    d = serialize.sample_to_dict(bad)
    assert "server_pod" not in d and "pod" not in d["devices"][0] and d["devices"][0]["namespace"] == "llm"
    window = Window(gpu=tuple(samples), process=engine_tree())
    verdicts = [v for v in run_detectors(window, DetectorConfig()) if v.name == "gpu_fault"]
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO())
    path = writer.write(window, verdicts, BundleContext(target_url="http://127.0.0.1:8000"))
    assert path is not None and verify_bundle(path).verdicts_checked >= 1      # schema, hashes, recomputed why
    (stored,) = [v for v in load_incident(path).verdicts if v.name == "gpu_fault"]
    assert "pod vllm-0, namespace llm, container vllm" in stored.why and stored.details["attributed"] == "pod"
