"""Values of load's server view, servewatch/load/server_view.py (issue 50): each sample's time (its answer's
arrival) and scrape time, the totals of its engines, the queue mean since the previous good sample, the failure
kinds of a scrape (an exception's kind, a timeout, a body no dialect reads), which samples keep their engines, the
ticks of `run` on a virtual clock (at most two scrapes in flight, the rest counted skipped), and the summary. The
scrapes read real vLLM captures (tests/fixtures/metrics); the client is a stand-in."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from servewatch.engine.served import delta_mean, run_means
from servewatch.engine.state import Counters, EngineState
from servewatch.load import server_view as V
from servewatch.load.server_view import ServerSample, ServerView
from servewatch.errors import TooManySeries
from servewatch.exposition.parser import DEFAULT_MAX_SERIES
from servewatch.sources.scrape import ScrapeBounds

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "metrics"
T0 = (FIXTURES / "vllm_kv_pressure_t0.prom").read_bytes()
T1 = (FIXTURES / "vllm_kv_pressure_t1.prom").read_bytes()


def test_constants():
    assert V.MAX_IN_FLIGHT == 2 and V.MAX_SCRAPE_BYTES == ScrapeBounds().max_bytes
    assert V._r(None) is None and V._r(0.123456789) == 0.1234568
    view = ServerView(None, lambda: 0.0, None, 0.5)
    assert view._timeout == 5.0 and view.bounds == ScrapeBounds() and view.interval_s == 0.5
    assert ServerView(None, lambda: 0.0, None, 2.0)._timeout == 8.0           # four intervals
    assert ServerView(None, lambda: 0.0, None, 2.0, timeout_s=1.5)._timeout == 1.5


def test_ingest_stamps_the_arrival_and_aggregates():
    view = ServerView(None, lambda: 0.0, None, 0.5)
    a = view.ingest(T0, 1.0, 1.25)
    assert (a.t, a.scrape_s, a.error, a.dialect, a.naming) == (1.25, 0.25, None, "vllm", a.engines[0].naming)
    assert (a.running, a.waiting) == (7, 9) and a.kv_usage == pytest.approx(0.8889, abs=1e-4)
    assert a.queue_mean_s is None                                        # no previous sample
    b = view.ingest(T1, 2.0, 2.5)
    assert (b.t, b.scrape_s, b.running, b.waiting, b.kv_usage) == (2.5, 0.5, 7, 4, 1.0)
    assert b.queue_mean_s == delta_mean(list(b.engines), list(a.engines), "queue")
    assert b.queue_mean_s is not None and b.queue_mean_s > 0
    assert b.preemptions == 40.0
    assert b.to_json() == {"t": 2.5, "scrape_s": 0.5, "error": None, "dialect": "vllm", "generation": b.naming,
                           "running": 7, "waiting": 4, "kv_usage": 1.0, "preemptions": b.preemptions,
                           "queue_mean_s": round(b.queue_mean_s, 7)}
    assert view.first_good is a and view.last_good is b and view._prev_good is b


def test_a_body_no_dialect_reads_is_an_error_sample():
    view = ServerView(None, lambda: 0.0, None, 0.5)
    bad = view.ingest(b"foo_total 1\n", 3.0, 3.5)
    assert (bad.t, bad.scrape_s, bad.error, bad.running, bad.engines) == (3.5, 0.5, "no_engine_metrics", None, ())
    assert view.first_good is None and view.samples == [bad]
    assert view.ingest(T0, 4.0, 4.1, status=503).error == "http_503"
    assert view.ingest(T0, 4.0, 4.1, status=200).error is None


def test_only_the_first_and_the_latest_good_samples_keep_their_engines():
    view = ServerView(None, lambda: 0.0, None, 0.5)
    a, b = view.ingest(T0, 1.0, 1.1), view.ingest(T1, 2.0, 2.1)
    view.add_error(2.5, "timeout")
    c = view.ingest(T0, 3.0, 3.1)
    assert a.engines != () and b.engines == () and c.engines != ()
    assert view.first_good is a and view.last_good is c
    assert [s.error for s in view.samples] == [None, None, "timeout", None]
    err = view.samples[2]
    assert (err.t, err.scrape_s) == (2.5, None)


def test_aggregate_sums_over_engines():
    engines = (EngineState("vllm", "v", {"engine": "0"}, running=2, waiting=1, kv_usage=0.5,
                           counters=Counters(preemptions=0.1)),
               EngineState("vllm", "v", {"engine": "1"}, running=3, waiting=None, kv_usage=0.75,
                           counters=Counters(preemptions=0.2)),
               EngineState("vllm", "v", {"engine": "2"}, counters=Counters(preemptions=None)))
    s = V.aggregate(ServerSample(1.0, 0.1, engines=engines))
    assert (s.running, s.waiting, s.kv_usage) == (5, 1, 0.75)
    assert s.preemptions == 0.30000000000000004                         # fsum of 0.1 and 0.2 (a None left out)
    assert V._sum([0.1] * 10) == 1.0                                    # fsum: exact (sum() gives 0.9999999999999999)
    assert V._sum([None]) is None and V._sum([]) is None


def test_the_summary():
    view = ServerView(None, lambda: 0.0, None, 0.5)
    empty = view.summary()
    assert empty == {"samples": 0, "errors": {}, "skipped_ticks": 0, "interval_s": 0.5, "dialect": None,
                     "generation": None, "max_running": None, "max_waiting": None, "max_kv": None,
                     "slot_limit": None, "preemptions": None, "means": {}}
    a = view.ingest(T0, 1.0, 1.1)
    one = view.summary()
    assert one["means"] == {} and one["samples"] == 1 and one["max_waiting"] == 9     # one scrape: no means
    view.add_error(1.5, "timeout")
    view.add_error(1.7, "timeout")
    view.add_error(1.8, "connect")
    first_engines = list(a.engines)
    b = view.ingest(T1, 2.0, 2.1)
    view.skipped = 3
    s = view.summary()
    assert s["samples"] == 5 and s["errors"] == {"timeout": 2, "connect": 1} and s["skipped_ticks"] == 3
    assert (s["dialect"], s["generation"]) == ("vllm", b.naming)
    assert (s["max_running"], s["max_waiting"], s["max_kv"]) == (7, 9, 1.0)
    assert s["means"] == run_means(first_engines, list(b.engines))
    assert s["means"]["queue"] is not None
    assert s["slot_limit"] is None and s["preemptions"] == 8.0            # 40 - 32 preemptions between the captures
    assert s["means"]["finished"] == 5.0 and s["means"]["tokens_out"] == 1070.0


class _Response:
    def __init__(self, body, status=200, gate=None):
        self.body, self.status, self.gate = body, status, gate
        self.asked_max = None
        self.released = 0

    async def read_all(self, max_bytes, check=None):
        self.asked_max, self.check = max_bytes, check
        if self.gate is not None:
            await self.gate.wait()
        return self.body

    def release(self):
        self.released += 1


class _Client:
    def __init__(self, answer):
        self.answer = answer
        self.asked = []

    async def request(self, method, path):
        self.asked.append((method, path))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class _Clock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


def test_scrape_once_reads_the_answer_and_names_failures():
    clock = _Clock()
    response = _Response(T0)
    client = _Client(response)
    view = ServerView(client, clock, None, 1.0, bounds=ScrapeBounds(max_bytes=2 ** 22))
    sample = asyncio.run(view.scrape_once())
    assert client.asked == [("GET", "/metrics")] and response.asked_max == 2 ** 22 and response.released == 1
    with pytest.raises(TooManySeries):             # the series bound goes with the read, looked at as the body arrives
        response.check(b"up 1\n" * (DEFAULT_MAX_SERIES + 1))
    response.check(b"up 1\n" * DEFAULT_MAX_SERIES)
    assert sample.error is None and sample.running == 7 and sample.t == 100.0 and sample.scrape_s == 0.0
    refused = ServerView(_Client(ConnectionRefusedError("no")), clock, None, 1.0)
    assert asyncio.run(refused.scrape_once()).error == "connect"
    status = ServerView(_Client(_Response(T0, status=500)), clock, None, 1.0)
    assert asyncio.run(status.scrape_once()).error == "http_500"


def test_a_scrape_past_its_timeout_is_a_timeout_sample():
    gate = asyncio.Event()                      # never set: the body never comes
    response = _Response(T0, gate=gate)
    view = ServerView(_Client(response), _Clock(7.0), None, 1.0, timeout_s=0.05)
    sample = asyncio.run(view.scrape_once())
    assert (sample.error, sample.t, sample.scrape_s) == ("timeout", 7.0, None)
    assert response.released == 1                                      # released on the way out


def test_run_ticks_every_interval_and_skips_beyond_two_in_flight():
    clock = _Clock(0.0)
    slept = []
    gates = []

    class Slow(_Client):
        async def request(self, method, path):
            gate = asyncio.Event()
            gates.append(gate)
            return _Response(T0, gate=gate)

    async def go():
        stop = asyncio.Event()

        async def sleep(delay):
            slept.append(delay)
            clock.t += delay
            if clock.t >= 5.0:
                stop.set()
            await asyncio.sleep(0)

        view = ServerView(Slow(None), clock, sleep, 1.0)
        task = asyncio.create_task(view.run(stop))
        deadline = asyncio.get_running_loop().time() + 10
        while not stop.is_set() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0)
        for gate in gates:
            gate.set()
        await asyncio.wait_for(task, 10)
        return view

    view = asyncio.run(go())
    assert slept == [1.0] * 5                  # ticks at 1, 2, 3, 4; the fifth sleep reaches 5.0 and stops
    assert len(gates) == 2 and view.skipped == 2
    assert len(view.samples) == 2 and all(s.error is None for s in view.samples)


def test_run_without_a_sleep_waits_on_stop():
    clock = _Clock(0.0)

    async def go():
        stop = asyncio.Event()
        stop.set()
        view = ServerView(_Client(_Response(T0)), clock, None, 0.01)
        await asyncio.wait_for(view.run(stop), 5)
        late = ServerView(_Client(_Response(T0)), lambda: 50.0, None, 0.01)
        stop2 = asyncio.Event()
        task = asyncio.create_task(late.run(stop2))
        deadline = asyncio.get_running_loop().time() + 10
        while not late.samples and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.001)          # polls the condition, bounded by the deadline
        stop2.set()
        await asyncio.wait_for(task, 5)
        return view, late

    view, late = asyncio.run(asyncio.wait_for(go(), 20))
    assert view.samples == [] and view.skipped == 0
    assert late.samples[0].running == 7


def test_the_survivors_of_the_first_run():
    from servewatch.dialects import read_scrape as default_read

    seen = []

    def spy(text, max_bytes):
        seen.append(max_bytes)
        return default_read(text, max_bytes=max_bytes)

    view = ServerView(None, lambda: 0.0, None, 0.5, read_scrape=spy, bounds=ScrapeBounds(max_bytes=2 ** 21))
    sample = view.ingest(T0, 2.12345678, 2.12345678)
    assert seen == [2 ** 21] and sample.running == 7                  # the view's own reader and bounds
    assert sample.to_json()["t"] == 2.123457                            # to a microsecond
    small = ServerView(None, lambda: 0.0, None, 0.5, bounds=ScrapeBounds(max_bytes=100))
    assert small.ingest(T0, 1.0, 1.0).error == "too_large"
    clock = _Clock(42.0)
    refused = ServerView(_Client(ConnectionRefusedError("no")), clock, None, 1.0)
    assert asyncio.run(refused.scrape_once()).t == 42.0


def test_a_late_wake_scrapes_at_once_and_every_scrape_is_waited_for():
    clock = _Clock(0.0)
    slept = []
    gates = []

    class Slow(_Client):
        async def request(self, method, path):
            gate = asyncio.Event()
            gates.append(gate)
            return _Response(T0, gate=gate)

    async def go():
        stop = asyncio.Event()

        async def sleep(delay):
            slept.append(delay)
            clock.t += delay + 1.0                    # each wake a second late
            if clock.t >= 5.0:
                stop.set()
                for gate in gates:
                    gate.set()                        # the scrapes can end now, but have not run yet
                return
            await asyncio.sleep(0)

        view = ServerView(Slow(None), clock, sleep, 1.0)
        await view.run(stop)                          # in this task: nothing else ran since it returned
        return view, len(view.samples) - len(view._in_flight)

    view, at_return = asyncio.run(asyncio.wait_for(go(), 10))
    # ticks due at 1 (woke at 2), 2 (due now: no sleep), 3 (woke at 4), 4 (due now), then the wake at 6 stops it
    assert slept == [1.0, 1.0, 1.0]
    assert len(gates) == 2 and view.skipped == 2
    assert at_return == 2                          # the scrapes in flight were waited for before run returned


def test_finished_scrapes_leave_room_for_the_next():
    clock = _Clock(0.0)

    async def go():
        stop = asyncio.Event()

        async def sleep(delay):
            clock.t += delay
            if clock.t >= 5.0:
                stop.set()
            for _ in range(5):
                await asyncio.sleep(0)               # the scrape started at the last tick ends meanwhile

        view = ServerView(_Client(_Response(T0)), clock, sleep, 1.0)
        await asyncio.wait_for(view.run(stop), 10)
        return view

    view = asyncio.run(go())
    # each scrape starts at its tick and is stamped when it ends, during the next sleep (the clock moved on)
    assert view.skipped == 0 and [s.t for s in view.samples] == [2.0, 3.0, 4.0, 5.0]
    assert not view._in_flight
