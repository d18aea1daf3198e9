"""`servewatch gpu-check` and the node-problem-detector monitor that runs it (deploy/kubernetes/
node-problem-detector.yaml): the manifest validates (kubernetes-validate, strict), its rule runs the check with NPD's
exit-code protocol (0 OK, 1 a problem with its message, 2 unknown), checked through the real nvidia-ml-py calls
answered by the NVML stand-in (healthy, then Xid 79 with GPU 1 off the bus) and against dcgm-exporter's page."""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
import yaml

from servewatch.cli import build_parser
from servewatch.lab.nvml_stand_in import LIBRARY_VAR, prepare
from tests.nvml_lab import have_compiler

ROOT = pathlib.Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "deploy" / "kubernetes" / "node-problem-detector.yaml"
DCGM_PAGE = ROOT / "tests" / "fixtures" / "dcgm" / "dcgm_exporter_h100x2.prom"
K8S_VERSION = "1.33.0"


def _monitor():
    [doc] = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return doc, json.loads(doc["data"]["servewatch-drain.json"])


def _gpu_rule():
    _, config = _monitor()
    [rule] = [r for r in config["rules"] if r["condition"] == "ServewatchGPUFault"]
    return config, rule


def _check(args, env=None):
    """The rule's command as NPD runs it (its path here the package's own entry point): (exit status, stdout)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SERVEWATCH_TEST_ONLY_NVML")}
    done = subprocess.run([sys.executable, "-m", "servewatch", *args], capture_output=True, text=True, timeout=60,
                          env={**clean, **(env or {})}, cwd=ROOT)
    return done.returncode, done.stdout


def test_the_monitor_validates_and_its_gpu_rule_is_a_custom_plugin_running_gpu_check():
    import kubernetes_validate   # a test dependency (pyproject's dev extra): missing, the test fails

    doc, _ = _monitor()
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)     # raises on any schema error
    config, rule = _gpu_rule()
    assert config["plugin"] == "custom" and rule["type"] == "permanent"
    assert "ServewatchGPUFault" in {c["type"] for c in config["conditions"]}
    assert rule["path"].endswith("/servewatch") and rule["args"] == ["gpu-check", "--npd"]
    args = build_parser().parse_args(rule["args"])
    assert args.func is not None and args.npd


@pytest.mark.skipif(not have_compiler(), reason="no C compiler (cc or gcc): the NVML stand-in cannot be built")
def test_the_check_is_0_on_healthy_gpus_and_1_naming_the_gpu_after_an_xid_79(tmp_path):
    config, rule = _gpu_rule()
    env, clock = prepare(tmp_path, "xid79", ["pid:1", "pid:1"])
    assert _check(rule["args"], env) == (0, "2 GPU(s) fit: none lost, no row-remap failure, no uncorrectable ECC "
                                            "error, no reset or reboot asked for\n")
    clock.inject()          # Xid 79 on GPU 1, which falls off the bus
    code, out = _check(rule["args"], env)
    assert code == 1, out
    # a lost GPU answers NVML with "GPU is lost" for its UUID and bus id too: one reading knows only its index
    assert out == ("GPU 1: lost (NVML: GPU is lost; fallen off the bus): drain this node, do not place work on this "
                   "GPU\n")
    assert len(out.strip()) <= config["pluginConfig"]["max_output_length"]


def test_the_check_is_2_unknown_when_nvml_cannot_be_read(tmp_path):
    code, out = _check(["gpu-check", "--npd"], {LIBRARY_VAR: str(tmp_path / "missing" / "libnvidia-ml.so.1")})
    assert code == 2 and out.startswith("GPUs not read: NVML "), out


@pytest.fixture
def dcgm_page():
    """A loopback dcgm-exporter serving the recorded page, or it with `last_xid` as GPU 1's last Xid."""
    pages = [DCGM_PAGE.read_text()]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages[-1].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", pages
    finally:
        server.shutdown()
        server.server_close()


def test_the_check_reads_dcgm_exporters_last_xid(dcgm_page):
    url, pages = dcgm_page
    code, out = _check(["gpu-check", "--npd", "--gpu-metrics", url])
    assert code == 0 and out.startswith("2 GPU(s) fit"), out
    lines = pages[0].splitlines()
    pages.append("\n".join(line[:-2] + " 79" if line.startswith('DCGM_FI_DEV_XID_ERRORS{gpu="1"') else line
                           for line in lines) + "\n")
    code, out = _check(["gpu-check", "--npd", "--gpu-metrics", url])
    assert code == 1 and out.startswith("GPU 1 (GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, bus 00000000:2A:00.0"), out
    assert "last Xid 79 (GPU has fallen off the bus; NVIDIA: reboot the node)" in out
    pages.append(pages[0].replace('DCGM_FI_DEV_XID_ERRORS{gpu="1"', 'DCGM_FI_DEV_XID_ERRORS{gpu="1"', 1)
                 .replace('err_msg="No Error"} 0\n', 'err_msg="No Error"} 13\n'))   # Xid 13: the process's, not the GPU's
    code, out = _check(["gpu-check", "--npd", "--gpu-metrics", url])
    assert code == 0, out


def _gpu(index=0, **fields):
    from servewatch.timeline.samples import GpuDevice

    return GpuDevice(index, 97.0, 1, 2, 600.0, uuid=f"GPU-{index}", pci_bus_id=f"00000000:1{index}:00.0",
                     name="NVIDIA H100 80GB HBM3", **fields)


@pytest.mark.parametrize(("fields", "said"), [
    ({"remap_failure": True}, "row remapping failed (no spare rows left)"),
    ({"ecc_volatile_uncorrected": 2}, "2 uncorrectable ECC error(s) since the driver loaded"),
    ({"recovery_action": 1}, "NVML's recovery action is 1 (reset the GPU)"),
    ({"recovery_action": 2}, "NVML's recovery action is 2 (reboot the node)"),
])
def test_each_hardware_fault_of_one_reading_is_a_problem(fields, said):
    from servewatch.detectors.gpu import node_gpu_problems

    assert node_gpu_problems([_gpu(0), _gpu(1, **fields)]) == [
        f"GPU 1 (GPU-1, bus 00000000:11:00.0, NVIDIA H100 80GB HBM3): {said}"]


def test_what_is_not_a_hardware_fault_is_no_problem():
    """A pending remap, correctable ECC, no recovery action or one a person decides (drain P2P: 3), an
    uncorrectable count of 0, and a last Xid that is the process's (13) or informational, or 0 (none)."""
    from servewatch.detectors.gpu import node_gpu_problems

    fine = _gpu(0, remap_pending=True, remap_failure=False, ecc_volatile_corrected=900, ecc_volatile_uncorrected=0,
                ecc_aggregate_uncorrected=3, recovery_action=3)
    assert node_gpu_problems([fine, _gpu(1, recovery_action=0)], {0: 13, 1: 0}) == []
    assert node_gpu_problems([fine], {0: 79}) == [
        "GPU 0 (GPU-0, bus 00000000:10:00.0, NVIDIA H100 80GB HBM3): last Xid 79 (GPU has fallen off the bus; "
        "NVIDIA: reboot the node)"]


def test_every_fault_of_a_gpu_is_said_in_one_sentence_gpus_in_index_order():
    from servewatch.detectors.gpu import node_gpu_problems

    assert node_gpu_problems([_gpu(2, remap_failure=True, ecc_volatile_uncorrected=1), _gpu(1, lost=True)]) == [
        "GPU 1 (GPU-1, bus 00000000:11:00.0, NVIDIA H100 80GB HBM3): lost (NVML: GPU is lost; fallen off the bus)",
        "GPU 2 (GPU-2, bus 00000000:12:00.0, NVIDIA H100 80GB HBM3): row remapping failed (no spare rows left); 1 "
        "uncorrectable ECC error(s) since the driver loaded"]


def test_npd_gets_one_line_of_at_most_200_characters(capsys):
    from servewatch.commands.gpu_check import NPD_MESSAGE_CHARS, _say

    assert _say(SimpleNamespace(npd=True), 1, ["GPU 1: lost", "GPU 2: lost"]) == 1
    assert capsys.readouterr().out == "GPU 1: lost (and 1 more GPU(s))\n"
    _say(SimpleNamespace(npd=True), 1, ["x" * 300])
    out = capsys.readouterr().out
    assert len(out.rstrip("\n")) == NPD_MESSAGE_CHARS == 200 and out.endswith("…\n")
    _say(SimpleNamespace(npd=False), 1, ["GPU 1: lost", "GPU 2: lost"])
    assert capsys.readouterr().out == "GPU 1: lost\nGPU 2: lost\n"
