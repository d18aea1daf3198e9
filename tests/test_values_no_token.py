"""Value tests of detectors/no_token.py (issue 40): requests_no_token's threshold by hand,

    threshold = max(no_token_k x max(TTFT p99, the oldest waiting request's expected TTFT), no_token_floor_s)

and its boundary: a quiet of exactly the threshold says nothing (`quiet_s <= limit`), one over it fires."""

from __future__ import annotations

from dataclasses import replace

from servewatch.detectors import no_token as N
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.samples import HealthSample, RequestsSample
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
K, FLOOR = CONFIG.no_token_k, CONFIG.no_token_floor_s
STEP = 0.25


def requests(quiet, *, p99=None, expected=None, in_flight=3, waiting=2, oldest_waiting=None, error=None, t=20.0):
    return RequestsSample(T0 + t, in_flight, waiting, 9.0, oldest_waiting, quiet, p99, 5, expected, error=error)


def test_the_floor_under_at_and_over():
    assert N.threshold_s(requests(1.0), CONFIG) == FLOOR
    for quiet, fires in ((FLOOR - STEP, False), (FLOOR, False), (FLOOR + STEP, True)):
        assert (N.detect(Window(requests=(requests(quiet),)), CONFIG) != []) is fires, quiet


def test_k_times_the_p99_under_at_and_over():
    p99 = 1.5
    limit = K * p99
    assert limit > FLOOR and N.threshold_s(requests(1.0, p99=p99), CONFIG) == limit
    for quiet, fires in ((limit - STEP, False), (limit, False), (limit + STEP, True)):
        assert (N.detect(Window(requests=(requests(quiet, p99=p99),)), CONFIG) != []) is fires, quiet


def test_the_larger_expectation_is_used():
    assert N.threshold_s(requests(1.0, p99=1.5, expected=2.5), CONFIG) == K * 2.5
    assert N.threshold_s(requests(1.0, p99=2.5, expected=1.5), CONFIG) == K * 2.5
    assert N.threshold_s(requests(1.0, p99=0.1, expected=0.2), CONFIG) == max(K * 0.2, FLOOR)
    assert N.threshold_s(requests(1.0, p99=1.0), replace(CONFIG, no_token_k=3.0)) == 3.0


def test_the_whole_verdict_with_the_p99():
    health = HealthSample(T0 + 19.5, 200, 0.001)
    w = Window(health=(health,), requests=(requests(7.0, p99=1.5, oldest_waiting=6.5),))
    assert N.detect(w, CONFIG) == [Verdict(
        "requests_no_token", T0 + 20, T0 + 13,
        f"3 request(s) in flight got no byte from the engine for 7.0 s (threshold 6.0 s = max({FLOOR:g} s, {K:g} x "
        f"recent TTFT p99 1.500 s)); the oldest has waited 6.5 s for its first token",
        (Evidence("requests", T0 + 20, "quiet_s", 7.0), Evidence("requests", T0 + 20, "in_flight", 3),
         Evidence("health", T0 + 19.5, "status", 200)),
        {"in_flight": 3, "waiting_first_token": 2, "quiet_s": 7.0, "threshold_s": 6.0, "ttft_p99_s": 1.5})]


def test_the_terms_of_each_threshold():
    v, = N.detect(Window(requests=(requests(11.0, p99=1.5, expected=2.5),)), CONFIG)
    assert v.why == (f"3 request(s) in flight got no byte from the engine for 11.0 s (threshold 10.0 s = "
                     f"max({FLOOR:g} s, {K:g} x the oldest waiting request's expected TTFT 2.500 s))")
    assert v.evidence == (Evidence("requests", T0 + 20, "quiet_s", 11.0), Evidence("requests", T0 + 20, "in_flight", 3))
    v, = N.detect(Window(requests=(requests(3.0),)), CONFIG)
    assert v.why == (f"3 request(s) in flight got no byte from the engine for 3.0 s (threshold {FLOOR:.1f} s = the "
                     f"{FLOOR:g} s floor: no stream has finished yet to give a recent TTFT)")
    # an expectation equal to the p99: the p99's words
    v, = N.detect(Window(requests=(requests(9.0, p99=2.0, expected=2.0),)), CONFIG)
    assert "x recent TTFT p99 2.000 s)" in v.why
    assert N._threshold_terms(requests(1.0, p99=None, expected=0.5), CONFIG) == \
        f"max({FLOOR:g} s, {K:g} x the oldest waiting request's expected TTFT 0.500 s)"


def test_rounded_details():
    v, = N.detect(Window(requests=(requests(2.123456, p99=0.1234567),)), CONFIG)
    assert v.details["quiet_s"] == 2.123 and v.details["threshold_s"] == FLOOR
    assert v.evidence[0] == Evidence("requests", T0 + 20, "quiet_s", 2.123)
    assert v.onset == T0 + 20 - 2.123456


def test_nothing_to_judge():
    assert N.detect(Window(), CONFIG) == []
    assert N.detect(Window(requests=(requests(9.0, error="connect"),)), CONFIG) == []
    assert N.detect(Window(requests=(requests(9.0, in_flight=0),)), CONFIG) == []
    assert N.detect(Window(requests=(requests(None),)), CONFIG) == []
    # the newest sample speaks
    assert N.detect(Window(requests=(requests(9.0, t=10.0), requests(1.0, t=20.0))), CONFIG) == []
    assert len(N.detect(Window(requests=(requests(1.0, t=10.0), requests(9.0, t=20.0))), CONFIG)) == 1


def test_a_p99_under_a_second_is_named_and_the_threshold_rounded_to_a_millisecond():
    # p99 0.61234 s: threshold 4 x 0.61234 = 2.44936 s, over the floor; said with the p99, stored as 2.449
    p99 = 0.61234
    v, = N.detect(Window(requests=(requests(3.0, p99=p99),)), CONFIG)
    assert f"x recent TTFT p99 {p99:.3f} s)" in v.why
    assert v.details["threshold_s"] == round(K * p99, 3) == 2.449
