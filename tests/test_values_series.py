"""Value tests of detectors/series.py and detectors/probes.py (issue 40): the helpers every detector's figures go
through — the words of an engine key and of a number, the scrape cadence, summed progress counters, the cache
of one computation per window, when a probe was sent and the run of misses that ends a window."""

from __future__ import annotations

from servewatch.detectors import probes as P
from servewatch.detectors import series as S
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import DEADLINE, FAILED, SERVED, UNAVAILABLE, MetricsSample, ProbeSample
from servewatch.timeline.window import Window

T0 = 1000.0


def state(steps=None, gen=None, prompt=None, running=None, waiting=None):
    return EngineState("vllm", "vllm-test", {"engine": "0"}, running=running, waiting=waiting,
                       counters=Counters(prompt_tokens=prompt, generation_tokens=gen, steps=steps))


def test_num():
    assert S.num(None) == "n/a"
    assert S.num(3.0) == "3"
    assert S.num(7) == "7"
    assert S.num(2.5) == "2.5"
    assert S.num(1234.5678) == "1.23e+03"
    assert S.num(0.012345) == "0.0123"
    assert S.num(-2.0) == "-2"


def test_where_and_engine_words():
    assert S.where("") == ""
    assert S.where("engine=1") == " on engine 1"
    assert S.engine_words("") == "the engine"
    assert S.engine_words("engine=0") == "engine 0"
    assert S.engine_words("dp_rank=1,tp_rank=0") == "DP rank 1, TP rank 0"
    assert S.engine_words("pp_rank=2,some_label=x") == "PP rank 2, some label x"
    assert S.engine_words("dp_rank=0,engine_type=unified,moe_ep_rank=3") == "the unified engine (DP rank 0, EP rank 3)"
    assert S.engine_words("engine_type=prefill") == "the prefill engine"


def test_progress_and_totals():
    assert S.progress(state(steps=1.0, gen=2.0, prompt=3.0)) == (1.0, 2.0, 3.0)
    assert S.progress_totals([state(steps=1.0, gen=2.0), state(steps=10.0, prompt=5.0)]) == (11.0, 2.0, 5.0)
    assert S.progress_totals([]) == (0, 0, 0)
    assert S.progress_totals(iter([state(steps=1.0), state(steps=2.0)])) == (3.0, 0, 0)   # any iterable, read once
    assert S.has_progress_counters(state()) is False
    assert S.has_progress_counters(state(prompt=0.0)) is True
    assert S.has_progress_counters(state(steps=0.0)) is True
    assert S.has_progress_counters(state(gen=1.0)) is True


def test_admitted():
    assert S.admitted(state()) is False
    assert S.admitted(state(running=0.0, waiting=0.0)) is False
    assert S.admitted(state(running=0.5)) is True
    assert S.admitted(state(waiting=1.0)) is True
    assert S.admitted(state(running=-1.0, waiting=None)) is False


def points(times):
    return [(MetricsSample(T0 + t, "vllm", "vllm-test", (state(),)), state()) for t in times]


def test_cadence():
    assert S.cadence([]) is None
    assert S.cadence(points([0])) is None
    assert S.cadence(points([0, 1, 3])) == 1.5                     # median of 1 and 2
    assert S.cadence(points([0, 1, 2, 5])) == 1.0                  # median of 1, 1, 3
    assert S.cadence(points([0, 0, 2])) == 2.0                     # a repeated time is no gap
    # the most recent `last` gaps only: 20 gaps of 10 s then 16 of 1 s
    times = [10.0 * i for i in range(21)] + [200.0 + i for i in range(1, 17)]
    assert S.cadence(points(times)) == 1.0
    assert S.cadence(points(times), last=32) == 5.5                # 16 gaps of 10 s and 16 of 1 s: (1 + 10) / 2
    assert S.cadence(points([0, 5, 6]), last=1) == 1.0


def test_once_per_window():
    calls = []

    @S.once_per_window
    def compute(window, config):
        calls.append((window, config))
        return len(calls)

    a, b = Window(), Window()
    config = object()
    assert [compute(a, config), compute(a, config), compute(b, config), compute(a, config)] == [1, 1, 2, 3]
    assert compute(a, object()) == 4
    assert compute.__name__ == "compute"


# --- probes.py ----------------------------------------------------------------------------------------------

def probe(t, outcome=DEADLINE, latency=None, deadline=3.0):
    return ProbeSample(T0 + t, outcome, latency, deadline)


def test_asked_at():
    assert P.asked_at(probe(13.0)) == T0 + 10.0                     # no answer: the deadline it waited
    assert P.asked_at(probe(10.5, FAILED, latency=0.5)) == T0 + 10.0
    assert P.asked_at(probe(10.0, FAILED, latency=0.0)) == T0 + 10.0   # an answer at once: latency 0, not the deadline


def test_trailing_failures():
    served = probe(5.0, SERVED, latency=0.1)
    run = (probe(4.0), served, probe(9.0), probe(12.5, FAILED, latency=0.5))
    assert P.trailing_failures(run, after=None) == [probe(9.0), probe(12.5, FAILED, latency=0.5)]
    # asked at 6 and at 12: `after` 6 keeps both (asked at it counts), after 6.25 keeps the newest only
    assert P.trailing_failures(run, after=T0 + 6.0) == [probe(9.0), probe(12.5, FAILED, latency=0.5)]
    assert P.trailing_failures(run, after=T0 + 6.25) == [probe(12.5, FAILED, latency=0.5)]
    assert P.trailing_failures(run + (served,), after=None) == []
    assert P.trailing_failures((probe(4.0), probe(7.0, UNAVAILABLE)), after=None) == []
    assert P.trailing_failures((), after=None) == []


def test_cadence_reads_the_last_16_gaps_by_default():
    # the 17th gap from the end is 10 s; the last 16 are 8 of 1 s then 8 of 10 s: median (1 + 10) / 2 = 5.5
    gaps = [10.0] * 5 + [1.0] * 8 + [10.0] * 8
    times = [0.0]
    for g in gaps:
        times.append(times[-1] + g)
    assert S.cadence(points(times)) == 5.5
    assert S.cadence(points(times), last=17) == 10.0


def test_engine_words_splits_at_the_first_equals_sign():
    assert S.engine_words("engine=a=b") == "engine a=b"


def _shared(steps, gen, prompt, shared=True):
    return EngineState(dialect="sglang", naming="sglang-0.5.23", labels={},
                       counters=Counters(steps=steps, generation_tokens=gen, prompt_tokens=prompt,
                                         tokens_shared=shared))


def test_progress_of_an_engine_whose_tokens_are_the_models():
    assert S.progress(_shared(7.0, 100.0, 40.0)) == (7.0, None, None)           # its own steps only
    assert S.progress(_shared(None, 100.0, 40.0)) == (None, 100.0, 40.0)        # no steps: the tokens still tell
    assert S.progress(_shared(7.0, 100.0, 40.0, shared=False)) == (7.0, 100.0, 40.0)


def test_generated_total_counts_a_shared_count_once():
    # two DP ranks of one model (1,040 tokens seen by both) and an engine of its own (25 tokens): 1,065
    engines = [_shared(786.0, 1040.0, 492.0), _shared(129.0, 1040.0, 492.0), _shared(3.0, 25.0, 9.0, shared=False)]
    assert S.generated_total(engines) == 1065.0
    # two models whose shared counts differ are two counts: 1,040 + 7
    assert S.generated_total([_shared(1.0, 1040.0, 492.0), _shared(2.0, 7.0, 492.0)]) == 1047.0
    # the same generation count with another prompt count is another model's: 10 + 10
    assert S.generated_total([_shared(1.0, 10.0, 1.0), _shared(2.0, 10.0, 2.0)]) == 20.0
    # own counts add up even when equal: 10 + 10
    assert S.generated_total([_shared(1.0, 10.0, 1.0, shared=False), _shared(2.0, 10.0, 1.0, shared=False)]) == 20.0
    assert S.generated_total([_shared(1.0, None, 1.0)]) is None
    assert S.generated_total([_shared(1.0, None, 1.0), _shared(1.0, 0.0, 1.0)]) == 0.0
    assert S.generated_total([]) is None


def test_admitted_leaves_out_decode_requests_waiting_for_their_kv():
    from servewatch.engine.state import KvTransfer

    def state(running, waiting, for_kv):
        return EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=running, waiting=waiting,
                           kv_transfer=KvTransfer(role="decode", waiting_for_kv=for_kv))

    assert S.admitted(state(0, 2, 2.0)) is False          # every waiting request waits on the prefill's KV
    assert S.admitted(state(0, 3, 2.0)) is True           # one more waits for this engine: 3 - 2 = 1
    assert S.admitted(state(0, 2, 3.0)) is False          # more said waiting for KV than waiting: 0, not -1
    assert S.admitted(state(1, 2, 2.0)) is True           # one running
    assert S.admitted(state(0, 2, 0.0)) is True           # no request waits for KV
    assert S.admitted(state(0, 2, None)) is True          # not exported
    assert S.admitted(state(None, None, 1.0)) is False
    assert S.admitted(EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=0, waiting=0.5)) is True
    assert S.admitted(EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=0.5, waiting=0)) is True
