"""The registry's answers for a name it does not know, and policy_lines over all verdicts or some: what guard
prints at its start, the rules and the README read."""

from __future__ import annotations

from servewatch.detectors import registry
from servewatch.detectors.verdict import INFO


def test_an_unknown_verdict_is_only_to_be_known_and_has_no_runbook():
    assert registry.action_of("no_such_verdict") == INFO
    assert registry.action_of("engine_dead") == "restart"
    assert registry.runbook_for("no_such_verdict") is None
    assert registry.runbook_for("engine_dead") is registry.spec("engine_dead").runbook
    registry.unregister("no_such_verdict")              # nothing to remove: no error
    assert "engine_dead" in registry.names()


def test_policy_lines_cover_every_verdict_or_the_names_asked_skipping_unknown_ones():
    every = registry.policy_lines()
    assert len(every) == len(registry.names())
    assert every[0].startswith(registry.names()[0] + " (")
    # an unknown name is skipped and the lines after it are still given
    assert registry.policy_lines(("no_such_verdict", "overload")) == registry.policy_lines(("overload",))
    (overload,) = registry.policy_lines(("overload",))
    assert overload.startswith("overload (page")
    assert registry.policy_lines(()) == []


def test_incidents_and_findings_and_a_registered_verdict_taken_out_again():
    import dataclasses

    assert registry.is_incident("engine_dead") and not registry.is_incident("histogram_blind")
    assert not registry.is_incident("no_such_verdict")
    extra = dataclasses.replace(registry.spec("overload"), name="values_test_extra")
    registry.register(extra)
    try:
        assert registry.is_incident("values_test_extra") and registry.names()[-1] == "values_test_extra"
    finally:
        registry.unregister("values_test_extra")
    assert "values_test_extra" not in registry.names() and registry.spec("values_test_extra") is None


def test_policy_lines_of_a_verdict_whose_class_is_each_firings_own():
    # gpu_fault's class is chosen per fault: the line gives how, never a class of its own
    assert registry.policy_lines(("gpu_fault",)) == [
        "gpu_fault (per fault: drain for a GPU reset or reboot, restart when a process restart helps, else page)"]


def test_may_act_on_a_pair_verdict_only_the_instance_it_names():
    # a deployment verdict (pair=True) acts only on the instance in its act_on detail; none named: a person decides
    assert registry.spec("kv_transfer_stall").pair
    assert registry.may_act_on("kv_transfer_stall", {"act_on": "prefill-0"}, "prefill-0") is True
    assert registry.may_act_on("kv_transfer_stall", {"act_on": "prefill-0"}, "decode-0") is False
    assert registry.may_act_on("kv_transfer_stall", {"act_on": "prefill-0"}, None) is False
    assert registry.may_act_on("kv_transfer_stall", {}, None) is False
    assert registry.may_act_on("kv_transfer_stall", {"instance": "prefill-0"}, "prefill-0") is False
    # an instance's own verdict: that instance's tree, a single server's (no instance) any tree it watches
    assert registry.may_act_on("engine_dead", {"instance": "decode-0"}, "decode-0") is True
    assert registry.may_act_on("engine_dead", {"instance": "decode-0"}, "prefill-0") is False
    assert registry.may_act_on("engine_dead", {}, "decode-0") is True
    assert registry.may_act_on("engine_dead", {}, None) is True
    assert registry.may_act_on("engine_dead", {"act_on": "prefill-0"}, "decode-0") is True   # act_on: pair only
    # an unknown verdict is judged as an instance's own
    assert registry.may_act_on("no_such_verdict", {"act_on": "x"}, "y") is True
    assert registry.may_act_on("no_such_verdict", {"instance": "x"}, "y") is False


def test_settings_classes_are_every_verdict_modules_in_order():
    classes = registry.settings_classes()
    assert classes == tuple(cls for module in registry.VERDICT_MODULES for cls in module.SETTINGS)
    assert [c.__name__ for c in classes[:5]] == [
        "StallSettings", "LivenessSettings", "NotServingSettings", "RankSettings", "OverloadSettings"]
    assert len(classes) == 14 and len(set(classes)) == 14


def test_a_verdict_module_registered_and_taken_out_whole():
    import dataclasses
    import types

    import pytest

    one = dataclasses.replace(registry.spec("overload"), name="values_test_module_a")
    two = dataclasses.replace(registry.spec("overload"), name="values_test_module_b")
    module = types.ModuleType("values_test_module")
    module.SPECS = (one, two)
    try:
        assert registry.register_module(module) == (one, two)
        assert registry.names()[-2:] == ("values_test_module_a", "values_test_module_b")
        assert registry.spec("values_test_module_b") is two
    finally:
        registry.unregister_module(module)
    assert "values_test_module_a" not in registry.names() and "values_test_module_b" not in registry.names()
    bad = types.ModuleType("values_test_bad")
    bad.SPECS = (one, "not a spec")
    with pytest.raises(TypeError, match=r"^values_test_bad\.SPECS holds 'not a spec', not a VerdictSpec$"):
        registry.register_module(bad)
    registry.unregister("values_test_module_a")          # registered before the bad entry was found
    assert "values_test_module_a" not in registry.names()
