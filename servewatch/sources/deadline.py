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
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if task in done:
        return task.result()
    task.cancel()
    task.add_done_callback(_consume)
    raise TimeoutError


def _consume(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()      # retrieved: a late failure of abandoned work is not "never retrieved"
