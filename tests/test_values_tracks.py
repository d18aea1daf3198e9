"""Values of servewatch/timeline/tracks.py (issue 50 item 8: every detector's columns come from here): the engine key,
each column, the counter drops, and the split carried from one window to the next equal to the split made afresh
(new sample objects: nothing carried over), window after window, with errors, two engines, a model twin and a
restart. Each figure written by hand beside the assertion."""

from __future__ import annotations

import dataclasses

import pytest

from servewatch.engine.state import Counters, EngineState
from servewatch.timeline import tracks as tr
from servewatch.timeline.samples import MetricsSample


def _state(engine="0", steps=None, gen=None, prompt=None, pre=None, waiting=None, kv=None, model="m",
           finished=None, responses=None, shared=False, rb=None, rbc=None, answered=None):
    return EngineState(dialect="vllm", naming="vllm-0.32", labels={"model_name": model, "engine": engine},
                       waiting=waiting, kv_usage=kv,
                       counters=Counters(steps=steps, generation_tokens=gen, prompt_tokens=prompt, preemptions=pre,
                                         finished=finished or {}, responses=responses or {}, tokens_shared=shared,
                                         request_bytes=rb, request_bytes_count=rbc, answered=answered))


def _sample(t, *states, error=None):
    return MetricsSample(t=t, dialect="vllm", naming="vllm-0.32", engines=tuple(states), error=error)


def _fresh(samples):
    """The split of copies of the samples: no window was seen before with these objects."""
    copies = tuple(dataclasses.replace(s) for s in samples)
    return copies, tr._split(copies)


def _view(series):
    return {key: [(s.t, st.counters.steps, st.labels["engine"]) for s, st in points] for key, points in series.items()}


def test_the_engine_key_is_the_sorted_labels_without_the_model(monkeypatch):
    monkeypatch.setattr(tr, "_KEYS", {})                 # (keys made before are remembered: make them here)
    assert tr.engine_key({"model_name": "/models/x", "engine": "0", "dp": "1"}) == "dp=1,engine=0"
    assert tr.engine_key({"model_name": "m"}) == ""
    assert tr.engine_key({"tp_rank": "3"}) == "tp_rank=3"


def test_the_key_cache_is_cleared_when_full(monkeypatch):
    monkeypatch.setattr(tr, "_KEYS", {})
    for i in range(tr._KEYS_KEPT):
        tr.engine_key({"engine": str(i)})
    assert len(tr._KEYS) == 4096
    assert tr.engine_key({"engine": "new"}) == "engine=new"
    assert len(tr._KEYS) == 1


def test_each_column_reads_its_value_of_each_point():
    points = [(_sample(10.0, s := _state(steps=1, gen=2, prompt=3, pre=4, waiting=5, kv=0.5, rb=7, rbc=8, answered=9,
                                          finished={"stop": 6}, responses={"2xx": 11})), s),
              (_sample(12.0, s2 := _state(shared=True, steps=20, gen=30)), s2)]
    track = tr.Track(points)
    assert track.times == [10.0, 12.0]
    assert track.states == [s, s2]
    assert track.column("counters") == [s.counters, s2.counters]
    assert track.column("waiting") == [5, None]
    assert track.column("kv_usage") == [0.5, None]
    assert track.counter_columns == ([1, 20], [2, 30], [3, None], [4, None])
    assert [track.column(n) for n in ("request_bytes", "request_bytes_count", "answered")] == [[7, None], [8, None],
                                                                                            [9, None]]
    assert track.progress == [(1, 2, 3), (20, None, None)]
    assert track.column("responses", "2xx") == [11, 0.0]
    assert track.column("finished", "stop") == [6, None]
    assert track.column("steps") is track.column("steps")             # computed once
    assert tr.COUNTERS == ("steps", "generation_tokens", "prompt_tokens", "preemptions")
    assert tr._counter("preemptions")(points, None) == [4, None]     # (COLUMNS' own were made at import)


def test_counter_drops_name_the_first_counter_that_went_down_of_each_pair():
    values = [(1, 1, 1, 1), (2, 0, 0, 1), (3, 2, 2, 0), (None, 3, 3, 1), (1, 4, 4, 2), (0, None, 5, 2), (5, 1, 5, 2)]
    points = [(_sample(float(i), s := _state(steps=a, gen=b, prompt=c, pre=d)), s) for i, (a, b, c, d) in
              enumerate(values)]
    assert tr.Track(points).counter_drops == [(1, 1), (2, 3), (5, 0)]
    # pair 3→4: steps None→1 is no drop; 5→6: gen None→1 is none, steps 0→5 none, prompt 5→5 none
    flat = [(_sample(float(i), s := _state(steps=1, gen=None)), s) for i in range(4)]
    assert tr.Track(flat).counter_drops == []
    assert tr._drops(([3, 2],), 1) == [(1, 0)]
    assert tr._drops(([3, 2, 1],), 2) == [(2, 0)]                   # from `start` on only
    assert tr._drops(([1, 2, 1],), 2) == [(2, 0)]


def test_may_drop_reads_past_missing_values():
    assert tr._may_drop([1, 2, 3]) is False
    assert tr._may_drop([1, 3, 2]) is True
    assert tr._may_drop([3, None, 2]) is False            # no pair of two values went down
    assert tr._may_drop([1, None, 3, 2]) is True
    assert tr._may_drop([None, None]) is False
    assert tr._may_drop([1, 1, None]) is False            # equal is no drop
    assert tr._may_drop([]) is False


def test_a_track_carried_over_equals_the_track_made_afresh():
    rows = [(1, 1, 1, 0), (2, 2, 2, 0), (3, 1, 3, 0), (4, 5, 4, 1), (5, 6, 5, 0), (6, 7, 6, 2), (2, 8, 7, 2),
            (8, 9, 8, 2)]
    points = [(_sample(float(i), s := _state(steps=a, gen=b, prompt=c, pre=d)), s) for i, (a, b, c, d) in
              enumerate(rows)]
    first = tr.Track(points[0:5])
    assert first.counter_drops == [(2, 1), (4, 3)]
    assert first.column("steps") == [1, 2, 3, 4, 5]
    for dropped in (0, 1, 2, 3):
        prior = tr.Track(points[0:5])
        prior.counter_drops, prior.column("steps"), prior.column("progress")
        carried = tr.Track(points[dropped:8], (prior, dropped))
        plain = tr.Track(points[dropped:8])
        assert carried.column("steps") == plain.column("steps") == [r[0] for r in rows[dropped:8]]
        assert carried.progress == plain.progress
        assert carried.counter_drops == plain.counter_drops
    carried = tr.Track(points[2:8], (first, 2))
    assert carried.counter_drops == [(2, 3), (4, 0)]          # (2, 1) was pair 1→2, gone; 4→5 pre, 6→7 steps
    assert carried.column("steps") == [3, 4, 5, 6, 2, 8]
    # a carried column is taken from the prior's, not read again
    prior = tr.Track(points[0:3])
    prior._columns[("steps", None)] = ["a", "b", "c"]
    assert tr.Track(points[1:5], (prior, 1)).column("steps") == ["b", "c", 4, 5]
    prior._drops = [(1, 0), (2, 0)]
    assert tr.Track(points[1:3], (prior, 1)).counter_drops == [(1, 0)]   # i - 1 ≥ 1: the pair within it


def _windows(samples, width):
    for end in range(1, len(samples) + 1):
        yield tuple(samples[max(0, end - width):end])


def _run(samples, width):
    """Every window of a recorder sliding over `samples`: each split and track equals the fresh one."""
    tr._last = None
    tr._CHAINS.clear()
    checked = 0
    for window in _windows(samples, width):
        got = tr.tracks(window)
        assert tr.engine_series(window) is tr._cached(window).series
        copies, fresh = _fresh(window)
        assert list(_view({k: t.points for k, t in got.items()}).items()) == list(_view(fresh).items())
        for key, track in got.items():
            plain = tr.Track(fresh[key])
            assert track.times == plain.times
            assert track.counter_drops == plain.counter_drops, (window[-1].t, key)
            assert track.progress == plain.progress
            assert track.counter_columns == plain.counter_columns
        assert list(_view(tr.engine_series(copies)).items()) == list(_view(fresh).items())
        checked += 1
    return checked


def _recording():
    out = []
    for i in range(40):
        t = 100.0 + 2 * i
        if i in (7, 8, 21):
            out.append(_sample(t, error="timeout"))
            continue
        steps = i if i < 25 else i - 25                   # a restart at 25
        engines = [_state("0", steps=steps, gen=2 * steps)]
        if 10 <= i < 30:
            engines.append(_state("1", steps=steps + 100))     # a second engine for a while
        if 15 <= i < 20:
            engines.append(_state("0", steps=500 + i, model="other"))   # the same key: a model twin, "engine=0#2"
        out.append(_sample(t, *engines))
    return out


@pytest.mark.parametrize("width", [1, 3, 6, 12])
def test_the_split_carried_window_to_window_equals_the_split_made_afresh(width):
    assert _run(_recording(), width) == 40


def test_a_window_jumping_ahead_more_than_the_carried_limit_is_split_afresh():
    samples = _recording()
    tr._last = None
    tr._CHAINS.clear()
    tr.tracks(tuple(samples[0:10]))
    assert tr._carried_over(tuple(samples[0:15])) is None                 # 5 new: more than _NEW_AT_MOST
    assert tr._carried_over(tuple(samples[0:14])) is not None             # 4 new
    tr._CHAINS.clear()
    tr.tracks(tuple(samples[0:10]))
    assert tr._carried_over(tuple(samples[5:14])) is None                 # 5 dropped from its head
    assert tr._carried_over(tuple(samples[4:14])) is not None             # 4 dropped
    assert tr._carried_over(()) is None
    for jump in (5, 9):
        tr._last = None
        tr._CHAINS.clear()
        window = tuple(samples[0:10])
        tr.tracks(window)
        later = tuple(samples[jump:10 + jump])
        got = tr.tracks(later)
        assert _view({k: t.points for k, t in got.items()}) == _view(_fresh(later)[1])


def test_the_order_of_engines_is_the_order_a_split_meets_them():
    a, b = _state("0", steps=1), _state("1", steps=1)
    samples = (_sample(1.0, b), _sample(2.0, a, b), _sample(3.0, error="x"))
    assert tr._first_seen(samples, {"engine=1": 0, "engine=0": 0}) == ["engine=1", "engine=0"]
    assert tr._first_seen(samples, {"engine=1": 0}) == ["engine=1"]
    assert [k for k, _ in tr._keyed(_sample(1.0, a, _state("0", model="y"), _state("0", model="z")))] == [
        "engine=0", "engine=0#2", "engine=0#3"]
    assert list(tr._split([_sample(1.0, b), _sample(2.0, a)])) == ["engine=1", "engine=0"]
    assert tr._split([_sample(1.0, error="x")]) == {}


def test_the_chains_are_bounded(monkeypatch):
    monkeypatch.setattr(tr, "_CHAINS", {})
    monkeypatch.setattr(tr, "_CHAINS_KEPT", 3)
    monkeypatch.setattr(tr, "_last", None)
    samples = [_sample(float(i), _state(steps=i)) for i in range(5)]
    for s in samples:
        tr.tracks((s,))
    assert list(tr._CHAINS) == [id(samples[2]), id(samples[3]), id(samples[4])]
    tr.tracks(())
    assert len(tr._CHAINS) == 3


def test_an_earlier_windows_track_still_reads_its_own_columns_after_a_later_window_carried_it():
    tr._last = None
    tr._CHAINS.clear()
    samples = [_sample(float(i), _state(steps=i, gen=10 - i)) for i in range(6)]
    first = tr.tracks(tuple(samples[0:4]))["engine=0"]
    first.column("steps")
    second = tr.tracks(tuple(samples[1:5]))["engine=0"]
    assert second.column("steps") == [1, 2, 3, 4]
    assert first.column("generation_tokens") == [10, 9, 8, 7]
    assert first.counter_drops == [(1, 1), (2, 1), (3, 1)]


def test_engine_series_of_another_window_is_that_windows():
    tr._last = None
    tr._CHAINS.clear()
    a = (_sample(1.0, _state("0", steps=1)),)
    b = (_sample(2.0, _state("1", steps=2)),)
    tr.tracks(a)
    assert list(tr.engine_series(b)) == ["engine=1"]
    assert tr.engine_series(a) is tr._last.series


def test_a_remembered_window_with_another_sample_in_its_middle_is_not_carried_over():
    tr._last = None
    tr._CHAINS.clear()
    a, b, c, d = (_sample(float(i), _state(steps=i)) for i in range(4))
    x = _sample(1.0, _state(steps=99))                    # the same time as b, another scrape
    tr.tracks((a, b, c))
    window = (a, x, c, d)
    got = tr.tracks(window)
    assert [st.counters.steps for _, st in got["engine=0"].points] == [0, 99, 2, 3]


def test_two_engines_carried_over_take_the_order_a_fresh_split_meets_them():
    tr._last = None
    tr._CHAINS.clear()
    s1 = _sample(1.0, _state("0", steps=1))
    s2 = _sample(2.0, _state("1", steps=1))
    s3 = _sample(3.0, _state("0", steps=2))
    assert list(tr.tracks((s1, s2))) == ["engine=0", "engine=1"]
    assert list(tr.tracks((s2, s3))) == ["engine=1", "engine=0"]        # s1 gone: engine 1 is met first


def test_a_column_is_carried_in_place_and_the_earlier_track_reads_its_own_again():
    tr._last = None
    tr._CHAINS.clear()
    samples = [_sample(float(i), _state(steps=i, gen=10 - i)) for i in range(7)]
    first = tr.tracks(tuple(samples[0:4]))["engine=0"]
    steps = first.column("steps")
    second = tr.tracks(tuple(samples[2:6]))["engine=0"]              # two dropped, two new
    assert second.column("steps") is steps == [2, 3, 4, 5]            # the same list, its head gone, the new ones on
    assert first.column("steps") == [0, 1, 2, 3] and first.column("steps") is not steps   # read afresh
    third = tr.tracks(tuple(samples[3:7]))["engine=0"]
    assert third.column("steps") is steps == [3, 4, 5, 6]
    assert second.column("steps") == [2, 3, 4, 5]


def test_another_thread_splits_afresh_and_shares_no_column_with_the_judging_thread():
    import threading

    tr._last = None
    tr._CHAINS.clear()
    samples = [_sample(float(i), _state(steps=i)) for i in range(8)]
    judged = tuple(samples[0:4])
    ours = tr.tracks(judged)["engine=0"]
    steps = ours.column("steps")
    chains = dict(tr._CHAINS)
    seen = {}

    def worker():
        window = tuple(samples[1:5])                                     # would carry over from ours
        got = tr.tracks(window)["engine=0"]
        seen["column"] = got.column("steps")
        seen["again"] = tr._cached(window) is tr._cached(window)         # nothing kept for it

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["column"] == [1, 2, 3, 4] and seen["column"] is not steps
    assert seen["again"] is False
    assert tr._CHAINS == chains and tr._last.samples is judged
    later = tr.tracks(tuple(samples[1:5]))["engine=0"]                   # the judging thread still carries its own
    assert later.column("steps") is steps == [1, 2, 3, 4]
    assert seen["column"] == [1, 2, 3, 4]
