"""A deadline that holds: the answer of a coroutine, or TimeoutError at `timeout_s` — on time.

`asyncio.wait_for` cancels the late work and then waits for it to finish; an aiohttp request to a
server whose event loop is blocked can take that long to unwind (a real vLLM under 32 concurrent
requests stopped answering /health for 25 s, and a 2 s health probe returned after 11 s). Here the
late work is cancelled and left to unwind on its own, so one stuck server never delays the next probe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TypeVar

T = TypeVar("T")


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
    timer = loop.call_later(timeout_s, wake)
    try:
        await waiter
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_consume)
        raise
    finally:
        timer.cancel()
        task.remove_done_callback(wake)
    if task.done():
        return task.result()
    task.cancel()
    task.add_done_callback(_consume)
    raise TimeoutError


def _consume(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()      # retrieved: a late failure of abandoned work is not "never retrieved"
