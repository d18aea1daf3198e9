"""Value tests of detectors/outcomes.py (issue 40): server_errors, client_errors and requests_aborted as whole
verdicts, the increases they read, and a boundary test (just under, at, just over) for each threshold, read from
DetectorConfig (every one `>=`: that many, or that share, fires):
  server_error_min, server_error_fraction; client_error_min, client_error_fraction; abort_min, abort_fraction;
  outcome_window_s (a scrape at exactly now - window is the first of the stretch);
and BYTES_PER_TOKEN (bodies averaging more than that many bytes a token of the model's maximum length: `>`)."""

from __future__ import annotations

from servewatch.detectors import outcomes as O
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState
from servewatch.kinds import TIMEOUT
from servewatch.timeline.samples import DEADLINE, HealthSample, LogEvent, MetricsSample, ProbeSample
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
WINDOW = CONFIG.outcome_window_s
S_MIN, S_FRACTION = CONFIG.server_error_min, CONFIG.server_error_fraction
C_MIN, C_FRACTION = CONFIG.client_error_min, CONFIG.client_error_fraction
A_MIN, A_FRACTION = CONFIG.abort_min, CONFIG.abort_fraction


def state(responses=None, finished=None, body=None, bodies=None, answered=None, gen=0.0, engine="0", dialect="vllm"):
    return EngineState(dialect, f"{dialect}-test", {"model_name": "m", "engine": engine}, running=1.0, waiting=0.0,
                       counters=Counters(prompt_tokens=0.0, generation_tokens=gen, steps=gen,
                                         finished=dict(finished or {}), responses=dict(responses or {}),
                                         request_bytes=body, request_bytes_count=bodies, answered=answered))


def scrape(t, engines=1, dialect="vllm", **kw):
    """One scrape at T0 + t; with `engines` > 1 every engine carries the same counts (the server's are shared)."""
    return MetricsSample(T0 + t, dialect, f"{dialect}-test",
                         tuple(state(engine=str(i), dialect=dialect, **kw) for i in range(engines)))


def run(detect, *samples, logs=(), probe=(), health=()):
    return detect(Window(metrics=tuple(samples), logs=tuple(logs), probe=tuple(probe), health=tuple(health)), CONFIG)


# --- the increases -------------------------------------------------------------------------------------------

def test_increase_across_resets_and_gaps():
    assert O.increase([1.0, 3.0, 3.0, 7.0]) == 6.0
    assert O.increase([5.0, 8.0, 2.0, 4.0]) == (8 - 5) + 2 + (4 - 2)          # after a drop the new value is all new
    assert O.increase([None, 2.0, None, 5.0]) == 3.0
    assert O.increase(iter([1.0, 4.0])) == 3.0 and O.increase([]) == 0.0 and O.increase([4.0]) == 0.0
    assert O.walked_increase([5.0, 8.0, 2.0, None, 4.0]) == 3 + 2 + 2
    assert O.walked_increase([3.0, 3.0]) == 0.0


def test_increase_is_the_walk_to_the_last_bit():
    """The shortcut (no reset: the steps summed in C) against the walk, bit for bit (repr), on series that round:
    steps of a tenth, of unlike magnitudes, whole and not, an int among floats, inf, -0.0, a NaN first (sort
    leaves it in place: the walk skips it as it skips no other value) and later, a reset."""
    import math
    import random

    nan, inf = math.nan, math.inf
    fixed = [[0.1 * k for k in range(40)], [1e16, 1e16 + 2, 1e16 + 4, 1e16 + 6], [110.0 * (1 + k / 1000) for k in range(31)],
             [1.0, 1e-17, 2.0], [0.0, 1, 2.5, 3], [-0.0, 0.0], [0.0, -0.0], [5.0, inf], [inf, inf], [nan, 5.0, 6.0],
             [5.0, nan, 6.0], [5.0, 6.0, nan], [nan], [None], [3.0, 1.0], [1e308, 1.7e308, 1.7e308]]
    rng = random.Random(54)
    for _ in range(400):
        start = rng.choice([0.0, 110.0, 1e9, 123456.789])
        series = [start]
        for _ in range(rng.randrange(0, 40)):
            series.append(series[-1] + rng.choice([0.0, 0.01, 0.1, 1.0, 3.3, rng.random() * 10 ** rng.randrange(-3, 6)]))
        fixed.append(series)
    for values in fixed:
        assert repr(O.increase(values)) == repr(O.walked_increase(values)), values
        assert repr(O.increase(iter(values))) == repr(O.walked_increase(values)), values
    assert O.increase([nan, 5.0, 6.0]) == 6.0 and math.isnan(O.increase([inf, inf]))
    assert O.increase([2.0, 1.0, 1.0]) == 1.0 and O.increase([None]) == 0.0


def test_the_steps_are_summed_in_order():
    """Whichever sum serves (sum() where it adds in order, up to Python 3.11; the reduce from 3.12), 1e16 + 1 + 1
    rounds back to 1e16 at each step; a compensated sum would give 1e16 + 2."""
    for steps_sum in (O._steps_sum, O._steps_in_order):
        assert steps_sum((1e16, 1.0, 1.0)) == 1e16 and steps_sum(iter([0.1, 0.2])) == 0.1 + 0.2
        assert steps_sum(()) == 0.0 and repr(steps_sum([-0.0])) == "0.0"
    if O._steps_sum is O._steps_summed:
        assert O._steps_summed((0.1, 0.2, 0.3)) == (0.1 + 0.2) + 0.3


def test_status_class():
    assert [O.status_class(k) for k in ("404", "4xx", "unrouted", "503", "200")] == ["4xx", "4xx", "4xx", "5xx", "2xx"]


def test_outcomes_of_one_engine_and_of_several_are_the_same_increases():
    for engines in (1, 2):
        samples = [scrape(-100, engines, responses={"2xx": 1.0}, finished={"stop": 1.0}),
                   scrape(-WINDOW + 20, engines, responses={"2xx": 5.0}, finished={"stop": 4.0, "abort": 0.0}, body=10.0,
                          bodies=1.0),
                   scrape(10, engines, responses={"2xx": 9.0, "404": 2.0}, finished={"stop": 7.0, "abort": 0.0}, body=40.0,
                          bodies=4.0, answered=3.0),
                   scrape(20, engines, responses={"2xx": 3.0, "404": 3.0}, finished={"stop": 9.0, "abort": 1.0},
                          body=50.0, bodies=5.0, answered=4.0)]
        o = O.window_outcomes(Window(metrics=tuple(samples)), CONFIG)
        assert (o.first.t, o.last.t, o.span_s) == (T0 - WINDOW + 20, T0 + 20, WINDOW), engines
        # 2xx: 5 → 9, then a reset to 3: 4 + 3; the finished reasons are summed over the engines
        assert o.responses == {"2xx": 4.0 + 3.0, "404": 3.0}, engines
        assert o.finished == {"abort": engines * 1.0, "stop": engines * 5.0}, engines
        # answered is not exported at the first scrape: its increase is from the first that has it
        assert (o.request_bytes, o.request_bytes_count, o.answered) == (40.0, 4.0, 4.0 - 3.0), engines
        assert (o.by_class("2xx"), o.by_class("4xx"), o.total_responses) == (7.0, 3.0, 10.0)
        assert o.rate(6.0) == 6.0 / WINDOW and len(o.scrapes) == 3
    # fewer than two good scrapes in the window: nothing to say
    assert O.window_outcomes(Window(metrics=(scrape(0),)), CONFIG) is None
    assert O.window_outcomes(Window(metrics=(scrape(-WINDOW - 1), scrape(0))), CONFIG) is None
    two = (scrape(0, 2), MetricsSample(T0 + 5, "vllm", "vllm-test", error="timeout"))
    assert O.window_outcomes(Window(metrics=two), CONFIG) is None
    # not exported at all: None, not 0
    o = O.window_outcomes(Window(metrics=(scrape(0, 2), scrape(5, 2))), CONFIG)
    assert (o.request_bytes, o.request_bytes_count, o.answered) == (None, None, None)
    o = O.window_outcomes(Window(metrics=(scrape(0), scrape(5))), CONFIG)
    assert (o.request_bytes, o.request_bytes_count, o.answered) == (None, None, None)


def test_outcome_window_holds_a_scrape_at_exactly_its_start():
    for first, counted in ((20 - WINDOW + 0.25, True), (20 - WINDOW, True), (20 - WINDOW - 0.25, False)):
        o = O.window_outcomes(Window(metrics=(scrape(first, responses={"5xx": 0.0}), scrape(10, responses={"5xx": 2.0}),
                                              scrape(20, responses={"5xx": 3.0}))), CONFIG)
        assert o.responses["5xx"] == (3.0 if counted else 1.0), first


def test_rate_of_an_empty_span_is_zero():
    o = O.Outcomes(scrape(0), scrape(0))
    assert (o.span_s, o.rate(5.0)) == (0.0, 0.0)


# --- server_errors ----------------------------------------------------------------------------------------------

def test_server_errors_is_the_whole_verdict():
    samples = (scrape(0, responses={"2xx": 100.0, "500": 0.0, "503": 1.0, "502": 4.0}),
               scrape(10, responses={"2xx": 140.0, "500": 1.0, "503": 4.0, "502": 4.0}),
               scrape(20, responses={"2xx": 180.0, "500": 2.0, "503": 7.0, "502": 4.0}))
    # increases: 2xx 80, 500 2, 503 6, 502 0: 8 of 88 in 20 s
    assert run(O.detect_server_errors, *samples) == [Verdict(
        "server_errors", T0 + 20, T0,
        f"8 of 88 responses in the last 20 s were 5xx ({8 / 88:.0%}, {8 / 20:.2f} per s; ≥ 5% and ≥ 3): 2 × 500, 6 × 503",
        (Evidence("metrics", T0, "counters.responses.500", 0.0), Evidence("metrics", T0 + 20, "counters.responses.500", 2.0),
         Evidence("metrics", T0, "counters.responses.503", 1.0), Evidence("metrics", T0 + 20, "counters.responses.503", 7.0)),
        {"errors": 8.0, "responses": 88.0, "fraction": round(8 / 88, 4), "per_s": round(8 / 20, 4),
         "engine_errors": 0.0})]
    assert f"{8 / 88:.0%}, {8 / 20:.2f}" == "9%, 0.40"
    # a class count says no codes
    v, = run(O.detect_server_errors, scrape(0, responses={"2xx": 0.0, "5xx": 0.0}),
             scrape(20, responses={"2xx": 6.0, "5xx": 4.0}))
    assert v.why == "4 of 10 responses in the last 20 s were 5xx (40%, 0.20 per s; ≥ 5% and ≥ 3)"
    assert v.evidence == (Evidence("metrics", T0, "counters.responses.5xx", 0.0),
                          Evidence("metrics", T0 + 20, "counters.responses.5xx", 4.0))


def test_server_errors_of_the_engine_finished_with_reason_error():
    samples = (scrape(0, responses={"2xx": 0.0}, finished={"stop": 0.0, "error": 0.0}),
               scrape(20, responses={"2xx": 40.0}, finished={"stop": 36.0, "error": 4.0}))
    assert run(O.detect_server_errors, *samples) == [Verdict(
        "server_errors", T0 + 20, T0,
        "0 of 40 responses in the last 20 s were 5xx (0%, 0.00 per s; ≥ 5% and ≥ 3); the engine finished 4 "
        "request(s) with reason error",
        (Evidence("metrics", T0, "counters.responses.5xx", None), Evidence("metrics", T0 + 20, "counters.responses.5xx", None),
         Evidence("metrics", T0 + 20, "counters.finished.error", 4.0)),
        {"errors": 4.0, "responses": 40.0, "fraction": 0.1, "per_s": 0.2, "engine_errors": 4.0})]
    # no responses counted: the share is of the requests finished
    v, = run(O.detect_server_errors, scrape(0, finished={"stop": 0.0, "error": 0.0}),
             scrape(20, finished={"stop": 16.0, "error": 4.0}))
    assert (v.details["fraction"], v.why.split(" (")[1].split(",")[0]) == (4 / 20, "n/a")
    # SGLang's "all" is every finished request: 3 errors of 60 is 5 %, not 3 of 63
    at = (scrape(0, finished={"all": 0.0, "error": 0.0}), scrape(20, finished={"all": 60.0, "error": 3.0}))
    assert [v.details["fraction"] for v in run(O.detect_server_errors, *at)] == [3 / 60]


def test_server_error_min_under_at_and_over():
    for n, fires in ((S_MIN - 1, False), (S_MIN, True), (S_MIN + 1, True)):
        found = run(O.detect_server_errors, scrape(0, responses={"2xx": 0.0, "500": 0.0}),
                    scrape(20, responses={"2xx": 10.0 - n, "500": n}))
        assert [v.details["errors"] for v in found] == ([n] if fires else []), n


def test_server_error_fraction_under_at_and_over():
    at = round(10 / S_FRACTION)         # 10 errors of 200 responses
    for total, fires in ((at + 1, False), (at, True), (at - 1, True)):
        found = run(O.detect_server_errors, scrape(0, responses={"2xx": 0.0, "500": 0.0}),
                    scrape(20, responses={"2xx": total - 10.0, "500": 10.0}))
        assert [v.details["fraction"] for v in found] == ([round(10 / total, 4)] if fires else []), total


# --- client_errors ----------------------------------------------------------------------------------------------

def test_client_errors_is_the_whole_verdict():
    samples = (scrape(0, responses={"2xx": 10.0, "404": 0.0, "unrouted": 0.0, "400": 5.0}),
               scrape(20, responses={"2xx": 22.0, "404": 6.0, "unrouted": 2.0, "400": 5.0}))
    assert run(O.detect_client_errors, *samples) == [Verdict(
        "client_errors", T0 + 20, T0,
        "8 of 20 responses in the last 20 s were 4xx (40%, 0.40 per s; ≥ 25% and ≥ 5): 6 × 404, 2 × 404 (no route); "
        "likely cause: an unknown model name or a path the server has no route for",
        (Evidence("metrics", T0, "counters.responses.404", 0.0), Evidence("metrics", T0 + 20, "counters.responses.404", 6.0),
         Evidence("metrics", T0, "counters.responses.unrouted", 0.0),
         Evidence("metrics", T0 + 20, "counters.responses.unrouted", 2.0)),
        {"cause": "not_found", "errors": 8.0, "responses": 20.0, "fraction": 0.4, "per_s": 0.4})]


def cause(increases, logs=(), first=None, last=None):
    base = {k: 0.0 for k in increases}
    v, = run(O.detect_client_errors, scrape(0, responses={**base, "2xx": 0.0}, **(first or {})),
             scrape(20, responses={**increases, "2xx": 1.0}, **(last or {})), logs=logs)
    return v.details["cause"], v.why.partition("; likely cause: ")[2]


def test_client_cause_by_the_most_frequent_code():
    assert cause({"unrouted": 6.0, "404": 2.0}) == ("unknown_path", "requests to a path the server has no route for")
    assert cause({"400": 3.0, "404": 3.0})[0] == "not_found"          # a tie: the greater code
    assert cause({"400": 3.0, "429": 3.0}) == ("rate_limited", "the server's rate or queue limit")
    assert cause({"413": 6.0}) == ("input_too_long", "inputs over the model's maximum length")
    assert cause({"418": 6.0}) == ("other", "client errors")
    assert cause({"401": 6.0, "404": 0.0})[0] == "unauthorized"


def test_client_cause_of_a_class_count_from_the_bodies():
    invalid = O.CAUSE_TEXT["invalid_request"]
    assert cause({"4xx": 6.0}) == ("invalid_request", invalid)
    # 10 bodies of 100 bytes before; in the window 20 bodies, 14 of them others (at 100 bytes) and 6 rejected
    # of `each` bytes: the rejected average (bytes - 14 x 100) / 6
    startup = [LogEvent(T0 - 50, "startup", {"per_request": 2048})]
    limit = O.BYTES_PER_TOKEN * 2048
    for each, too_long in ((limit, False), (limit + 1, True)):
        first, last = dict(body=1000.0, bodies=10.0), dict(body=1000.0 + 1400.0 + 6 * each, bodies=30.0)
        got = cause({"4xx": 6.0}, logs=startup, first=first, last=last)
        if too_long:
            assert got == ("input_too_long", f"{O.CAUSE_TEXT['input_too_long']} (the rejected request bodies averaged "
                                             f"~{limit + 1:,} bytes, over 4 bytes × the maximum length of 2,048 tokens "
                                             "the log gave)")
        else:
            assert got == ("invalid_request", f"{invalid} (the rejected request bodies averaged ~{limit:,} bytes)")
    # no length in the log: said as invalid, with the figure
    got = cause({"4xx": 6.0}, first=dict(body=1000.0, bodies=10.0), last=dict(body=1000.0 + 1400.0 + 6e5, bodies=30.0))
    assert got == ("invalid_request", f"{invalid} (the rejected request bodies averaged ~100,000 bytes)")
    # no bodies before the window: the window's own mean
    got = cause({"4xx": 6.0}, first=dict(body=0.0, bodies=0.0), last=dict(body=900.0, bodies=6.0))
    assert got == ("invalid_request", f"{invalid} (the rejected request bodies averaged ~150 bytes)")
    # fewer bodies than rejections: the mean over the bodies
    got = cause({"4xx": 6.0}, first=dict(body=1000.0, bodies=10.0), last=dict(body=1000.0 + 800.0, bodies=14.0))
    assert got == ("invalid_request", f"{invalid} (the rejected request bodies averaged ~200 bytes)")
    # bodies not counted in the window: no figure
    assert cause({"4xx": 6.0}, first=dict(body=10.0, bodies=1.0), last=dict(body=10.0, bodies=1.0)) == (
        "invalid_request", invalid)


def test_max_model_len_is_the_newest_startup_line():
    logs = [LogEvent(1.0, "startup", {"per_request": 1024}), LogEvent(2.0, "startup", {"per_request": "4096"}),
            LogEvent(3.0, "startup", {"kv_tokens": 9}), LogEvent(4.0, "stats", {"per_request": 7})]
    assert O.max_model_len(logs) == 4096 and O.max_model_len([]) is None


def test_client_error_min_under_at_and_over():
    for n, fires in ((C_MIN - 1, False), (C_MIN, True), (C_MIN + 1, True)):
        found = run(O.detect_client_errors, scrape(0, responses={"2xx": 0.0, "404": 0.0}),
                    scrape(20, responses={"2xx": 12.0 - n, "404": n}))
        assert [v.details["errors"] for v in found] == ([n] if fires else []), n


def test_client_error_fraction_under_at_and_over():
    at = round(5 / C_FRACTION)          # 5 of 20
    for total, fires in ((at + 1, False), (at, True), (at - 1, True)):
        found = run(O.detect_client_errors, scrape(0, responses={"2xx": 0.0, "404": 0.0}),
                    scrape(20, responses={"2xx": total - 5.0, "404": 5.0}))
        assert [v.details["fraction"] for v in found] == ([round(5 / total, 4)] if fires else []), total


# --- requests_aborted -------------------------------------------------------------------------------------------

def test_requests_aborted_is_the_whole_verdict():
    samples = (scrape(0, finished={"stop": 0.0, "abort": 0.0}), scrape(20, finished={"stop": 15.0, "abort": 5.0}))
    assert run(O.detect_requests_aborted, *samples) == [Verdict(
        "requests_aborted", T0 + 20, T0,
        "5 of 20 requests finished in the last 20 s were aborted (25%, 0.25 per s; ≥ 25% and ≥ 5): clients gave up "
        "or timed out before their answer was complete",
        (Evidence("metrics", T0, "counters.finished.abort", 0.0), Evidence("metrics", T0 + 20, "counters.finished.abort", 5.0)),
        {"aborted": 5.0, "finished": 20.0, "fraction": 0.25, "per_s": 0.25, "hung_up": 0.0})]


def test_requests_aborted_counts_the_answers_the_engine_never_finished():
    # answered 20, finished 12 + 2 aborted: 6 hung up; 2 + 6 aborted of 14 + 6
    samples = (scrape(0, finished={"stop": 0.0, "abort": 0.0}, answered=0.0),
               scrape(20, finished={"stop": 12.0, "abort": 2.0}, answered=20.0))
    assert run(O.detect_requests_aborted, *samples) == [Verdict(
        "requests_aborted", T0 + 20, T0,
        "8 of 20 requests finished in the last 20 s were aborted (40%, 0.40 per s; ≥ 25% and ≥ 5): clients gave up "
        "or timed out before their answer was complete (6 answered by the API server but never counted finished by "
        "the engine: the client hung up mid-answer)",
        (Evidence("metrics", T0, "counters.finished.abort", 0.0), Evidence("metrics", T0 + 20, "counters.finished.abort", 2.0),
         Evidence("metrics", T0, "counters.answered", 0.0), Evidence("metrics", T0 + 20, "counters.answered", 20.0)),
        {"aborted": 8.0, "finished": 20.0, "fraction": 0.4, "per_s": 0.4, "hung_up": 6.0})]
    # our own probes that missed their deadline hung up too: not the clients'
    probes = [ProbeSample(T0 + t, DEADLINE, None, 10.0) for t in (0, 5, 20, 25)]     # (first, last]: 5 and 20
    v, = run(O.detect_requests_aborted, *samples, probe=probes)
    assert (v.details["aborted"], v.details["finished"]) == (8.0 - 2, 20.0 - 2)


def test_answers_ending_at_the_start_are_no_hang_ups():
    # a scrape before the window (8 finished); at 0, 10 finished and 9 answered; at 10, 12 finished, 14 answered:
    # at most min(max(10 - 9, 10 - 8), (14 - 9) - (12 - 10)) = 2 of the answers were still ending at 0
    samples = (scrape(-WINDOW - 30, finished={"stop": 8.0, "abort": 0.0}, answered=8.0),
               scrape(0, finished={"stop": 10.0, "abort": 0.0}, answered=9.0),
               scrape(10, finished={"stop": 12.0, "abort": 0.0}, answered=14.0),
               scrape(20, finished={"stop": 12.0, "abort": 8.0}, answered=16.0))
    w = Window(metrics=samples)
    o = O.window_outcomes(w, CONFIG)
    assert O._answers_ending_at_the_start(w, o) == min(max(10 - 9, 10 - 8), (14 - 9) - (12 - 10))
    # hung up: (16 - 9) - (20 - 10) - 2 < 0 → 0; aborted 8 of 10
    v, = O.detect_requests_aborted(w, CONFIG)
    assert (v.details["hung_up"], v.details["aborted"], v.details["finished"]) == (0.0, 8.0, 10.0)
    # none before: what had finished beyond the answers at the first scrape
    w = Window(metrics=samples[1:])
    assert O._answers_ending_at_the_start(w, O.window_outcomes(w, CONFIG)) == min(10 - 9, (14 - 9) - (12 - 10))
    assert O._scrape_before(Window(metrics=(MetricsSample(T0 - 5, "vllm", "x", error="timeout"), *samples[1:])), T0) is None
    assert O._finished_now(scrape(0, finished={"all": 7.0, "stop": 3.0})) == 7.0
    assert O._finished_now(scrape(0, 2, finished={"stop": 3.0, "abort": 1.0})) == 8.0
    assert O._finished_now(scrape(0)) is None


def test_abort_min_under_at_and_over():
    for n, fires in ((A_MIN - 1, False), (A_MIN, True), (A_MIN + 1, True)):
        found = run(O.detect_requests_aborted, scrape(0, finished={"stop": 0.0, "abort": 0.0}),
                    scrape(20, finished={"stop": 10.0 - n, "abort": n}))
        assert [v.details["aborted"] for v in found] == ([n] if fires else []), n


def test_abort_fraction_under_at_and_over():
    at = round(5 / A_FRACTION)          # 5 of 20
    for total, fires in ((at + 1, False), (at, True), (at - 1, True)):
        found = run(O.detect_requests_aborted, scrape(0, finished={"stop": 0.0, "abort": 0.0}),
                    scrape(20, finished={"stop": total - 5.0, "abort": 5.0}))
        assert [v.details["fraction"] for v in found] == ([round(5 / total, 4)] if fires else []), total


def test_sglang_aborts_while_not_serving_belong_to_the_stall():
    # SGLang (its /health runs a generation): the engine stuck from 10 to 20 with /health failing: the 6 aborts
    # counted then are the stall's; a health probe of ours that timed out at 25 hung up on one more
    def sg(t, gen, abort):
        return scrape(t, dialect="sglang", gen=gen, finished={"stop": 0.0, "abort": abort})
    samples = (sg(0, 0.0, 0.0), sg(10, 100.0, 0.0), sg(20, 100.0, 6.0), sg(30, 200.0, 14.0))
    # health probes of ours that timed out: at 0 (not after the first scrape), 15 (in the stall), 25, 26 and 30 (the
    # last scrape's time: counted); one answered at 28
    health = (HealthSample(T0, None, None, TIMEOUT), HealthSample(T0 + 15, None, None, TIMEOUT),
              HealthSample(T0 + 25, None, None, TIMEOUT), HealthSample(T0 + 26, None, None, TIMEOUT),
              HealthSample(T0 + 28, 200, 0.01), HealthSample(T0 + 30, None, None, TIMEOUT))
    w = Window(metrics=samples, health=health)
    o = O.window_outcomes(w, CONFIG)
    assert O.aborts_while_not_serving(w, o) == (6.0, [(T0 + 10, T0 + 20)])
    assert O._own_health_hangups(w, o, [(T0 + 10, T0 + 20)]) == 3          # 25, 26 and 30
    v, = O.detect_requests_aborted(w, CONFIG)
    assert (v.details["aborted"], v.details["finished"]) == (14.0 - 6 - 3, 14.0)
    # vLLM's /health does not run the engine: none set aside
    w = Window(metrics=tuple(scrape(s.t - T0, gen=s.engines[0].counters.steps,
                                    finished=s.engines[0].counters.finished) for s in samples), health=health)
    o = O.window_outcomes(w, CONFIG)
    assert O.aborts_while_not_serving(w, o) == (0.0, []) and O._own_health_hangups(w, o, []) == 0
    assert O.detect_requests_aborted(w, CONFIG)[0].details["aborted"] == 14.0


def test_health_failing_in_a_stretch_or_just_before_it():
    ok, bad = (lambda t: HealthSample(T0 + t, 200, 0.01)), (lambda t: HealthSample(T0 + t, 503, 0.01))
    assert O._health_failing((bad(5),), T0 + 4, T0 + 5) is True          # (start, end]
    assert O._health_failing((bad(4),), T0 + 4, T0 + 5) is True          # the last one at or before the start
    assert O._health_failing((bad(3), ok(4)), T0 + 4, T0 + 5) is False
    assert O._health_failing((bad(6),), T0 + 4, T0 + 5) is False and O._health_failing((), T0, T0 + 1) is False
    assert O._inside(T0 + 5, [(T0 + 4, T0 + 5)]) and not O._inside(T0 + 4, [(T0 + 4, T0 + 5)])


def test_n_and_pct():
    assert (O._n(3.0), O._n(2.5), O._n(2.25)) == ("3", "2.5", "2.2")
    assert (O._pct(1, 3), O._pct(1, 0)) == ("33%", "n/a")


# --- the survivors of the first mutation run, each a value --------------------------------------------------------

def test_answers_ending_with_two_scrapes_and_counts_not_exported():
    def ending(*samples):
        w = Window(metrics=samples)
        return O._answers_ending_at_the_start(w, O.window_outcomes(w, CONFIG))
    # two scrapes: at 0, 10 finished and 9 answered (1 still ending); at 10, 2 more answered and 2 more finished
    assert ending(scrape(0, finished={"stop": 10.0}, answered=9.0), scrape(10, finished={"stop": 12.0}, answered=14.0)) \
        == min(10 - 9, (14 - 9) - (12 - 10))
    assert ending(scrape(0, finished={"stop": 10.0}, answered=9.0), scrape(10, finished={"stop": 12.0}, answered=11.0)) \
        == 0.0                                                   # as many finished as answered since: none ending
    # the finished or the answered count not exported at the first scrape: nothing is surely ending
    assert ending(scrape(0, answered=5.0), scrape(10, finished={"stop": 2.0}, answered=9.0)) == 0.0
    assert ending(scrape(0, finished={"stop": 10.0}), scrape(10, finished={"stop": 12.0}, answered=9.0)) == 0.0
    assert O._answers_ending_at_the_start(Window(), O.Outcomes(scrape(0), scrape(0))) == 0.0


def test_a_good_scrape_without_engines_is_not_the_scrape_before():
    samples = (scrape(-WINDOW - 30, finished={"stop": 8.0, "abort": 0.0}, answered=8.0),
               MetricsSample(T0 - 5, "vllm", "vllm-test"),
               scrape(0, finished={"stop": 10.0, "abort": 0.0}, answered=9.0),
               scrape(10, finished={"stop": 12.0, "abort": 0.0}, answered=14.0))
    w = Window(metrics=samples)
    assert O._answers_ending_at_the_start(w, O.window_outcomes(w, CONFIG)) == min(max(10 - 9, 10 - 8), 3)
    # nor is it read among several engines' scrapes
    two = (scrape(0, 2, responses={"5xx": 0.0, "2xx": 0.0}), MetricsSample(T0 + 5, "vllm", "vllm-test"),
           scrape(10, 2, responses={"5xx": 4.0, "2xx": 6.0}))
    assert O.window_outcomes(Window(metrics=two), CONFIG).responses == {"2xx": 6.0, "5xx": 4.0}


def test_finished_reasons_of_any_engine_and_of_one_engine_a_scrape():
    # two engines; only engine 1 has aborted requests
    samples = tuple(MetricsSample(T0 + t, "vllm", "vllm-test", (state(finished={"stop": 0.0}, engine="0"),
                                                                state(finished={"stop": 0.0, "abort": n}, engine="1")))
                    for t, n in ((0, 0.0), (10, 3.0)))
    assert O.window_outcomes(Window(metrics=samples), CONFIG).finished == {"abort": 3.0, "stop": 0.0}
    # one engine a scrape, but two engines in the window (its engine label changed): the counts still add up
    samples = (scrape(0, finished={"stop": 0.0}), scrape(10, finished={"stop": 5.0}),
               MetricsSample(T0 + 20, "vllm", "vllm-test", (state(finished={"stop": 9.0}, engine="1"),)))
    assert O.window_outcomes(Window(metrics=samples), CONFIG).finished == {"stop": 9.0}


def test_hang_ups_alone_with_no_abort_counted():
    samples = (scrape(0, finished={"stop": 0.0}, answered=0.0), scrape(20, finished={"stop": 12.0}, answered=18.0))
    v, = run(O.detect_requests_aborted, *samples)
    assert (v.details["aborted"], v.details["finished"], v.details["hung_up"]) == (6.0, 18.0, 6.0)
    assert v.evidence[:2] == (Evidence("metrics", T0, "counters.finished.abort", None),
                              Evidence("metrics", T0 + 20, "counters.finished.abort", None))


def test_rates_and_fractions_keep_four_decimals():
    # 5 in 30 s: 0.1667 a second
    v, = run(O.detect_server_errors, scrape(0, responses={"2xx": 0.0, "500": 0.0}),
             scrape(30, responses={"2xx": 1.0, "500": 5.0}))
    assert (v.details["per_s"], v.details["fraction"]) == (0.1667, 0.8333)
    v, = run(O.detect_client_errors, scrape(0, responses={"2xx": 0.0, "404": 0.0}),
             scrape(30, responses={"2xx": 1.0, "404": 5.0}))
    assert (v.details["per_s"], v.details["fraction"]) == (0.1667, 0.8333)
    v, = run(O.detect_requests_aborted, scrape(0, finished={"stop": 0.0, "abort": 0.0}),
             scrape(30, finished={"stop": 1.0, "abort": 5.0}))
    assert (v.details["per_s"], v.details["fraction"]) == (0.1667, 0.8333)


def test_one_error_of_a_code_is_named():
    v, = run(O.detect_server_errors, scrape(0, responses={"2xx": 0.0, "500": 0.0, "503": 0.0}),
             scrape(20, responses={"2xx": 6.0, "500": 1.0, "503": 3.0}))
    assert v.why.endswith(": 1 × 500, 3 × 503")
    v, = run(O.detect_client_errors, scrape(0, responses={"2xx": 0.0, "400": 0.0, "404": 0.0}),
             scrape(20, responses={"2xx": 6.0, "400": 1.0, "404": 5.0}))
    assert ": 1 × 400, 5 × 404; likely cause: " in v.why
    # five codes once each: the greatest code is the cause
    assert cause({"400": 1.0, "401": 1.0, "403": 1.0, "404": 1.0, "429": 1.0})[0] == "rate_limited"


def test_a_single_class_rejection_and_empty_bodies():
    invalid = O.CAUSE_TEXT["invalid_request"]
    # one request rejected (4xx, the class, ties the codes and wins: "4xx" > "404"), 700 bytes against 100 typical
    got = cause({"4xx": 1.0, "400": 1.0, "401": 1.0, "403": 1.0, "404": 1.0},
                first=dict(body=1000.0, bodies=10.0), last=dict(body=1000.0 + 4 * 100.0 + 700.0, bodies=15.0))
    assert got == ("invalid_request", f"{invalid} (the rejected request bodies averaged ~700 bytes)")
    # rejected bodies that brought no bytes: 0, not a byte
    got = cause({"4xx": 3.0, "404": 2.0}, first=dict(body=1000.0, bodies=10.0), last=dict(body=1000.0, bodies=11.0))
    assert got == ("invalid_request", f"{invalid} (the rejected request bodies averaged ~0 bytes)")


def test_server_errors_against_fewer_responses_than_engine_errors():
    # 4 requests finished with reason error, one response counted: 4 of 1
    v, = run(O.detect_server_errors, scrape(0, responses={"2xx": 0.0}, finished={"error": 0.0}),
             scrape(20, responses={"2xx": 1.0}, finished={"error": 4.0}))
    assert v.why.startswith("0 of 1 responses in the last 20 s were 5xx (0%, 0.00 per s;")
    assert v.details["fraction"] == 4.0
    # nothing finished at all (SGLang's "all" did not move): nothing to judge against
    assert run(O.detect_server_errors, scrape(0, finished={"all": 0.0, "error": 0.0}),
               scrape(20, finished={"all": 0.0, "error": 3.0})) == []


def test_rate_over_a_span_under_a_second():
    o = O.Outcomes(scrape(0), scrape(0.5))
    assert (o.span_s, o.rate(1.0)) == (0.5, 2.0)


def test_each_outcome_fraction_is_a_share():
    from dataclasses import replace
    bad = replace(O.OutcomeSettings(), server_error_fraction=1.5, client_error_fraction=-0.5, abort_fraction=2.0)
    assert bad.validate() == ["server_error_fraction is a share from 0 to 1, not 1.5",
                              "client_error_fraction is a share from 0 to 1, not -0.5",
                              "abort_fraction is a share from 0 to 1, not 2"]
    assert O.OutcomeSettings().validate() == []
