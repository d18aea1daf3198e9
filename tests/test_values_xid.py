"""Value tests of detectors/xid.py (issue 40): the row each Xid code gives (its action an operator acts on), the
hardware actions, Xid 154's recovery action replacing the catalogue's, and an unknown code said as unknown."""

from __future__ import annotations

from servewatch.detectors import xid as X
from servewatch.timeline.samples import RECOVERY_WORDS


def test_a_listed_code_is_its_row():
    assert X.lookup(79) == X.Xid(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus",
                                 "RESTART_BM", X.REBOOT)
    assert X.lookup(13) == X.Xid(13, "ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception", "RESTART_APP",
                                 X.RESTART_APP)
    assert X.lookup(48).action == X.WORKFLOW and X.lookup(63).action == X.IGNORE
    assert X.lookup(95).action == X.RESET_GPU and X.lookup(154).action == X.RECOVERY


def test_an_unknown_code_is_unknown_never_guessed():
    assert X.lookup(9999) == X.Xid(9999, "UNKNOWN", "unknown Xid (not in servewatch's table)", "UNKNOWN", X.UNKNOWN)
    assert X.lookup(0).action == X.UNKNOWN and not X.lookup(9999).hardware


def test_hardware_is_a_reset_or_a_reboot():
    assert [c for c in (13, 46, 79, 48, 63, 154) if X.lookup(c).hardware] == [46, 79]
    for action in (X.RESTART_APP, X.RESET_GPU, X.REBOOT, X.IGNORE, X.WORKFLOW, X.RECOVERY, X.UNKNOWN):
        assert X.Xid(1, "M", "m", "B", action).hardware is (action in (X.RESET_GPU, X.REBOOT)), action


def test_the_drivers_recovery_action_replaces_the_catalogues():
    row = X.lookup(X.RECOVERY_XID)
    expected = {0: X.IGNORE, 1: X.RESET_GPU, 2: X.REBOOT, 3: X.WORKFLOW, 4: X.RESET_GPU, 5: X.WORKFLOW,
                6: X.RESET_GPU, 7: X.REBOOT}
    for value, action in expected.items():
        assert X.with_recovery(row, value) == X.Xid(
            154, "GPU_RECOVERY_ACTION_CHANGED", f"the driver's recovery action for the GPU changed: {RECOVERY_WORDS[value]}",
            f"recovery action {value}", action), value
    assert X.with_recovery(row, 2).meaning.endswith(": reboot the node")
    # a value NVML may add later: unknown, said with its number
    assert X.with_recovery(row, 42) == X.Xid(154, "GPU_RECOVERY_ACTION_CHANGED",
                                             "the driver's recovery action for the GPU changed: recovery action 42",
                                             "recovery action 42", X.UNKNOWN)


def test_each_action_word_has_the_class_a_gpu_fault_for_it_carries():
    """What a gpu_fault makes happen per action word (issue 50: one mapping, read by every consumer)."""
    assert X.ACTION_CLASS == {"restart_app": "restart", "reset_gpu": "drain", "reboot": "drain", "ignore": "info",
                              "workflow": "page", "recovery": "page", "unknown": "page"}
    assert [X.action_class(w) for w in ("restart_app", "reset_gpu", "reboot", "ignore", "workflow", "recovery",
                                        "unknown", "not a word")] == [
        "restart", "drain", "drain", "info", "page", "page", "page", "page"]
    assert [X.lookup(c).action_class for c in (13, 46, 79, 48, 63, 154, 9999)] == [
        "restart", "drain", "drain", "page", "info", "page", "page"]
    assert (X.words_of_class("drain"), X.words_of_class("restart"), X.words_of_class("page"),
            X.words_of_class("info")) == (("reset_gpu", "reboot"), ("restart_app",),
                                          ("workflow", "recovery", "unknown"), ("ignore",))
    assert X.CLASS_WORDS == {"drain": "do not restart on this GPU", "restart": "a restart of the process helps",
                             "page": "a person decides", "info": "nothing to do"}
