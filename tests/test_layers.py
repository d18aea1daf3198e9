"""The layers hold: `lint-imports` checks the contract in pyproject.toml (each package imports only from the
layers below it, siblings split by `|` not from each other, every top-level package named), and the
contract is one that can fail: an upward import, an import between siblings or a package the contract
does not name breaks it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (the test extra)")


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    """`lint-imports` over the servewatch package found in `tree`, with the contract of `tree`/pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"],     # the contract: tree/pyproject.toml
                          cwd=tree, env=env, capture_output=True, text=True, timeout=60)


def test_the_layers_contract_is_kept():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "servewatch layers KEPT" in done.stdout


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package and of the contract, to break."""
    shutil.copytree(ROOT / "servewatch", tmp_path / "servewatch",
                    ignore=shutil.ignore_patterns("__pycache__", "*.json", "assets"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path     # each test's message names a line only the copy holds: the copy is what was read


def add_line(path: Path, line: str) -> None:
    path.write_text(path.read_text() + "\n\n" + line + "\n")


@pytest.mark.parametrize("module, line, said", [
    # the ground floor reaching up to a command, inside a function where the import would hide
    ("kinds.py", "def _f():\n    from servewatch.commands import watch  # noqa", "servewatch.kinds -> servewatch.commands"),
    # the circle this contract was written to break: dialects asking the bundle format for something
    ("dialects/base.py", "from servewatch.bundle import serialize  # noqa",
     "servewatch.dialects.base -> servewatch.bundle.serialize"),
    # siblings of one layer: the recorder may not import the offline doctor
    ("watch/options.py", "from servewatch.doctor import diagnose  # noqa",
     "servewatch.watch.options -> servewatch.doctor.diagnose"),
])
def test_an_import_against_the_layers_breaks_the_contract(copy: Path, module: str, line: str, said: str):
    add_line(copy / "servewatch" / module, line)
    done = lint_imports(copy)
    assert done.returncode != 0
    assert "servewatch layers BROKEN" in done.stdout
    assert said in done.stdout, done.stdout


def test_a_package_the_contract_does_not_name_breaks_it(copy: Path):
    (copy / "servewatch" / "newthing").mkdir()
    (copy / "servewatch" / "newthing" / "__init__.py").write_text('"""A package outside the layers."""\n')
    done = lint_imports(copy)
    assert done.returncode != 0
    assert "servewatch.newthing" in done.stdout, done.stdout
