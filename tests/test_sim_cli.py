"""`python -m servewatch sim` as a process: engine death -> 503 -> exit code, bad
arguments -> one line and a non-zero exit. Every wait is bounded."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _start(*args: str) -> tuple[subprocess.Popen, int, float]:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", "0", "--profile", "tiny-cpu",
                             "--log-file", os.devnull, *args],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()            # the server prints its address once it listens
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise AssertionError(f"no address line: {line!r} {proc.stderr.read()!r}")
    return proc, int(match.group(1)), started


def _status(port: int, path: str = "/health") -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def _wait_status(port: int, wanted: int, seconds: float) -> float:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _status(port) == wanted:
            return time.monotonic()
        time.sleep(0.05)
    raise AssertionError(f"/health never returned {wanted}")


@pytest.mark.parametrize("code", [0, 3])
def test_engine_death_gives_503_then_the_process_exits_with_the_configured_code(code):
    # The fault lands 4 s after the server listens: room for this process to ask once before it on a
    # loaded machine (how fast the simulator starts is a benchmark's business, not this test's).
    proc, port, _ = _start("--fault", f"engine-death@4s:exit={code}", "--exit-delay", "1")
    try:
        assert _status(port) == 200
        _wait_status(port, 503, 10)
        assert proc.wait(timeout=15) == code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        proc.stderr.close()


def test_health_answers_once_the_server_prints_its_address_and_sigterm_ends_it_cleanly():
    proc, port, _ = _start()
    try:
        # The address line is printed once it listens; /health must then answer 200 (the wait only
        # fences a hung server: how fast it starts is not a unit test's business on a shared machine).
        _wait_status(port, 200, 30)
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        proc.stderr.close()


def test_startup_oom_exits_1_without_listening():
    proc = subprocess.run([sys.executable, "-m", "servewatch", "sim", "--port", "0", "--profile", "tiny-cpu",
                           "--fault", "startup-oom", "--log-file", os.devnull],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "http://" not in proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["--fault", "meltdown"], "unknown fault kind"),
    (["--profile", "a100-70b"], "unknown"),
    (["--max-num-seqs", "0"], "max-num-seqs must be positive"),
])
def test_bad_arguments_fail_with_one_line(args, needle):
    proc = subprocess.run([sys.executable, "-m", "servewatch", "sim", "--port", "0", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("servewatch sim: ") and needle in lines[0]
