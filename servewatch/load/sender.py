"""A thread that writes prepared requests on their sockets at their scheduled instants.

Why a thread: the event loop may be busy with a burst of stream reads when a send is due, and its
timers have millisecond granularity (uvloop). This thread sleeps on a precise timeout, then needs
only the GIL (the caller shortens the interpreter's switch interval) to stamp the time and write.

Honest timing: `Pending.sent` is stamped immediately before the bytes are handed to the socket, and
is cleared again if the write failed.

Priority: the thread asks for real-time scheduling (SCHED_FIFO, lowest priority) when the process
may (root, CAP_SYS_NICE or an RLIMIT_RTPRIO): on a busy machine a woken normal thread can wait
milliseconds for a core, a real-time one preempts at once. It sleeps almost always and does one
write per request; the kernel's real-time throttling bounds it anyway. Without the privilege it
runs at normal priority; `priority` says which. What a failed write becomes is the loop's business: nothing
written → the connection fails as never-answered and `Http1Client.complete` retries on a fresh one
(not before the request's time); part written → the rest goes through the transport, in order.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

_STOP = object()


class TimedSender:
    """Give it (due, Pending) pairs from the event loop's thread, in time order; it writes each at
    `due`. It sleeps until the next due time without being woken by later submissions (one thread
    wake-up per request), so a submission due before one already waiting would be written late."""

    def __init__(self, loop, clock=time.time, realtime: bool = True):
        self._loop = loop
        self._realtime = realtime
        self.priority = "normal"
        self._clock = clock
        self._items: deque = deque()
        self._more = threading.Event()
        self._thread = threading.Thread(target=self._run, name="servewatch-sender", daemon=True)
        self.written = 0
        self.failed = 0

    def start(self) -> "TimedSender":
        self._thread.start()
        return self

    def submit(self, due: float, pending) -> None:
        self._items.append((due, pending))
        self._more.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread; requests not yet written are failed as never sent."""
        if self._thread.is_alive():
            self._items.appendleft((0.0, _STOP))
            self._more.set()
            self._thread.join(timeout_s)

    def _run(self) -> None:
        if self._realtime:
            self.priority = _ask_realtime()
        items, more, clock, sleep = self._items, self._more, self._clock, time.sleep
        while True:
            if not items:
                more.clear()
                if not items:                    # checked again after clear: no lost wake-up
                    more.wait()
                continue
            due, pending = items[0]
            if pending is _STOP:
                items.popleft()
                while items:
                    self._drop(items.popleft()[1])
                return
            wait = due - clock()
            if wait > 0:
                sleep(wait)                      # clock_nanosleep: precise, and not woken early
                continue
            items.popleft()
            self._write(pending)

    def _write(self, pending) -> None:
        raw = pending.raw
        pending.sent = self._clock()         # before the write: the response may be read before
        try:                                 # this thread holds the GIL again
            n = os.write(pending.fd, raw)
        except OSError:
            n = 0
        finally:
            os.close(pending.fd)
            pending.fd = -1
        if n == len(raw):
            self.written += 1
            return
        if n <= 0:
            pending.sent = None
            self.failed += 1
            self._call(pending.conn.unsent)
        else:
            self.written += 1
            self._call(pending.conn.write_rest, raw[n:])

    def _drop(self, pending) -> None:
        os.close(pending.fd)
        pending.fd = -1
        self._call(pending.conn.unsent)

    def _call(self, fn, *args) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:                 # the loop is closed: nobody awaits this request
            pass


def _ask_realtime() -> str:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))     # 0: the calling thread
    except (OSError, AttributeError):
        return "normal"
    return "realtime"
