"""Values of the active probe (servewatch/sources/probe.py): its deadlines, its cadence, the backstop, the
confirmation of a miss, the urgent probe and its gap, progress proven by the counters, the cost line and the
classification of an answer — each on a hand-driven clock with the arithmetic beside it (issue 40). Boundaries
read the module's constants: just under, at, just over."""

from __future__ import annotations

import asyncio

import pytest

from servewatch.clock import VirtualClock
from servewatch.engine.state import Counters, EngineState
from servewatch.sources import completions
from servewatch.sources import probe as P
from servewatch.sources.probe import ProbeAnswer, ProbeSource, classify, progress_proven
from servewatch.timeline.ranks import Aim
from servewatch.timeline.samples import DEADLINE, FAILED, SERVED, UNAVAILABLE, MetricsSample, ProbeSample
from servewatch.timeline.window import Window

T0 = 1_800_000_000.0


class Attempt:
    def __init__(self, deadline_s, route):
        self.deadline_s, self.route = deadline_s, route
        self.result: ProbeAnswer | None = None
        self.cancelled = False

    def answer(self):
        return self.result

    def cancel(self):
        self.cancelled = True


class Prober:
    def __init__(self):
        self.attempts: list[Attempt] = []

    def __call__(self, deadline_s, route=None):
        self.attempts.append(Attempt(deadline_s, route))
        return self.attempts[-1]

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]


class Ring:
    def __init__(self, window=None):
        self.window_ = window or Window()
        self.asked: list[float] = []

    def window(self, since):
        self.asked.append(since)
        return self.window_


def poll(source):
    return asyncio.run(source.poll())


def make(**kw):
    clock, prober = VirtualClock(T0), Prober()
    said: list[str] = []
    source = ProbeSource(prober, clock, say=said.append, **kw)
    return source, clock, prober, said


def served(latency=0.05, at=None):
    return ProbeAnswer(SERVED, latency, 200, 1, at=at)


def test_defaults_and_refusals():
    source, *_ = make(deadline_s=10.0)
    assert (source.probe_interval_s, source.deadline_s, source.urgent_deadline_s, source.interval) == \
        (P.DEFAULT_PROBE_INTERVAL_S, 10.0, P.URGENT_DEADLINE_S, 1.0)
    assert make(deadline_s=2.0)[0].urgent_deadline_s == 2.0          # min(3, 2): never past the routine deadline
    assert make(deadline_s=4.0, urgent_deadline_s=3.5)[0].urgent_deadline_s == 3.5
    for kw in ({"probe_interval_s": 0.0}, {"deadline_s": 0.0}, {"check_s": 0.0}, {"probe_interval_s": -1.0}):
        with pytest.raises(ValueError, match="^probe interval, deadline and check cadence must be positive$"):
            make(**kw)
    make(probe_interval_s=0.001, deadline_s=0.001, check_s=0.001)              # just over zero is fine


def test_a_served_probe_becomes_one_sample_and_the_next_is_due_every_s_later():
    source, clock, prober, _ = make(probe_interval_s=30.0, deadline_s=10.0)
    assert poll(source) == []                                        # asked at T0, no answer yet
    assert [a.deadline_s for a in prober.attempts] == [10.0] and prober.last.route is None
    assert source.sent == 1
    clock.advance(0.5)
    prober.last.result = served(0.4, at=T0 + 0.4)
    # t: the answer's own time when it is earlier than the poll (min(T0 + 0.5, T0 + 0.4))
    assert poll(source) == [ProbeSample(t=T0 + 0.4, outcome=SERVED, latency_s=0.4, deadline_s=10.0, status=200,
                                        tokens=1)]
    clock.advance(29.499)                                            # 29.999 s after the ask: not due
    assert poll(source) == [] and source.sent == 1
    clock.advance(0.001)                                             # 30 s after: due
    assert poll(source) == [] and source.sent == 2
    prober.last.result = served(0.1, at=T0 + 40.0)                   # an `at` after the poll: the poll's time
    clock.advance(0.2)
    assert poll(source)[0].t == T0 + 30.2


def test_the_backstop_gives_up_at_twice_the_deadline_plus_one_look():
    source, clock, prober, _ = make(deadline_s=10.0, check_s=1.0)
    poll(source)
    backstop = 2 * 10.0 + 1.0                                         # 21 s after the ask
    clock.advance(backstop - 0.001)
    assert poll(source) == [] and not prober.last.cancelled
    clock.advance(0.001)
    [sample] = poll(source)
    assert prober.attempts[0].cancelled
    assert (sample.outcome, sample.latency_s, sample.deadline_s, sample.error) == (DEADLINE, pytest.approx(21.0),
                                                                                   10.0, "timeout")
    assert sample.t == T0 + 21.0


def test_a_miss_is_asked_again_at_once_once_per_run_of_misses():
    source, clock, prober, _ = make(probe_interval_s=30.0, deadline_s=10.0)
    poll(source)
    clock.advance(10.0)
    prober.last.result = ProbeAnswer(DEADLINE, 10.0, error="timeout")
    assert poll(source)[0].outcome == DEADLINE
    clock.advance(1.0)
    poll(source)                                                      # the confirmation, 11 s after the first ask
    assert (source.sent, source.confirms, prober.last.deadline_s) == (2, 1, 10.0)
    clock.advance(2.0)
    prober.last.result = ProbeAnswer(FAILED, 2.0, 503)
    assert poll(source)[0].outcome == FAILED
    clock.advance(1.0)
    assert poll(source) == [] and source.sent == 2                   # the run had its confirmation: wait the interval
    clock.advance(26.999)                                             # T0 + 40.999: 29.999 s after the confirmation
    poll(source)
    assert source.sent == 2
    clock.advance(0.001)                                              # T0 + 41: 30 s after it (asked at T0 + 11)
    poll(source)
    assert source.sent == 3
    prober.last.result = served()
    poll(source)
    clock.advance(30.0)
    poll(source)                                                      # routine
    clock.advance(10.0)
    prober.last.result = ProbeAnswer(FAILED, 0.1, 500)
    poll(source)
    poll(source)                                                      # a new run of misses: confirmed again at once
    assert (source.sent, source.confirms) == (5, 2)


def test_an_unavailable_probe_is_not_confirmed_and_is_said_once_per_error():
    source, clock, prober, said = make(probe_interval_s=30.0)
    poll(source)
    prober.last.result = ProbeAnswer(UNAVAILABLE, None, error="no_models", detail="no model listed")
    assert poll(source)[0].outcome == UNAVAILABLE
    assert poll(source) == [] and source.confirms == 0 and source.sent == 1
    assert said == ["probe unavailable: no model listed; no probe verdict until it answers"]
    clock.advance(30.0)
    poll(source)
    prober.last.result = ProbeAnswer(UNAVAILABLE, None, error="no_models", detail="no model listed")
    poll(source)
    assert len(said) == 1                                             # said once
    clock.advance(30.0)
    poll(source)
    prober.last.result = ProbeAnswer(UNAVAILABLE, None, error="connect", detail="")
    poll(source)
    assert len(said) == 1                                             # nothing to say without a detail
    clock.advance(30.0)
    poll(source)
    prober.last.result = served()
    poll(source)
    clock.advance(30.0)
    poll(source)
    prober.last.result = ProbeAnswer(UNAVAILABLE, None, error="no_models", detail="again")
    poll(source)
    assert said[-1] == "probe unavailable: again; no probe verdict until it answers" and len(said) == 2


def test_cost_line():
    source, clock, prober, _ = make(probe_interval_s=30.0, deadline_s=10.0)
    poll(source)
    clock.advance(59.0)
    assert source.cost_line() == ("1 one-token request(s) in 59 s; 0 skipped because the counters had moved; "
                                  "deadline 10 s")
    clock.advance(1.0)
    # 1 x 3600 / 60 = 60 an hour
    assert source.cost_line() == ("1 one-token request(s) in 60 s (60 an hour); 0 skipped because the counters had "
                                  "moved; deadline 10 s")
    source.urgent, source.confirms, source.skipped = 2, 1, 3
    clock.advance(30.0)
    # 1 x 3600 / 90 = 40 an hour
    assert source.cost_line() == ("1 one-token request(s) (2 asked at once: a rank looked stalled) (1 asked at once to "
                                  "confirm a probe that got no token) in 90 s (40 an hour); 3 skipped because the "
                                  "counters had moved; deadline 10 s")
    fresh = make()[0]
    assert fresh.cost_line().startswith("0 one-token request(s) in 0 s;")


# -- progress proven by the counters ------------------------------------------------------------------------------

def scrape(t, tokens):
    state = EngineState("vllm", "vllm-0.11", {"model_name": "m"}, counters=Counters(generation_tokens=tokens))
    return MetricsSample(t=t, dialect="vllm", naming="vllm-0.11", engines=(state,))


def probe_sample(t, tokens=1, outcome=SERVED):
    return ProbeSample(t=t, outcome=outcome, latency_s=0.1, deadline_s=10.0, tokens=tokens)


def test_progress_proven_is_more_tokens_than_the_probes_asked_for():
    metrics = (scrape(0.0, 100), scrape(10.0, 105), scrape(20.0, 107))
    # since 10: baseline the scrape at 10 (105), newest 107 -> 2 tokens
    assert progress_proven(Window(metrics=metrics), 10.0, 5.0)
    assert progress_proven(Window(metrics=metrics, probe=(probe_sample(12.0),)), 10.0, 5.0)      # 2 > 1
    assert not progress_proven(Window(metrics=metrics, probe=(probe_sample(12.0, tokens=2),)), 10.0, 5.0)  # 2 > 2: no
    # a probe answered up to a deadline before `since` counts (5.0 = 10 - 5); one before that does not
    assert not progress_proven(Window(metrics=metrics, probe=(probe_sample(5.0, 1), probe_sample(6.0, None))), 10.0, 5.0)
    assert progress_proven(Window(metrics=metrics, probe=(probe_sample(4.999, 5), probe_sample(6.0, None))), 10.0, 5.0)
    # a probe that was not served asked for nothing
    assert progress_proven(Window(metrics=metrics, probe=(probe_sample(12.0, 2, DEADLINE),)), 10.0, 5.0)
    # since 9.999: baseline the scrape at 0 (100) -> 7 tokens
    assert progress_proven(Window(metrics=metrics, probe=(probe_sample(12.0, 6),)), 9.999, 5.0)
    # no scrape at or before `since`, or none after it: nothing proven
    assert not progress_proven(Window(metrics=metrics), -0.001, 5.0)
    assert not progress_proven(Window(metrics=metrics), 20.0, 5.0)
    # counters that went down (a restart) or are unknown prove nothing
    assert not progress_proven(Window(metrics=(scrape(0.0, 100), scrape(10.0, 50))), 0.0, 5.0)
    assert not progress_proven(Window(metrics=(scrape(0.0, None), scrape(10.0, 50))), 0.0, 5.0)
    assert not progress_proven(Window(metrics=(scrape(0.0, 100), scrape(10.0, None))), 0.0, 5.0)
    assert not progress_proven(Window(metrics=(scrape(0.0, 100), scrape(10.0, 100))), 0.0, 5.0)


def test_a_due_probe_is_skipped_when_the_counters_moved_and_skips_count_once_per_interval():
    metrics = (scrape(T0 - 40.0, 100), scrape(T0 - 30.0, 100), scrape(T0, 150))
    ring = Ring(Window(metrics=metrics))
    source, clock, prober, _ = make(probe_interval_s=30.0, deadline_s=10.0)
    source.bind_timeline(ring)
    assert poll(source) == [] and source.sent == 0 and source.skipped == 1
    # the window read from now - every - deadline; progress judged since now - every (the scrape at T0 - 30)
    assert ring.asked == [T0 - 40.0]
    clock.advance(29.999)
    poll(source)
    assert source.skipped == 1
    # a newer scrape: since T0 (150) -> 200, proven again
    ring.window_ = Window(metrics=(*metrics, scrape(T0 + 30.0, 200)))
    clock.advance(0.001)
    poll(source)
    assert source.skipped == 2 and source.sent == 0


# -- the urgent probe ----------------------------------------------------------------------------------------------

def test_an_urgent_probe_preempts_a_routine_one_and_waits_its_gap():
    aim = Aim("1", (("X-data-parallel-rank", "1"),))
    onset = {"t": None}
    source, clock, prober, _ = make(probe_interval_s=30.0, deadline_s=10.0)
    source.bind_timeline(Ring(), lambda window: None if onset["t"] is None else (onset["t"], aim))
    poll(source)                                                      # routine, asked at T0
    clock.advance(2.0)
    onset["t"] = T0 + 1.0                                             # a stall seen 1 s after the routine ask
    assert poll(source) == []
    routine, urgent = prober.attempts
    assert routine.cancelled and source.preempted == 1 and source.urgent == 1
    assert (urgent.deadline_s, urgent.route) == (P.URGENT_DEADLINE_S, {"X-data-parallel-rank": "1"})
    clock.advance(P.URGENT_DEADLINE_S)
    urgent.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
    [sample] = poll(source)
    assert (sample.deadline_s, sample.engine, sample.t) == (3.0, "1", T0 + 5.0)
    # the confirmation goes to the same engine with the routine deadline
    poll(source)
    assert (prober.last.deadline_s, prober.last.route) == (10.0, {"X-data-parallel-rank": "1"})
    prober.last.result = served()
    poll(source)
    # a new stall after the last ask (T0 + 5), but within URGENT_GAP_S of the last urgent probe (asked at T0 + 2)
    onset["t"] = clock.now() + 0.5
    clock.advance(P.URGENT_GAP_S - 3.0 - 0.001)                       # now T0 + 11.999
    poll(source)
    assert source.urgent == 1
    clock.advance(0.001)                                              # T0 + 12 = the urgent ask + 10 s
    poll(source)
    assert source.urgent == 2 and prober.last.deadline_s == 3.0


def test_no_urgent_probe_for_a_stall_that_began_before_the_last_ask():
    aim = Aim("0", ())
    source, clock, prober, _ = make(probe_interval_s=30.0, deadline_s=10.0)
    source.bind_timeline(Ring(), lambda window: (T0, aim))
    poll(source)                                                      # nothing asked yet: urgent at once
    assert source.urgent == 1 and prober.last.deadline_s == 3.0
    prober.last.result = served()
    poll(source)
    clock.advance(P.URGENT_GAP_S + 1.0)
    poll(source)                                                      # the stall began at T0, the ask was at T0
    assert source.urgent == 1 and source.sent == 1
    # an urgent probe in flight is not preempted by another
    source2, clock2, prober2, _ = make()
    source2.bind_timeline(Ring(), lambda window: (clock2.now(), aim))
    poll(source2)
    clock2.advance(P.URGENT_GAP_S + 1.0)
    assert [s.outcome for s in poll(source2)] == [DEADLINE]         # the urgent deadline's backstop: 2 x 3 + 1
    assert source2.preempted == 0


def test_routine_probes_take_the_engines_in_turn():
    source, *_ = make()
    assert source._in_turn(None) is None
    assert source._in_turn(Window()) is None


# -- an answer as an outcome ---------------------------------------------------------------------------------------

def completion(status, elapsed=0.2, tokens=1, error=None, detail=""):
    return completions.Completion(status=status, elapsed_s=elapsed, tokens=tokens, error=error, detail=detail)


def test_classify():
    assert classify(completion(None, 10.0, None, completions.TIMEOUT), 10.0) == \
        ProbeAnswer(DEADLINE, 10.0, error="timeout", detail="no token within 10 s")
    assert classify(completion(200, tokens=1), 10.0) == ProbeAnswer(SERVED, 0.2, 200, 1)
    assert classify(completion(299, tokens=2), 10.0) == ProbeAnswer(SERVED, 0.2, 299, 2)
    assert classify(completion(200, tokens=None), 10.0) == ProbeAnswer(SERVED, 0.2, 200, None)
    assert classify(completion(200, tokens=0), 10.0) == ProbeAnswer(FAILED, 0.2, 200, 0, "no_token",
                                                                    "an answer without a token")
    assert classify(completion(200, error="bad_json", detail="d"), 10.0) == \
        ProbeAnswer(UNAVAILABLE, 0.2, 200, error="bad_json", detail="d")
    assert classify(completion(500, error="http_500", detail="d"), 10.0) == \
        ProbeAnswer(FAILED, 0.2, 500, error="http_500", detail="d")
    assert classify(completion(499, error="http_499", detail="d"), 10.0) == \
        ProbeAnswer(UNAVAILABLE, 0.2, 499, error="http_499", detail="d")
    assert classify(completion(300, error="http_300", detail="d"), 10.0).outcome == UNAVAILABLE
    assert classify(completion(199, error=None), 10.0).outcome == UNAVAILABLE
    assert classify(completion(None, error=completions.DISCONNECTED, detail="cut"), 10.0) == \
        ProbeAnswer(FAILED, 0.2, None, error=completions.DISCONNECTED, detail="cut")
    assert classify(completion(None, error=completions.CONNECT, detail="refused"), 10.0) == \
        ProbeAnswer(UNAVAILABLE, 0.2, None, error=completions.CONNECT, detail="")
    assert classify(completion(None, 2.5, None, completions.TIMEOUT), 2.5).detail == "no token within 2.5 s"


def test_a_task_attempt_answers_as_its_task_ended():
    async def main():
        async def ok():
            return served()

        async def boom():
            raise RuntimeError("x")

        async def forever():
            await asyncio.sleep(3600)

        done, failed, pending = (P._TaskAttempt(asyncio.ensure_future(f())) for f in (ok, boom, forever))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert done.answer() == served()
        assert failed.answer() == ProbeAnswer(UNAVAILABLE, None, error="RuntimeError")
        assert pending.answer() is None
        pending.cancel()
        await asyncio.sleep(0)
        assert pending.answer() == ProbeAnswer(UNAVAILABLE, None, error="cancelled")

    asyncio.run(main())


# -- the learned deadline ------------------------------------------------------------------------------------------

def test_the_deadline_is_learned_from_the_served_probes_between_floor_and_ceiling():
    source, clock, prober, _ = make(probe_interval_s=10.0)                     # deadline_s None: learned
    assert source.deadline_s == P.DEADLINE_CEILING_S == 10.0         # before any answer: the ceiling
    assert source.deadline_words() == "10 s (until the server has answered one; then learned from its answers)"
    assert source.urgent_deadline_s == min(P.URGENT_DEADLINE_S, P.DEADLINE_FLOOR_S)
    poll(source)
    assert prober.last.deadline_s == 10.0
    prober.last.result = served(0.05)
    poll(source)
    # 4 x 0.05 = 0.2 s, under the floor: 3 s
    assert (P.LEARN_FACTOR, P.DEADLINE_FLOOR_S) == (4.0, 3.0)
    assert source.deadline_s == 3.0
    assert source.deadline_words() == "3 s (learned: 4 x the slowest of the last 1 served, between 3 and 10 s)"
    for latency in (0.75, 0.7499, 2.0, 2.5001):
        clock.advance(10.0)
        poll(source)
        prober.last.result = served(latency)
        poll(source)
    # the slowest of the last 8 is 2.5001: 4 x 2.5001 = 10.0004, over the ceiling: 10
    assert source.deadline_s == 10.0
    source._served.clear()
    source._served.extend([0.75])
    assert source.deadline_s == 3.0                                   # 4 x 0.75 = 3: at the floor
    source._served.extend([0.7501])
    assert source.deadline_s == pytest.approx(3.0004)                 # just over the floor
    source._served.extend([2.5])
    assert source.deadline_s == 10.0                                  # 4 x 2.5 = 10: at the ceiling
    source._served.extend([2.4999])
    assert source.deadline_s == 10.0
    source._served.clear()
    source._served.extend([2.4999])
    assert source.deadline_s == pytest.approx(9.9996)                 # just under the ceiling


def test_the_learned_deadline_forgets_all_but_the_last_served():
    source, clock, prober, _ = make(probe_interval_s=10.0)
    assert P.LEARN_FROM == 8
    for latency in (2.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1):           # 8 served: the slowest 2.0 -> 8 s
        poll(source)
        prober.last.result = served(latency)
        poll(source)
        clock.advance(10.0)
    assert source.deadline_s == 8.0
    poll(source)
    prober.last.result = served(0.1)                                  # a 9th: 2.0 drops out -> 4 x 0.1, the floor
    poll(source)
    assert source.deadline_s == 3.0
    clock.advance(10.0)
    poll(source)
    prober.last.result = ProbeAnswer(SERVED, None, 200, 1)            # no latency: nothing learned
    poll(source)
    assert len(source._served) == 8 and source.deadline_s == 3.0


def test_a_fixed_deadline_is_said_as_given():
    source = make(deadline_s=2.5)[0]
    assert (source.deadline_s, source.deadline_words(), source.urgent_deadline_s) == (2.5, "2.5 s", 2.5)


# -- a miss while a process of the server was stopped ---------------------------------------------------------------

def process(t, status):
    from servewatch.timeline.samples import ProcessMember, ProcessSample
    return ProcessSample(t=t, root_pid=1, root_create_time=0.0, alive=True,
                         members=(ProcessMember(1, 0.0, "api", "api", "sleeping"),
                                  ProcessMember(2, 0.0, "engine_core", "VLLM::EngineCore", status)))


def test_a_miss_during_a_stop_is_asked_again_when_the_stop_ends():
    ring = Ring(Window(process=(process(T0 + 1.0, "stopped"),)))
    source, clock, prober, _ = make(probe_interval_s=10.0, deadline_s=3.0)
    source.bind_timeline(ring)
    poll(source)                                                      # asked at T0
    clock.advance(3.0)
    prober.last.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
    poll(source)                                                      # a miss; the process view: stopped since T0 + 1
    assert ring.asked[-1] == T0 - 1.0                                 # read from a second before the ask
    clock.advance(1.0)
    poll(source)                                                      # the confirmation goes out at once
    assert (source.confirms, source.sent) == (1, 2)
    clock.advance(3.0)
    prober.last.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
    poll(source)
    clock.advance(1.0)
    assert poll(source) == [] and source.sent == 2                   # still stopped: nothing asked
    ring.window_ = Window(process=(process(T0 + 1.0, "stopped"), process(clock.now(), "running")))
    poll(source)                                                      # the stop ended: asked at once
    assert (source.after_stop, source.sent, prober.last.deadline_s) == (1, 3, 3.0)
    assert source.cost_line().endswith("0 skipped because the counters had moved; deadline 3 s")
    assert "(1 asked at once when a stop that a miss coincided with ended)" in source.cost_line()


def test_stopped_since_and_now():
    stopped, traced, running = process(5.0, "stopped"), process(6.0, "tracing-stop"), process(7.0, "running")
    assert P._stopped_since(Window(process=(stopped,)), 5.0)
    assert not P._stopped_since(Window(process=(stopped,)), 5.001)
    assert P._stopped_since(Window(process=(running, traced)), 6.0)
    assert not P._stopped_since(Window(process=(running,)), 0.0)
    assert P._stopped_now(Window(process=(running, traced)))
    assert not P._stopped_now(Window(process=(traced, running)))
    assert not P._stopped_now(Window())


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

def test_routine_probes_take_each_data_parallel_engine_in_turn():
    from servewatch.timeline.samples import ProcessMember, ProcessSample
    members = tuple(ProcessMember(100 + i, 1.0, "engine_core", f"VLLM::EngineCore_DP{i}", "running") for i in range(3))
    window = Window(process=(ProcessSample(t=1.0, root_pid=1, root_create_time=0.0, alive=True, members=members),))
    source = make()[0]
    # turns 1, 2, 3, 4, 5: engines (turn - 1) mod 3 = 0, 1, 2, 0, 1
    assert [source._in_turn(window).engine for _ in range(5)] == ["0", "1", "2", "0", "1"]
    assert source._in_turn(window).headers == (("X-data-parallel-rank", "2"),)


def test_progress_proven_adds_every_engine_and_skips_one_without_a_baseline():
    def scrape_of(t, engine, tokens):
        state = EngineState("vllm", "vllm-0.11", {"model_name": "m", "engine": engine},
                            counters=Counters(generation_tokens=tokens))
        return MetricsSample(t=t, dialect="vllm", naming="vllm-0.11", engines=(state,))
    # engine 0 has no scrape after `since` (10): skipped; engine 1 moved 10 -> 20: proven
    skipped_first = (scrape_of(0.0, "0", 100), scrape_of(5.0, "1", 10), scrape_of(20.0, "1", 20))
    assert progress_proven(Window(metrics=skipped_first), 10.0, 5.0)
    # engines 0 and 1 moved 2 and 3 tokens: 5 > 4 probe tokens (either alone would not be)
    both = (scrape_of(0.0, "0", 100), scrape_of(0.0, "1", 10), scrape_of(20.0, "0", 102), scrape_of(20.0, "1", 13))
    assert progress_proven(Window(metrics=both, probe=(probe_sample(12.0, 4),)), 10.0, 5.0)


def test_stderr_say(capsys):
    P.stderr_say("watch")("probe unavailable: x")
    assert capsys.readouterr().err == "servewatch watch: probe unavailable: x\n"


def test_an_error_class_of_no_letters_is_said_once_too():
    source, clock, prober, said = make(probe_interval_s=10.0)
    for _ in range(2):
        poll(source)
        prober.last.result = ProbeAnswer(UNAVAILABLE, None, error="", detail="odd")
        poll(source)
        clock.advance(10.0)
    assert said == ["probe unavailable: odd; no probe verdict until it answers"]


def test_cancel_pending():
    source, clock, prober, _ = make()
    source.cancel_pending()                                           # nothing pending: nothing to do
    poll(source)
    assert source.pending is prober.last
    source.cancel_pending()
    assert prober.last.cancelled and source.pending is None
    source.cancel_pending()


def test_cost_line_per_hour_and_every_kind_asked_at_once():
    source, clock, prober, _ = make(probe_interval_s=10.0, deadline_s=3.0)
    poll(source)
    clock.advance(3600.0)
    source.sent, source.confirms, source.after_stop = 3600, 2, 1
    # 3,600 x 3,600 / 3,600 = 3600 an hour
    assert source.cost_line() == ("3600 one-token request(s) (2 asked at once to confirm a probe that got no token) "
                                  "(1 asked at once when a stop that a miss coincided with ended) in 3600 s "
                                  "(3600 an hour); 0 skipped because the counters had moved; deadline 3 s")
    source.preempted = 4
    assert "ended) (4 in flight given up for an urgent one: asked before a rank looked stalled) in 3600 s" in \
        source.cost_line()


def test_classify_statuses_at_their_bounds():
    assert classify(completion(300, error=None), 10.0).outcome == UNAVAILABLE        # 2xx is 200 to 299
    assert classify(completion(200, error=completions.DISCONNECTED, detail="cut"), 10.0) == \
        ProbeAnswer(FAILED, 0.2, 200, error=completions.DISCONNECTED, detail="cut")


def test_the_http_prober_asks_one_token_and_stamps_the_answer(monkeypatch):
    asked = []

    async def served_model(session, base, *, timeout_s):
        asked.append(("models", base, timeout_s))
        return completions.ModelLookup("tiny")

    async def complete(session, base, request, *, timeout_s, headers=None):
        asked.append(("complete", request, timeout_s, headers))
        return completions.Completion(status=200, elapsed_s=0.25, tokens=1)

    monkeypatch.setattr(completions, "served_model", served_model)
    monkeypatch.setattr(completions, "complete", complete)
    clock = VirtualClock(T0)
    prober = P.HttpProber(None, "http://x", clock)

    async def main():
        attempt = prober(1.5, route={"X-data-parallel-rank": "1"})
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return attempt.answer()
    answer = asyncio.run(main())
    assert answer == ProbeAnswer(SERVED, 0.25, 200, 1, at=T0)
    # the model looked up with at least 2 s (max(1.5, 2.0)); one token, greedy, not streamed, with the route
    assert asked == [("models", "http://x", 2.0),
                     ("complete", {"model": "tiny", "prompt": P.PROMPT, "max_tokens": 1, "temperature": 0,
                                   "stream": False}, 1.5, {"X-data-parallel-rank": "1"})]
    assert prober.model == "tiny"


def test_the_http_prober_without_a_model(monkeypatch):
    async def served_model(session, base, *, timeout_s):
        return completions.ModelLookup(None, error=None, detail="empty list")

    monkeypatch.setattr(completions, "served_model", served_model)
    answer = asyncio.run(P.HttpProber(None, "http://x", VirtualClock(T0))._outcome(3.0, {}))
    assert answer == ProbeAnswer(UNAVAILABLE, None, error="no_models", detail="empty list")


def test_a_long_exception_name_is_cut_to_40_characters():
    class AnExceptionWhoseNameIsLongerThanFortyCharacters(Exception):
        pass

    async def main():
        async def boom():
            raise AnExceptionWhoseNameIsLongerThanFortyCharacters()
        attempt = P._TaskAttempt(asyncio.ensure_future(boom()))
        await asyncio.sleep(0)
        return attempt.answer()
    assert asyncio.run(main()).error == "AnExceptionWhoseNameIsLongerThanFortyCharacters"[:40]


def test_the_urgent_probe_reads_the_last_minute_and_is_preempting_twice():
    aim = Aim("1", (("X-data-parallel-rank", "1"),))
    ring = Ring()
    windows = []

    def suspicion(window):
        windows.append(window)
        return (clock.now() - 0.5, aim)
    source, clock, prober, _ = make(probe_interval_s=30.0, deadline_s=10.0)
    source.bind_timeline(ring, suspicion)
    clock.advance(1.0)
    poll(source)                                      # urgent at once (nothing asked before)
    assert ring.asked[0] == T0 + 1.0 - 60.0 and windows[0] is ring.window_
    prober.last.result = served()
    poll(source)
    for _ in range(2):                                # a routine probe, then a stall seen: preempted, twice
        clock.advance(P.URGENT_GAP_S)
        source._asked = clock.now() - 30.0            # the routine one is due now
        source._last_urgent = clock.now()             # and the urgent gap not yet over
        poll(source)
        clock.advance(P.URGENT_GAP_S)
        poll(source)
        prober.last.result = served()
        poll(source)
    assert source.preempted == 2


def test_after_a_stop_one_probe_then_the_routine_and_its_miss_confirmed():
    ring = Ring(Window(process=(process(T0 + 1.0, "stopped"),)))
    source, clock, prober, _ = make(probe_interval_s=10.0, deadline_s=3.0)
    source.bind_timeline(ring)
    poll(source)
    clock.advance(3.0)
    prober.last.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
    poll(source)
    ring.window_ = Window(process=(process(T0 + 1.0, "stopped"), process(clock.now(), "running")))
    clock.advance(1.0)
    poll(source)                                      # the stop ended: asked at once (it stands for the confirmation)
    assert ring.asked[-1] == clock.now() - 5.0        # the process view of the last 5 s
    assert (source.after_stop, source.sent, source.confirms) == (1, 2, 0)
    clock.advance(3.0)
    prober.last.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
    poll(source)
    poll(source)                                      # its miss starts a run of its own: confirmed at once
    assert (source.sent, source.confirms, source.after_stop) == (3, 1, 1)
    prober.last.result = served()
    poll(source)
    clock.advance(1.0)
    assert poll(source) == [] and source.sent == 3    # nothing more until the interval


def test_a_routine_probe_is_aimed_at_the_engine_in_turn():
    from servewatch.timeline.samples import ProcessMember, ProcessSample
    members = tuple(ProcessMember(100 + i, 1.0, "engine_core", f"VLLM::EngineCore_DP{i}", "running") for i in range(2))
    ring = Ring(Window(process=(ProcessSample(t=T0, root_pid=1, root_create_time=0.0, alive=True, members=members),)))
    source, clock, prober, _ = make(probe_interval_s=10.0, deadline_s=3.0)
    source.bind_timeline(ring)
    poll(source)
    assert prober.last.route == {"X-data-parallel-rank": "0"}
    prober.last.result = served()
    [sample] = poll(source)
    assert sample.engine == "0"
    clock.advance(10.0)
    poll(source)
    assert prober.last.route == {"X-data-parallel-rank": "1"}


def test_after_stop_probes_are_counted_and_aimed_like_the_miss():
    from servewatch.timeline.samples import ProcessMember, ProcessSample

    def view(t, status):
        members = (ProcessMember(100, 1.0, "engine_core", "VLLM::EngineCore_DP0", status),
                   ProcessMember(101, 1.0, "engine_core", "VLLM::EngineCore_DP1", "running"))
        return ProcessSample(t=t, root_pid=1, root_create_time=0.0, alive=True, members=members)
    ring = Ring(Window(process=(view(T0, "stopped"),)))
    source, clock, prober, _ = make(probe_interval_s=10.0, deadline_s=3.0)
    source.bind_timeline(ring)
    for round_ in (1, 2):
        ring.window_ = Window(process=(view(clock.now(), "stopped"),))
        poll(source)                                    # routine, aimed at DP0 then DP1
        aimed = prober.last.route
        clock.advance(3.0)
        prober.last.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
        poll(source)                                    # missed while DP0 was stopped
        poll(source)                                    # the confirmation
        clock.advance(3.0)
        prober.last.result = ProbeAnswer(DEADLINE, 3.0, error="timeout")
        poll(source)
        ring.window_ = Window(process=(view(clock.now(), "running"),))
        clock.advance(1.0)
        poll(source)                                    # the stop ended: asked at once, at the same engine
        assert source.after_stop == round_ and prober.last.route == aimed
        prober.last.result = served()
        poll(source)
        clock.advance(10.0)


def test_a_served_probe_just_before_the_span_does_not_prove_progress_in_a_due_check():
    metrics = (scrape(T0 - 40.0, 100), scrape(T0 - 30.0, 100), scrape(T0, 101))
    # 1 token since T0 - 30, and a probe served at T0 - 35 (within a deadline, 10 s, before the span): its own token
    ring = Ring(Window(metrics=metrics, probe=(probe_sample(T0 - 35.0, 1),)))
    source, clock, prober, _ = make(probe_interval_s=30.0, deadline_s=10.0)
    source.bind_timeline(ring)
    poll(source)
    assert (source.sent, source.skipped) == (1, 0)
