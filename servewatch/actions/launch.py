"""Starting the server guard supervises (its own session, optionally at a lower CPU priority) and the
private directory its stack dumps go to."""

from __future__ import annotations

import os
from pathlib import Path

from servewatch.errors import ServewatchError


def default_stacks_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "servewatch" / "stacks"


def stacks_dir(given: str | None, *, check: bool) -> Path:
    """--stacks-dir (`given`; None: the default), checked now: an unwritable one is one line and exit 2 before
    anything runs (the dump is evidence a kill destroys; finding out at the kill is too late)."""
    from servewatch.sinks.bundle_sink import check_writable

    path = Path(given) if given else default_stacks_dir()
    if check:
        check_writable(path, "--stacks-dir")
    return path


def start_server(command: list[str], *, json_lines: bool, nice: int | None = None):
    import subprocess
    import sys

    # Its own session: a ^C in guard's terminal reaches guard, which drains the server. With --json,
    # guard's stdout carries only JSON lines: the server's stdout goes to stderr with its logs.
    try:
        server = subprocess.Popen(command, start_new_session=True, stdout=sys.stderr if json_lines else None)
    except OSError as exc:
        raise ServewatchError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
    print(f"servewatch guard: started {os.path.basename(command[0])} as pid {server.pid}", file=sys.stderr, flush=True)
    if nice is not None:
        from servewatch.sched import set_session_nice

        why = set_session_nice(server.pid, nice)
        print(f"servewatch guard: the server's session runs at CPU priority nice {nice} (its autogroup)" if why is None
              else f"servewatch guard: --server-nice {nice} not applied: {why}", file=sys.stderr, flush=True)
    return server
