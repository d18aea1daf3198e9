"""Stopping a server a test started: SIGTERM, a bounded wait, then SIGKILL."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
