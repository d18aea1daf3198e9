"""Value tests of detectors/capacity.py (issue 40): overload, kv_pressure (held, queued, preempting) and preemption as
whole verdicts, and a boundary test (just under, at, just over) for each threshold, read from DetectorConfig:
  overload_sustain_s         waiting > 0 for that long fires (`>=`);
  overload_clear_s           a dip to 0 (or a quiet end) that long, from its first cold scrape, ends the stretch (`>=`);
  overload_min_mean_waiting  a time-weighted mean of that many waiting fires (`>=`);
  kv_high                    overload's cause is "kv" at a peak of it (`>=`); kv_pressure's hot scrapes (`>=`);
  overload_slots_slack       running >= slot limit x (1 - slack) is at the limit;
  overload_slots_share       at the limit for that share of the stretch is "slots" (`>=`);
  kv_clear                   the mean that fires kv_pressure (`>=`);
  kv_sustain_s, kv_grace_s   as overload's sustain and clear (`>=`);
  kv_window_s                a scrape at exactly now - window is inside it;
  preemption_min, preemption_window_s   a rise of that much fires (`>=`); a scrape at exactly now - window counts.
A time-weighted mean gives the newest scrape no weight: values[i] holds from times[i] to times[i + 1]."""

from __future__ import annotations

from servewatch.detectors import capacity as C
from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import LogEvent, MetricsSample
from servewatch.timeline.window import Window

T0 = 1000.0
CONFIG = DetectorConfig()
STEP = 0.25
SUSTAIN, CLEAR, MIN_MEAN = CONFIG.overload_sustain_s, CONFIG.overload_clear_s, CONFIG.overload_min_mean_waiting
SLACK, SHARE, KV_HIGH, KV_CLEAR = CONFIG.overload_slots_slack, CONFIG.overload_slots_share, CONFIG.kv_high, CONFIG.kv_clear
KV_SUSTAIN, KV_GRACE, KV_WINDOW = CONFIG.kv_sustain_s, CONFIG.kv_grace_s, CONFIG.kv_window_s
P_MIN, P_WINDOW = CONFIG.preemption_min, CONFIG.preemption_window_s
SILENT = CONFIG.overload_metrics_silent_s


def scrape(t, waiting=0.0, running=4.0, kv=0.3, slot_limit=None, by_reason=None, gen=None, preempt=0.0,
           used=None, total=None, engine="0"):
    """One scrape at T0 + t of an engine that makes 10 tokens a second unless `gen` says otherwise."""
    state = EngineState("vllm", "vllm-test", {"model_name": "m", "engine": engine}, running=running, waiting=waiting,
                        waiting_by_reason=dict(by_reason or {}), slot_limit=slot_limit, kv_usage=kv,
                        kv_used_tokens=used, kv_total_tokens=total,
                        counters=Counters(prompt_tokens=0.0, generation_tokens=10.0 * t if gen is None else gen,
                                          preemptions=preempt, steps=10.0 * t if gen is None else gen))
    return MetricsSample(T0 + t, "vllm", "vllm-test", (state,))


def window(*samples):
    return Window(metrics=tuple(sorted(samples, key=lambda s: s.t)))


def queue(start, end, step=1.0, **kw):
    """Scrapes from T0 + start to T0 + end (both included), `step` apart."""
    n = round((end - start) / step)
    return [scrape(start + i * step, **kw) for i in range(n + 1)]


def overload(*samples):
    return C.detect_overload(window(*samples), CONFIG)


# --- overload from the scrapes ---------------------------------------------------------------------------------

def test_overload_is_the_whole_verdict():
    # idle at 0; waiting 2 from 1 to 6, 6 from 7 to 13: mean over [1, 13] = (2 x 6 s + 6 x 6 s) / 12 s = 4.0
    samples = [scrape(0, running=2)] + [scrape(t, waiting=2 if t <= 6 else 6, running=16, slot_limit=16, kv=0.28)
                                        for t in range(1, 14)]
    assert overload(*samples) == [Verdict(
        "overload", T0 + 13, T0 + 1,
        "6 waiting on engine 0, waiting > 0 for 12.0 s (≥ 10 s, 4.0 on average); cause slots: running 16 = slot "
        "limit 16 while KV is 28%: out of slots, not memory",
        (Evidence("metrics", T0 + 1, "waiting", 2.0), Evidence("metrics", T0 + 13, "waiting", 6.0),
         Evidence("metrics", T0 + 13, "running", 16.0), Evidence("metrics", T0 + 13, "kv_usage", 0.28),
         Evidence("metrics", T0 + 13, "slot_limit", 16)),
        {"engine": "engine=0", "cause": "slots", "waiting": 6.0, "running": 16.0, "slot_limit": 16, "kv_usage": 0.28,
         "sustained_s": 12.0, "mean_waiting": (2 * 6 + 6 * 6) / 12})]
    assert f"(≥ {SUSTAIN:g} s," in overload(*samples)[0].why


def test_each_engine_is_judged_alone_in_key_order():
    a = queue(0, 12, waiting=3, engine="1")
    b = queue(0, 12, waiting=4, engine="0")
    merged = [MetricsSample(x.t, "vllm", "vllm-test", (y.engines[0], x.engines[0])) for x, y in zip(a, b)]
    found = overload(*merged)
    assert [(v.details["engine"], v.details["waiting"], v.details["mean_waiting"]) for v in found] == [
        ("engine=0", 4.0, 4.0), ("engine=1", 3.0, 3.0)]


def test_overload_sustain_under_at_and_over():
    for d, fires in ((SUSTAIN - STEP, False), (SUSTAIN, True), (SUSTAIN + STEP, True)):
        found = overload(*queue(0, d, step=STEP, waiting=3))
        assert [v.details["sustained_s"] for v in found] == ([d] if fires else []), d


def test_overload_clear_dip_under_at_and_over():
    # waiting from 0 to 6, 0 from 7 until h, waiting again from h to h + 6: a dip shorter than CLEAR (from its first
    # cold scrape, at 7, to the next hot one) joins the two stretches (h + 6 s), one of CLEAR or more does not (6 s)
    for h, joined in ((7 + CLEAR - STEP, True), (7 + CLEAR, False), (7 + CLEAR + STEP, False)):
        samples = queue(0, 6, waiting=3) + queue(7, h - STEP, step=STEP, waiting=0) + queue(h, h + 6, waiting=3)
        found = overload(*samples)
        assert [(v.onset, v.details["sustained_s"]) for v in found] == ([(T0, h + 6)] if joined else []), h


def test_overload_ends_once_the_queue_was_empty_for_clear_s():
    # waiting from 0 to 12, then empty from 13 to e: still the overload while e - 13 < CLEAR
    for e, fires in ((13 + CLEAR - STEP, True), (13 + CLEAR, False), (13 + CLEAR + STEP, False)):
        found = overload(*queue(0, 12, waiting=3), *queue(13, e, step=STEP, waiting=0))
        assert [(v.t, v.details["sustained_s"]) for v in found] == ([(T0 + 12, 12.0)] if fires else []), e


def test_overload_mean_waiting_under_at_and_over():
    for w, fires in ((MIN_MEAN - 0.5, False), (MIN_MEAN, True), (MIN_MEAN + 0.5, True)):
        found = overload(*queue(0, 12, waiting=w))
        assert [v.details["mean_waiting"] for v in found] == ([w] if fires else []), w
    # the newest scrape has no weight in the mean: 1 waiting for 12 s, then 40 at the end is a mean of 1
    assert overload(*queue(0, 12, waiting=1), scrape(13, waiting=40)) == []


def test_a_queue_behind_an_engine_that_does_not_move_is_no_overload():
    assert overload(*queue(0, 12, waiting=6, gen=50.0)) == []
    # it moved before the queue, not during it
    assert overload(scrape(0, gen=0.0), *queue(1, 13, waiting=6, gen=50.0)) == []
    # it moved within the queue, once
    found = overload(*queue(0, 12, waiting=6, gen=50.0), scrape(13, waiting=6, gen=51.0))
    assert [v.details["sustained_s"] for v in found] == [13.0]


# --- overload's cause --------------------------------------------------------------------------------------------

def cause(samples):
    v, = overload(*samples)
    return v.details["cause"], v.why.partition("; cause ")[2].partition(": ")[2]


def test_deferred_is_the_cause_when_at_least_as_many_wait_deferred():
    s = queue(0, 12, waiting=6, by_reason={"deferred": 3, "capacity": 3})
    assert cause(s) == ("deferred", "3 of 6 waiting are deferred (not for lack of room)")
    assert cause(queue(0, 12, waiting=6, slot_limit=16, by_reason={"deferred": 3, "capacity": 3.5}))[0] == "unknown"
    assert cause(queue(0, 12, waiting=6, slot_limit=16, by_reason={"deferred": 0}))[0] == "unknown"
    assert cause(queue(0, 12, waiting=6, by_reason={"deferred": 2}))[0] == "deferred"     # no capacity count: 0


def test_kv_cause_at_the_peak_of_the_stretch_under_at_and_over():
    for peak, is_kv in ((KV_HIGH - 0.01, False), (KV_HIGH, True), (KV_HIGH + 0.01, True)):
        s = queue(0, 5, waiting=4, running=5, kv=peak, slot_limit=16) + queue(6, 12, waiting=4, running=5, kv=0.5,
                                                                             slot_limit=16)
        got = cause(s)
        assert got[0] == ("kv" if is_kv else "unknown"), peak
        if is_kv:
            assert got[1] == f"KV peaked at {peak:.0%} (≥ {KV_HIGH:.0%}) while requests waited, now 50% with 5 running"
    # a peak before the stretch is not the stretch's
    assert cause([scrape(0, kv=0.99)] + queue(1, 13, waiting=4, running=5, kv=0.5, slot_limit=16))[0] == "unknown"


def test_slots_within_the_slack_of_the_limit_under_at_and_over():
    full = 100 * (1.0 - SLACK)          # 98
    for running, words in (
            (full - 0.5, None),
            (full, f"running {full:.3g} of the slot limit 100 (the slots of requests that just finished, not yet "
                   "refilled) while KV is 30%: out of slots, not memory"),
            (100 - 1, "running 99 of the slot limit 100 (the slots of requests that just finished, not yet refilled) "
                      "while KV is 30%: out of slots, not memory"),
            (100, "running 100 = slot limit 100 while KV is 30%: out of slots, not memory")):
        got = cause(queue(0, 12, waiting=4, running=running, slot_limit=100))
        assert got == (("slots", words) if words else ("unknown", f"running {running:.3g} below its limit (100) and "
                                                                  "KV 30%: nothing is admitted though there is room"))


def test_slots_for_a_share_of_the_stretch_under_at_and_over():
    # the stretch is [0, 12]: at the limit (16) for the first k seconds, then 10; share k / 12
    for k, fires in ((12 * SHARE - 1, False), (12 * SHARE, True), (12 * SHARE + 1, True)):
        s = [scrape(t, waiting=4, running=16 if t < k else 10, slot_limit=16, kv=0.25) for t in range(13)]
        got = cause(s)
        if fires:
            assert got == ("slots", f"running at the slot limit 16 for {k / 12:.0%} of the stretch (now 10) while "
                                    "KV peaked at 25%: out of slots, not memory"), k
        else:
            assert got[0] == "unknown", k
    # within the slack of the limit counts as at it (16 x (1 - slack) = 15.68): 15.7 for 8 s of 12
    s = [scrape(t, waiting=4, running=15.7 if t < 8 else 10, slot_limit=16) for t in range(13)]
    assert cause(s)[1].startswith("running at the slot limit 16 for 67% of the stretch (now 10)")


def test_slots_inferred_from_a_flat_running_count_without_a_limit():
    assert cause(queue(0, 12, waiting=4, running=7)) == (
        "slots", "running flat at 7 (slot limit unknown, inferred) while KV is 30%")
    s = queue(0, 6, waiting=4, running=7) + queue(7, 12, waiting=4, running=8)
    assert cause(s) == ("unknown", "running 8 below its limit (n/a) and KV 30%: nothing is admitted though there is room")
    assert cause(queue(0, 12, waiting=4, running=0))[0] == "unknown"
    # a flat count with a known limit below it is not inferred
    assert cause(queue(0, 12, waiting=4, running=7, slot_limit=16))[0] == "unknown"


# --- kv_pressure --------------------------------------------------------------------------------------------------

def kv_pressure(*samples):
    return C.detect_kv_pressure(window(*samples), CONFIG)


def test_kv_held_is_the_whole_verdict():
    # 50% at 0; 93.75% from 1 to 4, 100% from 5 to 8: held over [1, 8], mean (0.9375 x 4 s + 1.0 x 3 s) / 7 s
    kvs = [0.5, 0.9375, 0.9375, 0.9375, 0.9375, 1.0, 1.0, 1.0, 1.0]
    samples = [scrape(t, kv=kv, used=kv * 16000, total=16000) for t, kv in enumerate(kvs)]
    mean = (0.9375 * 4 + 1.0 * 3) / 7
    assert kv_pressure(*samples) == [Verdict(
        "kv_pressure", T0 + 8, T0 + 1,
        f"KV cache 100% (16000 of 16000 tokens) on engine 0: ≥ 90% over 7.0 s (dips under {KV_GRACE:g} s included; "
        f"mean {mean:.0%}, peak 100%), 4 running, 0 waiting",
        (Evidence("metrics", T0 + 1, "kv_usage", 0.9375), Evidence("metrics", T0 + 8, "kv_usage", 1.0),
         Evidence("metrics", T0 + 8, "waiting", 0.0)),
        {"engine": "engine=0", "rule": "held", "kv_usage": 1.0, "peak_kv_usage": 1.0, "mean_kv_usage": mean,
         "sustained_s": 7.0, "kv_total_tokens": 16000})]
    assert f"{mean:.0%}" == "96%"
    # the tokens are said only where the total is known and not 0
    samples = [scrape(t, kv=kv, used=kv * 16000, total=0) for t, kv in enumerate(kvs)]
    assert kv_pressure(*samples)[0].why.startswith("KV cache 100% on engine 0: ")
    samples = [scrape(t, kv=kv, used=None, total=16000) for t, kv in enumerate(kvs)]
    assert kv_pressure(*samples)[0].why.startswith("KV cache 100% on engine 0: ")


def swinging():
    """KV 100% with 3 waiting from 0 to 3 and 10 to 13 (5 waiting at 11), 75% and none waiting from 4 to 9 and 14 to
    19, 100% at 20: each dip lasts 6 s (>= grace), so nothing is held; over [0, 20] the mean is
    (8 x 1.0 + 12 x 0.75) / 20 = 0.85."""
    out = []
    for t in range(21):
        hot = t % 10 < 4
        out.append(scrape(t, kv=1.0 if hot else 0.75, waiting=(5 if t == 11 else 3) if hot else 0))
    return out


def test_kv_queued_is_the_whole_verdict():
    assert kv_pressure(*swinging()) == [Verdict(
        "kv_pressure", T0 + 20, T0 + 0,
        "KV cache 100% on engine 0: mean 85% over the last 20.0 s, peak 100%, with up to 5 waiting for room, "
        "4 running, 3 waiting",
        (Evidence("metrics", T0, "kv_usage", 1.0), Evidence("metrics", T0 + 20, "kv_usage", 1.0),
         Evidence("metrics", T0 + 20, "waiting", 3.0)),
        {"engine": "engine=0", "rule": "queued", "kv_usage": 1.0, "peak_kv_usage": 1.0,
         "mean_kv_usage": (8 * 1.0 + 12 * 0.75) / 20, "sustained_s": 20.0, "kv_total_tokens": None})]
    # nobody waiting: not queued
    calm = [scrape(s.t - T0, kv=s.engines[0].kv_usage) for s in swinging()]
    assert kv_pressure(*calm) == []


def test_kv_preempting_is_the_whole_verdict():
    # KV 95% with 2 waiting at 10 only (30% elsewhere); the counter rises 4 → 7 within the last 20 s
    samples = [scrape(t, kv=0.95 if t == 10 else 0.3, waiting=2 if t == 10 else 0, preempt=4.0 if t < 12 else 7.0)
               for t in range(21)]
    mean = (0.95 + 19 * 0.3) / 20
    v, = kv_pressure(*samples)
    assert v == Verdict(
        "kv_pressure", T0 + 20, T0,
        "KV cache 30% on engine 0: +3 preemptions in the last 20.0 s with KV peaking at 95% and up to 2 waiting: the "
        "engine evicts running requests to find room, 4 running, 0 waiting",
        (Evidence("metrics", T0, "kv_usage", 0.3), Evidence("metrics", T0 + 20, "kv_usage", 0.3),
         Evidence("metrics", T0 + 20, "waiting", 0.0)),
        {"engine": "engine=0", "rule": "preempting", "kv_usage": 0.3, "peak_kv_usage": 0.95,
         "mean_kv_usage": v.details["mean_kv_usage"], "sustained_s": 20.0, "kv_total_tokens": None})
    assert abs(v.details["mean_kv_usage"] - mean) < 1e-12
    # full but nobody waiting, or waiting but not full: not preempting
    assert kv_pressure(*[scrape(s.t - T0, kv=s.engines[0].kv_usage, preempt=s.engines[0].counters.preemptions)
                         for s in samples]) == []
    assert kv_pressure(*[scrape(s.t - T0, waiting=s.engines[0].waiting, preempt=s.engines[0].counters.preemptions)
                         for s in samples]) == []


def test_kv_preempting_reads_the_counters_rise_under_at_and_over():
    for rise, fires in ((P_MIN - 0.5, False), (P_MIN, True), (P_MIN + 1, True)):
        samples = [scrape(t, kv=0.95 if t == 10 else 0.3, waiting=2 if t == 10 else 0, preempt=4.0 + (rise if t >= 12 else 0))
                   for t in range(21)]
        found = kv_pressure(*samples)
        assert [v.why.partition(": ")[2].partition(" preemptions")[0] for v in found] == (
            [f"+{rise:g}"] if fires else []), rise
    # a counter that went down (a reset) is no rise; one not exported neither
    samples = [scrape(t, kv=0.95 if t == 10 else 0.3, waiting=2 if t == 10 else 0, preempt=9.0 if t < 12 else 2.0)
               for t in range(21)]
    assert kv_pressure(*samples) == []
    assert C._preempted([(s, s.engines[0]) for s in samples]) == 0.0
    none = [MetricsSample(s.t, s.dialect, s.naming, (EngineState("vllm", "x", {}, counters=Counters()),))
            for s in samples[:3]]
    assert C._preempted([(s, s.engines[0]) for s in none]) == 0.0
    rising = [scrape(t, preempt=p) for t, p in enumerate((None, 2.0, 3.0, None, 6.0, None))]
    assert C._preempted([(s, s.engines[0]) for s in rising]) == 6.0 - 2.0


def test_kv_high_under_at_and_over():
    for kv, fires in ((KV_HIGH - 0.01, False), (KV_HIGH, True), (KV_HIGH + 0.01, True)):
        found = kv_pressure(*queue(0, 8, kv=kv))
        assert [(v.details["rule"], v.details["mean_kv_usage"]) for v in found] == (
            [("held", sum([kv] * 8) / 8)] if fires else []), kv


def test_kv_clear_mean_under_at_and_over():
    # 100% from 0 to 4, c from 5 to 8 (a 4 s dip, under the grace), 100% at 9 and 10: mean (5 + 4c + 1) / 10
    at = (KV_CLEAR * 10 - 6) / 4         # 0.5
    for c, fires in ((at - 0.25, False), (at, True), (at + 0.25, True)):
        samples = [scrape(t, kv=c if 5 <= t <= 8 else 1.0) for t in range(11)]
        found = kv_pressure(*samples)
        assert [v.details["mean_kv_usage"] for v in found] == ([(5 + 4 * c + 1) / 10] if fires else []), c


def test_kv_sustain_under_at_and_over():
    for d, fires in ((KV_SUSTAIN - STEP, False), (KV_SUSTAIN, True), (KV_SUSTAIN + STEP, True)):
        found = kv_pressure(*queue(0, d, step=STEP, kv=1.0))
        assert [v.details["sustained_s"] for v in found] == ([d] if fires else []), d
    # queued: 100% at 0 with 3 waiting, 85% after, seen for d seconds
    for d, fires in ((KV_SUSTAIN - STEP, False), (KV_SUSTAIN, True), (KV_SUSTAIN + STEP, True)):
        found = kv_pressure(scrape(0, kv=1.0, waiting=3), *queue(STEP, d, step=STEP, kv=0.85))
        assert [(v.details["rule"], v.details["sustained_s"]) for v in found] == ([("queued", d)] if fires else []), d


def test_kv_grace_under_at_and_over():
    # 100% from 0 to 3, 85% from 4 until h, 100% from h to h + 2: joined while h - 4 < grace
    for h, joined in ((4 + KV_GRACE - STEP, True), (4 + KV_GRACE, False), (4 + KV_GRACE + STEP, False)):
        samples = queue(0, 3, kv=1.0) + queue(4, h - STEP, step=STEP, kv=0.85) + queue(h, h + 2, kv=1.0)
        found = kv_pressure(*samples)
        assert [(v.onset, v.details["sustained_s"]) for v in found] == ([(T0, h + 2)] if joined else []), h
    # a quiet end as long as the grace ends it too: 100% from 0 to 8, 85% from 9 to e
    for e, fires in ((9 + KV_GRACE - STEP, True), (9 + KV_GRACE, False)):
        found = kv_pressure(*queue(0, 8, kv=1.0), *queue(9, e, step=STEP, kv=0.85))
        assert [v.details["rule"] for v in found] == (["held"] if fires else []), e


def test_kv_window_holds_a_scrape_at_exactly_its_start():
    # 100% with 3 waiting at 0 only, 85% after, the newest at e: the peak is in the window while 0 >= e - window
    for e, fires in ((KV_WINDOW - STEP, True), (KV_WINDOW, True), (KV_WINDOW + STEP, False)):
        found = kv_pressure(scrape(0, kv=1.0, waiting=3), *queue(1, e - 1, kv=0.85), scrape(e, kv=0.85))
        assert [(v.onset, v.details["peak_kv_usage"]) for v in found] == ([(T0, 1.0)] if fires else []), e


def test_kv_pressure_reads_only_scrapes_with_a_known_kv():
    # scrapes without a KV usage are skipped, not read as 0: held over [0, 8] with None every other second
    samples = [scrape(t, kv=None if t % 2 else 1.0) for t in range(9)]
    v, = kv_pressure(*samples)
    assert (v.onset, v.t, v.details["mean_kv_usage"], v.details["sustained_s"]) == (T0, T0 + 8, 1.0, 8.0)
    assert C.detect_kv_pressure(Window(), CONFIG) == []


# --- preemption -----------------------------------------------------------------------------------------------

def preemption(*samples):
    return C.detect_preemption(window(*samples), CONFIG)


def test_preemption_is_the_whole_verdict():
    # 500 from long ago; 500 at 100, 503 at 101, a reset to 1 at 102, 4 at 103: +3 +3 = 6 in the window
    samples = [scrape(0, preempt=500.0), scrape(100, preempt=500.0), scrape(101, preempt=503.0, kv=0.5, waiting=2),
               scrape(102, preempt=1.0), scrape(103, preempt=4.0, kv=0.25, waiting=1)]
    v, = preemption(*samples)
    # the window [103 - 60, 103] holds the scrapes from 100: the first is at 100
    assert v == Verdict(
        "preemption", T0 + 103, T0 + 101,
        "+6 preemptions in the last 3 s on engine 0 (counter 500 → 4; the delta, not the cumulative value); KV 25%, "
        "1 waiting",
        (Evidence("metrics", T0 + 100, "counters.preemptions", 500.0),
         Evidence("metrics", T0 + 103, "counters.preemptions", 4.0), Evidence("metrics", T0 + 103, "kv_usage", 0.25)),
        {"engine": "engine=0", "delta": (503 - 500) + (4 - 1), "window_s": 103.0 - 100.0, "kv_usage": 0.25})
    assert preemption() == [] and C.detect_preemption(Window(), CONFIG) == []


def test_preemption_min_under_at_and_over():
    for rise, fires in ((P_MIN - 0.5, False), (P_MIN, True), (P_MIN + 1, True)):
        found = preemption(scrape(0, preempt=10.0), scrape(1, preempt=10.0 + rise), scrape(2, preempt=10.0 + rise))
        assert [(v.onset, v.details["delta"]) for v in found] == ([(T0 + 1, rise)] if fires else []), rise
    # no rise at all, or only a reset
    assert preemption(*queue(0, 5, preempt=3.0)) == []
    assert preemption(scrape(0, preempt=9.0), scrape(1, preempt=2.0), scrape(2, preempt=2.0)) == []


def test_preemption_window_holds_a_scrape_at_exactly_its_start():
    # 0 at 0, 2 at 1, the newest at e: the rise is seen while the scrape at 0 is in [e - window, e]
    for e, fires in ((P_WINDOW - STEP, True), (P_WINDOW, True), (P_WINDOW + STEP, False)):
        found = preemption(scrape(0, preempt=0.0), scrape(1, preempt=2.0), scrape(e, preempt=2.0))
        assert [(v.onset, v.details["delta"], v.details["window_s"]) for v in found] == (
            [(T0 + 1, 2.0, e)] if fires else []), e
    # a scrape without the counter is skipped, not read as 0
    none = MetricsSample(T0 + 1.5, "vllm", "vllm-test",
                         (EngineState("vllm", "vllm-test", {"model_name": "m", "engine": "0"}, running=4.0),))
    v, = preemption(scrape(0, preempt=0.0), none, scrape(2, preempt=2.0))
    assert (v.onset, v.details["delta"]) == (T0 + 2, 2.0)


# --- overload from the engine's stats lines ---------------------------------------------------------------------

def line(t, waiting, running=4, kv_pct=6.25, gen_tps=100.0, prompt_tps=0.0, engine=0):
    """vLLM's periodic stats line at T0 + t, as the log source reads it."""
    return LogEvent(T0 + t, "stats", {"dialect": "vllm", "engine": engine, "prompt_tps": prompt_tps, "gen_tps": gen_tps,
                                      "running": running, "waiting": waiting, "kv_pct": kv_pct, "prefix_hit_pct": 0.0})


def idle(t):
    return scrape(t, running=0.0, kv=0.0, slot_limit=4, gen=0.0)


def from_lines(scrapes, lines):
    return C.detect_overload(Window(metrics=tuple(scrapes), logs=tuple(lines)), CONFIG)


def test_overload_from_stats_lines_is_the_whole_verdict():
    # idle scrapes (slot limit 4) at 0, 1, 2, then none; lines from 3 to 15: waiting 2 to 8, 6 from 9
    lines = [line(t, 2 if t <= 8 else 6) for t in range(3, 16)]
    assert from_lines([idle(0), idle(1), idle(2)], lines) == [Verdict(
        "overload", T0 + 15, T0 + 3,
        "6 waiting on engine 0, waiting > 0 for 12.0 s (≥ 10 s, 4.0 on average), from vLLM's own stats line at "
        "00:16:55 UTC; /metrics did not answer for 13 s; cause slots: running 4 = slot limit 4 while KV is 6%: out of "
        "slots, not memory",
        (Evidence("log", T0 + 3, "waiting", 2), Evidence("log", T0 + 15, "waiting", 6),
         Evidence("log", T0 + 15, "running", 4), Evidence("log", T0 + 15, "kv_pct", 6.25)),
        {"engine": "engine=0", "cause": "slots", "waiting": 6, "running": 4, "slot_limit": 4, "kv_usage": 0.0625,
         "sustained_s": 12.0, "mean_waiting": (2 * 6 + 6 * 6) / 12, "seen_in": "log",
         "metrics_silent_s": (T0 + 15) - (T0 + 2)})]
    assert f"{T0 + 15:.0f}" == "1015"      # 00:16:55 UTC on 1 January 1970


def test_stats_lines_decide_after_metrics_silent_s_under_at_and_over():
    # good idle scrapes every `gap` s from 2 while the lines (3 to 15) say 3 waiting: silent for the longest gap
    lines = [line(t, 3) for t in range(3, 16)]
    for gap, fires in ((SILENT - STEP, False), (SILENT, True), (SILENT + STEP, True)):
        scrapes = [idle(0), idle(1)] + [idle(2 + k * gap) for k in range(3)]
        assert 15 - (2 + 2 * gap) < gap
        found = from_lines(scrapes, lines)
        assert [(v.details["metrics_silent_s"], v.details["sustained_s"]) for v in found] == (
            [(gap, 12.0)] if fires else []), gap


def test_stats_lines_of_an_engine_that_computes_nothing_are_no_overload():
    lines = [line(t, 3, gen_tps=0.0) for t in range(3, 16)]
    assert from_lines([idle(0)], lines) == []
    # the first line of the stretch does not count (its figures are the time before the queue)
    lines[0] = line(3, 3, gen_tps=50.0)
    assert from_lines([idle(0)], lines) == []
    lines[1] = line(4, 3, gen_tps=0.0, prompt_tps=50.0)
    assert [v.details["sustained_s"] for v in from_lines([idle(0)], lines)] == [12.0]


def test_stats_lines_rules_sustain_clear_and_mean():
    for d, fires in ((SUSTAIN - 1, False), (SUSTAIN, True)):
        found = from_lines([idle(0)], [line(3 + t, 3) for t in range(int(d) + 1)])
        assert [v.details["sustained_s"] for v in found] == ([d] if fires else []), d
    for w, fires in ((MIN_MEAN - 0.5, False), (MIN_MEAN, True)):
        found = from_lines([idle(0)], [line(3 + t, w) for t in range(13)])
        assert [v.details["mean_waiting"] for v in found] == ([w] if fires else []), w
    # an empty queue at the end for CLEAR s ends it
    found = from_lines([idle(0)], [line(3 + t, 3) for t in range(13)] + [line(16 + t, 0) for t in range(int(CLEAR) + 1)])
    assert found == []


def test_stats_lines_are_skipped_where_the_scrapes_tell():
    # the scrapes' own overload: the lines of the same engine add nothing
    scrapes = queue(0, 12, waiting=3)
    v, = from_lines(scrapes, [line(t, 9) for t in range(0, 13)])
    assert "seen_in" not in v.details
    # lines of an engine never scraped while a scraped one is overloaded: any of them, skipped
    v, = from_lines(scrapes, [line(t, 9, engine=5) for t in range(0, 13)])
    assert v.details["engine"] == "engine=0"
    # lines of an engine never scraped, no scrape verdict: judged with the good scrapes' times, no slot limit
    v, = from_lines([idle(0), idle(1)], [line(t, 9, running=3, engine=5) for t in range(3, 16)])
    assert (v.details["engine"], v.details["slot_limit"], v.details["metrics_silent_s"]) == ("engine=5", None, 14.0)
    # lines of another kind, or a stats line without a queue, are not read
    assert from_lines([idle(0)], [LogEvent(T0 + t, "error", {"dialect": "vllm", "waiting": 3}) for t in range(3, 16)]) == []
    assert C._stats_lines(Window(logs=(LogEvent(T0, "stats", {"dialect": "nope", "waiting": 3}),
                                       LogEvent(T0, "stats", {"dialect": "vllm", "running": 3})))) == {}


def test_longest_silence():
    assert C._longest_silence([0.0, 1.0, 2.0], 3.0, 15.0) == 13.0      # from the last scrape before the stretch
    assert C._longest_silence([0.0, 5.0, 6.0, 15.0], 3.0, 15.0) == 15.0 - 6.0   # 6 → 15 (the one at 15 is the end)
    assert C._longest_silence([0.0, 5.0, 6.0, 9.0], 3.0, 10.0) == 5.0 - 0.0     # 0 → 5
    assert C._longest_silence([4.0, 6.0], 3.0, 15.0) == 9.0             # none before: from the start, 3 → 4, 6 → 15
    assert C._longest_silence([3.0, 9.0, 15.0], 3.0, 15.0) == 6.0       # one at the start: 3 → 9
    assert C._longest_silence([], 3.0, 3.0) == 0.0


def test_time_mean():
    assert C._time_mean([0.0, 1.0, 4.0], [2.0, 5.0, 100.0]) == (2.0 * 1 + 5.0 * 3) / 4
    assert C._time_mean([7.0], [3.5]) == 3.5 and C._time_mean([], []) == 0.0


# --- the survivors of the first mutation run, each a value --------------------------------------------------------

def test_the_stretch_ends_at_its_last_hot_scrape():
    # waiting 3 from 0 to 12, then empty scrapes within the clear time: the mean is over [0, 12] alone
    v, = overload(*queue(0, 12, waiting=3), *queue(13, 13 + CLEAR - 1, waiting=0))
    assert (v.details["mean_waiting"], v.details["sustained_s"]) == (3.0, 12.0)
    # a dip inside the stretch weighs as 0 waiting: 3 for 7 s, 0 for 4.75 s, 3 for 6 s
    h = 7 + CLEAR - STEP
    v, = overload(*queue(0, 6, waiting=3), *queue(7, h - STEP, step=STEP, waiting=0), *queue(h, h + 6, waiting=3))
    assert v.details["mean_waiting"] == (3 * 7 + 3 * 6) / (h + 6)


def test_one_waiting_is_a_queue():
    # 1 waiting from 0 to 3, 4 from 4 to 13: the stretch is [0, 13], its mean (1 x 4 + 4 x 9) / 13
    v, = overload(*queue(0, 3, waiting=1), *queue(4, 13, waiting=4))
    assert (v.onset, v.details["mean_waiting"]) == (T0, (1 * 4 + 4 * 9) / 13)
    v, = from_lines([idle(0)], [line(t, 1) for t in range(3, 7)] + [line(t, 4) for t in range(7, 17)])
    assert (v.onset, v.details["mean_waiting"]) == (T0 + 3, (1 * 4 + 4 * 9) / 13)
    # a dip of the lines to 0 weighs as 0
    v, = from_lines([idle(0)], [line(t, 0 if 8 <= t <= 9 else 4) for t in range(3, 16)])
    assert v.details["mean_waiting"] == (4 * 10 + 0 * 2) / 12


def test_causes_at_their_edges():
    assert cause(queue(0, 12, waiting=6, by_reason={"deferred": 1}))[0] == "deferred"        # > 0, not > 1
    assert cause(queue(0, 12, waiting=6, by_reason={"deferred": 0.5}))[1] == ("0.5 of 6 waiting are deferred (not for "
                                                                             "lack of room)")   # no capacity count: 0
    assert cause(queue(0, 12, waiting=4, running=1)) == ("slots", "running flat at 1 (slot limit unknown, inferred) "
                                                                  "while KV is 30%")
    # running 0 is never at a limit, however small
    assert cause(queue(0, 12, waiting=4, running=0, slot_limit=1))[0] == "unknown"
    # exactly at limit x (1 - slack) counts as at the limit over the stretch
    full = 100 * (1.0 - SLACK)
    s = [scrape(t, waiting=4, running=full if t < 6 else 90, slot_limit=100) for t in range(13)]
    assert cause(s)[1].startswith("running at the slot limit 100 for 50% of the stretch (now 90)")
    # KV not exported: said as n/a
    s = [scrape(t, waiting=4, running=16 if t < 8 else 10, slot_limit=16, kv=None) for t in range(13)]
    assert cause(s) == ("slots", "running at the slot limit 16 for 67% of the stretch (now 10) while KV peaked at n/a: "
                                 "out of slots, not memory")
    assert cause(queue(0, 12, waiting=4, running=7, kv=None))[1] == ("running flat at 7 (slot limit unknown, inferred) "
                                                                     "while KV is n/a")


def test_longest_silence_counts_from_the_last_scrape_before():
    assert C._longest_silence([0.0, 10.0], 11.0, 12.0) == 12.0 - 10.0


def test_preempted_reads_the_first_and_last_counts():
    pts = lambda *counts: [(s, s.engines[0]) for s in (scrape(t, preempt=c) for t, c in enumerate(counts))]
    assert C._preempted(pts(4.0, 7.0)) == 3.0
    assert C._preempted(pts(5.0, 2.0, 7.0)) == 2.0         # a dip between: first to last
    assert C._preempted(pts(5.0, 8.0, 7.0)) == 2.0
    assert C._preempted(pts(5.0, 5.0)) == 0.0 and C._preempted(pts(5.0)) == 0.0


def test_kv_rules_at_their_edges():
    # preempting: a scrape at exactly kv_high with one waiting
    for kv, fires in ((KV_HIGH - 0.01, False), (KV_HIGH, True)):
        samples = [scrape(t, kv=kv if t == 10 else 0.3, waiting=1 if t == 10 else 0, preempt=4.0 if t < 12 else 7.0)
                   for t in range(21)]
        assert [v.details["rule"] for v in kv_pressure(*samples)] == (["preempting"] if fires else []), kv
    # up to half a request waiting (a gauge averaged over engines) is said as it is
    samples = [scrape(t, kv=0.95 if t == 10 else 0.3, waiting=0.5 if t == 10 else 0, preempt=4.0 if t < 12 else 7.0)
               for t in range(21)]
    assert "and up to 0.5 waiting: the engine evicts" in kv_pressure(*samples)[0].why
    # queued: a peak of exactly kv_high, one waiting
    for hot, fires in ((KV_HIGH - 0.01, False), (KV_HIGH, True)):
        s = [scrape(t, kv=hot if t % 10 < 4 else 0.75, waiting=1 if t % 10 < 4 else 0) for t in range(21)]
        assert [v.details["rule"] for v in kv_pressure(*s)] == (["queued"] if fires else []), hot
    s = [scrape(t, kv=1.0 if t % 10 < 4 else 0.75, waiting=0.5 if t % 10 < 4 else 0) for t in range(21)]
    assert "with up to 0.5 waiting for room" in kv_pressure(*s)[0].why
    # queued: a mean of exactly kv_clear — 100% from 0 to 11 (2 waiting at 0), c from 12 to 20: (12 + 8c) / 20
    at = (KV_CLEAR * 20 - 12) / 8          # 0.5
    for c, fires in ((at - 0.25, False), (at, True), (at + 0.25, True)):
        s = [scrape(t, kv=1.0 if t < 12 else c, waiting=2 if t == 0 else 0) for t in range(21)]
        assert [(v.details["rule"], v.details["mean_kv_usage"]) for v in kv_pressure(*s)] == (
            [("queued", (12 + 8 * c) / 20)] if fires else []), c
    # queued with scrapes that have no KV usage among them
    s = swinging()
    s.insert(5, MetricsSample(T0 + 4.5, "vllm", "vllm-test", (EngineState("vllm", "vllm-test", s[0].engines[0].labels,
                                                                           waiting=9.0),)))
    v, = kv_pressure(*s)
    assert (v.details["rule"], v.details["mean_kv_usage"]) == ("queued", (8 * 1.0 + 12 * 0.75) / 20)


def test_each_engine_is_judged_after_one_that_says_nothing():
    both = lambda a, b: [MetricsSample(x.t, "vllm", "vllm-test", (x.engines[0], y.engines[0])) for x, y in zip(a, b)]
    found = kv_pressure(*both(queue(0, 8, kv=0.3, engine="0"), queue(0, 8, kv=1.0, engine="1")))
    assert [v.details["engine"] for v in found] == ["engine=1"]
    found = preemption(*both(queue(0, 3, preempt=5.0, engine="0"), [scrape(t, preempt=float(t), engine="1")
                                                                      for t in range(4)]))
    assert [(v.details["engine"], v.details["delta"]) for v in found] == [("engine=1", 3.0)]
    found = preemption(*both([scrape(t, preempt=t * 0.25, engine="0") for t in range(4)],
                             [scrape(t, preempt=float(t), engine="1") for t in range(4)]))
    assert [(v.details["engine"], v.details["delta"]) for v in found] == [("engine=1", 3.0)]


def test_a_preemption_onset_is_its_first_rise():
    v, = preemption(scrape(0, preempt=0.0), scrape(1, preempt=0.0), scrape(2, preempt=3.0))
    assert (v.onset, v.details["delta"]) == (T0 + 2, 3.0)


def test_stats_lines_among_other_log_events():
    lines = [line(t, 3) for t in range(3, 16)]
    noise = [LogEvent(T0 + 2.5, "error", {"dialect": "vllm"}), LogEvent(T0 + 2.6, "stats", {"dialect": "nope", "waiting": 3})]
    v, = from_lines([idle(0)], noise + lines)
    assert v.details["sustained_s"] == 12.0
    # a line without a KV figure, and lines that state only a little throughput
    v, = from_lines([idle(0)], [line(t, 3, kv_pct=None, gen_tps=0.5) for t in range(3, 16)])
    assert (v.details["kv_usage"], v.evidence[-1]) == (None, Evidence("log", T0 + 15, "kv_pct", None))
    assert v.why.endswith("while KV is n/a: out of slots, not memory")
    v, = from_lines([idle(0)], [line(t, 3, gen_tps=0.0, prompt_tps=0.5) for t in range(3, 16)])
    assert v.details["sustained_s"] == 12.0


def test_stats_lines_of_a_scraped_engine_beside_another_engines_overload():
    # engine 0 scraped throughout with its own queue; engine 1 scraped until 2, then only its lines say its queue
    scrapes = queue(0, 15, waiting=3, engine="0") + [scrape(t, running=0.0, kv=0.0, slot_limit=4, gen=0.0, engine="1")
                                                     for t in range(3)]
    lines = [line(t, 5, engine=0) for t in range(3, 16)] + [line(t, 5, engine=1) for t in range(3, 16)]
    found = from_lines(sorted(scrapes, key=lambda s: s.t), lines)
    assert [(v.details["engine"], v.details.get("seen_in"), v.details["slot_limit"]) for v in found] == [
        ("engine=0", None, None), ("engine=1", "log", 4)]
    assert found[1].details["metrics_silent_s"] == 15.0 - 2.0


def test_the_stats_lines_clock_is_utc(monkeypatch):
    import time
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        v, = from_lines([idle(0)], [line(t, 3) for t in range(3, 16)])
        assert "own stats line at 00:16:55 UTC" in v.why
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_gpu_read_but_not_throttled_leaves_the_overload():
    from servewatch.timeline.samples import CLOCK_HW_THERMAL, GpuDevice, GpuSample

    device = GpuDevice(0, 90.0, 1, 2, 300.0, clock_event_reasons=CLOCK_HW_THERMAL, sm_clock_mhz=2000,
                       sm_clock_max_mhz=2000)
    gpu = tuple(GpuSample(T0 + t, True, (device,)) for t in range(13))
    w = Window(metrics=tuple(queue(0, 12, waiting=3)), gpu=gpu)
    assert [v.details["sustained_s"] for v in C.detect_overload(w, CONFIG)] == [12.0]


def test_each_capacity_setting_checked_together():
    from dataclasses import replace
    assert replace(C.OverloadSettings(), overload_slots_share=1.5, overload_slots_slack=-0.25).validate() == [
        "overload_slots_share is a share from 0 to 1, not 1.5", "overload_slots_slack is a share from 0 to 1, not -0.25"]
    assert replace(C.KvPressureSettings(), kv_high=1.25, kv_clear=-0.5).validate() == [
        "kv_high is a share from 0 to 1, not 1.25", "kv_clear is a share from 0 to 1, not -0.5"]
    assert replace(C.KvPressureSettings(), kv_high=0.5, kv_clear=0.75).validate() == [
        "kv_clear (0.75) is above kv_high (0.5)"]
    assert C.OverloadSettings().validate() == C.KvPressureSettings().validate() == C.PreemptionSettings().validate() == []
