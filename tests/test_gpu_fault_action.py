"""A gpu_fault's action is the action of that firing, the same everywhere a program or a person reads it (issue 50:
an Xid 13 said "a restart of the process helps" while its JSON line carried "action": "drain").

For every row of the Xid table (and an unknown code, and Xid 154 with each recovery action NVML can report), a
gpu_fault is fired from a GPU reading and its action read back from each consumer: the watch JSON line and its
evidence line, serve's verdict JSON, livez, readyz and /node/drain, guard's decision, the alert rules (the one rule
whose selector takes the series serve exports for it), the node-problem-detector check (gpu-check) and the bundle
(stored, checked against its schema, read back). Each must equal the class the catalogue's immediate action
makes (written out here, not taken from the code under test), and the why line must say the same.
"""

from __future__ import annotations

import argparse
import io
import json
import re

import pytest

from servewatch.actions.policy import GuardConfig
from servewatch.actions.policy import action_for as guard_action
from servewatch.bundle import layout
from servewatch.bundle.incident import load_incident
from servewatch.bundle.verify import verify_bundle
from servewatch.bundle.writer import BundleContext, BundleWriter
from servewatch.bundle.serialize import verdict_from_dict, verdict_to_dict
from servewatch.detectors import registry, run_detectors
from servewatch.detectors import xid as xids
from servewatch.detectors.gpu import node_gpu_problems
from servewatch.derive.rules import gpu_fault_rules, servewatch_group
from servewatch.serve import probes
from servewatch.serve.http_api import _verdict as serve_verdict
from servewatch.sinks.base import Fired
from servewatch.sinks.delivery.alertmanager import _labels as alertmanager_labels
from servewatch.sinks.export.exporter import FleetExporter
from servewatch.timeline.samples import GpuDevice, GpuProcess, GpuSample, GpuXid
from servewatch.timeline.window import Window
from servewatch.watch.output import evidence_line, json_line
from tests.test_bundle_properties import VERDICT_VALIDATOR
from tests.test_detectors_gpu import CONFIG, T0, UUID0, engine

# The catalogue's "Resolution Bucket (Immediate Action)" -> what a gpu_fault for it makes happen, said once here
# from the docstring of servewatch/detectors/xid.py, independently of its ACTION_CLASS mapping.
EXPECTED = {"RESTART_APP": "restart", "RESET_GPU": "drain", "RESTART_BM": "drain", "IGNORE": None,
            "XID_154": "page", "UNKNOWN": "page"}
SENTENCE = {"restart": "a restart of the process helps", "drain": "do not restart on this GPU",
            "page": "a person decides"}
WORDS = {"restart": "restart_app", "drain": "reset_gpu|reboot", "page": "workflow|recovery|unknown"}


def expected(bucket: str) -> str | None:
    return "page" if bucket.startswith("WORKFLOW_") else EXPECTED[bucket]


def fire(code: int, recovery: int | None = None):
    device = GpuDevice(0, 97.0, 1, 2, 600.0, (GpuProcess(111, 1),), uuid=UUID0, recovery_action=recovery)
    gpu = GpuSample(T0 + 1, True, (device,), xids=(GpuXid(T0 + 1, 0, code),))
    window = Window(gpu=(gpu,), **engine(2, lambda s: 1000 * s))
    return [v for v in run_detectors(window, CONFIG) if v.name == "gpu_fault"], device, window


CASES = [pytest.param(code, None, expected(row.catalog_action), id=f"xid{code}") for code, row in xids.TABLE.items()]
CASES += [pytest.param(999, None, "page", id="xid999-unknown")]
CASES += [pytest.param(154, value, {0: None, 1: "drain", 2: "drain", 3: "page", 4: "drain", 5: "page", 6: "drain",
                                    7: "drain"}[value], id=f"xid154-recovery{value}") for value in range(8)]


def test_the_cases_cover_every_row_of_the_table():
    assert {c.values[0] for c in CASES} >= set(xids.TABLE) and len(xids.TABLE) == 34


@pytest.mark.parametrize("code, recovery, cls", CASES)
def test_every_consumer_reads_the_same_action_as_the_fault_and_its_sentence(code, recovery, cls, tmp_path):
    found, device, window = fire(code, recovery)
    if cls is None:                                        # informational: no verdict, nothing to act on
        assert found == [] and node_gpu_problems([device], {0: code}) == []
        return
    (fault,) = found
    assert registry.action_for(fault) == cls
    # the sentence: the NVIDIA action of the row, and what it means for this firing
    assert fault.why.endswith(f": {SENTENCE[cls]}")
    if recovery is None:
        assert f"NVIDIA: {xids.ACTION_WORDS[xids.lookup(code).action]})" in fault.why
    assert fault.details["hardware"] is (cls == "drain")
    # the watch JSON line, and the line that says its evidence came later
    line = json.loads(json_line(Fired(fault)))
    assert (line["action"], line["evidence_held"]) == (cls, True)
    assert json.loads(evidence_line(fault))["action"] == cls
    # serve: the verdict JSON, livez, readyz, /node/drain
    assert serve_verdict("a", fault)["action"] == cls
    assert probes.livez([fault]).ok is (cls != "restart")
    assert probes.readyz([fault], True, True, None).ok is (cls == "page")
    assert probes.node_drain({"a": [fault]}).ok is (cls != "drain")
    if cls != "page":
        assert probes.readyz([fault], True, True, None).reason.startswith(f"gpu_fault ({cls}): ")
    # guard: kills for restart and drain (drain ends with the hardware line), leaves a person's decision alone
    acted = guard_action("gpu_fault", GuardConfig(), fault.details, registry.action_for(fault))
    assert (acted is not None, acted is not None and acted.hardware is not None) == (cls != "page", cls == "drain")
    # Alertmanager (serve --alertmanager): the alert's action label
    assert alertmanager_labels("a", fault)["action"] == cls
    # the rules: exactly one gpu_fault rule selects the series serve exports for it, with this action
    exporter = FleetExporter()
    exporter.add_target("a")
    exporter.sink("a").on_fired(Fired(fault))
    (series,) = [s for s in exporter.exposition().decode().splitlines() if s.startswith("servewatch_gpu_fault{")]
    word = re.search(r'action="([a-z_]+)"', series).group(1)
    selecting = [r for r in gpu_fault_rules()
                 if re.fullmatch(re.search(r'action=~"([^"]+)"', r.expr).group(1), word)]
    assert [r.labels["action"] for r in selecting] == [cls] and word in WORDS[cls].split("|")
    rules = [r for r in servewatch_group().rules if r.alert]
    assert not any('verdict="gpu_fault"' in r.expr for r in rules)    # no rule with one static action for all
    # node-problem-detector's check (gpu-check, dcgm-exporter's last Xid per GPU): a problem only for a drain
    if recovery is None:
        assert bool(node_gpu_problems([device], {0: code})) is (cls == "drain")
    else:
        assert bool(node_gpu_problems([device], {})) is (cls == "drain")
    # the bundle: stored with its action, valid against the schema, read back with the same action
    stored = json.loads(layout.encode(verdict_to_dict(fault)))
    assert stored["action"] == cls and list(VERDICT_VALIDATOR.iter_errors(stored)) == []
    again = verdict_from_dict(stored)
    assert registry.action_for(again) == cls and registry.evidence_holds(again)
    path = BundleWriter(tmp_path / "out", stderr=io.StringIO()).write(
        window, [fault], BundleContext(target_url="http://127.0.0.1:8000"))
    assert verify_bundle(path).verdicts_checked == 1               # schema, hashes, the verdict recomputed
    assert [v["action"] for v in json.loads((path / "incident.json").read_text())["verdicts"]] == [cls]
    assert registry.action_for(load_incident(path).verdicts[0]) == cls


def test_gpu_check_exits_with_npds_problem_status_only_for_a_drain(monkeypatch, capsys):
    """`servewatch gpu-check --npd` over dcgm-exporter's last Xid: NonOK (1) for a fault whose class is drain, OK
    (0) for one a restart helps or a person decides."""
    from servewatch.commands import gpu_check

    device = GpuDevice(0, 97.0, 1, 2, 600.0, (), uuid=UUID0)
    args = argparse.Namespace(npd=True, gpu_metrics="http://127.0.0.1:9400/metrics", timeout=1.0)
    for code, row in xids.TABLE.items():
        monkeypatch.setattr(gpu_check, "_read", lambda _args, code=code: ((device,), {0: code}, None))
        status = gpu_check.run(args)
        capsys.readouterr()
        assert status == (gpu_check.PROBLEM if expected(row.catalog_action) == "drain" else gpu_check.OK), code


def test_a_bundle_written_before_firings_carried_their_action_still_verifies():
    """examples/bundle-stall was written without the verdicts' `action`: its verdicts are recomputed and compared
    without it, and read back with their spec's action."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "bundle-stall"
    assert all("action" not in v for v in json.loads((path / "incident.json").read_text())["verdicts"])
    assert verify_bundle(path).verdicts_checked == 1
    assert [registry.action_for(v) for v in load_incident(path).verdicts] == ["restart"]
