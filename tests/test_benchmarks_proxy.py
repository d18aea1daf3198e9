"""benchmarks/proxy.py's measure of nginx: its CPU is its worker's, and nginx's master listens before it forks the
worker, so the worker is waited for (a run that listed the master's children at once measured nginx's CPU as 0
and failed on a division by zero in the clean-clone CI's benchmark stage)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PROXY_PY = Path(__file__).resolve().parents[1] / "benchmarks" / "proxy.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("benchmarks_proxy", PROXY_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# a parent that forks its one child only once told to (a line on stdin), as nginx's master forks its worker after
# it listens; the child waits for the parent's stdin to close
_LATE_PARENT = ("import os, sys\nsys.stdin.readline()\nif os.fork() == 0:\n    sys.stdin.read()\n    os._exit(0)\n"
                "sys.stdin.read()\nos.wait()\n")


def test_the_worker_of_a_master_that_forks_late_is_waited_for(bench):
    parent = subprocess.Popen([sys.executable, "-c", _LATE_PARENT], stdin=subprocess.PIPE, text=True)
    try:
        assert bench.children(parent.pid) == []          # listening, say, and no worker yet
        parent.stdin.write("fork\n")
        parent.stdin.flush()
        found = bench.worker_pids(parent.pid, limit=10)
        assert len(found) == 1 and found[0] != parent.pid
        assert bench.children(parent.pid) == found
    finally:
        parent.stdin.close()
        parent.wait(10)


def test_a_master_without_a_worker_is_said_so(bench):
    parent = subprocess.Popen([sys.executable, "-c", _LATE_PARENT], stdin=subprocess.PIPE, text=True)
    try:
        with pytest.raises(SystemExit, match=rf"process {parent.pid} started no worker within 0.3 s"):
            bench.worker_pids(parent.pid, limit=0.3)
    finally:
        parent.stdin.close()
        parent.wait(10)
