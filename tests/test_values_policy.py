"""Value tests of actions/policy.py (issue 40): guard's exit status and its one line for every outcome, word for word,
with the statuses read from the constants the code reads, and what guard does about each verdict."""

from __future__ import annotations

import pytest

from servewatch.actions import policy as P
from servewatch.actions.policy import Action, GuardConfig, Outcome, action_for, exit_status, hardware_line


def test_the_exit_statuses_are_the_documented_numbers():
    assert (P.EXIT_GONE_UNKNOWN, P.EXIT_KILLED, P.EXIT_MASKED_FAILURE, P.EXIT_DRAIN_TIMEOUT, P.EXIT_HARDWARE) == \
        (1, 3, 4, 5, 6)


@pytest.mark.parametrize("outcome, status, line", [
    (Outcome(), 0, "stopped watching; the server is still running"),
    (Outcome(server_gone=True), P.EXIT_GONE_UNKNOWN, "the server exited; its exit status is unknown (not guard's child)"),
    (Outcome(server_exit=0, server_gone=True), 0, "the server exited 0"),
    (Outcome(server_exit=2, server_gone=True), 2, "the server exited 2"),
    (Outcome(server_exit=2, server_gone=True, drain="drained"), 2, "the server exited 2 after the drain"),
    (Outcome(server_exit=0, server_gone=True, drain="drained", engine_died=True), 0, "the server exited 0 after the drain"),
    (Outcome(server_exit=-9, server_gone=True), 128 + 9, "the server was ended by signal 9"),
    (Outcome(server_exit=-1, server_gone=True), 128 + 1, "the server was ended by signal 1"),
    (Outcome(server_exit=-15, server_gone=True, drain="drained"), 128 + 15, "the server was ended by signal 15 after the drain"),
    (Outcome(server_exit=0, server_gone=True, engine_died=True), P.EXIT_MASKED_FAILURE,
     "the server exited 0 although its engine had died (vLLM #48966); reported as a failure"),
    (Outcome(server_exit=1, server_gone=True, engine_died=True), 1, "the server exited 1"),
    (Outcome(server_exit=-9, server_gone=True, engine_died=True), 137, "the server was ended by signal 9"),
    (Outcome(killed_for="engine_dead", server_exit=-9, server_gone=True), P.EXIT_KILLED,
     "killed the server after engine_dead"),
    (Outcome(killed_for="gpu_fault", hardware="hardware: GPU 1 lost, do not restart on this GPU", server_exit=-9),
     P.EXIT_HARDWARE, "hardware: GPU 1 lost, do not restart on this GPU"),
    (Outcome(hardware="hardware: x"), 0, "stopped watching; the server is still running"),      # not killed: no 6
    (Outcome(drain="timeout", server_exit=-9, server_gone=True), P.EXIT_DRAIN_TIMEOUT,
     "the server did not stop within the drain timeout; killed"),
    (Outcome(drain="timeout", killed_for="engine_dead"), P.EXIT_KILLED, "killed the server after engine_dead"),
])
def test_exit_status_and_its_line(outcome, status, line):
    assert exit_status(outcome) == (status, line)


def test_the_outcome_defaults():
    assert Outcome() == Outcome(None, False, False, None, None, None)


def test_the_guard_config_defaults():
    config = GuardConfig()
    assert (config.exit_grace_s, config.drain_timeout_s, config.stacks, config.dry_run) == (10.0, 30.0, True, False)
    assert config.instance is None          # a single server: a deployment's verdicts name no side it holds
    assert config.act_on == P.default_act_on()
    assert P.default_act_on() == ("alive_health_ok_no_progress", "engine_dead", "not_serving", "rank_stalled",
                                  "collective_hang", "gpu_fault", "kv_transfer_stall")


def test_action_for_each_verdict():
    config = GuardConfig(exit_grace_s=7.5)
    assert action_for("engine_dead", config) == Action("engine_dead", 7.5, True, True, None)
    assert action_for("not_serving", config) == Action("not_serving", 0.0, True, True, None)
    assert action_for("overload", config) is None
    dry = GuardConfig(dry_run=True)
    assert action_for("rank_stalled", dry) == Action("rank_stalled", 0.0, False, False, None)
    assert action_for("rank_stalled", GuardConfig(stacks=False)) == Action("rank_stalled", 0.0, False, True, None)
    details = {"gpu_index": 1, "gpu_uuid": "GPU-abc", "gpu_bus_id": "00000000:2A:00.0", "xid": 79}
    assert action_for("gpu_fault", config, details) == Action(
        "gpu_fault", 0.0, True, True,
        "hardware: GPU 1 (GPU-abc, bus 00000000:2A:00.0) Xid 79 (GPU has fallen off the bus), do not restart on this GPU")
    assert action_for("gpu_fault", config).hardware == "hardware: a GPU hardware fault, do not restart on this GPU"
    # a non-drain verdict never carries a hardware line, whatever its details
    assert action_for("engine_dead", config, details).hardware is None


def test_hardware_line():
    assert hardware_line({}) == "hardware: a GPU hardware fault, do not restart on this GPU"
    assert hardware_line({"gpu_index": 0}) == "hardware: GPU 0 hardware fault, do not restart on this GPU"
    assert hardware_line({"gpu_index": 2, "gpu_uuid": "GPU-x"}) == \
        "hardware: GPU 2 (GPU-x) hardware fault, do not restart on this GPU"
    assert hardware_line({"gpu_bus_id": "0000:01:00.0", "fault": "lost"}) == \
        "hardware: a GPU (bus 0000:01:00.0) lost (fallen off the bus), do not restart on this GPU"
    assert hardware_line({"gpu_bus_id": "", "fault": "remap_failure"}) == \
        "hardware: a GPU row remapping failed, do not restart on this GPU"
    assert hardware_line({"fault": "ecc_uncorrectable"}) == \
        "hardware: a GPU uncorrectable ECC errors, do not restart on this GPU"
    assert hardware_line({"fault": "recovery_action"}) == \
        "hardware: a GPU NVML's recovery action asks for a reset or a reboot, do not restart on this GPU"
    assert hardware_line({"fault": "other"}) == "hardware: a GPU hardware fault, do not restart on this GPU"
    assert hardware_line({"xid": "79", "fault": "lost"}) == \
        "hardware: a GPU lost (fallen off the bus), do not restart on this GPU"      # not an int: the fault words
    assert hardware_line({"xid": 99999}) == \
        "hardware: a GPU Xid 99999 (unknown Xid (not in servewatch's table)), do not restart on this GPU"


def test_a_firing_s_own_class_decides_over_its_spec_s():
    from servewatch.detectors.verdict import INFO, RESTART

    config = GuardConfig()
    details = {"gpu_index": 1, "xid": 79}
    # gpu_fault is declared drain; a firing whose own class is restart is acted on, without the hardware line
    assert action_for("gpu_fault", config, details, action=RESTART) == Action("gpu_fault", 0.0, True, True, None)
    # a firing whose own class is neither restart nor drain (a fault a person decides) is reported, not acted on
    assert action_for("gpu_fault", config, details, action=INFO) is None
    # its spec's own class, given: acted on as declared
    assert action_for("gpu_fault", config, details, action="drain").hardware == \
        "hardware: GPU 1 Xid 79 (GPU has fallen off the bus), do not restart on this GPU"


def test_a_guard_of_one_instance_acts_only_on_its_own_side():
    mine, other = GuardConfig(instance="p1"), GuardConfig(instance="d1")
    assert action_for("engine_dead", mine, {"instance": "p1"}) == Action("engine_dead", 10.0, True, True, None)
    assert action_for("engine_dead", other, {"instance": "p1"}) is None
    assert action_for("engine_dead", GuardConfig(), {"instance": "p1"}) is None
    # a verdict about the pair: the instance its act_on names, none where it names no side
    assert action_for("kv_transfer_stall", mine, {"act_on": "p1"}) == Action("kv_transfer_stall", 0.0, True, True, None)
    assert action_for("kv_transfer_stall", other, {"act_on": "p1"}) is None
    assert action_for("kv_transfer_stall", GuardConfig(), {}) is None


@pytest.mark.parametrize("outcome,status,line", [
    (Outcome(server_exit=0, drain="forced"), 0, "the server exited 0 after a second SIGTERM"),
    (Outcome(server_exit=-15, drain="forced"), 143, "the server was ended by signal 15 after a second SIGTERM"),
    (Outcome(server_exit=0, drain="drained"), 0, "the server exited 0 after the drain"),
])
def test_the_line_says_how_the_stop_ended(outcome, status, line):
    assert exit_status(outcome) == (status, line)
