"""A full filesystem under a directory: a 1 MiB tmpfs mounted there and filled, where mounting is
allowed; else a simulated one (the recorder runs under `python -m servewatch.drill.full_disk DIR -- ARGS`,
which makes every write-open below DIR fail with ENOSPC). The report says which one ran."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

TMPFS_SIZE = "1m"


def make_full(directory: Path) -> str:
    """Mount and fill; "tmpfs" when that worked, else "simulated" (the caller wraps the recorder)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(directory)],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "simulated"
    if done.returncode != 0:
        return "simulated"
    try:
        with open(directory / ".filler", "wb") as filler:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    return "tmpfs"


def release(directory: Path, mode: str) -> None:
    if mode == "tmpfs":
        subprocess.run(["umount", str(directory)], capture_output=True, timeout=30)


def wrapper(directory: Path) -> list[str]:
    return [sys.executable, "-m", "servewatch.drill.full_disk", str(directory), "--"]


def _install(directory: str) -> None:
    import builtins
    import io

    root = os.path.realpath(directory)
    real_open, real_os_open = builtins.open, os.open

    def below(path) -> bool:
        try:
            return os.path.realpath(os.fspath(path)).startswith(root + os.sep)
        except TypeError:
            return False

    def full():
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fake_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and below(file):
            raise full()
        return real_open(file, mode, *args, **kwargs)

    def fake_os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and below(path):
            raise full()
        return real_os_open(path, flags, *args, **kwargs)

    builtins.open = fake_open
    io.open = fake_open
    os.open = fake_os_open


def main(argv: list[str]) -> int:
    directory, sep, rest = argv[0], argv[1], argv[2:]
    assert sep == "--"
    _install(directory)
    import runpy   # then run servewatch exactly as `python -m servewatch ARGS` (an entry point, not a layer)

    sys.argv = ["servewatch", *rest]
    try:
        runpy.run_module("servewatch", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
