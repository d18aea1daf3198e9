"""A gpu_fault reaches the outside: serve's servewatch_gpu_fault{target,gpu_uuid,xid,action} while it holds, the
ServewatchGpuHardwareFault alert in `servewatch rules`, and the guard exit status on guard's page (docs/site/commands/guard.md)."""

from __future__ import annotations

from pathlib import Path

from servewatch.detectors.verdict import Verdict
from servewatch.sinks.base import Cleared, Fired
from servewatch.sinks.export.exporter import FleetExporter

UUID1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def gpu_fault(**details) -> Verdict:
    return Verdict("gpu_fault", 10.0, 7.3, "why", (), {"gpu_index": 1, "gpu_uuid": UUID1, "xid": 79,
                                                      "action": "reboot", "hardware": True, **details})


def gpu_lines(exporter: FleetExporter) -> list[str]:
    return [line for line in exporter.exposition().decode().splitlines() if line.startswith("servewatch_gpu_fault{")]


def test_serve_exports_the_gpu_fault_while_it_holds_and_drops_it_when_it_clears():
    exporter = FleetExporter()
    exporter.add_target("vllm-a")
    sink = exporter.sink("vllm-a")
    assert gpu_lines(exporter) == []
    sink.on_fired(Fired(gpu_fault()))
    assert gpu_lines(exporter) == [f'servewatch_gpu_fault{{action="reboot",gpu_uuid="{UUID1}",target="vllm-a",xid="79"}} 1.0']
    sink.on_cleared(Cleared(gpu_fault(), 20.0))
    assert gpu_lines(exporter) == []
    sink.on_fired(Fired(gpu_fault(xid=None, action="reset_gpu", fault="ecc_uncorrectable")))   # no Xid: "none"
    assert gpu_lines(exporter) == [f'servewatch_gpu_fault{{action="reset_gpu",gpu_uuid="{UUID1}",target="vllm-a",xid="none"}} 1.0']
    exporter.remove_target("vllm-a")
    assert gpu_lines(exporter) == []


def test_rules_alert_on_a_hardware_gpu_fault_by_gpu_and_route_it_as_a_drain():
    from servewatch.derive.rules import servewatch_group

    rules = {r.alert: r for r in servewatch_group().rules if r.alert}
    alert = rules["ServewatchGpuHardwareFault"]
    assert alert.expr == ('max by (target, gpu_uuid, xid, action) (servewatch_gpu_fault{action=~"reset_gpu|reboot"}) '
                          "== 1")
    assert alert.labels == {"severity": "page", "action": "drain"} and alert.for_ == ""
    assert "ServewatchGpuFault" not in rules        # no one static action for every firing: one alert per class
    assert rules["ServewatchGpuFaultRestart"].expr == ('max by (target, gpu_uuid, xid, action) (servewatch_gpu_fault'
                                                       '{action=~"restart_app"}) == 1')
    assert rules["ServewatchGpuFaultRestart"].labels == {"severity": "page", "action": "restart"}
    assert rules["ServewatchGpuFaultPage"].expr == ('max by (target, gpu_uuid, xid, action) (servewatch_gpu_fault'
                                                    '{action=~"workflow|recovery|unknown"}) == 1')
    assert rules["ServewatchGpuFaultPage"].labels == {"severity": "page", "action": "page"}
    assert rules["ServewatchGpuThrottled"].labels == {"action": "page"} and rules["ServewatchGpuThrottled"].for_ == "1m"


def test_the_guard_page_documents_the_hardware_exit():
    page = Path(__file__).resolve().parent.parent / "docs" / "site" / "commands" / "guard.md"   # was the README's
    guard = page.read_text(encoding="utf-8")                                                     # guard section
    assert "**6** killed after a hardware fault" in guard and "RestartPreventExitStatus=6" in guard
