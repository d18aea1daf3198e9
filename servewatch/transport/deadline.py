"""A deadline that holds: the answer of a coroutine, or TimeoutError at `timeout_s` — on time.

`asyncio.wait_for` cancels the late work and then waits for it to finish; an aiohttp request to a
server whose event loop is blocked can take that long to unwind (a real vLLM under 32 concurrent
requests stopped answering /health for 25 s, and a 2 s health probe returned after 11 s). Here the
late work is cancelled and left to unwind on its own, so one stuck server never delays the next probe.

A deadline measures the server, not us: when the timer fires late, this process was not running at the
deadline (frozen, or starved of CPU by the engine it watches), and an answer may be sitting unread in
its socket. Then the time it did not run is given back (at most `timeout_s` in all) before the work is
abandoned: a watcher frozen for 6 s while a /metrics answer arrived in 0.2 s had discarded that answer
as a timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TypeVar

T = TypeVar("T")

LATE_S = 0.25    # a timer this late means the process did not run at its deadline


async def within(work: Coroutine[object, object, T], timeout_s: float) -> T:
    """The work's answer, or TimeoutError at `timeout_s`; cancelling the caller cancels the work too.
    (One waiter future and one timer: `asyncio.wait` costs several times more, and a fleet makes two
    such calls per target per cadence.)"""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    waiter = loop.create_future()

    def wake(_=None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    task.add_done_callback(wake)
    due = loop.time() + timeout_s
    given_back = 0.0

    def expire() -> None:
        nonlocal due, given_back, timer
        late = loop.time() - due
        if late >= LATE_S and given_back < timeout_s and not task.done():
            extra = min(late, timeout_s - given_back)
            given_back += extra
            due = loop.time() + extra
            timer = loop.call_at(due, expire)
            return
        wake()

    timer = loop.call_at(due, expire)
    try:
        await waiter
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_consume)
        raise
    finally:
        timer.cancel()
        task.remove_done_callback(wake)
        # expire re-arms itself, so it refers to itself: a reference cycle that would keep the task and
        # its answer (a whole /metrics body) until the cyclic collector runs, which serve makes rare
        # (serve/heap.py): 100 targets' bodies piled up to +50 MB (benchmarks/serve_hostile.py)
        expire = None
    if task.done():
        return task.result()
    task.cancel()
    task.add_done_callback(_consume)
    raise TimeoutError


def _consume(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()      # retrieved: a late failure of abandoned work is not "never retrieved"
