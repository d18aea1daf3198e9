"""A TEST-ONLY hook that lets the drill block the main thread of a server it started: the `hang` fault.

Why: a stopped process (SIGSTOP, state T) is visible to any process view; a deadlocked engine is not — it reads
state S and 0 % CPU, exactly like an idle one. gdb can make a real one (`call sleep(75)` in the engine's main
thread), but in this VM its inferior call held the process in a tracing stop for seconds first and the engine died
after it ("Couldn't write extended state status: Bad address"): the method changed what it measured. This hook
blocks the main thread in a system call (sleep) and nothing else: every other thread of the process goes on.

How: the drill writes `sitecustomize.py` (SOURCE) into a directory of its run and puts that directory first on the
PYTHONPATH of the servers it starts (the lab vLLM, the lab SGLang, the simulator), with HANG_DIR_ENV naming a
directory for requests. Python imports sitecustomize at every interpreter start, so every process of the server
(spawned or forked) catches HANG_SIGNAL; nothing happens unless the drill sends it. To hang pid P for S seconds the
drill writes S into `hang-P` there and sends the signal; the handler sleeps in 0.2 s naps while that file exists,
at most S seconds; removing the file ends it. Before sending, the drill reads /proc/P/status: a process that does
not catch the signal is never sent it (its default action would end the process).

It is never installed into any environment, and is only on the path of servers the drill starts itself.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

HANG_DIR_ENV = "SERVEWATCH_TEST_ONLY_HANG_DIR"
HANG_SIGNAL = signal.SIGRTMIN + 6            # a real-time signal no engine uses
HOOK_DIR_NAME = "servewatch-test-only-hang-hook"

SOURCE = f'''"""TEST-ONLY, written by `servewatch drill` (servewatch.drill.hang_hook): the drill's `hang` fault.

Installs a handler of signal SIGRTMIN+{HANG_SIGNAL - signal.SIGRTMIN} that blocks this process's main thread in sleep
while the drill's request file for this pid exists (at most the seconds it holds). Active only with {HANG_DIR_ENV} set.
"""

import os
import signal
import time

_DIR = os.environ.get("{HANG_DIR_ENV}")


def _hang(signum, frame):
    request = os.path.join(_DIR, "hang-%d" % os.getpid())
    try:
        with open(request) as f:
            until = time.monotonic() + float(f.read().strip() or 0)
    except (OSError, ValueError):
        return
    while os.path.exists(request) and time.monotonic() < until:
        time.sleep(0.2)


if _DIR:
    try:
        signal.signal(signal.SIGRTMIN + {HANG_SIGNAL - signal.SIGRTMIN}, _hang)
    except ValueError:      # not the main thread of the main interpreter: nothing to hang here
        pass
'''


def signal_name() -> str:
    """The hook's signal as the report says it: SIGRTMIN+6."""
    return f"SIGRTMIN+{HANG_SIGNAL - signal.SIGRTMIN}"


def write_hook(root: Path) -> Path:
    """Write the hook (idempotent) under `root`; return the directory to put first on PYTHONPATH."""
    hook = root / HOOK_DIR_NAME
    hook.mkdir(parents=True, exist_ok=True)
    target = hook / "sitecustomize.py"
    if not target.is_file() or target.read_text(encoding="utf-8") != SOURCE:
        target.write_text(SOURCE, encoding="utf-8")
    return hook


def environment(root: Path, pythonpath: str | None = None) -> dict[str, str]:
    """The variables that install the hook in a server started with them: PYTHONPATH with the hook first (before
    `pythonpath`, the one the server needs anyway), and the request directory (created here)."""
    requests = root / "hang-requests"
    requests.mkdir(parents=True, exist_ok=True)
    path = str(write_hook(root)) + (os.pathsep + pythonpath if pythonpath else "")
    return {"PYTHONPATH": path, HANG_DIR_ENV: str(requests)}


def catches(pid: int, sig: int = HANG_SIGNAL) -> bool:
    """Whether process `pid` has a handler for `sig` (its SigCgt mask in /proc): only then is it safe to send."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        return False
    return False


def request(root: Path, pid: int, seconds: float) -> Path:
    """Ask for a hang of `pid` for at most `seconds` (the signal is the caller's to send); the path to remove to end it."""
    path = root / "hang-requests" / f"hang-{pid}"
    path.write_text(f"{seconds:g}", encoding="utf-8")
    return path


def release(path: Path) -> None:
    path.unlink(missing_ok=True)
