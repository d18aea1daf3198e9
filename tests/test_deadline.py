"""A deadline that holds even when the late work is slow to unwind (an aiohttp request to a server whose
event loop is blocked can take seconds to finish after it is cancelled)."""

from __future__ import annotations

import asyncio

import pytest

from servewatch.sources.deadline import within


async def _stubborn(release: asyncio.Event, unwound: list) -> str:
    """Work that, once cancelled, keeps going until `release` is set."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        await release.wait()
        unwound.append(True)
        raise
    return "never"


def test_the_deadline_returns_on_time_while_the_cancelled_work_is_still_unwinding():
    async def main():
        release, unwound = asyncio.Event(), []
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await within(_stubborn(release, unwound), 0.05)
        returned_after = loop.time() - started
        assert unwound == []            # the deadline did not wait for the work to finish unwinding
        release.set()
        for _ in range(10):
            await asyncio.sleep(0)
        return returned_after, unwound

    returned_after, unwound = asyncio.run(main())
    assert unwound == [True]          # the abandoned work did unwind, later, on its own
    assert returned_after < 1.0


def test_wait_for_would_have_waited_for_the_unwinding():
    """The reason `within` exists: asyncio.wait_for holds the caller until the cancelled work ends."""
    async def main():
        release, unwound = asyncio.Event(), []
        asyncio.get_running_loop().call_later(0.3, release.set)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_stubborn(release, unwound), 0.05)
        return unwound

    assert asyncio.run(main()) == [True]   # wait_for returned only after the work had unwound


def test_an_answer_in_time_is_returned_and_a_failure_raised():
    async def answer():
        return 42

    async def fail():
        raise ValueError("bad")

    assert asyncio.run(within(answer(), 1.0)) == 42
    with pytest.raises(ValueError):
        asyncio.run(within(fail(), 1.0))


def test_cancelling_the_caller_cancels_the_work():
    async def main():
        release, unwound = asyncio.Event(), []
        release.set()
        caller = asyncio.ensure_future(within(_stubborn(release, unwound), 60))
        for _ in range(3):
            await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        for _ in range(10):
            await asyncio.sleep(0)
        return list(unwound)                 # before asyncio.run cancels whatever is left

    assert asyncio.run(main()) == [True]     # the work saw the cancellation and unwound
