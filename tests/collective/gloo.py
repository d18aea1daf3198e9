"""Runs tests/collective/gloo_job.py as a two-rank gloo job under a python with torch (the lab vLLM venv's):
each rank a process with RANK, TORCH_FR_BUFFER_SIZE, a dump trigger pipe prefix and a dump file prefix in
its environment, as a torchrun job would have them. Waits on the job's own lines, never on time."""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import subprocess
import threading
import time
from pathlib import Path

from servewatch.lab.venv import resolve_cache_dir, venv_dir

JOB = Path(__file__).with_name("gloo_job.py")
LAB_PYTHON = venv_dir(resolve_cache_dir(None)) / "bin" / "python"   # the lab vLLM venv (torch 2.x+cpu)
FR_BUFFER = 2000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    def __init__(self, procs: list[subprocess.Popen], lines: queue.Queue, workdir: Path):
        self.procs, self.lines, self.workdir = procs, lines, workdir
        self.seen: list[str] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def wait_for(self, *wanted: str, timeout_s: float = 60.0) -> None:
        """Until every wanted line has been printed by the job (a job that exits or a deadline fails)."""
        deadline = time.monotonic() + timeout_s
        missing = [w for w in wanted if w not in self.seen]
        while missing:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the gloo job did not say {missing} in {timeout_s:g} s; it said {self.seen[-6:]}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            missing = [w for w in wanted if w not in self.seen]


@contextlib.contextmanager
def gloo_job(mode: str, workdir: Path, python: Path = LAB_PYTHON, world: int = 2):
    port = free_port()
    lines: queue.Queue = queue.Queue()
    procs = []
    try:
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), TORCH_FR_BUFFER_SIZE=str(FR_BUFFER),
                       TORCH_NCCL_DEBUG_INFO_PIPE_FILE=str(workdir / "pipe_"),
                       TORCH_FR_DUMP_TEMP_FILE=str(workdir / "fr_rank_"), PYTHONUNBUFFERED="1")
            proc = subprocess.Popen([str(python), str(JOB), str(rank), str(world), str(port), mode], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(proc)
            threading.Thread(target=lambda p=proc: [lines.put(l.rstrip("\n")) for l in p.stdout],
                             daemon=True).start()
        yield Job(procs, lines, workdir)
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=30)
