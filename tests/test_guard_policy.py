"""guard's decisions: which verdicts it acts on, how, and the exit status an orchestrator sees."""

import pytest

from servewatch.actions.policy import (EXIT_DRAIN_TIMEOUT, EXIT_GONE_UNKNOWN, EXIT_KILLED, EXIT_MASKED_FAILURE,
                                       GuardConfig, Outcome, action_for, exit_status)


def test_a_stall_is_acted_on_at_once_a_dead_engine_after_the_grace():
    config = GuardConfig(exit_grace_s=7.0)
    stall = action_for("alive_health_ok_no_progress", config)
    dead = action_for("engine_dead", config)
    assert (stall.wait_for_exit_s, stall.stacks, stall.kill) == (0.0, True, True)
    assert (dead.wait_for_exit_s, dead.stacks, dead.kill) == (7.0, True, True)


def test_only_the_named_verdicts_are_acted_on():
    assert action_for("overload", GuardConfig()) is None
    assert action_for("kv_pressure", GuardConfig()) is None
    assert action_for("health_loss", GuardConfig(act_on=("health_loss",))).verdict == "health_loss"
    assert action_for("engine_dead", GuardConfig(act_on=("health_loss",))) is None


def test_a_dry_run_neither_kills_nor_dumps():
    action = action_for("alive_health_ok_no_progress", GuardConfig(dry_run=True))
    assert (action.kill, action.stacks) == (False, False)
    assert action_for("engine_dead", GuardConfig(stacks=False)).stacks is False


@pytest.mark.parametrize("outcome, code, words", [
    (Outcome(server_exit=0, server_gone=True), 0, "exited 0"),
    (Outcome(server_exit=1, server_gone=True), 1, "exited 1"),
    (Outcome(server_exit=-9, server_gone=True), 137, "signal 9"),
    # vLLM #48966: the API server exits 0 after its engine died; Restart=on-failure must see a failure.
    (Outcome(server_exit=0, server_gone=True, engine_died=True), EXIT_MASKED_FAILURE, "#48966"),
    (Outcome(server_exit=1, server_gone=True, engine_died=True), 1, "exited 1"),
    (Outcome(killed_for="alive_health_ok_no_progress", server_exit=-9, server_gone=True), EXIT_KILLED,
     "after alive_health_ok_no_progress"),
    (Outcome(server_exit=0, server_gone=True, drain="drained"), 0, "after the drain"),
    (Outcome(server_exit=-15, server_gone=True, drain="drained"), 143, "signal 15 after the drain"),
    (Outcome(drain="timeout", server_exit=-9, server_gone=True), EXIT_DRAIN_TIMEOUT, "drain timeout"),
    (Outcome(server_gone=True), EXIT_GONE_UNKNOWN, "unknown"),
    (Outcome(), 0, "still running"),
])
def test_exit_status_tells_the_restart_policy_the_truth(outcome, code, words):
    got, why = exit_status(outcome)
    assert got == code
    assert words in why
