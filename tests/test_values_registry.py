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
