"""Value tests of transport/deadline.py (issue 40): when `within` gives up, to the instant, on a virtual clock.

The loop's clock advances only by the time the loop would have slept, and a freeze (this process not running) is
a jump of the clock inside a callback: every figure below is exact, and the boundary of a late timer reads the
constant the code reads (LATE_S: a timer `>= LATE_S` late gives the time back, one any less late does not).
"""

from __future__ import annotations

import asyncio
import selectors

import pytest

from servewatch.transport import deadline as D
from servewatch.transport.deadline import within


HORIZON_S = 100.0     # no test here runs its clock past this: a deadline that never fires fails at once, not hangs


class _Selector(selectors.DefaultSelector):
    loop: "_VirtualLoop"

    def select(self, timeout=None):
        if timeout is not None and timeout > 0:
            self.loop.now += timeout              # the loop would have slept this long: no real sleep
        if self.loop.now > HORIZON_S or timeout is None:     # None: no timer left, nothing will ever wake the loop
            raise RuntimeError(f"the virtual clock ran past {HORIZON_S:g} s or has no timer: the deadline never fired")
        return super().select(0)


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self):
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self.now = 0.0

    def time(self) -> float:
        return self.now


def _run(main):
    loop = _VirtualLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


async def _answer_at(loop, t: float, value="answer", steps=3):
    await asyncio.sleep(t - loop.time())      # the server answers at t...
    for _ in range(steps):                    # ...and the answer is read in a few steps (status, headers, body)
        await asyncio.sleep(0)
    return value


def _freeze(loop, at: float, until: float) -> None:
    """This process does not run from `at` to `until` (the clock jumps inside one callback)."""
    def frozen():
        loop.now = until
    loop.call_at(at, frozen)


def _outcome(timeout_s: float, answer_at: float | None, freezes=(), steps=3):
    """(what `within` gave: the answer or "timeout", the clock when it gave it)."""
    async def main(loop):
        for at, until in freezes:
            _freeze(loop, at, until)
        work = _answer_at(loop, answer_at, steps=steps) if answer_at is not None else asyncio.Event().wait()
        try:
            value = await within(work, timeout_s)
        except TimeoutError:
            value = "timeout"
        return value, loop.time()
    return _run(main)


def test_an_answer_before_the_deadline_is_returned_when_it_comes():
    assert _outcome(1.0, 0.5) == ("answer", 0.5)


def test_no_answer_times_out_at_the_deadline_exactly():
    assert _outcome(1.0, None) == ("timeout", 1.0)
    assert _outcome(2.5, None) == ("timeout", 2.5)


def test_an_answer_after_the_deadline_is_a_timeout_at_the_deadline():
    assert _outcome(1.0, 1.5) == ("timeout", 1.0)


def test_late_s_is_the_boundary_of_a_late_timer_under_at_and_over():
    """Frozen from 0.9 s to past the 1 s deadline; the server had answered at 0.95 s (the answer waits in the
    socket). A timer LATE_S late or more gives the time back and the answer is read; any less late, it is a
    timeout at the moment the timer ran."""
    step = 2.0 ** -10
    for late, kept in ((D.LATE_S - step, False), (D.LATE_S, True), (D.LATE_S + step, True)):
        until = 1.0 + late
        assert until - 1.0 == late                     # exact on this clock
        value, at = _outcome(1.0, 0.95, freezes=[(0.9, until)])
        if kept:
            assert (value, at) == ("answer", until), late
        else:
            assert (value, at) == ("timeout", until), late


def test_the_time_given_back_is_the_lateness_and_then_it_times_out():
    # due 1.0, frozen to 1.5: 0.5 s late, given back: due again at 1.5 + 0.5 = 2.0, and no answer by then
    assert _outcome(1.0, None, freezes=[(0.9, 1.5)]) == ("timeout", 2.0)
    # the answer at 1.75 (after the freeze) is within the time given back
    assert _outcome(1.0, 1.75, freezes=[(0.9, 1.5)]) == ("answer", 1.75)
    # an answer after the given-back deadline (2.0) is a timeout at 2.0
    assert _outcome(1.0, 2.25, freezes=[(0.9, 1.5)]) == ("timeout", 2.0)


def test_the_time_given_back_is_at_most_the_timeout_in_all():
    # 3 s late on a 1 s deadline: 1 s given back (min(3, 1)), due at 4 + 1 = 5
    assert _outcome(1.0, None, freezes=[(0.9, 4.0)]) == ("timeout", 5.0)
    # two freezes: 0.75 s late (given back 0.75: due 1.75 + 0.75 = 2.5), then 0.5 s late at 3.0: only
    # 1.0 - 0.75 = 0.25 s is left to give (due 3.0 + 0.25 = 3.25)
    assert _outcome(1.0, None, freezes=[(0.9, 1.75), (2.4, 3.0)]) == ("timeout", 3.25)
    # a third freeze, once the whole timeout was given back: the timer that runs late times out there
    assert _outcome(1.0, None, freezes=[(0.9, 1.75), (2.4, 3.0), (3.2, 4.0)]) == ("timeout", 4.0)
    # with exactly the timeout given back in one piece (late == timeout), a second late timer times out
    assert _outcome(1.0, None, freezes=[(0.9, 2.0), (2.5, 3.5)]) == ("timeout", 3.5)
    # ...at once: not even a turn of the loop more for an answer that arrived meanwhile (`given_back < timeout_s`)
    assert _outcome(1.0, 3.2, freezes=[(0.9, 2.0), (2.5, 3.5)], steps=0) == ("timeout", 3.5)


def test_work_done_when_the_late_timer_runs_is_returned_not_given_more_time():
    # frozen to 1.5 with the answer at 0.95: the answer is read at 1.5 (the task finishes in the same turn)
    assert _outcome(1.0, 0.95, freezes=[(0.9, 1.5)]) == ("answer", 1.5)


def test_a_failure_of_abandoned_work_is_retrieved_and_a_cancelled_one_left():
    """_consume: the exception of work abandoned at its deadline is read (asyncio logs 'never retrieved'
    otherwise); a cancelled task has no exception to read."""
    errors = []

    async def main(loop):
        loop.set_exception_handler(lambda _loop, context: errors.append(context.get("message")))

        async def fails_late():
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise ValueError("late failure") from None

        with pytest.raises(TimeoutError):
            await within(fails_late(), 1.0)
        for _ in range(5):
            await asyncio.sleep(0)
        return loop.time()

    assert _run(main) == 1.0
    import gc
    gc.collect()
    assert errors == []

    cancelled = asyncio.Future(loop=_VirtualLoop())
    cancelled.cancel()
    D._consume(cancelled)                  # no CancelledError raised
    failed = asyncio.Future(loop=_VirtualLoop())
    failed.set_exception(ValueError("x"))
    D._consume(failed)
    assert failed._log_traceback is False  # retrieved


def test_cancelling_the_caller_leaves_no_error_behind():
    """The work cancelled with its caller, and failing as it unwinds: its exception is retrieved (_consume), and
    no callback of `within` is left to fail."""
    errors = []

    async def main(loop):
        loop.set_exception_handler(lambda _loop, context: errors.append(context.get("message")))

        async def fails_when_cancelled():
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise ValueError("failed while unwinding") from None

        caller = asyncio.ensure_future(within(fails_when_cancelled(), 1.0))
        await asyncio.sleep(0.5)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        for _ in range(5):
            await asyncio.sleep(0)
        return loop.time()

    assert _run(main) == 0.5
    import gc
    gc.collect()
    assert errors == []
