"""External programs some tests run for real (the only checks against the real tools).

A test declares what it needs with `@needs_tool("promtool")` (or in `pytestmark`). When a tool is missing,
the test is skipped with the reason printed by `pytest -rs` on a developer's machine, and FAILS under
`CI=true`: CI installs every one of them, so a missing tool there is a broken install, not a reason to
check less.
"""

from __future__ import annotations

import os
import shutil

import pytest

from servewatch.actions.stacks import find_py_spy

# name -> (executables tried in order, where it comes from)
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "chromium": (("chromium", "chromium-browser"), "Debian package chromium"),
    "prometheus": (("prometheus",), "Debian package prometheus"),
    "promtool": (("promtool",), "Debian package prometheus"),
    "alertmanager": (("prometheus-alertmanager", "alertmanager"), "Debian package prometheus-alertmanager"),
    "amtool": (("amtool",), "Debian package prometheus-alertmanager"),
    "systemd-analyze": (("systemd-analyze",), "Debian package systemd"),
    "py-spy": ((), "PyPI package py-spy, a dependency of servewatch"),
    "stress-ng": (("stress-ng",), "Debian package stress-ng"),
    "cmake": (("cmake",), "Debian package cmake"),
    "cc": (("cc", "gcc"), "Debian package gcc"),
}


def tool_path(name: str) -> str | None:
    if name == "py-spy":
        return find_py_spy()
    names, _ = TOOLS[name]
    return next((found for found in map(shutil.which, names) if found), None)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def needs_tool(*names: str) -> pytest.MarkDecorator:
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise ValueError(f"unknown tool(s) {unknown}; known: {sorted(TOOLS)}")
    return pytest.mark.needs_tool(*names)


def check_tools(item: pytest.Item) -> None:
    """Called before each test (tests/conftest.py): skip locally, fail under CI=true, naming the package."""
    missing = [name for marker in item.iter_markers("needs_tool") for name in marker.args if tool_path(name) is None]
    if not missing:
        return
    where = "; ".join(f"{name} ({TOOLS[name][1]})" for name in dict.fromkeys(missing))
    if in_ci():
        pytest.fail(f"needs {where}, which is not installed; under CI=true a missing tool fails the test",
                    pytrace=False)
    pytest.skip(f"needs {where}, which is not installed")
