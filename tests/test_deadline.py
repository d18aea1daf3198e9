"""A deadline that holds even when the late work is slow to unwind (an aiohttp request to a server whose
event loop is blocked can take seconds to finish after it is cancelled)."""

from __future__ import annotations

import asyncio

import pytest

from servewatch.transport.deadline import within


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


def _answer_after_a_few_steps(answer: asyncio.Future) -> object:
    async def read():
        value = await answer
        for _ in range(3):            # a response is read in several steps (status line, headers, body)
            await asyncio.sleep(0)
        return value
    return read()


def test_an_answer_that_arrived_while_this_process_did_not_run_is_kept():
    """The timer fires late when the process was frozen or starved at the deadline: the server answered
    in time, and the answer waiting in the socket is read, not thrown away as a timeout."""
    import time

    async def main():
        loop = asyncio.get_running_loop()
        answer = loop.create_future()

        def frozen():
            answer.set_result("scrape")   # the server answers at once...
            time.sleep(0.6)               # ...while this process does not run (a freeze), past the deadline

        loop.call_soon(frozen)
        started = loop.time()
        value = await within(_answer_after_a_few_steps(answer), 0.1)
        return value, loop.time() - started

    value, took = asyncio.run(main())
    assert value == "scrape"
    assert took < 0.6 + 0.1 + 1.0


def test_a_server_that_does_not_answer_still_times_out_after_a_freeze():
    import time

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_soon(time.sleep, 0.6)                      # frozen past the deadline
        started = loop.time()
        with pytest.raises(TimeoutError):
            await within(_answer_after_a_few_steps(loop.create_future()), 0.1)
        return loop.time() - started

    took = asyncio.run(main())
    assert 0.6 <= took < 0.6 + 0.1 + 1.0      # the time given back is at most timeout_s more
