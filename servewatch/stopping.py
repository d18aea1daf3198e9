"""How a command stops on a signal: ^C (SIGINT), SIGTERM (kill, systemd, Kubernetes, a CI time limit) and
SIGHUP (a closed terminal) take one path, ^C's.

The first of them starts an orderly stop: the records flushed, the summary and any bundle written, one line
on stderr saying what was kept (`say`), exit status 128 + the signal's number (`status`: 130 SIGINT, 143
SIGTERM, 129 SIGHUP). A second one during that stop ends the program at once, as a second ^C does, by a
KeyboardInterrupt between two records, never inside one (a record is written whole, in one call).

Two ways in, one path:
- `interrupt_on_termination()` (the cli, for every command): SIGTERM and SIGHUP raise SIGINT, so they do what
  ^C does at that moment: Python's KeyboardInterrupt, asyncio.Runner's handler (the main task cancelled, then a
  KeyboardInterrupt at the second) or an event loop's own.
- `on_stop(loop, callback)` (a command that stops its event loop itself: load, watch, guard, serve, proxy):
  each of the three signals calls `callback` on the loop the first time; later ones call `again`, by default
  a KeyboardInterrupt. Removing it puts back the handlers it replaced.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_received: list[int] = []         # the signals that asked this process to stop, the first first


def received() -> int | None:
    """The signal that started the stop (None: none did)."""
    return _received[0] if _received else None


def note(signum: int) -> bool:
    """Keep `signum` as received; whether it is the first."""
    _received.append(int(signum))
    return len(_received) == 1


def status() -> int:
    """The exit status of a stop by a signal: 128 + its number (^C's 130 when none was noted: Python's own
    SIGINT handler raised the KeyboardInterrupt)."""
    return 128 + (received() or signal.SIGINT)


def name() -> str:
    return signal.Signals(received() or signal.SIGINT).name


def say(tool: str, kept: str | None = None) -> None:
    """The one line of a stop: `servewatch TOOL: stopped by SIGTERM: KEPT`. A terminal that went away (the
    SIGHUP) cannot take it: then nothing is said, and the exit status still says it."""
    line = f"servewatch {tool}: stopped by {name()}" + (f": {kept}" if kept else "")
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _as_interrupt(signum, frame) -> None:
    note(signum)
    if callable(signal.getsignal(signal.SIGINT)):
        # whatever ^C does now: Python's KeyboardInterrupt, asyncio.Runner's handler or an event loop's
        signal.raise_signal(signal.SIGINT)
    else:
        raise KeyboardInterrupt(signal.Signals(signum).name)   # SIGINT ignored (a background job) or default


def interrupt_on_termination() -> None:
    """SIGTERM and SIGHUP end this program as ^C does (see the module's words). One ignored when the program
    started stays ignored (`nohup` ignores SIGHUP: the program must outlive its terminal)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _as_interrupt)


def on_stop(loop, callback: Callable[[], object], again: Callable[[], object] | None = None) -> Callable[[], None]:
    """SIGINT, SIGTERM and SIGHUP call `callback()` on `loop` (the first noted); any later one `again()`, by
    default a KeyboardInterrupt out of the loop (the stop cut short). Returns what removes them, putting
    back the handlers they replaced."""
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS
              if signal.getsignal(signum) is not signal.SIG_IGN}     # an ignored one stays ignored (nohup)

    def heard(signum: int) -> None:
        if note(signum):
            callback()
        elif again is not None:
            again()
        else:
            raise KeyboardInterrupt(signal.Signals(signum).name)

    for signum in before:
        loop.add_signal_handler(signum, heard, signum)

    def remove() -> None:
        # The loop's remove_signal_handler puts the signal's default action back (SIGTERM's and SIGHUP's: the
        # process dies), and only then is the handler before it restored: a signal landing between the two
        # killed the process with no stop line (measured once under load: status -1 for a SIGHUP sent just after
        # a SIGTERM). The stop signals are held back while the handlers are swapped and delivered after.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for signum in before:
                loop.remove_signal_handler(signum)
                if before[signum] is not None and signal.getsignal(signum) is not before[signum]:
                    signal.signal(signum, before[signum])
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    return remove
