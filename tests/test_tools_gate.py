"""The gate on external tools: a missing tool skips locally with its reason and fails under CI=true."""

import pytest

from tests import tools


def _item_needing(pytester_free_item_names):
    class Marker:
        def __init__(self, args):
            self.args = args

    class Item:
        def iter_markers(self, name):
            assert name == "needs_tool"
            return [Marker(pytester_free_item_names)]
    return Item()


def test_a_missing_tool_skips_with_the_package_named(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(tools, "tool_path", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match=r"promtool \(Debian package prometheus\)"):
        tools.check_tools(_item_needing(("promtool",)))


@pytest.mark.parametrize("value", ["true", "1"])
def test_a_missing_tool_fails_under_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    monkeypatch.setattr(tools, "tool_path", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match=r"chromium \(Debian package chromium\).*CI=true"):
        tools.check_tools(_item_needing(("chromium",)))


def test_a_present_tool_runs_the_test(monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(tools, "tool_path", lambda name: "/usr/bin/" + name)
    tools.check_tools(_item_needing(("promtool", "amtool")))   # neither skips nor fails


def test_an_unknown_tool_name_is_refused_when_declared():
    with pytest.raises(ValueError, match="unknown tool"):
        tools.needs_tool("promtol")
