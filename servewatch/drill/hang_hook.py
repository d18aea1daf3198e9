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


# The same hook for a server that is no Python program (llama.cpp's llama-server): a shared library the drill builds
# with the C compiler and puts in the server's LD_PRELOAD. Its constructor installs the handler (only with
# HANG_DIR_ENV set); a signal the kernel hands to another thread is passed on to the main thread (tgkill), which is
# the one that sleeps: llama-server's main thread runs its slots (the decode loop), its HTTP threads go on.
NATIVE_SOURCE = f"""/* TEST-ONLY, written and built by `servewatch drill` (servewatch.drill.hang_hook): the drill's `hang` fault
   for a server that is not a Python program. Loaded through LD_PRELOAD; active only with {HANG_DIR_ENV} set. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char request[4096];

static double now_s(void) {{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}}

static double seconds_in(const char * text) {{    /* "12.5": no strtod in a signal handler */
    double whole = 0, scale = 0;
    for (; *text; text++) {{
        if (*text == '.') {{ scale = 1; continue; }}
        if (*text < '0' || *text > '9') break;
        if (scale > 0) {{ scale /= 10; whole += (*text - '0') * scale; }} else whole = whole * 10 + (*text - '0');
    }}
    return whole;
}}

static void hang(int sig) {{
    pid_t pid = getpid();
    if ((pid_t) syscall(SYS_gettid) != pid) {{      /* another thread got it: the main thread is the one to block */
        syscall(SYS_tgkill, pid, pid, sig);
        return;
    }}
    char text[32] = {{0}};
    int fd = open(request, O_RDONLY);
    if (fd < 0) return;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return;
    double until = now_s() + seconds_in(text);
    struct timespec nap = {{0, 200000000}};
    while (access(request, F_OK) == 0 && now_s() < until) nanosleep(&nap, NULL);
}}

__attribute__((constructor)) static void install(void) {{
    const char * dir = getenv("{HANG_DIR_ENV}");
    if (dir == NULL) return;
    snprintf(request, sizeof request, "%s/hang-%d", dir, (int) getpid());
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = hang;
    sigemptyset(&action.sa_mask);
    sigaction(SIGRTMIN + {HANG_SIGNAL - signal.SIGRTMIN}, &action, NULL);
}}
"""
NATIVE_LIBRARY = "servewatch-test-only-hang.so"


def native_library(root: Path) -> Path:
    """Build (once per source) the hook's shared library under `root`; its path, for LD_PRELOAD."""
    import hashlib
    import subprocess

    from servewatch.errors import ServewatchError

    hook = root / HOOK_DIR_NAME
    hook.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(NATIVE_SOURCE.encode()).hexdigest()[:12]
    library = hook / f"{digest}-{NATIVE_LIBRARY}"
    if library.is_file():
        return library
    source = hook / "servewatch-test-only-hang.c"
    source.write_text(NATIVE_SOURCE, encoding="utf-8")
    try:
        done = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServewatchError(f"cannot build the drill's hang hook with cc: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ServewatchError(f"building the drill's hang hook failed (cc exit {done.returncode}): {last}")
    return library


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


def environment(root: Path, pythonpath: str | None = None, *, native: bool = False) -> dict[str, str]:
    """The variables that install the hook in a server started with them: PYTHONPATH with the hook first (before
    `pythonpath`, the one the server needs anyway), and the request directory (created here); with `native`, for a
    server that is no Python program, LD_PRELOAD naming the hook's shared library instead of PYTHONPATH."""
    requests = root / "hang-requests"
    requests.mkdir(parents=True, exist_ok=True)
    if native:
        return {"LD_PRELOAD": str(native_library(root)), HANG_DIR_ENV: str(requests)}
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
