"""Drive `servewatch guard --json` as a supervisor would: attached to a server (--pid) or starting it
(`-- COMMAND`); its JSON lines collected as they arrive, and whatever is left of it killed at the end."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import psutil
from lab_cli import SERVEWATCH
from lab_observations import log_excerpt
from lab_scrape import health


class GuardProcess:
    """`servewatch guard URL --json --interval 0.5 --stacks-dir … --out … ARGS`."""

    def __init__(self, url: str, run_dir: Path, name: str, *args: str, env: dict[str, str] | None = None):
        self.stderr_path = run_dir / f"{name}.guard-stderr.txt"
        self.stacks_dir = run_dir / "stacks"
        self.out = run_dir / "bundles"
        self.args = ["guard", url, "--json", "--interval", "0.5", "--stacks-dir", str(self.stacks_dir),
                     "--out", str(self.out), *args]
        self.env = env                                  # guard's environment (and a server it starts): None, ours
        self.lines: list[tuple[float, dict]] = []      # (monotonic arrival, JSON line)
        self.proc: subprocess.Popen | None = None
        self.tree: list[psutil.Process] = []            # a started server's processes, once it is ready

    def __enter__(self) -> GuardProcess:
        self._stderr = open(self.stderr_path, "w+", encoding="utf-8")
        self.proc = subprocess.Popen([*SERVEWATCH, *self.args], stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env=self.env)
        self.started = time.monotonic()
        threading.Thread(target=self._read, name="guard-stdout", daemon=True).start()
        return self

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), json.loads(raw)))

    def wait_recording(self, timeout_s: float = 120.0) -> None:
        """Bounded wait for guard's "recording" line (its first /health and /metrics answers)."""
        deadline = time.monotonic() + timeout_s
        while "recording" not in self.stderr_text() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the line lands in a file; there is no event to wait on
        assert self.proc.poll() is None, f"guard exited {self.proc.returncode}: {self.stderr_tail()}"

    def wait_server_ready(self, url: str, timeout_s: float = 240.0) -> float:
        """A server guard started: /health 200 (bounded); then its tree is recorded for the cleanup."""
        deadline = self.started + timeout_s
        while time.monotonic() < deadline:
            if health(url, timeout_s=2.0) == 200:
                self.tree = psutil.Process(self.proc.pid).children(recursive=True)
                return time.monotonic() - self.started
            assert self.proc.poll() is None, f"guard exited {self.proc.returncode}: {self.stderr_tail()}"
            time.sleep(0.5)    # the engine's start-up: nothing to wait on but its port
        raise AssertionError(f"the server under guard was not ready after {timeout_s:.0f} s: {self.stderr_tail()}")

    def events(self) -> dict[str, tuple[float, dict]]:
        """The first line of each kind (a verdict's name, or guard's action: stacks, kill, drain, exit)."""
        found: dict[str, tuple[float, dict]] = {}
        for at, line in self.lines:
            if line.get("event") != "cleared":
                found.setdefault(line.get("guard") or line.get("verdict"), (at, line))
        return found

    def verdict_names(self) -> list[str]:
        return [line["verdict"] for _, line in self.lines if "verdict" in line and line.get("event") != "cleared"]

    def stderr_text(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def stderr_tail(self) -> str:
        return log_excerpt(self.stderr_text(), max_lines=40)

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for member in self.tree:       # whatever guard left of a server it started
            try:
                member.resume()
                member.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(self.tree, timeout=10)
        self._stderr.close()


def gone(proc: psutil.Process) -> bool:
    """The process has exited (a zombie waiting for its parent counts as exited)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True

