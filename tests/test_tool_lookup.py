"""A test finds an external tool (promtool, prometheus, alertmanager, amtool, chromium, py-spy, ...) when it
runs, not when its module is imported: a path read once at import goes stale when the tool is installed
after collection, and the test then runs a `None` that `check_tools` had just found present (issue 45)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
LOOKUPS = {"which", "tool_path", "find_py_spy"}   # shutil.which, tests/tools.py's, servewatch's py-spy finder


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def lookups_at_import(source: str) -> list[int]:
    """Lines where a tool is looked up outside every function: at import, or in a class body or a decorator
    argument (both run at import too). A lambda's body runs when called, so it is not counted."""
    found: list[int] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
                if child is not None:
                    visit(child, in_function)
            for child in node.body:
                visit(child, True)
            return
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.Call) and not in_function and _called_name(node) in LOOKUPS:
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, in_function)

    visit(ast.parse(source), False)
    return found


def test_the_check_finds_a_lookup_at_import_and_passes_one_at_test_time():
    assert lookups_at_import('import shutil\nPROMTOOL = shutil.which("promtool")\n') == [2]
    assert lookups_at_import('from tests.tools import tool_path\nX = tool_path("promtool")\n') == [2]
    assert lookups_at_import('class T:\n    PATH = tool_path("prometheus")\n') == [2]
    assert lookups_at_import('@mark(tool_path("x"))\ndef test_a():\n    pass\n') == [1]
    assert lookups_at_import('def test_a():\n    subprocess.run([tool_path("promtool")])\n') == []
    assert lookups_at_import('tool = lambda: shutil.which("amtool")\n') == []


def test_no_test_module_looks_a_tool_up_at_import():
    stale = {p.relative_to(TESTS).as_posix(): lines for p in sorted(TESTS.rglob("*.py"))
             if (lines := lookups_at_import(p.read_text(encoding="utf-8")))}
    assert len(list(TESTS.rglob("test_*.py"))) > 100                     # the walk found the suite
    assert not stale, f"a tool looked up at import (file: lines): {stale}; look it up in the test instead"
