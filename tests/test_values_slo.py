"""Values of the SLO maths and the SLO file's checks (servewatch/derive/slo.py): error budgets, burn rates of the
standard windows for a 30-day and a 7-day budget (hand-computed below), durations both ways, and the exact words
of every refusal, with the boundaries just under, at and just over (issue 40)."""

import math

import pytest

from servewatch.derive import slo as S
from servewatch.derive.slo import BurnWindow, Objective, SloInvalid, duration_text, load_slo, parse_slo

DAY = 86400


def base(**kw):
    data = {"service": "chat", "objectives": {"availability": 99.9}}
    data.update(kw)
    return data


def refused(data, message):
    with pytest.raises(SloInvalid) as e:
        parse_slo(data, "slo.yaml")
    assert str(e.value) == message


def test_error_budget():
    assert Objective("availability", 99.9).error_budget == 0.001           # 1 - 0.999, to 12 decimals
    assert Objective("success", 99.5).error_budget == 0.005
    assert Objective("ttft", 95.0, 2.5).error_budget == 0.05


def test_burn_rates_of_the_standard_windows():
    budget = 30 * DAY                                                        # 2,592,000 s
    # 2 % in 1 h: 0.02 x 2,592,000 / 3,600 = 14.4; 5 % in 6 h: 0.05 x 2,592,000 / 21,600 = 6;
    # 10 % in 1 d: 0.1 x 2,592,000 / 86,400 = 3; 10 % in 3 d: 0.1 x 2,592,000 / 259,200 = 1
    assert [w.burn_rate(budget) for w in S.STANDARD_WINDOWS] == [14.4, 6.0, 3.0, 1.0]
    assert [(w.severity, w.long_s, w.short_s, w.budget_spent) for w in S.STANDARD_WINDOWS] == [
        ("page", 3600, 300, 2.0), ("page", 21600, 1800, 5.0), ("ticket", 86400, 7200, 10.0),
        ("ticket", 259200, 21600, 10.0)]
    # a 7-day budget: 0.02 x 604,800 / 3,600 = 3.36
    assert S.STANDARD_WINDOWS[0].burn_rate(7 * DAY) == 3.36
    # six decimals: 1 % of 1,000 s in 3 s = 3.333333
    assert BurnWindow("page", 3, 1, 1.0).burn_rate(1000) == 3.333333


@pytest.mark.parametrize("seconds, text", [(300, "5m"), (DAY, "1d"), (7200, "2h"), (90, "90s"), (90000, "25h"),
                                           (60, "1m"), (3600, "1h"), (59, "59s"), (3 * DAY, "3d")])
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text


def test_a_whole_file():
    slo = load_slo("""
service: chat
budget: 7d
selector: {job: vllm, shard: 3}
objectives:
  availability: "99.9%"
  success: {target: 99.5}
  ttft: {target: 99, threshold: 2.5}
  e2e: {target: 95, threshold: 30}
min_requests: 1
engine: {slot_limit: 256, buckets: {ttft: [0.5, 1, 2.5]}}
windows:
  - {severity: page, long: 1h, short: 5m, budget_spent: 100}
""", "slo.yaml")
    assert (slo.service, slo.budget_s, slo.selector, slo.min_requests, slo.slot_limit) == \
        ("chat", 7 * DAY, {"job": "vllm", "shard": "3"}, 1, 256)
    assert slo.objectives == (Objective("availability", 99.9), Objective("success", 99.5),
                              Objective("ttft", 99.0, 2.5), Objective("e2e", 95.0, 30.0))
    assert slo.buckets == {"ttft": (0.5, 1.0, 2.5)}
    assert slo.windows == (BurnWindow("page", 3600, 300, 100.0),)
    assert slo.objective("e2e") == Objective("e2e", 95.0, 30.0) and slo.objective("tpot") is None
    plain = parse_slo(base(), "f")
    assert (plain.budget_s, plain.min_requests, plain.windows, plain.selector, plain.slot_limit, plain.buckets) == \
        (30 * DAY, 100, S.STANDARD_WINDOWS, {}, None, {})


def test_yaml_that_does_not_parse():
    with pytest.raises(SloInvalid) as e:
        load_slo("service: [chat\n", "slo.yaml")
    # the parser's mark is 0-based: line index 1 is the second line
    assert str(e.value) == "slo.yaml: line 2 not valid YAML (expected ',' or ']', but got '<stream end>')"
    with pytest.raises(SloInvalid) as e:
        load_slo("\x07", "slo.yaml")                          # a reader error: no mark, no problem
    assert str(e.value) == "slo.yaml: not valid YAML (parse error)"


@pytest.mark.parametrize("data, message", [
    ([], "slo.yaml: expected a mapping with keys service, budget, selector, objectives, min_requests, engine, windows"),
    (base(extra=1), "slo.yaml: extra: unknown key (known: service, budget, selector, objectives, min_requests, engine, "
                    "windows)"),
    (base(service="a b"), "slo.yaml: service: required: 1-64 letters, digits, '_', '.', '-'"),
    (base(service="a" * 65), "slo.yaml: service: required: 1-64 letters, digits, '_', '.', '-'"),
    (base(service=5), "slo.yaml: service: required: 1-64 letters, digits, '_', '.', '-'"),
    (base(budget="0d"), "slo.yaml: budget: '0d' is not a duration like 5m, 1h, 30d"),
    (base(budget=30), "slo.yaml: budget: 30 is not a duration like 5m, 1h, 30d"),
    (base(budget=1.5), "slo.yaml: budget: 1.5 is not a duration like 5m, 1h, 30d"),
    (base(budget="1y"), "slo.yaml: budget: '1y' is not a duration like 5m, 1h, 30d"),
    (base(min_requests=0), "slo.yaml: min_requests: 0 is not a whole number >= 1"),
    (base(min_requests=True), "slo.yaml: min_requests: True is not a whole number >= 1"),
    (base(min_requests=1.0), "slo.yaml: min_requests: 1.0 is not a whole number >= 1"),
    (base(budget="1h"), "slo.yaml: budget: window 6h is longer than the budget 1h (give windows: that fit the budget)"),
    (base(budget="1h", windows=[{"severity": "page", "long": "1h", "short": "5m", "budget_spent": 2},
                                {"severity": "ticket", "long": "2h", "short": "5m", "budget_spent": 2}]),
     "slo.yaml: windows[1].long: window 2h is longer than the budget 1h"),
])
def test_refusals_at_the_top(data, message):
    refused(data, message)


def test_the_longest_window_may_equal_the_budget():
    assert parse_slo(base(budget="3d"), "f").budget_s == 3 * DAY                # 3 d window, 3 d budget: fits
    assert len(parse_slo(base(service="a" * 64), "f").service) == 64


@pytest.mark.parametrize("objectives, message", [
    (None, "slo.yaml: objectives: required: a mapping with some of availability, success, ttft, tpot, e2e"),
    ({}, "slo.yaml: objectives: required: a mapping with some of availability, success, ttft, tpot, e2e"),
    ({"latency": 1}, "slo.yaml: objectives.latency: unknown key (known: availability, success, ttft, tpot, e2e)"),
    ({"success": {"goal": 99}}, "slo.yaml: objectives.success.goal: unknown key (known: target)"),
    ({"availability": "most"}, "slo.yaml: objectives.availability: 'most' is not a percentage"),
    ({"availability": "99X"}, "slo.yaml: objectives.availability: '99X' is not a percentage"),
    ({"availability": None}, "slo.yaml: objectives.availability: None is not a percentage"),
    ({"availability": True}, "slo.yaml: objectives.availability: True is not a percentage above 0"),
    ({"availability": 0}, "slo.yaml: objectives.availability: 0 is not a percentage above 0"),
    ({"availability": float("nan")}, "slo.yaml: objectives.availability: nan is not a percentage above 0"),
    ({"availability": 100.5}, "slo.yaml: objectives.availability: 100.5 % is over 100 %"),
    ({"availability": 100}, "slo.yaml: objectives.availability: 100 % leaves no error budget to burn"),
    ({"ttft": 99}, "slo.yaml: objectives.ttft: expected {target: PERCENT, threshold: SECONDS}"),
    ({"ttft": {"target": 99, "threshold": 1, "x": 1}},
     "slo.yaml: objectives.ttft.x: unknown key (known: target, threshold)"),
    ({"ttft": {"target": 99, "threshold": 0}}, "slo.yaml: objectives.ttft.threshold: 0 is not a latency in seconds above 0"),
    ({"ttft": {"target": 99, "threshold": True}},
     "slo.yaml: objectives.ttft.threshold: True is not a latency in seconds above 0"),
    ({"ttft": {"target": 99, "threshold": "1"}},
     "slo.yaml: objectives.ttft.threshold: '1' is not a latency in seconds above 0"),
    ({"ttft": {"target": 99, "threshold": float("inf")}},
     "slo.yaml: objectives.ttft.threshold: inf is not a latency in seconds above 0"),
    ({"ttft": {"target": 0, "threshold": 1}}, "slo.yaml: objectives.ttft.target: 0 is not a percentage above 0"),
])
def test_refusals_of_objectives(objectives, message):
    refused(base(objectives=objectives), message)


def test_percentages_just_inside():
    objectives = parse_slo(base(objectives={"availability": " 99.99 % ".replace(" %", "%"), "success": 0.001,
                                            "tpot": {"target": 99.999, "threshold": 0.001}}), "f").objectives
    assert objectives == (Objective("availability", 99.99), Objective("success", 0.001), Objective("tpot", 99.999, 0.001))
    assert objectives[2].threshold_s == 0.001 and isinstance(objectives[2].threshold_s, float)
    assert parse_slo(base(objectives={"ttft": {"target": 50, "threshold": 2}}), "f").objectives[0].threshold_s == 2.0


@pytest.mark.parametrize("selector, message", [
    (["job"], "slo.yaml: selector: expected a mapping of label name to value"),
    ({"1job": "x"}, "slo.yaml: selector.1job: not a Prometheus label name"),
    ({"__name__": "x"}, "slo.yaml: selector.__name__: not a Prometheus label name"),
    ({"job": True}, "slo.yaml: selector.job: expected a string value"),
    ({"job": 1.5}, "slo.yaml: selector.job: expected a string value"),
])
def test_refusals_of_the_selector(selector, message):
    refused(base(selector=selector), message)


@pytest.mark.parametrize("engine, message", [
    ([1], "slo.yaml: engine: expected a mapping with slot_limit and/or buckets"),
    ({"slots": 1}, "slo.yaml: engine.slots: unknown key (known: slot_limit, buckets)"),
    ({"slot_limit": 0}, "slo.yaml: engine.slot_limit: 0 is not a whole number >= 1"),
    ({"slot_limit": True}, "slo.yaml: engine.slot_limit: True is not a whole number >= 1"),
    ({"slot_limit": 2.0}, "slo.yaml: engine.slot_limit: 2.0 is not a whole number >= 1"),
    ({"buckets": [1]}, "slo.yaml: engine.buckets: expected a mapping of histogram (ttft, tpot, e2e) to its edges"),
    ({"buckets": {"itl": [1]}}, "slo.yaml: engine.buckets.itl: unknown key (known: ttft, tpot, e2e)"),
    ({"buckets": {"ttft": []}}, "slo.yaml: engine.buckets.ttft: expected a list of numbers"),
    ({"buckets": {"ttft": [1, True]}}, "slo.yaml: engine.buckets.ttft: expected a list of numbers"),
    ({"buckets": {"ttft": [1, float("inf")]}}, "slo.yaml: engine.buckets.ttft: expected a list of numbers"),
    ({"buckets": {"ttft": (1, 2)}}, "slo.yaml: engine.buckets.ttft: expected a list of numbers"),
    ({"buckets": {"ttft": [1, 1]}}, "slo.yaml: engine.buckets.ttft: edges must be strictly increasing"),
    ({"buckets": {"ttft": [2, 1]}}, "slo.yaml: engine.buckets.ttft: edges must be strictly increasing"),
])
def test_refusals_of_the_engine(engine, message):
    refused(base(engine=engine), message)


def test_engine_slot_limit_one_is_enough():
    assert parse_slo(base(engine={"slot_limit": 1}), "f").slot_limit == 1


W = {"severity": "page", "long": "1h", "short": "5m", "budget_spent": 2}


@pytest.mark.parametrize("windows, message", [
    ([], "slo.yaml: windows: expected a list of {severity, long, short, budget_spent}"),
    ({"a": 1}, "slo.yaml: windows: expected a list of {severity, long, short, budget_spent}"),
    ([W, "x"], "slo.yaml: windows[1]: expected {severity, long, short, budget_spent}"),
    ([{**W, "burn": 1}], "slo.yaml: windows[0].burn: unknown key (known: severity, long, short, budget_spent)"),
    ([{**W, "severity": "info"}], "slo.yaml: windows[0].severity: 'info' is not one of page, ticket"),
    ([{**W, "long": "1x"}], "slo.yaml: windows[0].long: '1x' is not a duration like 5m, 1h, 30d"),
    ([{**W, "short": None}], "slo.yaml: windows[0].short: None is not a duration like 5m, 1h, 30d"),
    ([{**W, "short": "1h"}], "slo.yaml: windows[0].short: must be shorter than long"),
    ([{**W, "short": "2h"}], "slo.yaml: windows[0].short: must be shorter than long"),
    ([{**W, "budget_spent": 101}], "slo.yaml: windows[0].budget_spent: 101 % is over 100 %"),
])
def test_refusals_of_windows(windows, message):
    refused(base(windows=windows), message)


def test_a_window_just_shorter():
    assert parse_slo(base(windows=[{**W, "short": "59m"}, {**W, "severity": "ticket"}]), "f").windows == \
        (BurnWindow("page", 3600, 3540, 2.0), BurnWindow("ticket", 3600, 300, 2.0))


def test_durations():
    fail = lambda key, reason: SloInvalid(f"{key}: {reason}")
    assert [S._duration(v, "k", fail) for v in ("5s", " 2m ", "1h", "1d", "2w")] == [5, 120, 3600, DAY, 14 * DAY]
    assert S._percent("99.5 %".replace(" ", ""), "k", fail) == 99.5
    assert S._percent(" 50 ", "k", fail) == 50.0
    assert S._percent(100, "k", fail, whole_allowed=True) == 100.0
    assert math.isclose(S._percent("0.0001", "k", fail), 0.0001)


# -- the thresholds and the selector against an engine's series ----------------------------------------------------

class Hist:
    def __init__(self, edges):
        self.edges, self.name, self.edge_flag = edges, "vllm:ttft_seconds", "--buckets"


class Series:
    def __init__(self, availability="a", success="s", hists=None, engine_labels=("engine",)):
        self.naming, self.engine_labels = "vllm-9", engine_labels
        self.availability = None if availability is None else type("R", (), {"counter": "http_requests_total"})()
        self.success = success
        self._hists = {"ttft": Hist((0.5, 1.0, 2.5))} if hists is None else hists

    def histogram(self, kind):
        return self._hists.get(kind)


def slo_of(objectives, **kw):
    return parse_slo(base(objectives=objectives, **kw), "f")


def check(slo, series):
    with pytest.raises(SloInvalid) as e:
        S.check_thresholds(slo, series, "slo.yaml")
    return str(e.value)


def test_ratio_objectives_need_their_own_series():
    S.check_thresholds(slo_of({"availability": 99}), Series(success=None), "slo.yaml")
    S.check_thresholds(slo_of({"success": 99}), Series(availability=None), "slo.yaml")
    assert check(slo_of({"success": 99}), Series(success=None)) == \
        "slo.yaml: objectives.success: vllm-9 exports no series for it"
    assert check(slo_of({"availability": 99}), Series(availability=None)) == \
        "slo.yaml: objectives.availability: vllm-9 exports no series for it"


def test_a_threshold_must_be_a_bucket_edge():
    S.check_thresholds(slo_of({"ttft": {"target": 99, "threshold": 1.0 + 1e-10}}), Series(), "slo.yaml")  # isclose
    assert check(slo_of({"tpot": {"target": 99, "threshold": 1}}), Series()) == \
        "slo.yaml: objectives.tpot: vllm-9 exports no tpot histogram"
    words = ("use one of those, or add the edge with --buckets and list the edges under engine.buckets.ttft")
    assert check(slo_of({"ttft": {"target": 99, "threshold": 0.75}}), Series()) == \
        f"slo.yaml: objectives.ttft.threshold: 0.75 s is not a bucket edge of vllm:ttft_seconds (nearest: 0.5 and 1 s); {words}"
    assert check(slo_of({"ttft": {"target": 99, "threshold": 0.25}}), Series()) == \
        f"slo.yaml: objectives.ttft.threshold: 0.25 s is not a bucket edge of vllm:ttft_seconds (nearest: 0.5 s); {words}"
    assert check(slo_of({"ttft": {"target": 99, "threshold": 3}}), Series()) == \
        f"slo.yaml: objectives.ttft.threshold: 3 s is not a bucket edge of vllm:ttft_seconds (nearest: 2.5 s); {words}"
    # the SLO's own edges replace the engine's
    S.check_thresholds(slo_of({"ttft": {"target": 99, "threshold": 0.75}}, engine={"buckets": {"ttft": [0.75]}}),
                       Series(), "slo.yaml")


def test_an_engine_label_in_the_selector_only_matters_for_availability():
    S.check_selector(slo_of({"success": 99}, selector={"engine": "0"}), Series(), "slo.yaml")
    S.check_selector(slo_of({"availability": 99}, selector={"engine": "0"}), Series(availability=None), "slo.yaml")
    S.check_selector(slo_of({"availability": 99}, selector={"job": "x"}), Series(), "slo.yaml")
    with pytest.raises(SloInvalid) as e:
        S.check_selector(slo_of({"availability": 99}, selector={"job": "x", "engine": "0"}), Series(), "slo.yaml")
    assert str(e.value) == ("slo.yaml: selector.engine: http_requests_total has no engine label, so the availability "
                            "SLI would match nothing; select by a scrape label (job, instance)")


def test_load_slo_names_the_file_in_a_refusal():
    with pytest.raises(SloInvalid) as e:
        load_slo("service: 'a b'\nobjectives: {availability: 99}\n", "team/slo.yaml")
    assert str(e.value) == "team/slo.yaml: service: required: 1-64 letters, digits, '_', '.', '-'"
