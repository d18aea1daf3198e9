"""Values of servewatch/engine/served.py (issue 50: what `load`'s server view and `diagnose` report of a stretch of
scrapes, found by the mutation rule): per-request means from the deltas of the histograms and counters between the
first and the last scrape, over the engines in both (one that went backwards left out); running and waiting summed,
KV the fullest, each at its peak; the slot limit summed over the newest scrape. Each figure computed by hand."""

from __future__ import annotations

import pytest

from servewatch.engine.served import MEAN_KINDS, Served, counter_delta, delta_mean, run_means, served, totals
from servewatch.engine.state import Counters, EngineState, Histogram


def h(count, total):
    return Histogram(edges=(1.0,), cumulative=(count,), count=count, sum=total)


def eng(rank, *, running=None, waiting=None, kv=None, slots=None, hist=None, finished=None, prompt=None,
        generated=None, preempt=None):
    return EngineState("vllm", "vllm-test", {"engine": rank}, running=running, waiting=waiting, kv_usage=kv,
                       slot_limit=slots, histograms=hist or {},
                       counters=Counters(prompt_tokens=prompt, generation_tokens=generated, preemptions=preempt,
                                         finished=finished or {}))


def test_totals_of_one_scrape():
    assert totals([eng("0", running=2, waiting=1, kv=0.25), eng("1", running=3, kv=0.5), eng("2")]) == (5.0, 1.0, 0.5)
    assert totals([eng("0")]) == (None, None, None)
    # summed exactly (fsum): 0.1 + 0.2 + 0.3 is 0.6, not 0.6000000000000001
    assert totals([eng("0", running=0.1), eng("1", running=0.2), eng("2", running=0.3)])[0] == 0.6


def test_a_mean_over_engines_in_both_scrapes():
    old = [eng("0", hist={"ttft": h(10, 5.0)}), eng("1", hist={"ttft": h(4, 2.0)}), eng("2", hist={"ttft": h(1, 1.0)})]
    new = [eng("0", hist={"ttft": h(14, 7.0)}),          # +4 observations, +2.0 s
           eng("1", hist={"ttft": h(10, 8.0)}),          # +6, +6.0
           eng("2", hist={"ttft": h(0, 0.0)}),           # went backwards (restarted): left out
           eng("3", hist={"ttft": h(50, 50.0)})]         # not in the first scrape: left out
    assert delta_mean(new, old, "ttft") == 8.0 / 10
    assert delta_mean(new, old, "itl") is None                               # no such histogram
    assert delta_mean(old, old, "ttft") is None                              # nothing observed between
    same_count = [eng("0", hist={"ttft": h(10, 6.0)})]                       # a count unchanged is no reset
    assert delta_mean(same_count, old[:1], "ttft") is None


def test_a_counter_delta_over_engines_in_both():
    get = lambda e: e.counters.prompt_tokens                                # noqa: E731
    old = [eng("0", prompt=100.0), eng("1", prompt=50.0), eng("2", prompt=10.0), eng("4", prompt=None)]
    new = [eng("0", prompt=130.0), eng("1", prompt=50.0), eng("2", prompt=5.0), eng("3", prompt=99.0),
           eng("4", prompt=7.0)]
    # +30 and +0; engine 2 went backwards, 3 is new, 4 said nothing before
    assert counter_delta(new, old, get) == 30.0
    assert counter_delta(new[2:], old, get) is None                         # no engine gives a delta
    assert counter_delta(new[1:2], old, get) == 0.0                          # unchanged: 0, not None


def test_run_means():
    first = [eng("0", hist={k: h(0, 0.0) for k in MEAN_KINDS}, finished={"stop": 1.0, "length": 1.0},
                 prompt=20.0, generated=40.0)]
    last = [eng("0", hist={k: h(4, 2.0) for k in MEAN_KINDS}, finished={"stop": 3.0, "length": 3.0},
                prompt=100.0, generated=240.0)]
    means = run_means(first, last)
    assert {k: means[k] for k in MEAN_KINDS} == {k: 0.5 for k in MEAN_KINDS}
    # 4 finished between (2 + 2): 80 prompt tokens and 200 generated over 4
    assert (means["finished"], means["tokens_in"], means["tokens_out"]) == (4.0, 20.0, 50.0)
    none_finished = run_means(first, first)
    assert (none_finished["finished"], none_finished["tokens_in"], none_finished["tokens_out"]) == (0.0, None, None)
    unknown = run_means([eng("0")], [eng("0")])
    assert (unknown["finished"], unknown["tokens_in"], unknown["tokens_out"]) == (None, None, None)


def test_served_over_a_stretch():
    first = [eng("0", finished={"length": 2.0}, generated=10.0, preempt=1.0, prompt=5.0)]
    last = [eng("0", slots=64, finished={"length": 5.0, "stop": 1.0}, generated=70.0, preempt=4.0, prompt=35.0),
            eng("1", slots=32)]
    rows = [(1.0, 0.0, 0.25), (None, 3.0, None), (4.0, 2.0, 0.75)]
    s = served(first, last, rows, scrapes=3)
    assert (s.scrapes, s.max_running, s.max_waiting, s.max_kv, s.slot_limit) == (3, 4.0, 3.0, 0.75, 96.0)
    assert (s.preemptions, s.tokens_moved, s.length_finished) == (3.0, True, 3.0)
    assert s.means["finished"] == 4.0 and s.means["tokens_out"] == 15.0 and s.means["tokens_in"] == 7.5
    still = served(first, [eng("0", finished={"length": 2.0}, generated=10.0)], [], scrapes=2)
    assert (still.tokens_moved, still.length_finished, still.max_running, still.slot_limit) == (False, 0.0, None, None)
    one = served(first, first, rows[:1], scrapes=1)
    assert (one.means, one.preemptions, one.tokens_moved, one.length_finished) == ({}, None, None, None)
    assert served(None, None, [], 0) == Served()
    no_counter = served([eng("0")], [eng("0")], [], scrapes=2)
    assert (no_counter.tokens_moved, no_counter.length_finished) == (None, None)
    assert served(first, last, rows, scrapes=2).means != {}                  # two scrapes are a stretch


@pytest.mark.parametrize("kind", MEAN_KINDS)
def test_each_mean_kind_is_read(kind):
    first, last = [eng("0", hist={kind: h(1, 1.0)})], [eng("0", hist={kind: h(3, 2.0)})]
    means = run_means(first, last)
    assert means[kind] == 0.5 and all(means[k] is None for k in MEAN_KINDS if k != kind)


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

def test_engines_left_out_before_one_counted():
    get = lambda e: e.counters.prompt_tokens                                # noqa: E731
    old = [eng("0", prompt=100.0), eng("2", prompt=10.0), eng("4", prompt=None)]
    new = [eng("3", prompt=99.0), eng("2", prompt=5.0), eng("4", prompt=7.0), eng("0", prompt=130.0)]
    assert counter_delta(new, old, get) == 30.0                              # the three before it passed over
    old_h = [eng("0", hist={"ttft": h(10, 5.0)}), eng("2", hist={"ttft": h(1, 1.0)})]
    new_h = [eng("3", hist={"ttft": h(5, 5.0)}), eng("2", hist={"ttft": h(0, 0.0)}), eng("1"),
             eng("0", hist={"ttft": h(12, 6.5)})]
    assert delta_mean(new_h, old_h, "ttft") == 0.75                          # (6.5 - 5.0) / (12 - 10)


def test_one_observation_is_a_mean_and_one_token_a_move():
    assert delta_mean([eng("0", hist={"e2e": h(3, 4.5)})], [eng("0", hist={"e2e": h(2, 2.0)})], "e2e") == 2.5
    s = served([eng("0", generated=10.0)], [eng("0", generated=11.0)], [], scrapes=2)
    assert s.tokens_moved is True
