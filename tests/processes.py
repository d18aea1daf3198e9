"""Processes of the tests: stopping a server a test started (SIGTERM, a bounded wait, then SIGKILL), and running
code in a fresh interpreter where an optional compiled module cannot be imported (as where it was not built)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


_BLOCK = """
import sys
class _NotBuilt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise ImportError("not built")
sys.meta_path.insert(0, _NotBuilt())
"""


def without_module(module: str, code: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """`code` run by a fresh interpreter (from the repository's root) in which importing `module` fails."""
    return subprocess.run([sys.executable, "-c", _BLOCK.format(module=module) + code], capture_output=True,
                          text=True, timeout=timeout, cwd=Path(__file__).resolve().parents[1])
