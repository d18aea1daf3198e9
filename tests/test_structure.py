"""No package reaches into another's private names: a `_name` is its module's own business (or its package's), so a
caller in another package uses a public name, or the module makes one public. Checked on the source (ast): `from
servewatch.pkg.mod import _name`, and `mod._name` where `mod` is a servewatch module imported from another package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "servewatch"


def _package(module: str) -> str:
    """servewatch.detectors.ranks -> detectors; servewatch.cli -> cli."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def crossings(source: str, module: str) -> list[str]:
    """The private names `source` (the module `module`) takes from another servewatch package."""
    tree = ast.parse(source)
    mine = _package(module)
    bound: dict[str, str] = {}        # a local name -> the servewatch module or name it stands for
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("servewatch"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and _package(node.module) != mine:
                    found.append(f"{module}:{node.lineno} imports {node.module}.{alias.name}")
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("servewatch"):
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            target = bound.get(node.value.id)
            if target is not None and _package(target) != mine:
                found.append(f"{module}:{node.lineno} uses {target}.{node.attr}")
    return found


def test_no_package_uses_another_packages_private_names():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        found += crossings(path.read_text(encoding="utf-8"), module)
    assert found == []


def test_the_check_can_fail():
    assert crossings("from servewatch.http1 import _Conn\n", "servewatch.proxy.server") == [
        "servewatch.proxy.server:1 imports servewatch.http1._Conn"]
    assert crossings("from servewatch.detectors import ranks\nranks._member_run(1)\n", "servewatch.sources.probe") == [
        "servewatch.sources.probe:2 uses servewatch.detectors.ranks._member_run"]
    # within one package a module may use a sibling's private helper
    assert crossings("from servewatch.detectors import ranks\nranks._member_run(1)\n",
                     "servewatch.detectors.not_serving") == []
